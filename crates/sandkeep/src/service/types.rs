//! The arguments and results of every tool, as JSON sees them. Field docs
//! become the schema descriptions a model reads. Ranges are declared for
//! the schema here and enforced in `validate`.

use std::collections::BTreeMap;

use sandkeep_proto::limits::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The schema of a task state (the proto crate's `TaskState` is serde-only).
pub(super) fn task_state_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["running", "succeeded", "failed", "cancelled", "timed_out", "unknown"]
    })
}

// ---- sandboxes -------------------------------------------------------------

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxArgs {
    /// Template (base image) of the sandbox.
    #[serde(default)]
    pub template: Option<String>,
    /// Host directories to mount, among those the operator configured
    /// (each at the same path inside). Default: all of them; [] for none.
    #[serde(default)]
    #[schemars(length(max = SHARES_MAX))]
    pub shares: Option<Vec<String>>,
    /// Seconds until the sandbox is destroyed. run_command and the file tools push the deadline to now + timeout;
    /// the task tools do not.
    #[serde(default)]
    #[schemars(range(min = SANDBOX_TIMEOUT_MIN, max = SANDBOX_TIMEOUT_MAX))]
    #[schemars(extend("default" = SANDBOX_TIMEOUT_DEFAULT))]
    pub timeout: Option<u64>,
    /// Environment variables for every process in the sandbox. Put secrets
    /// a task needs here: values of variables whose names contain KEY,
    /// TOKEN, SECRET or PASSWORD are redacted from task logs.
    #[serde(default)]
    pub envs: Option<BTreeMap<String, String>>,
    /// "internet": outbound connections to public addresses only;
    /// "none": loopback only.
    #[serde(default)]
    #[schemars(extend("enum" = ["internet", "none"]))]
    pub network: Option<String>,
    /// Host names or "*.suffix" patterns: only these are reachable
    /// (implies "internet").
    #[serde(default)]
    #[schemars(length(min = 1, max = ALLOW_HOSTS_MAX))]
    pub allow_hosts: Option<Vec<String>>,
    /// Memory limit.
    #[serde(default)]
    #[schemars(range(min = MEMORY_MIB_MIN))]
    pub memory_mib: Option<u64>,
    /// CPUs (fractions allowed).
    #[serde(default)]
    #[schemars(range(min = super::validate::CPUS_MIN))]
    pub cpus: Option<f64>,
    /// Most processes at once.
    #[serde(default)]
    #[schemars(range(min = PIDS_MIN))]
    pub pids: Option<u64>,
    /// Most the sandbox may write.
    #[serde(default)]
    #[schemars(range(min = DISK_MIB_MIN))]
    pub disk_mib: Option<u64>,
    /// What the deadline does: "kill" destroys the sandbox, "pause"
    /// freezes it for resume_sandbox (its files and processes kept).
    #[serde(default)]
    #[schemars(extend("enum" = ["kill", "pause"], "default" = "kill"))]
    pub on_timeout: Option<String>,
}

/// The limits in force; null where the host cannot enforce one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LimitsResult {
    /// Memory limit in MiB.
    pub memory_mib: Option<u64>,
    /// CPUs the sandbox may use at once.
    pub cpus: Option<f64>,
    /// Most processes at once.
    pub pids: Option<u64>,
    /// Most MiB the sandbox may write.
    pub disk_mib: Option<u64>,
}

impl From<crate::provider::Limits> for LimitsResult {
    fn from(l: crate::provider::Limits) -> Self {
        Self {
            memory_mib: l.memory_mib,
            cpus: l.milli_cpus.map(|m| f64::from(m) / 1000.0),
            pids: l.pids,
            disk_mib: l.disk_mib,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateSandboxResult {
    /// The sandbox's id: pass it as sandbox_id to every call that works in
    /// this sandbox.
    pub sandbox_id: String,
    /// Present when the caller has no session (2026-07-28 HTTP requests):
    /// there is no default sandbox, so pass sandbox_id to every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The template (base image) it was made from.
    pub template: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds: the sandbox and everything in it is destroyed then.
    pub expires_at: u64,
    /// The isolation level the sandbox got.
    pub isolation: String,
    /// The network mode in force ("internet" or "none"); null when the
    /// sandbox shares the host's network.
    pub network: Option<String>,
    /// The names connections are narrowed to (empty: none).
    pub allow_hosts: Vec<String>,
    /// The limits in force; null where the host cannot enforce one.
    pub limits: LimitsResult,
    /// Host directories mounted at their own paths; the first is where
    /// commands run by default.
    pub shares: Vec<super::ShareResult>,
    /// The ports exposed with expose_port (none yet).
    pub ports: Vec<super::PortEntry>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillSandboxArgs {
    /// The sandbox to destroy, with every process, file and task in it.
    pub sandbox_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KillSandboxResult {
    /// The sandbox asked for.
    pub sandbox_id: String,
    /// False when the sandbox was already gone.
    pub killed: bool,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSandboxesArgs {}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSandboxArgs {
    /// The sandbox whose files to save.
    pub sandbox_id: String,
    /// The snapshot's id; it must not name a template or snapshot already.
    /// Default: a new "snap-…" id.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotResult {
    /// The snapshot's id.
    pub snapshot_id: String,
    /// Pass it as create_sandbox's template for a sandbox with these files.
    pub template: String,
    /// The sandbox it was taken of.
    pub sandbox_id: String,
    /// What it holds on disk, in bytes.
    pub size_bytes: u64,
    /// Unix seconds.
    pub created_at: u64,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSnapshotsArgs {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ListSnapshotsResult {
    /// Every snapshot, oldest first.
    pub snapshots: Vec<SnapshotResult>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteSnapshotArgs {
    /// The snapshot to delete.
    pub snapshot_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteSnapshotResult {
    /// The snapshot asked for.
    pub snapshot_id: String,
    /// False when there was no such snapshot.
    pub deleted: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSandboxArgs {
    /// The sandbox to copy.
    pub sandbox_id: String,
    /// Seconds (1 to 86400) until the new sandbox's deadline. Default: the
    /// copied sandbox's own timeout.
    #[serde(default)]
    #[schemars(range(min = SANDBOX_TIMEOUT_MIN, max = SANDBOX_TIMEOUT_MAX))]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseSandboxArgs {
    /// The sandbox to pause.
    pub sandbox_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PauseSandboxResult {
    /// The sandbox paused.
    pub sandbox_id: String,
    /// "paused".
    pub state: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeSandboxArgs {
    /// The paused sandbox to resume.
    pub sandbox_id: String,
    /// Seconds (1 to 86400) until its new deadline, also its timeout
    /// from now on. Default: the sandbox's own timeout.
    #[serde(default)]
    #[schemars(range(min = SANDBOX_TIMEOUT_MIN, max = SANDBOX_TIMEOUT_MAX))]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeSandboxResult {
    /// The sandbox resumed.
    pub sandbox_id: String,
    /// "running".
    pub state: String,
    /// Unix seconds: its new deadline.
    pub expires_at: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxEntry {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The template (base image) it was made from.
    pub template: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub expires_at: u64,
    /// True once a task was started in it: no session end destroys it; it
    /// lives until expires_at or kill_sandbox. (On the e2b provider a
    /// paused sandbox shows false: reading its mark would resume it.)
    pub retained: bool,
    /// The isolation level the sandbox got.
    pub isolation: String,
    /// The network mode in force ("internet" or "none"); null when the
    /// sandbox shares the host's network.
    pub network: Option<String>,
    /// The names connections are narrowed to (empty: none).
    pub allow_hosts: Vec<String>,
    /// The limits in force; null where the host cannot enforce one.
    pub limits: LimitsResult,
    /// Host directories mounted at their own paths; the first is where
    /// commands run by default.
    pub shares: Vec<super::ShareResult>,
    /// The ports exposed with expose_port, and where each is reached.
    pub ports: Vec<super::PortEntry>,
    /// "running", or "paused" (every process frozen, no deadline until
    /// resume_sandbox).
    pub state: String,
    /// What its deadline does: "kill", "pause", or "pause_files" (a pause
    /// that ends its processes and keeps its files: E2B's filesystem-only
    /// auto-pause, asked for through the E2B endpoint).
    pub on_timeout: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSandboxesResult {
    /// The live sandboxes.
    pub sandboxes: Vec<SandboxEntry>,
}

// ---- foreground commands and files -----------------------------------------

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// Shell command, run with bash -c (sh -c without bash).
    #[schemars(length(min = 1, max = COMMAND_MAX_CHARS))]
    pub command: String,
    /// Sandbox to run in. Default: this session's sandbox from the last
    /// create_sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Working directory. Default: the sandbox user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds to wait. At the timeout the command's
    /// process group is killed and timed_out is true. For anything longer,
    /// use start_task.
    #[serde(default)]
    #[schemars(range(min = RUN_TIMEOUT_MIN, max = RUN_TIMEOUT_MAX))]
    #[schemars(extend("default" = RUN_TIMEOUT_DEFAULT))]
    pub timeout: Option<u64>,
}

/// Field order is what a client previewing the first bytes shows: the
/// verdict and flags first, the output last (serde_json keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunCommandResult {
    /// Exit status, or 128+N when killed by signal N; null if none was
    /// collected.
    pub exit_code: Option<i32>,
    /// True when the command was killed at its timeout.
    pub timed_out: bool,
    /// True when earlier stdout bytes were dropped.
    pub stdout_truncated: bool,
    /// True when earlier stderr bytes were dropped.
    pub stderr_truncated: bool,
    /// The sandbox it ran in.
    pub sandbox_id: String,
    /// The last bytes of stdout (at most 64 KiB).
    pub stdout: String,
    /// The last bytes of stderr (at most 64 KiB).
    pub stderr: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read; a relative path is taken from the sandbox user's home.
    /// Files over 1 MiB are refused.
    #[schemars(length(min = 1, max = super::validate::PATH_MAX_BYTES))]
    pub path: String,
    /// Default: this session's sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReadFileResult {
    /// The path as given.
    pub path: String,
    /// The file as text (invalid UTF-8 shown as U+FFFD).
    pub content: String,
    /// Size in bytes.
    pub size: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// File to write; a relative path is taken from the sandbox user's home.
    /// Missing parent directories are created; the file is replaced
    /// atomically.
    #[schemars(length(min = 1, max = super::validate::PATH_MAX_BYTES))]
    pub path: String,
    /// The new content of the file.
    pub content: String,
    /// Default: this session's sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WriteFileResult {
    /// The path as given.
    pub path: String,
    /// Bytes of the file as written (the content as UTF-8).
    pub bytes_written: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory to list; a relative path is taken from the sandbox user's
    /// home ("." is the home itself).
    #[schemars(length(min = 1, max = super::validate::PATH_MAX_BYTES))]
    pub path: String,
    /// Default: this session's sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DirEntry {
    /// The entry's name in the directory.
    pub name: String,
    /// What it is (a symbolic link is not followed).
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    /// Bytes.
    pub size: u64,
    /// Unix seconds.
    pub modified_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ListFilesResult {
    /// The path as given.
    pub path: String,
    /// The directory's entries.
    pub entries: Vec<DirEntry>,
}

// ---- tasks ----------------------------------------------------------------

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartTaskArgs {
    /// Shell command to run in the background (bash -c).
    #[schemars(length(min = 1, max = COMMAND_MAX_CHARS))]
    pub command: String,
    /// Sandbox to run in. Default: this session's sandbox from the last
    /// create_sandbox. A sandbox is never created implicitly.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Working directory; must exist. Default: the sandbox user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before the task is stopped (state timed_out). The
    /// sandbox's own deadline still applies.
    #[serde(default)]
    #[schemars(range(min = TASK_TIMEOUT_MIN, max = TASK_TIMEOUT_MAX))]
    #[schemars(extend("default" = TASK_TIMEOUT_DEFAULT))]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StartTaskResult {
    /// Keep this together with task_id: the pair is the task's handle.
    pub sandbox_id: String,
    /// Keep this: get_task and cancel_task need it, from any later session.
    pub task_id: String,
    /// running, succeeded, failed, cancelled, timed_out, or unknown when
    /// the submission could not be confirmed.
    #[schemars(schema_with = "task_state_schema")]
    pub state: sandkeep_proto::TaskState,
    /// Exit status when the task already ended; null while running.
    pub exit_code: Option<i32>,
    /// Unix seconds; null when unknown.
    pub started_at: Option<u64>,
    /// Unix seconds; null until a terminal state is recorded.
    pub finished_at: Option<u64>,
    /// Present only with state unknown: why the start is unconfirmed and
    /// what to do (query the handle with get_task; do not submit again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskQueryArgs {
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle: 32 lowercase hex characters.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub task_id: String,
    /// Byte offset into the saved stdout. Pass the previous
    /// stdout_next_offset to read on.
    #[serde(default)]
    #[schemars(range(min = 0, max = OFFSET_MAX), extend("default" = 0))]
    pub stdout_offset: Option<u64>,
    /// Byte offset into the saved stderr. Pass the previous
    /// stderr_next_offset to read on.
    #[serde(default)]
    #[schemars(range(min = 0, max = OFFSET_MAX), extend("default" = 0))]
    pub stderr_offset: Option<u64>,
    /// Bytes per stream to return.
    #[serde(default)]
    #[schemars(range(min = PAGE_LIMIT_MIN, max = PAGE_LIMIT_MAX))]
    #[schemars(extend("default" = PAGE_LIMIT_DEFAULT))]
    pub limit: Option<u64>,
}

/// get_task and cancel_task take the same arguments.
pub type GetTaskArgs = TaskQueryArgs;
pub type CancelTaskArgs = TaskQueryArgs;

/// Field order is what a client previewing the first bytes shows: state,
/// exit code, offsets and flags first, the logs last (serde_json keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskResult {
    /// running, succeeded, failed, cancelled, timed_out, or unknown (the
    /// supervisor is gone without recording a result: never assume
    /// success).
    #[schemars(schema_with = "task_state_schema")]
    pub state: sandkeep_proto::TaskState,
    /// Exit status, or 128+N when ended by signal N; null while running or
    /// unknown.
    pub exit_code: Option<i32>,
    /// Pass as stdout_offset to read the next page.
    pub stdout_next_offset: u64,
    /// Pass as stderr_offset to read the next page.
    pub stderr_next_offset: u64,
    /// Bytes of stdout saved so far (at most 1 MiB).
    pub stdout_bytes: u64,
    /// Bytes of stderr saved so far (at most 1 MiB).
    pub stderr_bytes: u64,
    /// True once stdout passed 1 MiB: later bytes were not saved.
    pub stdout_truncated: bool,
    /// True once stderr passed 1 MiB: later bytes were not saved.
    pub stderr_truncated: bool,
    /// Why a terminal task failed, when known beyond its exit code: "out
    /// of memory (limit N MiB)" when the sandbox's memory limit killed it.
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The sandbox_id of the task's handle.
    pub sandbox_id: String,
    /// The task_id of the task's handle.
    pub task_id: String,
    /// Unix seconds.
    pub started_at: Option<u64>,
    /// Unix seconds; null until a terminal state is recorded.
    pub finished_at: Option<u64>,
    /// Saved stdout bytes [stdout_offset, stdout_offset+limit) as text.
    pub stdout: String,
    /// Saved stderr bytes [stderr_offset, stderr_offset+limit) as text.
    pub stderr: String,
}
