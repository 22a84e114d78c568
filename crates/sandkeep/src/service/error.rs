//! [`ToolError`]: every failure a tool call reports to its caller, each
//! message saying what to do next.

use sandkeep_proto::wire::ErrorKind;

use super::TaskResult;
use crate::provider::ProviderError;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A parameter is unknown, of the wrong type, or out of range. Nothing
    /// was executed. The message names the parameter and what is allowed.
    #[error("{0}")]
    InvalidArgument(String),
    /// A sandbox tool was called without `sandbox_id` in a session that
    /// has not created a sandbox. (Sessionless callers get their own
    /// message from the MCP layer: no default exists for them at all.)
    #[error(
        "no default sandbox in this session: pass sandbox_id (list_sandboxes lists the live \
         ones), or call create_sandbox once and reuse its sandbox"
    )]
    NoDefaultSandbox,
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The in-sandbox helper refused the request.
    #[error("{message}")]
    Helper { kind: ErrorKind, message: String },
    /// The helper's answer could not be read.
    #[error(
        "the task helper in sandbox {sandbox_id} gave an unreadable answer ({detail}); \
         retry, and if it persists the sandbox is damaged: kill_sandbox and create a new one"
    )]
    BadHelperReply { sandbox_id: String, detail: String },
    /// cancel_task could not confirm a terminal state within 3 s.
    #[error(
        "cancellation of task {} is not confirmed: after 3 s it is still {}. \
         Call get_task later to see whether it stopped, or kill_sandbox to stop everything in the sandbox",
        .0.task_id, .0.state
    )]
    CancelNotConfirmed(Box<TaskResult>),
    /// send_input's call to the sandbox broke after the input may have
    /// been queued.
    #[error(
        "the input may or may not have been accepted ({0}): read the task's output with \
         get_task before sending it again, or it may arrive twice"
    )]
    InputUnconfirmed(String),
    #[error("unknown tool {0:?}: call tools/list for the available tools")]
    UnknownTool(String),
    #[error(
        "the session ended while sandbox {0} was being created; it was destroyed with the \
         session's other sandboxes"
    )]
    SessionEnded(String),
}

impl ToolError {
    /// Data the error carries besides its message (the observed task of an
    /// unconfirmed cancel), as the JSON object returned with it.
    pub fn structured(&self) -> Option<serde_json::Value> {
        match self {
            Self::CancelNotConfirmed(observed) => {
                let mut v = serde_json::to_value(observed.as_ref()).ok()?;
                v.as_object_mut()?
                    .insert("error".into(), self.to_string().into());
                Some(v)
            }
            _ => None,
        }
    }

    pub(super) fn invalid(param: &str, rule: &str, detail: impl std::fmt::Display) -> Self {
        Self::InvalidArgument(format!("invalid parameter `{param}`: {rule}; {detail}"))
    }
}
