//! A task's handle (`SANDBOX TASK`) as `get`, `cancel`, `wait` and `logs`
//! take it, and the requests those commands read a task with: a peek, and
//! the long-poll (wait_task) `wait` and `logs --follow` sleep in.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use sandkeep_proto::limits::{OFFSET_MAX, WAIT_TIMEOUT_MAX};

use crate::cli::context::CliError;
use crate::cli::output::OutputArgs;
use crate::service::{Service, TaskQueryArgs, TaskResult, WaitTaskArgs};

/// The longest one long-poll lasts: a terminal's status line shows the
/// elapsed time and is redrawn after each; elsewhere nothing is shown, so
/// the wait is as long as the tool allows.
pub fn long_poll_limit() -> Duration {
    if std::io::stderr().is_terminal() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(WAIT_TIMEOUT_MAX)
    }
}

/// A task's handle, as `task start` prints it.
#[derive(Debug, Args)]
pub struct HandleArgs {
    /// The sandbox of the task.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// The task's id (32 hex characters).
    #[arg(value_name = "TASK")]
    pub task_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl HandleArgs {
    /// A get_task request for this task with the service's default pages.
    pub fn query(&self) -> TaskQueryArgs {
        TaskQueryArgs {
            sandbox_id: self.sandbox_id.clone(),
            task_id: self.task_id.clone(),
            stdout_offset: None,
            stderr_offset: None,
            limit: None,
        }
    }

    /// Asks for the task's state without transferring log bytes: both
    /// offsets past any saved log give empty pages.
    pub async fn peek(&self, service: &Service) -> Result<TaskResult, CliError> {
        Ok(service.get_task(self.peek_query()).await?)
    }

    /// The request of [`Self::peek`].
    pub fn peek_query(&self) -> TaskQueryArgs {
        TaskQueryArgs {
            stdout_offset: Some(OFFSET_MAX),
            stderr_offset: Some(OFFSET_MAX),
            limit: Some(1),
            ..self.query()
        }
    }

    /// Sleeps in wait_task until the task settles, a log has bytes past
    /// its offset in `query`, or about `at_most` passed (whole seconds, at
    /// least one); returns the task without log bytes worth reading.
    pub async fn wait_past(
        &self,
        service: &Service,
        query: &TaskQueryArgs,
        at_most: Duration,
    ) -> Result<TaskResult, CliError> {
        let secs = at_most
            .as_secs_f64()
            .ceil()
            .clamp(1.0, WAIT_TIMEOUT_MAX as f64) as u64;
        let request = WaitTaskArgs {
            sandbox_id: self.sandbox_id.clone(),
            task_id: self.task_id.clone(),
            stdout_offset: query.stdout_offset,
            stderr_offset: query.stderr_offset,
            limit: Some(1),
            timeout: Some(secs),
        };
        Ok(service.wait_task(request).await?.task)
    }
}
