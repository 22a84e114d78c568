//! The interactive task tools (SPEC.md §15): start_interactive_task,
//! send_input and resize_terminal, their arguments and results.
//!
//! A start is start_task's protocol with the task's input mode added; input
//! and resizes go to the in-sandbox helper, which queues them in the task's
//! directory for its supervisor. Nothing is held on this side, so input
//! accepted here reaches the task after this process is gone.

use base64::Engine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use sandkeep_proto::limits::*;
use sandkeep_proto::wire::{self, InputMode, InputReply, InputRequest, ResizeReply, ResizeRequest};

use super::handlers::helper_error;
use super::helper::{self, HelperError};
use super::*;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartInteractiveTaskArgs {
    /// Shell command to run in the background (bash -c), reading its input
    /// from send_input.
    #[schemars(length(min = 1, max = COMMAND_MAX_CHARS))]
    pub command: String,
    /// Sandbox to run in. Default: this session's sandbox from the last
    /// create_sandbox. A sandbox is never created implicitly.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Working directory; must exist. Default: the sandbox user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before the task is stopped (state timed_out).
    #[serde(default)]
    #[schemars(range(min = TASK_TIMEOUT_MIN, max = TASK_TIMEOUT_MAX))]
    #[schemars(extend("default" = TASK_TIMEOUT_DEFAULT))]
    pub timeout: Option<u64>,
    /// Run on a pseudo-terminal (TERM=xterm-256color): for programs that
    /// want one (REPLs with prompts, editors, password prompts, ^C). Its
    /// output, stdout and stderr together, is the task's stdout. Without
    /// it stdin is a pipe.
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub pty: Option<bool>,
    /// Terminal columns (with pty).
    #[serde(default)]
    #[schemars(range(min = TERM_SIZE_MIN, max = TERM_SIZE_MAX))]
    #[schemars(extend("default" = TERM_COLS_DEFAULT))]
    pub cols: Option<u64>,
    /// Terminal rows (with pty).
    #[serde(default)]
    #[schemars(range(min = TERM_SIZE_MIN, max = TERM_SIZE_MAX))]
    #[schemars(extend("default" = TERM_ROWS_DEFAULT))]
    pub rows: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendInputArgs {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle: 32 lowercase hex characters.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub task_id: String,
    /// What to type; end a line with a newline character. On a terminal
    /// the character U+0003 is ^C and U+0004 is ^D.
    pub data: String,
    /// How data is written: utf8 (as is) or base64 (any bytes).
    #[serde(default)]
    #[schemars(extend("enum" = ["utf8", "base64"], "default" = "utf8"))]
    pub encoding: Option<String>,
    /// Close stdin after data: end-of-file on a pipe, ^D on a terminal.
    /// No input is taken afterwards.
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub close: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SendInputResult {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle.
    pub task_id: String,
    /// Bytes taken (all of data, decoded): they reach the task in order,
    /// once, even if this server is replaced meanwhile.
    pub bytes_accepted: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeTerminalArgs {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle: 32 lowercase hex characters.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub task_id: String,
    /// New number of columns.
    #[schemars(range(min = TERM_SIZE_MIN, max = TERM_SIZE_MAX))]
    pub cols: u64,
    /// New number of rows.
    #[schemars(range(min = TERM_SIZE_MIN, max = TERM_SIZE_MAX))]
    pub rows: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResizeTerminalResult {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle.
    pub task_id: String,
    /// The terminal's columns from now on.
    pub cols: u16,
    /// The terminal's rows from now on.
    pub rows: u16,
}

impl Service {
    pub async fn start_interactive_task(
        &self,
        session: &Session,
        args: StartInteractiveTaskArgs,
    ) -> Result<StartTaskResult, ToolError> {
        const TOOL: &str = "start_interactive_task";
        let input = if args.pty.unwrap_or(false) {
            InputMode::Pty(validate::term_size(TOOL, args.cols, args.rows)?)
        } else {
            for (name, value) in [("cols", args.cols), ("rows", args.rows)] {
                if value.is_some() {
                    return Err(ToolError::invalid(
                        name,
                        "is only taken with pty true",
                        "nothing was run",
                    ));
                }
            }
            InputMode::Pipe
        };
        let plain = StartTaskArgs {
            command: args.command,
            sandbox_id: args.sandbox_id,
            cwd: args.cwd,
            timeout: args.timeout,
        };
        self.submit_task(session, plain, Some(input)).await
    }

    pub async fn send_input(&self, args: SendInputArgs) -> Result<SendInputResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let task_id = validate::task_id(&args.task_id)?;
        let data = decode(&args.data, args.encoding.as_deref())?;
        let request = InputRequest {
            task_id: task_id.clone(),
            close: args.close.unwrap_or(false),
        };
        let reply: InputReply = helper::call_with_stdin(
            self.provider.as_ref(),
            &self.helpers,
            &id,
            wire::verb::INPUT,
            &request,
            data,
        )
        .await
        .map_err(|e| match e {
            HelperError::Provider(crate::provider::ProviderError::Unconfirmed {
                message, ..
            })
            | HelperError::Unreadable(message) => ToolError::InputUnconfirmed(message),
            e => helper_error(e, &id, &task_id),
        })?;
        Ok(SendInputResult {
            sandbox_id: id.to_string(),
            task_id: reply.task_id.to_string(),
            bytes_accepted: reply.bytes_accepted,
        })
    }

    pub async fn resize_terminal(
        &self,
        args: ResizeTerminalArgs,
    ) -> Result<ResizeTerminalResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let task_id = validate::task_id(&args.task_id)?;
        let size = validate::term_size("resize_terminal", Some(args.cols), Some(args.rows))?;
        let request = ResizeRequest {
            task_id: task_id.clone(),
            cols: size.cols,
            rows: size.rows,
        };
        let reply: ResizeReply = helper::call(
            self.provider.as_ref(),
            &self.helpers,
            &id,
            wire::verb::RESIZE,
            &request,
        )
        .await
        .map_err(|e| helper_error(e, &id, &task_id))?;
        Ok(ResizeTerminalResult {
            sandbox_id: id.to_string(),
            task_id: reply.task_id.to_string(),
            cols: reply.size.cols,
            rows: reply.size.rows,
        })
    }
}

/// send_input's `data` as bytes, within the per-call limit.
fn decode(data: &str, encoding: Option<&str>) -> Result<Vec<u8>, ToolError> {
    let bytes = match encoding.unwrap_or("utf8") {
        "utf8" => data.as_bytes().to_vec(),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                ToolError::invalid(
                    "data",
                    "must be valid base64 with encoding \"base64\"",
                    format_args!("{e}; nothing was sent"),
                )
            })?,
        other => {
            return Err(ToolError::invalid(
                "encoding",
                &validate::rule("send_input", "encoding"),
                format_args!("got {other:?}; nothing was sent"),
            ));
        }
    };
    if bytes.len() > INPUT_MAX_BYTES {
        return Err(ToolError::invalid(
            "data",
            &validate::rule("send_input", "data"),
            format_args!("got {} bytes; nothing was sent", bytes.len()),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_decoded_and_bounded() {
        assert_eq!(decode("hi\n", None).unwrap(), b"hi\n");
        assert_eq!(decode("AAE=", Some("base64")).unwrap(), [0, 1]);
        let e = decode("not base64!", Some("base64"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`data`"), "{e}");
        let e = decode("x", Some("hex")).unwrap_err().to_string();
        assert!(e.contains("`encoding`"), "{e}");
        assert!(decode(&"x".repeat(INPUT_MAX_BYTES), None).is_ok());
        let e = decode(&"x".repeat(INPUT_MAX_BYTES + 1), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`data`") && e.contains("65536"), "{e}");
    }
}
