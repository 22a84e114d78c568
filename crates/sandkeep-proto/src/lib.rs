//! The types both sides of sandkeep agree on: the host (`sandkeep`) and the
//! in-sandbox helper (`sandkeep-task`).
//!
//! This crate owns the wire format of the helper (its requests and JSON
//! replies), the task state record (`state.json`), the limits docs/tools.md states,
//! the pure logic of paging logs, and the rules both sides apply the same
//! way: process liveness ([`procfs`]), which shell runs a command
//! ([`shell`]), where a user's state lives ([`shell::state_base`]), 128+N
//! exit codes ([`record::exit_code_of`]), the clock of their times
//! ([`record::unix_now`]). It does no I/O beyond reading
//! `/proc/PID/stat` and depends on serde only, so the static helper stays
//! small.

#![forbid(unsafe_code)]

pub mod limits;
pub mod page;
pub mod procfs;
pub mod record;
pub mod shares;
pub mod shell;
pub mod task;
pub mod wire;

pub use record::StateRecord;
pub use task::{TaskId, TaskIdError, TaskState};
