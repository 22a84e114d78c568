//! The MCP server end to end (stdio, HTTP, the independent SDK clients and
//! the clients users run), one module per former test file, in one test
//! binary: each binary links sandkeep statically, and linking dominated a
//! cold build when every file was a binary. scripts/test runs this binary
//! once more on the e2b provider (`SANDKEEP_TEST_PROVIDER=e2b`).

#[path = "../support/mod.rs"]
mod support;

mod cancel;
mod clients;
mod faults;
mod host_bounds;
mod http;
mod interactive;
mod interop;
mod interop_ts;
mod pause;
mod ports;
mod sessionless;
mod shares;
mod snapshots;
mod stdio;
mod tasks_ext;
mod unconfirmed;
mod validation;
mod wait;
