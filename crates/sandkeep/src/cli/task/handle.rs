//! A task's handle (`SANDBOX TASK`) as `get`, `cancel`, `wait` and `logs`
//! take it, and the requests those commands poll a task with.

use std::time::Duration;

use clap::Args;
use sandkeep_proto::limits::OFFSET_MAX;

use crate::cli::context::CliError;
use crate::cli::output::OutputArgs;
use crate::service::{Service, TaskQueryArgs, TaskResult};

/// How often `wait` and `logs --follow` ask for news when there is none.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

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
        let request = TaskQueryArgs {
            stdout_offset: Some(OFFSET_MAX),
            stderr_offset: Some(OFFSET_MAX),
            limit: Some(1),
            ..self.query()
        };
        Ok(service.get_task(request).await?)
    }
}
