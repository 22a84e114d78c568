//! The state-file record: what a task's supervisor writes to `state.json`
//! and every later reader (status, cancel, list) parses.
//!
//! Only the helper writes and reads this file, but it lives here so the
//! format is pinned in one place next to the states it maps to. It owns no
//! I/O: writing it atomically and judging the supervisor's liveness from
//! `/proc` is the helper's job.

use serde::{Deserialize, Serialize};

use crate::task::{TaskId, TaskState};

/// Unix seconds now: the clock of the record's times, and of the host's
/// (a sandbox's creation and deadline), so both sides compare alike.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix nanoseconds now: when a sandbox's shares were read, which a host
/// file's ctime is compared with.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The format version written into every record; a reader that meets
/// another version treats the record as unreadable (state `unknown`).
pub const RECORD_VERSION: u32 = 1;

/// A process as identified across pid reuse: its pid and its start time in
/// clock ticks since boot (field 22 of `/proc/PID/stat`). A pid whose start
/// time differs is a different, recycled process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start_time: u64,
}

/// How a task ended. Only these four states can be recorded as final:
/// `running` and `unknown` are not endings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl From<Ending> for TaskState {
    fn from(e: Ending) -> Self {
        match e {
            Ending::Succeeded => TaskState::Succeeded,
            Ending::Failed => TaskState::Failed,
            Ending::Cancelled => TaskState::Cancelled,
            Ending::TimedOut => TaskState::TimedOut,
        }
    }
}

/// The terminal part of a record, present once the task has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub ending: Ending,
    /// Exit status, or 128+N for signal N; `None` when no status was
    /// collected (the command could not be spawned).
    pub exit_code: Option<i32>,
    /// Unix seconds when the terminal state was recorded.
    pub finished_at: u64,
}

/// One version of `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateRecord {
    pub version: u32,
    pub task_id: TaskId,
    /// The supervisor that writes this record.
    pub supervisor: ProcessIdentity,
    /// The task's process group (the pid of `bash -c`), for diagnosis only:
    /// nothing outside the supervisor may signal it, since once the
    /// supervisor has reaped its leader the number can be recycled.
    pub pgid: Option<u32>,
    /// Unix seconds when the command was spawned; `None` if it never was.
    pub started_at: Option<u64>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// `None` while the command runs.
    pub outcome: Option<Outcome>,
    /// Why the task failed, when the supervisor knows more than its exit
    /// code (the memory limit killed it). Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl StateRecord {
    /// The state this record states by itself. A `running` record still
    /// needs its supervisor checked: see [`StateRecord::state_given`].
    pub fn recorded_state(&self) -> TaskState {
        self.outcome
            .map_or(TaskState::Running, |o| TaskState::from(o.ending))
    }

    /// The state a reader reports, given whether the recorded supervisor is
    /// still alive: a `running` record whose supervisor is gone is
    /// `unknown`, never a guess.
    pub fn state_given(&self, supervisor_alive: bool) -> TaskState {
        match self.recorded_state() {
            TaskState::Running if !supervisor_alive => TaskState::Unknown,
            s => s,
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        self.outcome.and_then(|o| o.exit_code)
    }

    pub fn finished_at(&self) -> Option<u64> {
        self.outcome.map(|o| o.finished_at)
    }
}

/// The exit code docs/tools.md reports for a wait status: the exit status, or
/// 128+N for a process ended by signal N.
pub fn exit_code_of(exit_status: Option<i32>, signal: Option<i32>) -> Option<i32> {
    match (exit_status, signal) {
        (Some(code), _) => Some(code),
        (None, Some(sig)) => Some(128 + sig),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(outcome: Option<Outcome>) -> StateRecord {
        StateRecord {
            version: RECORD_VERSION,
            task_id: TaskId::from_bytes([7; 16]),
            supervisor: ProcessIdentity {
                pid: 42,
                start_time: 1234,
            },
            pgid: Some(43),
            started_at: Some(1),
            stdout_truncated: false,
            stderr_truncated: true,
            outcome,
            error: None,
        }
    }

    #[test]
    fn lost_supervisor_is_unknown_never_success() {
        let running = record(None);
        assert_eq!(running.state_given(true), TaskState::Running);
        assert_eq!(running.state_given(false), TaskState::Unknown);
        let done = record(Some(Outcome {
            ending: Ending::Succeeded,
            exit_code: Some(0),
            finished_at: 2,
        }));
        assert_eq!(done.state_given(false), TaskState::Succeeded);
    }

    #[test]
    fn record_round_trips_and_rejects_unknown_fields() {
        let r = record(Some(Outcome {
            ending: Ending::TimedOut,
            exit_code: Some(143),
            finished_at: 9,
        }));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<StateRecord>(&json).unwrap(), r);
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["surprise"] = 1.into();
        assert!(serde_json::from_value::<StateRecord>(v).is_err());
    }

    #[test]
    fn signal_maps_to_128_plus_n() {
        assert_eq!(exit_code_of(Some(3), None), Some(3));
        assert_eq!(exit_code_of(None, Some(9)), Some(137));
        assert_eq!(exit_code_of(None, None), None);
    }
}
