//! The exit codes of the `sandkeep` command line, in one place.
//!
//! Commands that wait for a command or a task (`exec`, `task wait`,
//! `task logs --follow`) exit with that command's own status, so sandkeep's
//! own failure there gets a code of its own ([`OWN_FAILURE_FORWARDING`]),
//! as `docker run` does. This module only maps states and statuses to
//! codes; it decides nothing about tasks.

use sandkeep_proto::TaskState;

/// Success.
pub const OK: u8 = 0;
/// sandkeep could not do what was asked (commands that do not forward a
/// status).
pub const OWN_FAILURE: u8 = 1;
/// The task failed or was cancelled and no exit status was collected.
pub const NO_STATUS: u8 = 1;
/// Bad arguments; clap exits with this code itself.
pub const USAGE: u8 = 2;
/// Stdout was closed by its reader, e.g. `| head` (128 + SIGPIPE, what a
/// shell reports for a process that SIGPIPE ended).
pub const STDOUT_CLOSED: u8 = 141;
/// The person pressed Ctrl-C (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;
/// `task wait --timeout` elapsed while the task was still running.
pub const STILL_RUNNING: u8 = 76;
/// The task's state is `unknown`: its supervisor is gone without recording
/// a result. Chosen from the sysexits range (EX_TEMPFAIL) so it is unlikely
/// to be mistaken for a command's own status.
pub const TASK_UNKNOWN: u8 = 75;
/// The task timed out and no exit status was collected (the code
/// `timeout(1)` uses).
pub const TASK_TIMED_OUT: u8 = 124;
/// sandkeep itself failed in a command that forwards a status.
pub const OWN_FAILURE_FORWARDING: u8 = 125;

/// The text the help pages and the README show.
pub const TABLE: &str = "\
Exit codes of exec, task wait and task logs --follow:
  0-255  the command's own exit status; 128+N when it was ended by signal N
         (143 = TERM, 137 = KILL)
  1      the task failed or was cancelled before any exit status was collected
  75     the task's state is unknown: its supervisor is gone without recording
         a result; inspect it with `sandkeep task get`
  76     `task wait --timeout` ran out while the task was still running
  124    the command timed out and no exit status was collected
  125    sandkeep itself failed (the message on stderr says why)
  130    interrupted with Ctrl-C (a background task keeps running)
  141    stdout was closed by its reader (e.g. piped into head)
  2      bad arguments
Other commands exit 0 on success, 1 on failure and 2 on bad arguments;
`task start` exits 75 when it cannot confirm the start.";

/// The exit code that reports a finished (or lost) task or command.
/// `None` while the task is still running.
pub fn for_task(state: TaskState, exit_code: Option<i32>) -> Option<u8> {
    match (state, exit_code) {
        (TaskState::Running, _) => None,
        (TaskState::Unknown, _) => Some(TASK_UNKNOWN),
        (_, Some(code)) => Some(u8::try_from(code).unwrap_or(NO_STATUS)),
        (TaskState::Succeeded, None) => Some(OK),
        (TaskState::TimedOut, None) => Some(TASK_TIMED_OUT),
        (TaskState::Failed | TaskState::Cancelled, None) => Some(NO_STATUS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_forwarded_and_running_has_none() {
        assert_eq!(for_task(TaskState::Succeeded, Some(0)), Some(0));
        assert_eq!(for_task(TaskState::Failed, Some(3)), Some(3));
        assert_eq!(for_task(TaskState::Cancelled, Some(143)), Some(143));
        assert_eq!(for_task(TaskState::TimedOut, Some(137)), Some(137));
        assert_eq!(for_task(TaskState::Running, None), None);
    }

    #[test]
    fn unknown_and_missing_statuses_get_documented_codes() {
        assert_eq!(for_task(TaskState::Unknown, None), Some(TASK_UNKNOWN));
        assert_eq!(for_task(TaskState::TimedOut, None), Some(TASK_TIMED_OUT));
        assert_eq!(for_task(TaskState::Failed, None), Some(NO_STATUS));
        assert_eq!(for_task(TaskState::Failed, Some(-1)), Some(NO_STATUS));
    }
}
