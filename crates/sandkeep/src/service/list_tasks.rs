//! list_tasks: every task of a sandbox with its state, newest first, from
//! the in-sandbox helper's `list` verb. Like get_task it neither renews the
//! deadline nor touches the session. The tool and `sandkeep task list`
//! both call [`Service::list_tasks`].

use sandkeep_proto::wire::{self, ListReply};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::helper::HelperError;
use super::{Service, ToolError, validate};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksArgs {
    /// The sandbox whose tasks to list.
    pub sandbox_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEntry {
    /// The task_id of the task's handle.
    pub task_id: String,
    /// running, succeeded, failed, cancelled, timed_out or unknown.
    #[schemars(schema_with = "super::types::task_state_schema")]
    pub state: sandkeep_proto::TaskState,
    /// Exit status, or 128+N when ended by signal N; null while running or
    /// unknown.
    pub exit_code: Option<i32>,
    /// Unix seconds.
    pub started_at: Option<u64>,
    /// Unix seconds.
    pub finished_at: Option<u64>,
    /// The first 256 characters of the command, with secret values of the
    /// sandbox's environment redacted as in the logs.
    pub command: String,
    /// Bytes of stdout saved so far.
    pub stdout_bytes: u64,
    /// Bytes of stderr saved so far.
    pub stderr_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ListTasksResult {
    /// The sandbox asked for.
    pub sandbox_id: String,
    /// Its tasks, newest first.
    pub tasks: Vec<TaskEntry>,
}

impl Service {
    pub async fn list_tasks(&self, args: ListTasksArgs) -> Result<ListTasksResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let no_arguments = serde_json::Map::new();
        let reply: ListReply = self
            .readers
            .read(
                self.provider.as_ref(),
                &self.helpers,
                &id,
                wire::verb::LIST,
                &no_arguments,
            )
            .await
            .map_err(|e| match e {
                HelperError::Provider(p) => ToolError::Provider(p),
                HelperError::Refused { kind, message } => ToolError::Helper {
                    kind,
                    message: format!(
                        "the task helper in sandbox {id} refused to list its tasks ({message})"
                    ),
                },
                HelperError::Unreadable(detail) => ToolError::BadHelperReply {
                    sandbox_id: id.to_string(),
                    detail,
                },
            })?;
        Ok(ListTasksResult {
            sandbox_id: id.to_string(),
            tasks: reply
                .tasks
                .into_iter()
                .map(|t| TaskEntry {
                    task_id: t.summary.task_id.to_string(),
                    state: t.summary.state,
                    exit_code: t.summary.exit_code,
                    started_at: t.summary.started_at,
                    finished_at: t.summary.finished_at,
                    command: self.masker.mask(t.command),
                    stdout_bytes: t.stdout_bytes,
                    stderr_bytes: t.stderr_bytes,
                })
                .collect(),
        })
    }
}
