//! The helper's command line and JSON replies.
//!
//! The host runs, inside the sandbox, `sandkeep-task VERB [JSON]` and reads
//! one JSON object from its stdout. A reply is either the verb's result or
//! [`ErrorReply`]; the helper exits non-zero only with an [`ErrorReply`].

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::task::{TaskId, TaskState};

/// The version of this protocol (verbs, requests, replies, the task
/// directory's files): bumped on every change a host and a helper built
/// apart would disagree on. `sandkeep-task --version` prints it.
pub const PROTOCOL_VERSION: u32 = 3;

/// `sandkeep-task --version`: one line naming the helper's version, its
/// protocol and the fingerprint of the sources it was built from.
pub const VERSION_FLAG: &str = "--version";

/// The helper's verbs, as spelled on its command line.
pub mod verb {
    pub const START: &str = "start";
    pub const STATUS: &str = "status";
    pub const CANCEL: &str = "cancel";
    pub const LIST: &str = "list";
    pub const WAIT: &str = "wait";
    pub const DELETE: &str = "delete";
    pub const CHANGES: &str = "changes";
    pub const EXPORT: &str = "export";
    pub const INPUT: &str = "input";
    pub const RESIZE: &str = "resize";
    pub const METADATA: &str = "metadata";
    pub const WATCH_DIR: &str = "watch-dir";
    pub const PTY: &str = "pty";
    pub const SERVE: &str = "serve";
}

/// The namespace of the file metadata `sandkeep-task metadata` keeps, as
/// E2B's envd keeps it: extended attributes `user.e2b.KEY`.
pub const METADATA_XATTR_PREFIX: &str = "user.e2b.";

/// What every staged upload's temporary file is called, beside its target:
/// this prefix and a random suffix. The E2B endpoint's `/files` writes an
/// upload there and renames it over the target once whole; `watch-dir`
/// reports that as the write of the target, as envd's in-place write is
/// reported.
pub const UPLOAD_STAGING_PREFIX: &str = ".sandkeep-upload.";

/// The prefix of a staged upload whose target did not exist when it began
/// (a new file: `watch-dir` reports its creation too).
pub const UPLOAD_STAGING_NEW_PREFIX: &str = ".sandkeep-upload.new.";

/// `sandkeep-task watch-dir JSON`: E2B's directory watch (envd's
/// `WatchDir`) on inotify in the sandbox, as the user who asked. It
/// answers with [`DirWatchLine`]s on stdout for as long as its stdin is
/// open; each line read on stdin asks for a [`DirWatchLine::Synced`] after
/// every change made before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirWatchRequest {
    /// The directory; relative to the helper's working directory.
    pub path: String,
    /// Whether the directories below it are watched too.
    #[serde(default)]
    pub recursive: bool,
}

/// One line on the stdout of `watch-dir` (an [`ErrorReply`] instead, with
/// exit code 1, when the watch cannot begin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirWatchLine {
    /// The watch is in place: changes from now on are reported.
    Started {
        /// The watched directory, absolute.
        path: String,
    },
    /// A change, named by its path relative to the watched directory.
    Event { name: String, op: FsOp },
    /// Every change made before the matching stdin line was reported.
    Synced,
}

/// The kinds of change envd reports (fsnotify's operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsOp {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

/// `sandkeep-task pty JSON`: E2B's PTY process (envd's `Start` with
/// `pty`): `command` (`bash -c`) in a session of its own on a new
/// pseudo-terminal of `size`, attached to the caller for as long as it
/// runs. The terminal's output is the helper's stdout; its stdin carries
/// [`PtyFrame`]s. It exits as the command did (its code, or the same
/// signal); it is not a task: nothing of it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtyRequest {
    pub command: String,
    pub size: TermSize,
}

/// What the host writes on the stdin of `pty`: a kind byte, the payload's
/// length (4 bytes, big-endian) and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyFrame {
    /// Bytes typed on the terminal.
    Input(Vec<u8>),
    /// The terminal's new size (payload: columns, rows, 2 bytes each).
    Resize(TermSize),
}

impl PtyFrame {
    const INPUT: u8 = b'i';
    const RESIZE: u8 = b'r';
    const HEADER: usize = 5;

    pub fn encode(&self) -> Vec<u8> {
        let (kind, payload) = match self {
            Self::Input(bytes) => (Self::INPUT, bytes.clone()),
            Self::Resize(size) => (
                Self::RESIZE,
                [size.cols.to_be_bytes(), size.rows.to_be_bytes()].concat(),
            ),
        };
        let len = u32::try_from(payload.len()).expect("a frame's payload fits in 4 GiB");
        let mut out = Vec::with_capacity(Self::HEADER + payload.len());
        out.push(kind);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// The first frame of `buf` and its length in bytes; `Ok(None)` while
    /// it is incomplete, an error for what is not a frame.
    pub fn decode(buf: &[u8]) -> Result<Option<(Self, usize)>, String> {
        let Some(header) = buf.get(..Self::HEADER) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let Some(payload) = buf.get(Self::HEADER..Self::HEADER + len) else {
            return Ok(None);
        };
        let frame = match (header[0], payload) {
            (Self::INPUT, bytes) => Self::Input(bytes.to_vec()),
            (Self::RESIZE, &[c0, c1, r0, r1]) => Self::Resize(TermSize {
                cols: u16::from_be_bytes([c0, c1]),
                rows: u16::from_be_bytes([r0, r1]),
            }),
            (kind, _) => return Err(format!("not a pty frame: kind {kind}, {len} bytes")),
        };
        Ok(Some((frame, Self::HEADER + len)))
    }
}

/// `sandkeep-task metadata JSON`: sets each file's metadata in `set`
/// (added to what it has), then reads that of each path of `get`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataRequest {
    #[serde(default)]
    pub set: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    pub get: Vec<String>,
}

/// The metadata of each path of [`MetadataRequest::get`], in order (empty
/// for a file without any, or that cannot be read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataReply {
    pub metadata: Vec<std::collections::BTreeMap<String, String>>,
}

/// `sandkeep-task start JSON`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    pub task_id: TaskId,
    pub command: String,
    /// Working directory; `None` means the user's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Seconds, within the task timeout range of docs/tools.md.
    pub timeout: u64,
    /// How the task takes input (start_interactive_task); `None`, the
    /// seed's start_task, is stdin from `/dev/null`. Left out of the JSON
    /// when `None`, so a start_task request is what it always was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputMode>,
}

/// Where an interactive task's input goes (SPEC.md §15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum InputMode {
    /// stdin is a pipe; stdout and stderr stay apart.
    Pipe,
    /// The command runs on a pseudo-terminal of this size; what it shows
    /// (stdout and stderr together) is the task's stdout.
    Pty(TermSize),
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TermSize {
    pub cols: u16,
    pub rows: u16,
}

impl TermSize {
    /// Checks both against [`limits::TERM_SIZE_MIN`]..=[`limits::TERM_SIZE_MAX`].
    pub fn validate(&self) -> Result<(), RequestError> {
        let (min, max) = (
            u64::from(limits::TERM_SIZE_MIN),
            u64::from(limits::TERM_SIZE_MAX),
        );
        check_range("cols", u64::from(self.cols), min, max)?;
        check_range("rows", u64::from(self.rows), min, max)
    }
}

/// `sandkeep-task input JSON`, the bytes to deliver on the helper's stdin
/// (so they need no quoting or encoding on the way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    pub task_id: TaskId,
    /// Close the task's stdin after these bytes: end-of-file on a pipe,
    /// `^D` on a terminal.
    #[serde(default)]
    pub close: bool,
}

/// The reply to `input`: the bytes are held in the task's directory and
/// will reach the task in order, whoever asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputReply {
    pub task_id: TaskId,
    pub bytes_accepted: u64,
}

/// `sandkeep-task resize JSON`: a pty task's new terminal size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    pub task_id: TaskId,
    pub cols: u16,
    pub rows: u16,
}

impl ResizeRequest {
    pub fn size(&self) -> TermSize {
        TermSize {
            cols: self.cols,
            rows: self.rows,
        }
    }
}

/// The reply to `resize`: the size the terminal will have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeReply {
    pub task_id: TaskId,
    #[serde(flatten)]
    pub size: TermSize,
}

/// `sandkeep-task status JSON` and `sandkeep-task cancel JSON`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    pub task_id: TaskId,
    #[serde(default)]
    pub stdout_offset: u64,
    #[serde(default)]
    pub stderr_offset: u64,
    #[serde(default = "default_limit")]
    pub limit: u64,
}

fn default_limit() -> u64 {
    limits::PAGE_LIMIT_DEFAULT
}

/// A request value outside what docs/tools.md allows: names the parameter and
/// the allowed range, so the caller knows what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    pub parameter: &'static str,
    pub message: String,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.parameter, self.message)
    }
}

impl std::error::Error for RequestError {}

fn check_range(
    parameter: &'static str,
    value: u64,
    min: u64,
    max: u64,
) -> Result<(), RequestError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(RequestError {
            parameter,
            message: format!("must be between {min} and {max}, got {value}"),
        })
    }
}

impl StartRequest {
    /// Checks every value against docs/tools.md; the helper creates nothing
    /// for a request that fails this.
    pub fn validate(&self) -> Result<(), RequestError> {
        let chars = self.command.chars().count();
        if !(1..=limits::COMMAND_MAX_CHARS).contains(&chars) {
            return Err(RequestError {
                parameter: "command",
                message: format!(
                    "must be 1 to {} characters long, got {chars}",
                    limits::COMMAND_MAX_CHARS
                ),
            });
        }
        if self.command.contains('\0') {
            return Err(RequestError {
                parameter: "command",
                message: "must not contain a NUL character (a shell cannot receive it)".into(),
            });
        }
        if let Some(cwd) = &self.cwd
            && (cwd.is_empty() || cwd.contains('\0'))
        {
            return Err(RequestError {
                parameter: "cwd",
                message: "must be a non-empty path without NUL characters".into(),
            });
        }
        if let Some(InputMode::Pty(size)) = &self.input {
            size.validate()?;
        }
        check_range(
            "timeout",
            self.timeout,
            limits::TASK_TIMEOUT_MIN,
            limits::TASK_TIMEOUT_MAX,
        )
    }
}

impl StatusRequest {
    /// Whether a wait with these offsets is answered by a task in `state`
    /// with these log sizes: it is settled, or either log has saved bytes
    /// past its offset (docs/tools.md, wait_task).
    pub fn is_due(&self, state: TaskState, stdout_bytes: u64, stderr_bytes: u64) -> bool {
        state.is_settled() || stdout_bytes > self.stdout_offset || stderr_bytes > self.stderr_offset
    }

    /// Checks offsets and page limit against docs/tools.md.
    pub fn validate(&self) -> Result<(), RequestError> {
        check_range("stdout_offset", self.stdout_offset, 0, limits::OFFSET_MAX)?;
        check_range("stderr_offset", self.stderr_offset, 0, limits::OFFSET_MAX)?;
        check_range(
            "limit",
            self.limit,
            limits::PAGE_LIMIT_MIN,
            limits::PAGE_LIMIT_MAX,
        )
    }
}

impl StatusRequest {
    /// A request for the first page of both logs.
    pub fn first_page(task_id: TaskId) -> Self {
        Self {
            task_id,
            stdout_offset: 0,
            stderr_offset: 0,
            limit: limits::PAGE_LIMIT_DEFAULT,
        }
    }
}

/// `sandkeep-task wait JSON`: a status request that answers only once the
/// task is settled, either log has saved bytes past its offset, or
/// `timeout` seconds have passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    pub task_id: TaskId,
    #[serde(default)]
    pub stdout_offset: u64,
    #[serde(default)]
    pub stderr_offset: u64,
    #[serde(default = "default_limit")]
    pub limit: u64,
    /// Seconds, within [`limits::WAIT_TIMEOUT_MIN`]..=[`limits::WAIT_TIMEOUT_MAX`].
    #[serde(default = "default_wait_timeout")]
    pub timeout: u64,
}

fn default_wait_timeout() -> u64 {
    limits::WAIT_TIMEOUT_DEFAULT
}

impl WaitRequest {
    /// The status request the answer is read with.
    pub fn status_request(&self) -> StatusRequest {
        StatusRequest {
            task_id: self.task_id.clone(),
            stdout_offset: self.stdout_offset,
            stderr_offset: self.stderr_offset,
            limit: self.limit,
        }
    }

    /// Checks offsets, page limit and timeout against docs/tools.md.
    pub fn validate(&self) -> Result<(), RequestError> {
        self.status_request().validate()?;
        check_range(
            "timeout",
            self.timeout,
            limits::WAIT_TIMEOUT_MIN,
            limits::WAIT_TIMEOUT_MAX,
        )
    }
}

/// The reply to `wait`: the status seen when it answered, and how long it
/// waited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitReply {
    #[serde(flatten)]
    pub status: TaskStatus,
    pub waited_ms: u64,
}

/// `sandkeep-task serve`: the resident reader of one host, the read-only
/// verbs ([`READER_VERBS`]) answered by one long-lived process instead of a
/// process per call. It reads request lines `ID VERB JSON` on stdin (the
/// one-shot command line, with the caller's number in front) and writes
/// reply lines `ID CODE JSON`: `CODE` and `JSON` are the exit code and the
/// stdout the one-shot helper would give (`JSON` is compact, so it holds no
/// newline). Requests are answered in order, except `changes` (without
/// its diff), a walk that may be long and is answered when it is done: the
/// caller matches answers by `ID`. It exits at the end of its stdin or
/// after [`READER_IDLE_SECS`] without a request.
pub const READER_VERBS: [&str; 3] = [verb::STATUS, verb::LIST, verb::CHANGES];

/// How long a resident reader stays without a request before it exits.
pub const READER_IDLE_SECS: u64 = 60;

/// The longest request line a reader takes (a status request is some
/// hundred bytes; a `changes` request names its shares' paths, and the host
/// sends a longer one to a helper process instead): past it the reader
/// exits, since only its host writes there.
pub const READER_REQUEST_MAX: usize = 64 * 1024;

/// One request line for a resident reader (`ID VERB JSON\n`).
pub fn reader_request_line<T: Serialize>(id: u64, verb: &str, request: &T) -> Vec<u8> {
    let mut line = format!("{id} {verb} ").into_bytes();
    serde_json::to_writer(&mut line, request).expect("helper requests always encode");
    line.push(b'\n');
    line
}

/// A reader's line split into the caller's number, the verb or code, and
/// the JSON; `None` when it is not of that shape.
pub fn split_reader_line(line: &[u8]) -> Option<(u64, &str, &[u8])> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let id = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let word = std::str::from_utf8(parts.next()?).ok()?;
    Some((id, word, parts.next()?))
}

/// `sandkeep-task wait --stream`: one process watching many tasks for one
/// host, answering its waits. It reads [`WatchCommand`] lines on stdin; it
/// answers each wait once (at once if already due) the task is settled or
/// either log has saved bytes past the wait's offset, with a line
/// `NUMBER CODE JSON` where `CODE JSON` is exactly what `status` of the
/// wait's request would exit with and print (a resident reader's answer
/// line, [`split_reader_line`]), and forgets the wait. It exits at the end
/// of its stdin.
pub const WAIT_STREAM: &str = "--stream";

/// One line on the stdin of `wait --stream`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WatchCommand {
    /// Answer this wait, numbered by the host, when it is due.
    Watch { number: u64, request: StatusRequest },
    /// Forget the wait with this number, unanswered.
    Unwatch { number: u64 },
}

/// `sandkeep-task delete JSON`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteRequest {
    pub task_id: TaskId,
}

/// The reply to `delete`: the task's directory and logs are gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteReply {
    pub task_id: TaskId,
    pub deleted: bool,
}

/// What a task looks like without its logs: the reply to `start`, and one
/// entry of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub task_id: TaskId,
    pub state: TaskState,
    pub exit_code: Option<i32>,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
}

/// The reply to `status`: get_task's result without `sandbox_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    #[serde(flatten)]
    pub summary: TaskSummary,
    pub stdout: String,
    pub stderr: String,
    pub stdout_next_offset: u64,
    pub stderr_next_offset: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Why a terminal task failed, when known beyond its exit code ("out
    /// of memory (limit N MiB)"). Absent otherwise, and from older helpers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The reply to `cancel`: the status seen at the end, and whether the
/// terminal state `cancelled` (or another terminal state reached first) was
/// confirmed within the wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReply {
    #[serde(flatten)]
    pub status: TaskStatus,
    pub confirmed: bool,
}

/// One entry of `list`: the summary, the start of the command (redacted
/// like the logs) and the bytes saved so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedTask {
    #[serde(flatten)]
    pub summary: TaskSummary,
    /// The first [`limits::LISTED_COMMAND_MAX_CHARS`] characters; empty for
    /// a task started by a helper that did not save it.
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub stdout_bytes: u64,
    #[serde(default)]
    pub stderr_bytes: u64,
}

/// The reply to `list`, newest start first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListReply {
    pub tasks: Vec<ListedTask>,
}

/// Why a request failed. The host maps these to tool errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or a value is out of range.
    BadRequest,
    /// No task with that id exists for this user.
    NoSuchTask,
    /// A task with that id already exists: the submission is not run again.
    TaskExists,
    /// The user already has the maximum number of task directories.
    TooManyTasks,
    /// The working directory does not exist or is not a directory.
    NoSuchCwd,
    /// The private task directory is unsafe (symlink, foreign owner, open
    /// permissions).
    UnsafeTaskDir,
    /// The task is still running, so it was not deleted.
    TaskRunning,
    /// Input for a task started without it (start_task: stdin is
    /// `/dev/null`), or a resize for a task without a terminal.
    NotInteractive,
    /// Input for a task that has ended (or whose supervisor is gone).
    TaskEnded,
    /// Input after the task's stdin was closed.
    StdinClosed,
    /// The input would leave more than 1 MiB waiting: nothing was taken.
    InputBacklogFull,
    /// Anything else (I/O failure, spawn failure).
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
}

/// `{"error": {"kind": ..., "message": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: ErrorBody,
}

impl ErrorReply {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            error: ErrorBody {
                kind,
                message: message.into(),
            },
        }
    }
}

/// Quotes one word for a POSIX shell: `'...'` with each `'` written `'\''`.
pub fn shell_quote(word: &str) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The command line that runs `verb` of the helper at `helper` with the
/// JSON-encoded `request`, as it travels to the sandbox.
pub fn helper_command_line<T: Serialize>(helper: &str, verb: &str, request: &T) -> String {
    let json = serde_json::to_string(request).expect("helper requests always encode");
    format!("{} {} {}", shell_quote(helper), verb, shell_quote(&json))
}

/// The size start_task limits (docs/tools.md): the request encoded as JSON
/// and then shell-quoted.
pub fn encoded_request_len<T: Serialize>(request: &T) -> usize {
    let json = serde_json::to_string(request).expect("helper requests always encode");
    shell_quote(&json).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's request line splits back into its number, verb and JSON;
    /// a line without a number or a verb is none.
    #[test]
    fn reader_lines_split_into_number_word_and_json() {
        let line = reader_request_line(42, verb::STATUS, &serde_json::json!({"task_id": "a b"}));
        assert_eq!(line, b"42 status {\"task_id\":\"a b\"}\n");
        assert_eq!(
            split_reader_line(&line),
            Some((42, verb::STATUS, &br#"{"task_id":"a b"}"#[..]))
        );
        assert_eq!(split_reader_line(b"7 0 {}"), Some((7, "0", &b"{}"[..])));
        for bad in [&b"status {}\n"[..], b"x 0 {}", b"7 0", b"", b"-1 0 {}"] {
            assert_eq!(
                split_reader_line(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn pty_frames_round_trip_whole_or_in_pieces() {
        let frames = [
            PtyFrame::Input(b"echo hi\n".to_vec()),
            PtyFrame::Resize(TermSize { cols: 300, rows: 2 }),
            PtyFrame::Input(Vec::new()),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(PtyFrame::encode).collect();
        let mut rest = &bytes[..];
        for frame in &frames {
            assert_eq!(PtyFrame::decode(&rest[..rest.len().min(4)]), Ok(None));
            let (got, n) = PtyFrame::decode(rest).unwrap().unwrap();
            assert_eq!(&got, frame);
            rest = &rest[n..];
        }
        assert!(rest.is_empty());
        assert!(PtyFrame::decode(b"x\0\0\0\0").is_err());
        assert!(PtyFrame::decode(b"r\0\0\0\x01z").is_err());
    }

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn status_request_defaults() {
        let r: StatusRequest =
            serde_json::from_str(r#"{"task_id":"0123456789abcdef0123456789abcdef"}"#).unwrap();
        assert_eq!(r.limit, limits::PAGE_LIMIT_DEFAULT);
        assert_eq!(r.stdout_offset, 0);
        assert!(
            serde_json::from_str::<StatusRequest>(
                r#"{"task_id":"0123456789abcdef0123456789abcdef","bogus":1}"#
            )
            .is_err()
        );
    }

    #[test]
    fn out_of_range_values_name_the_parameter() {
        let id = TaskId::from_bytes([3; 16]);
        let start = |command: &str, timeout| StartRequest {
            task_id: id.clone(),
            command: command.into(),
            cwd: None,
            timeout,
            input: None,
        };
        assert!(start("true", 1).validate().is_ok());
        assert!(
            start(&"€".repeat(limits::COMMAND_MAX_CHARS), 3600)
                .validate()
                .is_ok()
        );
        assert_eq!(start("", 5).validate().unwrap_err().parameter, "command");
        let long = "x".repeat(limits::COMMAND_MAX_CHARS + 1);
        assert_eq!(start(&long, 5).validate().unwrap_err().parameter, "command");
        assert_eq!(
            start("a\0b", 5).validate().unwrap_err().parameter,
            "command"
        );
        let err = start("true", 0).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "timeout: must be between 1 and 3600, got 0"
        );
        assert!(start("true", 3601).validate().is_err());

        let mut status = StatusRequest::first_page(id);
        assert!(status.validate().is_ok());
        status.limit = 0;
        assert_eq!(status.validate().unwrap_err().parameter, "limit");
        status.limit = 1;
        status.stderr_offset = limits::OFFSET_MAX + 1;
        assert_eq!(status.validate().unwrap_err().parameter, "stderr_offset");
    }

    #[test]
    fn a_start_task_request_encodes_as_it_always_did() {
        let request = StartRequest {
            task_id: TaskId::from_bytes([1; 16]),
            command: "true".into(),
            cwd: None,
            timeout: 5,
            input: None,
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"task_id":"01010101010101010101010101010101","command":"true","timeout":5}"#
        );
        let pty = StartRequest {
            input: Some(InputMode::Pty(TermSize { cols: 0, rows: 24 })),
            ..request
        };
        assert!(
            serde_json::to_string(&pty)
                .unwrap()
                .ends_with(r#""input":{"pty":{"cols":0,"rows":24}}}"#)
        );
        assert_eq!(pty.validate().unwrap_err().parameter, "cols");
    }

    #[test]
    fn status_reply_is_flat() {
        let s = TaskStatus {
            summary: TaskSummary {
                task_id: TaskId::from_bytes([1; 16]),
                state: TaskState::Running,
                exit_code: None,
                started_at: Some(1),
                finished_at: None,
            },
            stdout: "a".into(),
            stderr: String::new(),
            stdout_next_offset: 1,
            stderr_next_offset: 0,
            stdout_bytes: 1,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            error: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["state"], "running");
        assert_eq!(v["exit_code"], serde_json::Value::Null);
        let back: TaskStatus = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
