//! The helper's failures and the reply kind each maps to.
//!
//! Every message says what happened and what to do next; it must not carry
//! task output or environment values.

use std::io;
use std::path::PathBuf;

use sandkeep_proto::limits::{INPUT_BACKLOG_MAX_BYTES, MAX_TASK_DIRS};
use sandkeep_proto::wire::{ErrorKind, RequestError};
use sandkeep_proto::{TaskId, TaskState};

#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("bad request: {0}")]
    BadRequest(String),

    #[error("invalid request: {0}")]
    OutOfRange(#[from] RequestError),

    #[error("no such task: {0} (no task with this id was started by this user in this sandbox)")]
    NoSuchTask(TaskId),

    #[error("task {0} already exists: it is not started again; read it with status instead")]
    TaskExists(TaskId),

    #[error(
        "this user already has {MAX_TASK_DIRS} task directories in {}: remove directories of \
         finished tasks there before starting another",
        .0.display()
    )]
    TooManyTasks(PathBuf),

    #[error("task {0} is still running, so it was not deleted: cancel it first")]
    TaskRunning(TaskId),

    #[error(
        "task {0} takes no input: it was started with start_task, whose stdin is /dev/null; \
         start it with start_interactive_task to send it input"
    )]
    NotInteractive(TaskId),

    #[error("task {0} has no terminal: only a task started with pty true can be resized")]
    NoTerminal(TaskId),

    #[error("task {0} has ended (state {1}): its input is no longer read")]
    TaskEnded(TaskId, TaskState),

    #[error("the stdin of task {0} was closed (send_input with close): it takes no more input")]
    StdinClosed(TaskId),

    #[error(
        "input backlog full: {waiting} bytes sent to task {task_id} are still waiting to be \
         read, and {offered} more would exceed {INPUT_BACKLOG_MAX_BYTES}; nothing of this \
         input was taken: wait for the task to read what it has, then send again"
    )]
    InputBacklogFull {
        task_id: TaskId,
        waiting: u64,
        offered: usize,
    },

    #[error("working directory {} does not exist or is not a directory", .0.display())]
    NoSuchCwd(PathBuf),

    #[error("refusing the private task directory {}: {reason}", path.display())]
    UnsafeTaskDir { path: PathBuf, reason: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error("{0}")]
    Internal(String),
}

impl HelperError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::BadRequest(_) | Self::OutOfRange(_) => ErrorKind::BadRequest,
            Self::NoSuchTask(_) => ErrorKind::NoSuchTask,
            Self::TaskExists(_) => ErrorKind::TaskExists,
            Self::TooManyTasks(_) => ErrorKind::TooManyTasks,
            Self::NoSuchCwd(_) => ErrorKind::NoSuchCwd,
            Self::TaskRunning(_) => ErrorKind::TaskRunning,
            Self::NotInteractive(_) | Self::NoTerminal(_) => ErrorKind::NotInteractive,
            Self::TaskEnded(..) => ErrorKind::TaskEnded,
            Self::StdinClosed(_) => ErrorKind::StdinClosed,
            Self::InputBacklogFull { .. } => ErrorKind::InputBacklogFull,
            Self::UnsafeTaskDir { .. } => ErrorKind::UnsafeTaskDir,
            Self::Io { .. } | Self::Internal(_) => ErrorKind::Internal,
        }
    }
}

/// Attaches "while doing what, on which path" to an I/O error.
pub trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HelperError>;
}

impl<T, E: Into<io::Error>> IoContext<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HelperError> {
        self.map_err(|e| HelperError::Io {
            context: what(),
            source: e.into(),
        })
    }
}
