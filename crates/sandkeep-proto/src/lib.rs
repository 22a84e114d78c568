//! The types both sides of sandkeep agree on: the host (`sandkeep`) and the
//! in-sandbox helper (`sandkeep-task`).
//!
//! This crate owns the wire format of the helper (its requests and JSON
//! replies), the task state record (`state.json`), the limits of SPEC.md §8 and the pure
//! logic of paging logs. It must stay free of I/O and of any dependency but
//! serde, so that the static helper stays small.

#![forbid(unsafe_code)]

pub mod limits;
pub mod page;
pub mod record;
pub mod task;
pub mod wire;

pub use record::StateRecord;
pub use task::{TaskId, TaskIdError, TaskState};
