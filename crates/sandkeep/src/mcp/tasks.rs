//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663,
//! docs/tools.md, "The MCP Tasks extension") over sandkeep's durable tasks.
//!
//! For a 2026-07-28 client that declares the extension, `run_command`
//! starts the command as a task (its arguments checked as run_command checks them,
//! then started as `start_task` would, same sandbox) and answers a
//! `CreateTaskResult`. The task's MCP id encodes the
//! whole handle, `SANDBOX_ID/TASK_ID`, so `tasks/get` and `tasks/cancel`
//! are answered from the sandbox itself through the service's get_task /
//! cancel_task: any server process with the same provider configuration
//! can answer them, also after the one that created the task was killed.
//! Nothing is kept in memory (rmcp's `TaskManager` would, and is not used).
//!
//! A completed task's result is exactly what the blocking `run_command`
//! returns: exit code, the last 64 KiB of each stream, the truncation
//! flags and `timed_out`. `tasks/get` on a running task is a long-poll
//! (as wait_task): it answers when the task ends, or "working" after a
//! hold, and the advertised poll interval is short.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    DetailedTask, GetTaskParams, GetTaskResult, InitializeResult, JsonObject, TASKS_EXTENSION_ID,
    Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::{OFFSET_MAX, RUN_OUTPUT_MAX_BYTES};
use serde_json::Value;

use crate::service::{
    RunCommandResult, Service, Session, TaskQueryArgs, TaskResult, ToolError, WaitTaskArgs,
};

/// The tool that becomes a task for clients that declare the extension.
const TASK_TOOL: &str = "run_command";

/// What a client is told to wait between two `tasks/get`: short, because
/// `tasks/get` itself waits for a running task to end (up to
/// [`GET_HOLD_SECS`]), so a client that follows the interval gets a short
/// command's result about as soon as the blocking call would (with the
/// 1 s interval this once was, never under a second).
const POLL_INTERVAL_MS: u64 = 100;

/// How long `tasks/get` on a running task waits for it to end before it
/// answers "working": a long-poll like wait_task's, well inside the 60 s
/// after which clients commonly give up on a request.
const GET_HOLD_SECS: u64 = 10;

/// Whether this call should become a task: `run_command` on protocol
/// 2026-07-28 from a client that declared the extension in this request's
/// `_meta`. The extension is defined for that protocol only: a client that
/// declares it at a 2025-era `initialize` (the Inspector's CLI does) may
/// not expect a task, and gets the blocking result.
pub(super) fn wanted(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> bool {
    request.name == TASK_TOOL
        && modern(context)
        && context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
}

/// Whether the request speaks a protocol without `initialize` (2026-07-28
/// and later), where the extension is defined.
pub(super) fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| !v.has_initialize())
}

/// A legacy `initialize` answer without the extension: it is not offered
/// where it is not defined, so no client waits for a task that never comes.
pub(super) fn not_offered(mut result: InitializeResult) -> InitializeResult {
    if let Some(extensions) = result.capabilities.extensions.as_mut() {
        extensions.remove(TASKS_EXTENSION_ID);
        if extensions.is_empty() {
            result.capabilities.extensions = None;
        }
    }
    result
}

/// Starts `run_command`'s command as a durable task. Invalid arguments and
/// refusals are ordinary tool errors with run_command's messages; a started
/// task (also one whose start is unconfirmed) is a task.
pub(super) async fn start(
    service: &Service,
    session: &Session,
    request: CallToolRequestParams,
) -> Result<CallToolResponse, ToolError> {
    let started = service
        .start_run_command_task(session, request.arguments)
        .await?;
    let now = crate::provider::rfc3339(crate::provider::unix_now());
    let mut task = Task::new(
        encode_id(&started.sandbox_id, &started.task_id),
        TaskStatus::Working,
        started
            .started_at
            .map_or_else(|| now.clone(), crate::provider::rfc3339),
        now,
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    if let Some(error) = started.error {
        task = task.with_status_message(error);
    }
    Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
}

/// `tasks/get`: the task's state read from its sandbox, once it has ended
/// or [`GET_HOLD_SECS`] have passed.
pub(super) async fn get(
    service: &Service,
    params: GetTaskParams,
) -> Result<GetTaskResult, McpError> {
    let (sandbox_id, task_id) = decode_id(&params.task_id)?;
    let first = service
        .wait_task(until_ended(&sandbox_id, &task_id))
        .await
        .map_err(|e| lookup_error(&params.task_id, e))?
        .task;
    let detailed = match first.state {
        TaskState::Running => {
            DetailedTask::new(base(&params.task_id, &first), TaskPayload::Working)
        }
        TaskState::Cancelled => {
            DetailedTask::new(base(&params.task_id, &first), TaskPayload::Cancelled)
        }
        TaskState::Unknown => DetailedTask::new(
            base(&params.task_id, &first),
            TaskPayload::Failed {
                error: error_object(McpError::internal_error(
                    format!(
                        "the task's supervisor in sandbox {sandbox_id} is gone without recording \
                         a result (state unknown): never assume it succeeded; run it again if it \
                         is safe"
                    ),
                    None,
                )),
            },
        ),
        TaskState::Succeeded | TaskState::Failed | TaskState::TimedOut => {
            let result = run_command_result(service, &sandbox_id, &task_id, &first)
                .await
                .map_err(|e| lookup_error(&params.task_id, e))?;
            DetailedTask::new(
                base(&params.task_id, &first),
                TaskPayload::Completed { result },
            )
        }
    };
    Ok(GetTaskResult::new(detailed))
}

/// `tasks/cancel`: asks the task's supervisor to stop it, as cancel_task.
/// Cooperative: an unconfirmed cancellation still acknowledges, and
/// `tasks/get` shows the state when it lands.
pub(super) async fn cancel(service: &Service, params: CancelTaskParams) -> Result<(), McpError> {
    let (sandbox_id, task_id) = decode_id(&params.task_id)?;
    match service
        .cancel_task(query(&sandbox_id, &task_id, None))
        .await
    {
        Ok(_) | Err(ToolError::CancelNotConfirmed(_)) => Ok(()),
        Err(e) => Err(lookup_error(&params.task_id, e)),
    }
}

fn encode_id(sandbox_id: &str, task_id: &str) -> String {
    format!("{sandbox_id}/{task_id}")
}

/// The two halves of a task id; the extension's invalid-params error for
/// one this server did not make.
fn decode_id(id: &str) -> Result<(String, String), McpError> {
    id.split_once('/')
        .filter(|(s, t)| !s.is_empty() && t.len() == 32 && !t.contains('/'))
        .map(|(s, t)| (s.to_owned(), t.to_owned()))
        .ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "unknown task {id:?}: sandkeep task ids are SANDBOX_ID/TASK_ID as run_command \
                     returned them"
                ),
                None,
            )
        })
}

/// A wait_task that returns when the task ends (or after the hold): the
/// offsets are the highest there are (a log's cap), so output does not end
/// the wait.
fn until_ended(sandbox_id: &str, task_id: &str) -> WaitTaskArgs {
    WaitTaskArgs {
        sandbox_id: sandbox_id.to_owned(),
        task_id: task_id.to_owned(),
        stdout_offset: Some(OFFSET_MAX),
        stderr_offset: Some(OFFSET_MAX),
        limit: Some(1),
        timeout: Some(GET_HOLD_SECS),
    }
}

fn query(sandbox_id: &str, task_id: &str, stdout_offset: Option<u64>) -> TaskQueryArgs {
    TaskQueryArgs {
        sandbox_id: sandbox_id.to_owned(),
        task_id: task_id.to_owned(),
        stdout_offset,
        stderr_offset: None,
        limit: None,
    }
}

/// A task that cannot be looked up: invalid params for an id that names
/// nothing (bad id, no such task or sandbox), internal error otherwise.
fn lookup_error(id: &str, e: ToolError) -> McpError {
    match e {
        ToolError::InvalidArgument(_)
        | ToolError::Helper { .. }
        | ToolError::Provider(crate::provider::ProviderError::NoSuchSandbox(_)) => {
            McpError::invalid_params(format!("task {id:?}: {e}"), None)
        }
        other => McpError::internal_error(format!("task {id:?}: {other}"), None),
    }
}

fn base(id: &str, t: &TaskResult) -> Task {
    let now = crate::provider::rfc3339(crate::provider::unix_now());
    Task::new(
        id.to_owned(),
        TaskStatus::Working,
        t.started_at
            .map_or_else(|| now.clone(), crate::provider::rfc3339),
        t.finished_at.map_or(now, crate::provider::rfc3339),
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// The result the blocking run_command would have given: the last 64 KiB
/// of each saved stream, read as one page each from its tail.
async fn run_command_result(
    service: &Service,
    sandbox_id: &str,
    task_id: &str,
    t: &TaskResult,
) -> Result<JsonObject, ToolError> {
    let tail = |bytes: u64| bytes.saturating_sub(RUN_OUTPUT_MAX_BYTES as u64);
    let page = |stdout_offset, stderr_offset| TaskQueryArgs {
        stdout_offset: Some(stdout_offset),
        stderr_offset: Some(stderr_offset),
        limit: Some(RUN_OUTPUT_MAX_BYTES as u64),
        ..query(sandbox_id, task_id, None)
    };
    let last = service
        .get_task(page(tail(t.stdout_bytes), tail(t.stderr_bytes)))
        .await?;
    let result = RunCommandResult {
        sandbox_id: sandbox_id.to_owned(),
        exit_code: last.exit_code,
        stdout: last.stdout,
        stderr: last.stderr,
        stdout_truncated: last.stdout_truncated || t.stdout_bytes > RUN_OUTPUT_MAX_BYTES as u64,
        stderr_truncated: last.stderr_truncated || t.stderr_bytes > RUN_OUTPUT_MAX_BYTES as u64,
        timed_out: last.state == TaskState::TimedOut,
    };
    let value = serde_json::to_value(&result).expect("run_command results always encode");
    let call = CallToolResult::structured(value);
    let Ok(Value::Object(object)) = serde_json::to_value(&call) else {
        unreachable!("a CallToolResult encodes as an object")
    };
    Ok(object)
}

fn error_object(e: McpError) -> JsonObject {
    match serde_json::to_value(&e) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_foreign_ids_are_refused() {
        let id = encode_id("sb-1", &"a".repeat(32));
        assert_eq!(decode_id(&id).unwrap(), ("sb-1".into(), "a".repeat(32)));
        for bad in [
            "",
            "nope",
            "/x",
            "sb/short",
            &format!("a/b/{}", "c".repeat(32)),
        ] {
            assert!(decode_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(crate::provider::rfc3339(0), "1970-01-01T00:00:00Z");
    }
}
