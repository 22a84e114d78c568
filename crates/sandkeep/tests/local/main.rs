//! The local provider under the server's own parts, against real
//! sandboxes: the network and its egress proxy as the CLI and `doctor`
//! report them (`net`), and the service's resident task reader (`reader`).
//! The provider's own tests live in `crates/sandkeep-local/tests`.
//!
//! These share no host state that one of them counts or needs to itself
//! (each marks its processes, mounts and users with names of its own).

#[path = "../support/mod.rs"]
mod support;

mod keeper_exe;
mod net;
mod reader;
