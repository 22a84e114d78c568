//! The local provider against real sandboxes, one module per concern, in
//! one test binary (one static link instead of seven).
//!
//! Their tests run in parallel with one another (the harness's threads);
//! they share no host state that one of them counts or needs to itself
//! (each marks its processes, mounts and users with names of its own). The
//! tests that do are binaries of their own, which `cargo test` runs one
//! after another:
//!
//! - `local_hostfiles` plants files in the host's /etc, /var, /opt, /srv
//!   and /usr/local and counts the /etc snapshots that makes;
//! - `local_limits` holds host-wide pools for a while (ptys, root's
//!   inotify instances) and counts cgroups; with `local_escape`, it is
//!   also what scripts/cgroup-v2-vm runs by binary name under cgroup v2.

#[path = "../support/mod.rs"]
mod support;

mod fallback;
mod faults;
mod lifecycle;
mod ports;
mod snapshot;
mod trust;
mod unprivileged;
