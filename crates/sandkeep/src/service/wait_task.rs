//! wait_task and delete_task (docs/tools.md, beyond the seed's three task
//! tools): the long-poll on a task, and the removal of a settled one.
//!
//! Like get_task they neither renew the deadline nor touch the session.
//! wait_task is answered by the sandbox's shared watcher
//! ([`super::waiters`]), or at its timeout by a `status` read through the
//! sandbox's reader; where no watcher can run it falls back to one `wait`
//! call of its own. delete_task is the helper's `delete`.

use std::time::Duration;

use tokio::time::Instant;

use sandkeep_proto::limits::*;
use sandkeep_proto::wire::{self, DeleteReply, DeleteRequest, TaskStatus, WaitReply, WaitRequest};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::handlers::helper_error;
use super::helper;
use super::waiters::Outcome;
use super::{Service, TaskResult, ToolError, validate};
use crate::provider::SandboxId;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitTaskArgs {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle: 32 lowercase hex characters.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub task_id: String,
    /// Byte offset into the saved stdout: the call returns once stdout has
    /// bytes beyond it. Pass the previous stdout_next_offset.
    #[serde(default)]
    #[schemars(range(min = 0, max = OFFSET_MAX), extend("default" = 0))]
    pub stdout_offset: Option<u64>,
    /// Byte offset into the saved stderr: the call returns once stderr has
    /// bytes beyond it. Pass the previous stderr_next_offset.
    #[serde(default)]
    #[schemars(range(min = 0, max = OFFSET_MAX), extend("default" = 0))]
    pub stderr_offset: Option<u64>,
    /// Bytes per stream to return.
    #[serde(default)]
    #[schemars(range(min = PAGE_LIMIT_MIN, max = PAGE_LIMIT_MAX))]
    #[schemars(extend("default" = PAGE_LIMIT_DEFAULT))]
    pub limit: Option<u64>,
    /// Most seconds to wait when nothing happens.
    #[serde(default)]
    #[schemars(range(min = WAIT_TIMEOUT_MIN, max = WAIT_TIMEOUT_MAX))]
    #[schemars(extend("default" = WAIT_TIMEOUT_DEFAULT))]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaitTaskResult {
    #[serde(flatten)]
    pub task: TaskResult,
    /// How long the call waited, in milliseconds.
    pub waited_ms: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteTaskArgs {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle: 32 lowercase hex characters.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub task_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteTaskResult {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle.
    pub task_id: String,
    /// True: the task, its state and its logs are gone.
    pub deleted: bool,
}

impl Service {
    pub async fn wait_task(&self, args: WaitTaskArgs) -> Result<WaitTaskResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let request = WaitRequest {
            task_id: validate::task_id(&args.task_id)?,
            stdout_offset: validate::offset("stdout_offset", args.stdout_offset)?,
            stderr_offset: validate::offset("stderr_offset", args.stderr_offset)?,
            limit: validate::limit(args.limit)?,
            timeout: validate::wait_timeout(args.timeout)?,
        };
        let started = Instant::now();
        let deadline = started + Duration::from_secs(request.timeout);
        let status_request = request.status_request();
        let outcome = self
            .waiters
            .until_answered(
                self.provider.as_ref(),
                &self.helpers,
                &id,
                &status_request,
                deadline,
            )
            .await
            .map_err(|e| helper_error(e, &id, &request.task_id))?;
        let status: TaskStatus = match outcome {
            Outcome::Answered(answer) => answer
                .decode()
                .map_err(|e| helper_error(e, &id, &request.task_id))?,
            Outcome::TimedOut => self
                .readers
                .read(
                    self.provider.as_ref(),
                    &self.helpers,
                    &id,
                    wire::verb::STATUS,
                    &status_request,
                )
                .await
                .map_err(|e| helper_error(e, &id, &request.task_id))?,
            Outcome::NoWatcher(why) => {
                tracing::debug!(sandbox = %id, "wait_task without a shared watcher: {why}");
                self.wait_in_one_call(&id, request, deadline).await?
            }
        };
        Ok(WaitTaskResult {
            task: self.task_result(&id, status),
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// The wait as one helper call that watches alone: for providers that
    /// cannot keep a watcher running. Costs a process per waiter.
    async fn wait_in_one_call(
        &self,
        id: &SandboxId,
        mut request: WaitRequest,
        deadline: Instant,
    ) -> Result<TaskStatus, ToolError> {
        let left = deadline.saturating_duration_since(Instant::now());
        request.timeout = left.as_secs_f64().ceil().max(WAIT_TIMEOUT_MIN as f64) as u64;
        let reply: WaitReply = helper::call_within(
            self.provider.as_ref(),
            &self.helpers,
            id,
            wire::verb::WAIT,
            &request,
            Duration::from_secs(request.timeout),
        )
        .await
        .map_err(|e| helper_error(e, id, &request.task_id))?;
        Ok(reply.status)
    }

    pub async fn delete_task(&self, args: DeleteTaskArgs) -> Result<DeleteTaskResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let request = DeleteRequest {
            task_id: validate::task_id(&args.task_id)?,
        };
        let reply: DeleteReply = helper::call(
            self.provider.as_ref(),
            &self.helpers,
            &id,
            wire::verb::DELETE,
            &request,
        )
        .await
        .map_err(|e| helper_error(e, &id, &request.task_id))?;
        Ok(DeleteTaskResult {
            sandbox_id: id.to_string(),
            task_id: reply.task_id.to_string(),
            deleted: reply.deleted,
        })
    }
}

impl Service {
    /// run_command's arguments, checked as run_command checks them (the
    /// same messages), started as a durable task like start_task: the MCP
    /// Tasks extension's way to run a command (docs/tools.md).
    pub async fn start_run_command_task(
        &self,
        session: &super::Session,
        args: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<super::StartTaskResult, ToolError> {
        let args: super::RunCommandArgs = super::json::parse("run_command", args)?;
        self.start_task(
            session,
            super::StartTaskArgs {
                command: args.command,
                sandbox_id: args.sandbox_id,
                cwd: args.cwd,
                timeout: Some(validate::run_timeout(args.timeout)?),
            },
        )
        .await
    }
}
