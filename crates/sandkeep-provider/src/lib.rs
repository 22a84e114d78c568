//! Where sandboxes live.
//!
//! The [`Provider`] trait is everything the service may ask of a sandbox
//! host: create, kill, list, exec, files, renew, retain, and the path of the
//! task helper inside a sandbox. The service never knows which provider it
//! talks to. Providers know nothing of MCP, sessions or tasks' meaning.
//!
//! As the lowest crate every host-side crate shares, it also holds the few
//! helpers they would otherwise each write: [`unix_now`], [`unix_now_ns`],
//! [`rfc3339`] and [`random_hex`].

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

pub use sandkeep_proto::shares::{LayerKind, Layers, Share, ShareMode};

/// A sandbox id: 1–64 characters of `[a-z0-9-]`, starting with a letter or
/// digit. Ids come from users, so the type keeps them safe to use in paths.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxId(String);

impl SandboxId {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "sandbox_id must be 1-64 characters of a-z, 0-9 and '-', got {:?}",
                s.chars().take(80).collect::<String>()
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SandboxId({})", self.0)
    }
}

impl TryFrom<String> for SandboxId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s)
    }
}

impl From<SandboxId> for String {
    fn from(id: SandboxId) -> String {
        id.0
    }
}

/// Where a sandbox's processes may connect (SPEC.md §10).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Outbound connections to public addresses only.
    #[default]
    Internet,
    /// Loopback only.
    None,
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Internet => "internet",
            Self::None => "none",
        })
    }
}

/// A sandbox's resource limits. In a [`CreateSpec`], `None` asks for the
/// provider's default; in a [`SandboxInfo`], `None` says the limit is not
/// enforced. CPUs are counted in thousandths so the type stays exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_mib: Option<u64>,
    pub milli_cpus: Option<u32>,
    pub pids: Option<u64>,
    pub disk_mib: Option<u64>,
}

/// What create needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSpec {
    pub template: String,
    /// Seconds; also the renewal period.
    pub timeout: u64,
    /// Added to the sandbox's clean environment.
    pub envs: BTreeMap<String, String>,
    /// `None`: the provider's default (internet where it can isolate).
    pub network: Option<Network>,
    /// Host names or `*.suffix` patterns, validated; empty means no
    /// narrowing. Non-empty implies [`Network::Internet`].
    pub allow_hosts: Vec<String>,
    pub limits: Limits,
    /// Host directories to mount, among the operator's (SPEC §13); paths
    /// resolved and checked by the caller.
    pub shares: Vec<Share>,
    /// What its deadline does to it.
    pub on_timeout: OnTimeout,
}

/// Whether a sandbox's processes run or are frozen (SPEC §17).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    #[default]
    Running,
    /// Every process frozen, no deadline until it is resumed.
    Paused,
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Paused => "paused",
        })
    }
}

/// What a sandbox's deadline does to it (SPEC §17).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// It is destroyed.
    #[default]
    Kill,
    /// It is paused, to be resumed later (E2B's auto-pause).
    Pause,
    /// It is paused keeping its files only: its processes end, so a resume
    /// starts it without them (E2B's filesystem-only auto-pause,
    /// `autoPauseMemory: false`).
    PauseFiles,
}

impl OnTimeout {
    /// Whether the deadline pauses the sandbox rather than destroying it.
    pub fn pauses(self) -> bool {
        self != Self::Kill
    }
}

impl fmt::Display for OnTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kill => "kill",
            Self::Pause => "pause",
            Self::PauseFiles => "pause_files",
        })
    }
}

/// Unix seconds now: the clock of [`SandboxInfo`]'s times (the task
/// record's clock too, hence its home in `sandkeep-proto`).
pub use sandkeep_proto::record::{unix_now, unix_now_ns};

/// Unix seconds as RFC 3339 in UTC, to the second (`2026-01-02T03:04:05Z`),
/// as E2B's API and MCP's tasks write times. A time past chrono's range
/// (year 262,143) reads as the epoch.
pub fn rfc3339(unix_secs: u64) -> String {
    chrono::DateTime::from_timestamp(i64::try_from(unix_secs).unwrap_or(i64::MAX), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `host` as an `allow_hosts` entry (a host name or `*.suffix` pattern,
/// lowercased), or `None` when it is neither: addresses are never entries,
/// since the rule names hosts and a sandbox never reaches private
/// addresses. Shared by every front end that accepts the rule.
pub fn host_pattern(host: &str) -> Option<String> {
    let name = host.to_ascii_lowercase();
    let bare = name.strip_prefix("*.").unwrap_or(&name);
    let labels_ok = bare.len() <= 253
        && bare.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    let an_address = bare.parse::<std::net::Ipv4Addr>().is_ok()
        || bare
            .rsplit('.')
            .next()
            .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()));
    (labels_ok && !an_address).then_some(name)
}

/// `bytes` random bytes from the OS CSPRNG as lower-case hex: ids, secrets
/// and temporary names. Each caller says what a failure means to it.
pub fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A sandbox as list and create report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub sandbox_id: SandboxId,
    pub template: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds; the sandbox is destroyed then.
    pub expires_at: u64,
    /// Seconds; what renewals extend the deadline by.
    pub timeout: u64,
    /// Taken out of every session's destruction set (a task was started).
    pub retained: bool,
    /// The named isolation level this sandbox got.
    pub isolation: String,
    /// The network mode in force; `None` when the sandbox shares the
    /// host's network (a fallback level).
    #[serde(default)]
    pub network: Option<Network>,
    /// The names its connections are narrowed to (empty: no narrowing).
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The limits in force.
    #[serde(default)]
    pub limits: Limits,
    /// The host directories it mounts.
    #[serde(default)]
    pub shares: Vec<Share>,
    /// When its shares were mounted, nanoseconds since the epoch: a host
    /// path changed later is a conflict for `apply_changes`.
    #[serde(default)]
    pub shares_since_ns: u64,
    /// The ports exposed with [`Provider::expose_port`], by port.
    #[serde(default)]
    pub ports: Vec<PortForward>,
    /// Running, or paused (its deadline then stopped: `expires_at` is
    /// when it was paused).
    #[serde(default)]
    pub state: SandboxState,
    /// What its deadline does to it.
    #[serde(default)]
    pub on_timeout: OnTimeout,
}

/// Whether `name` may be a snapshot's id: 1–64 characters of
/// `[A-Za-z0-9_.-]`, starting with a letter or digit (it names a directory
/// and a template; E2B's SDK tests name theirs `snap-test_…`).
pub fn snapshot_id_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

/// Whether `id` may name an existing snapshot (to delete it): a snapshot
/// id ([`snapshot_id_ok`]) or E2B's form of one, `[namespace/]name[:tag]`
/// with each part one (E2B's snapshots are `team-slug/name:tag`, or
/// `templateID:tag` when unnamed). A provider that makes paths of ids
/// checks [`snapshot_id_ok`] itself.
pub fn snapshot_ref_ok(id: &str) -> bool {
    let (rest, tag) = match id.rsplit_once(':') {
        Some((rest, tag)) => (rest, Some(tag)),
        None => (id, None),
    };
    let (namespace, name) = match rest.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, rest),
    };
    snapshot_id_ok(name) && namespace.is_none_or(snapshot_id_ok) && tag.is_none_or(snapshot_id_ok)
}

/// A saved copy of a sandbox's files (SPEC §17): usable as a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// Its id, also the template name `create` takes.
    pub snapshot_id: String,
    /// The sandbox it was taken of.
    pub sandbox_id: SandboxId,
    /// What it holds on disk, in bytes.
    pub size_bytes: u64,
    /// Unix seconds.
    pub created_at: u64,
}

/// A port of a sandbox: 1–65535 (zero is no port a server listens on).
pub type Port = std::num::NonZeroU16;

/// A port of a sandbox and where it is reached from outside (SPEC.md §14).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortForward {
    /// The port inside the sandbox.
    pub port: Port,
    /// Where a client connects to reach it (`http://127.0.0.1:40123` for
    /// the local provider's forward, E2B's host name for e2b).
    pub url: String,
}

/// A foreground command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// Run as `sh -c COMMAND` (bash where the provider prefers it).
    pub command: String,
    /// `None`: the sandbox user's home.
    pub cwd: Option<String>,
    /// At the timeout the command's process group is killed.
    pub timeout: Duration,
    /// Bytes fed to stdin; `None` means /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Keep at most the last this-many bytes of each stream.
    pub output_limit: usize,
}

/// What a foreground command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// Exit status, or 128+N for signal N; `None` if none was collected.
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
}

/// What a spawned process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// `sh -c COMMAND` (bash where the provider prefers it).
    Shell(String),
    /// `argv[0]`, looked up on the sandbox's `PATH` unless it names a path,
    /// run with `argv` and the sandbox's environment plus `env`, with no
    /// shell in between (as E2B's envd starts a process).
    Argv {
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
}

impl Program {
    /// The same program as one POSIX shell command, for a provider that
    /// can only run those. Environment names are not checked here: a
    /// caller passes only valid ones.
    pub fn to_shell(&self) -> String {
        use sandkeep_proto::wire::shell_quote as quote;
        match self {
            Program::Shell(command) => command.clone(),
            Program::Argv { argv, env } => {
                let mut words: Vec<String> = env
                    .iter()
                    .map(|(name, value)| format!("{name}={}", quote(value)))
                    .collect();
                words.push("exec".into());
                words.extend(argv.iter().map(|word| quote(word)));
                words.join(" ")
            }
        }
    }
}

/// A process to start with [`Provider::spawn`], to live past the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub program: Program,
    /// `None`: the sandbox user's home.
    pub cwd: Option<String>,
    /// A pipe to the process's stdin; `false` gives it /dev/null.
    pub stdin: bool,
}

/// A running process: its pipes and its control. Dropping the pipes closes
/// them; dropping [`Spawned::process`] does not end the process.
pub struct Spawned {
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    pub process: Box<dyn RunningProcess>,
}

impl fmt::Debug for Spawned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawned")
            .field("stdin", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

/// How a process ended: its exit code, or the signal that killed it. Kept
/// apart end to end, since an exit code may exceed 128 (`exit 200`) and
/// E2B's envd reports the two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// The shell's single number for it: the code, or 128+N for signal N
    /// (sandkeep's task records and `run_command` results count so).
    pub fn shell_code(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => 128 + signal,
        }
    }

    /// Whether the process exited with code 0.
    pub fn success(self) -> bool {
        self == Self::Code(0)
    }
}

/// A sandbox's resource use at one moment (E2B's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time its processes have used so far, in microseconds.
    pub cpu_usec: u64,
    /// The CPUs it may use (its limit, rounded up, else the host's).
    pub cpu_count: u32,
    /// Memory in bytes: charged, its limit (else the host's), and of it
    /// the page cache.
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    /// Its disk (the root file system) in bytes.
    pub disk_used: u64,
    pub disk_total: u64,
}

/// The control of a process started by [`Provider::spawn`].
#[async_trait]
pub trait RunningProcess: Send + Sync {
    /// Sends `signal` (a Linux signal number) to the process itself, not to
    /// its children.
    fn signal(&self, signal: i32) -> Result<()>;
    /// SIGKILLs the process and everything in its process group.
    fn kill_group(&self) -> Result<()>;
    /// Waits for the end: its exit code or signal. Any number of callers
    /// may wait, before or after the exit.
    async fn wait(&self) -> Result<ExitStatus>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of list_files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: FileKind,
    pub size: u64,
    /// Unix seconds.
    pub modified_at: u64,
}

/// Failures a caller can act on, each saying what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error(
        "no such sandbox {0}: it does not exist or was destroyed; call list_sandboxes, or create_sandbox for a new one"
    )]
    NoSuchSandbox(SandboxId),
    #[error("unknown template {name:?}: available templates are {}", available.join(", "))]
    UnknownTemplate {
        name: String,
        available: Vec<String>,
    },
    #[error("{path}: no such file or directory in the sandbox")]
    NoSuchPath { path: String },
    #[error("{path} is {size} bytes, over the {limit}-byte limit")]
    FileTooLarge { path: String, size: u64, limit: u64 },
    #[error("{path}: {message}")]
    FileError { path: String, message: String },
    /// The call broke after the request may have reached the sandbox: it may
    /// or may not have run.
    #[error("the call to sandbox {sandbox} broke after it may have been sent: {message}")]
    Unconfirmed { sandbox: SandboxId, message: String },
    /// The sandbox's server (what runs its commands and file operations)
    /// could not be reached: nothing was sent. The sandbox may be shutting
    /// down.
    #[error(
        "sandbox {sandbox} does not answer ({detail}); it may be shutting down, check list_sandboxes"
    )]
    NotAnswering { sandbox: SandboxId, detail: String },
    /// The sandbox's server got the request and refused to start it (out
    /// of processes, most likely): nothing ran.
    #[error(
        "sandbox {sandbox} refused the request, nothing ran ({message}); it may be out of processes, retry later"
    )]
    Refused { sandbox: SandboxId, message: String },
    /// A sandbox's keeper (the process that builds, holds and ends it)
    /// failed or did not report in time: at create nothing was created.
    /// The message says at which step, in the keeper's words when it has
    /// them.
    #[error("{0}")]
    Keeper(String),
    /// A started process's exit status could not be learnt (its sandbox
    /// went away, or the answer was lost); the message says which.
    #[error("{0}")]
    ProcessLost(String),
    /// The service behind the provider (a remote API, the host's random
    /// number generator, an isolation probe) cannot serve the call now;
    /// the message names it.
    #[error("{0}")]
    Unavailable(String),
    /// A failure inside this process that no request causes (a worker
    /// task panicked or was cancelled, an invariant broke): a bug.
    #[error("{0}")]
    Internal(String),
    /// A setting of this process's configuration is refused (malformed, or
    /// naming what is never allowed); the message names it and what to
    /// write instead.
    #[error("{0}")]
    Misconfigured(String),
    /// A bound of the host (how many sandboxes may live at once, how much
    /// memory they may commit) leaves no room; nothing was created. The
    /// message says which bound and how to raise it.
    #[error("{0}")]
    LimitReached(String),
    /// A request this provider cannot enforce here; nothing was created.
    #[error("{0}")]
    Unsupported(String),
    /// A snapshot of that name exists; nothing was saved.
    #[error(
        "a snapshot or template named {0:?} exists already; choose another name, or delete_snapshot it first"
    )]
    SnapshotExists(String),
    /// The sandbox is not in the state the call needs (pausing a paused
    /// sandbox, resuming a running one); nothing changed.
    #[error("sandbox {sandbox} is already {state}; nothing changed")]
    AlreadyInState {
        sandbox: SandboxId,
        state: SandboxState,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// What [`Provider::kill_unless_retained`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Destroyed,
    /// A task retains it; it lives to its deadline or an explicit kill.
    Retained,
    /// It was already gone (killed, expired).
    Gone,
}

/// A place where sandboxes live.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider's kind, e.g. `"local"`.
    fn kind(&self) -> &'static str;

    /// Creates a sandbox and returns once it accepts exec.
    async fn create(&self, spec: CreateSpec) -> Result<SandboxInfo>;

    /// Destroys a sandbox with everything in it. `Ok(false)` when it was
    /// already gone.
    async fn kill(&self, id: &SandboxId) -> Result<bool>;

    /// Destroys a sandbox unless it is retained: the end of the session
    /// that created it. Checked and done under the same exclusion as
    /// [`Provider::retain`], so a task started meanwhile from any server
    /// process either retains the sandbox first (it is kept) or finds it
    /// gone (its start fails); it is never destroyed under a started task.
    async fn kill_unless_retained(&self, id: &SandboxId) -> Result<Release>;

    /// Every live sandbox this provider configuration can see.
    async fn list(&self) -> Result<Vec<SandboxInfo>>;

    /// One live sandbox, or [`ProviderError::NoSuchSandbox`].
    async fn info(&self, id: &SandboxId) -> Result<SandboxInfo>;

    /// Runs a foreground command and waits for it (bounded by its timeout).
    async fn exec(&self, id: &SandboxId, request: ExecRequest) -> Result<ExecOutput>;

    /// Starts a process that outlives the call, with live pipes.
    async fn spawn(&self, id: &SandboxId, request: SpawnRequest) -> Result<Spawned> {
        let _ = (id, request);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot start processes that outlive a call",
            self.kind()
        )))
    }

    /// The sandbox's resource use now.
    async fn usage(&self, id: &SandboxId) -> Result<Usage> {
        let _ = id;
        Err(ProviderError::Unsupported(format!(
            "the {} provider does not measure a sandbox's resource use",
            self.kind()
        )))
    }

    /// Sets the sandbox's timeout to `timeout` seconds and its deadline to
    /// now + `timeout`.
    async fn set_timeout(&self, id: &SandboxId, timeout: u64) -> Result<SandboxInfo> {
        let _ = (id, timeout);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot change a sandbox's timeout",
            self.kind()
        )))
    }

    /// Reads a file (a relative path is taken from the sandbox user's
    /// home), refusing files over `limit` bytes.
    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>>;

    /// Replaces a file atomically, creating missing parent directories.
    async fn write_file(&self, id: &SandboxId, path: &str, content: &[u8]) -> Result<u64>;

    /// Lists a directory.
    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>>;

    /// Sets the deadline to now + the sandbox's own timeout.
    async fn renew(&self, id: &SandboxId) -> Result<SandboxInfo>;

    /// Marks the sandbox retained (visible to every server process).
    async fn retain(&self, id: &SandboxId) -> Result<()>;

    /// The path of the static task helper inside the sandbox, placing it
    /// there first if needed.
    async fn task_helper(&self, id: &SandboxId) -> Result<String>;

    /// Where the in-sandbox helper finds the layers of `info`'s cow shares
    /// (SPEC §13), in the order of `info.shares`, to compare them with
    /// `sandkeep-task changes` and `export`.
    fn share_layers(&self, info: &SandboxInfo) -> Result<Vec<Layers>> {
        let _ = info;
        Err(ProviderError::Unsupported(format!(
            "copy-on-write shares need the local provider; the {} provider has none",
            self.kind()
        )))
    }

    /// Freezes every process of the sandbox and stops its deadline
    /// (SPEC §17); [`ProviderError::AlreadyInState`] when it is paused.
    async fn pause(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let _ = id;
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot pause a sandbox",
            self.kind()
        )))
    }

    /// Pauses the sandbox keeping its files only (E2B's filesystem-only
    /// pause): its processes end, so a resume starts it without them.
    async fn pause_files_only(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let _ = id;
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot pause a sandbox keeping its files only",
            self.kind()
        )))
    }

    /// Thaws a paused sandbox and sets its deadline to now + `timeout`
    /// seconds (its own timeout when `None`);
    /// [`ProviderError::AlreadyInState`] when it runs.
    async fn resume(&self, id: &SandboxId, timeout: Option<u64>) -> Result<SandboxInfo> {
        let _ = (id, timeout);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot resume a sandbox",
            self.kind()
        )))
    }

    /// Saves the sandbox's files (not its processes, not its shares) as
    /// snapshot `name` (a generated id when `None`), usable as a template.
    /// A snapshot appears only complete.
    async fn snapshot(&self, id: &SandboxId, name: Option<String>) -> Result<SnapshotInfo> {
        let _ = (id, name);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot snapshot a sandbox",
            self.kind()
        )))
    }

    /// The limits a sandbox made from a snapshot of `source` asks for
    /// (fork_sandbox): the source's, where they are what this provider
    /// enforces.
    fn fork_limits(&self, source: &SandboxInfo) -> Limits {
        source.limits
    }

    /// A new sandbox as `spec` says (but for its template) with the files
    /// of running sandbox `source` (fork_sandbox): a snapshot of it, a
    /// create from that snapshot, then the snapshot deleted, as the new
    /// sandbox holds its own copy.
    async fn fork(&self, source: &SandboxId, spec: CreateSpec) -> Result<SandboxInfo> {
        let snapshot = self.snapshot(source, None).await?;
        let created = self
            .create(CreateSpec {
                template: snapshot.snapshot_id.clone(),
                ..spec
            })
            .await;
        let deleted = self.delete_snapshot(&snapshot.snapshot_id).await;
        let info = created?;
        deleted?;
        Ok(info)
    }

    /// Every snapshot, oldest first.
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(Vec::new())
    }

    /// Deletes a snapshot; `Ok(false)` when there was none of that id.
    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<bool> {
        let _ = snapshot_id;
        Err(ProviderError::Unsupported(format!(
            "the {} provider has no snapshots",
            self.kind()
        )))
    }

    /// Makes `port` of the sandbox reachable from outside it (SPEC.md
    /// §14); the same port again answers the same forward. It lasts as
    /// long as the sandbox, whatever becomes of the calling process.
    async fn expose_port(&self, id: &SandboxId, port: Port) -> Result<PortForward> {
        let _ = (id, port);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot expose a sandbox's ports",
            self.kind()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::{Program, snapshot_id_ok, snapshot_ref_ok};

    /// E2B's snapshot ids pass where an existing snapshot is named, never
    /// where a local id becomes a path; no form of `..` or an absolute path
    /// passes either.
    #[test]
    fn e2b_snapshot_ids_name_a_snapshot_but_are_no_local_ids() {
        for id in [
            "snap-1",
            "team-slug/my-snapshot:default",
            "abc123:default",
            "team/x",
        ] {
            assert!(snapshot_ref_ok(id), "{id}");
        }
        for id in ["team-slug/my-snapshot:default", "abc123:default"] {
            assert!(!snapshot_id_ok(id), "{id}");
        }
        for id in [
            "", "..", "../x", "/x", "a/../b", "a/b/c", "a:", ":a", "a/", "/", "a:b:c/d", ".x/y",
        ] {
            assert!(!snapshot_ref_ok(id), "{id}");
        }
    }

    /// A shell given `to_shell`'s line runs exactly the argv, with the
    /// environment added, whatever the words hold.
    #[test]
    fn an_argv_as_a_shell_line_keeps_every_word() {
        let program = Program::Argv {
            argv: vec![
                "sh".into(),
                "-c".into(),
                r#"printf '<%s>' "$0" "$1" "$V""#.into(),
                "it's $HOME `x` \\ \"q\"".into(),
                "".into(),
            ],
            env: vec![("V".into(), "a 'b' $c".into())],
        };
        let out = std::process::Command::new("sh")
            .args(["-c", &program.to_shell()])
            .output()
            .expect("run sh");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "<it's $HOME `x` \\ \"q\"><><a 'b' $c>"
        );
        assert_eq!(Program::Shell("echo hi".into()).to_shell(), "echo hi");
    }
}
