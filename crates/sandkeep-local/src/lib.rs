//! The embedded local provider: namespaced sandboxes on this host that
//! outlive any server process.
//!
//! Topology: the provider (inside any server process) spawns one detached
//! **keeper** per sandbox (`sandkeep-keeper run`), which forks the
//! sandbox's **init** (pid 1 of fresh pid, mount, uts and ipc namespaces, in
//! a user namespace) that doubles as a fork server. Exec and file
//! operations are requests to that fork server over a unix socket in the
//! state directory; create, kill, list, renew and retain work on the state
//! directory and the keeper's process identity. Where the kernel refuses
//! namespaces, sandboxes fall back to a reported weaker level (`landlock`,
//! else `process-only`): a subreaper init on the host whose whole process
//! tree the keeper kills.
//!
//! This file is the `Provider` face of it and never enters a namespace
//! itself. In the server process: [`config`](LocalConfig), `bounds` (how
//! many sandboxes and how much memory a state directory holds), `presence`
//! (live or stale, cleanup, destruction), `spawn` (starting a keeper),
//! `client` and `file_reply` (one fork-server call and its file-operation
//! answer), `state` (the on-disk layout and records). In the keeper and
//! the sandbox: `keeper` (with its `userns` and `teardown` helpers),
//! `init` (the setup; `init::fork_server` serves exec and file
//! operations), `rootfs`, `fileops`, `seccomp`, `landlock`, `slots` (root's
//! uid blocks), `doctor` (the isolation probe), over `sys` (the only raw
//! syscalls), `step` (a setup step's error) and `wire` (the socket
//! protocol). [`keeper_main`] dispatches
//! the keeper executable's arguments to the keeper or the probe.

// `unsafe` lives in `sys` (thin wrappers over raw syscalls) and `seccomp`
// (installing the filter) alone; everything else calls their safe,
// checked functions.
#![deny(unsafe_code)]

mod boot_id;
mod bounds;
mod cgroup;
mod client;
mod config;
mod doctor;
mod etc_snapshot;
mod file_reply;
mod fileops;
mod forward;
mod init;
mod keeper;
mod landlock;
mod netpolicy;
mod pause;
mod ports;
mod presence;
mod process;
mod proxy;
mod rootfs;
#[allow(unsafe_code)]
mod seccomp;
mod slots;
mod snapshots;
mod spawn;
mod state;
mod step;
#[allow(unsafe_code)]
mod sys;
mod usage;
mod wire;

use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;

pub use bounds::HostBounds;
pub use config::LocalConfig;
pub use doctor::{Check, DoctorReport};
pub use netpolicy::{EGRESS_TRUST_VAR, EgressTrust, TrustError};
pub use spawn::prestart;
pub use state::trusted_path;

use self::client::{CallError, Outcome};
use self::keeper::{BUILD, REFUSED};
use self::presence::{Presence, Until, inspect, lock_sandbox, terminate};
use self::state::{Home, Meta, Spec};
use self::wire::Request;
use sandkeep_provider::{
    CreateSpec, ExecOutput, ExecRequest, FileEntry, Layers, Port, PortForward, Provider,
    ProviderError, Release, Result, SandboxId, SandboxInfo, SandboxState, ShareMode, SnapshotInfo,
    SpawnRequest, Spawned, Usage,
};

/// The first argument that makes the `sandkeep` binary a keeper.
pub const KEEPER_ARG: &str = "__keeper";

/// Entry point of the per-sandbox keeper process (the arguments after
/// [`KEEPER_ARG`], or the `sandkeep-keeper` executable's): runs a
/// sandbox's keeper, a standby keeper or the isolation probe; returns its
/// exit code.
pub fn keeper_main(args: Vec<String>) -> i32 {
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["run", _, _, build] if *build != BUILD => {
            eprintln!(
                "sandkeep keeper: built from other sources ({BUILD}) than its provider ({build})"
            );
            REFUSED
        }
        ["run", home, id, _] => match SandboxId::parse(id) {
            Ok(id) => match keeper::detach() {
                Ok(()) => keeper::run(Home::new(PathBuf::from(home)), id),
                Err(e) => {
                    eprintln!("sandkeep keeper: setsid: {e}");
                    1
                }
            },
            Err(e) => {
                eprintln!("sandkeep keeper: {e}");
                REFUSED
            }
        },
        ["standby", build] if *build != BUILD => {
            eprintln!(
                "sandkeep keeper: built from other sources ({BUILD}) than its provider ({build})"
            );
            REFUSED
        }
        ["standby", _] => keeper::standby(),
        ["probe"] => doctor::probe_main(),
        _ => {
            eprintln!(
                "usage: sandkeep-keeper run HOME SANDBOX_ID BUILD | sandkeep-keeper standby BUILD | \
                 sandkeep-keeper probe (internal)"
            );
            REFUSED
        }
    }
}

/// The built-in template: the host's own system seen through the sandbox.
/// Others are root filesystem directories under `SANDKEEP_HOME/templates/`.
pub const BASE_TEMPLATE: &str = "base";

/// The exit code of a command ended by SIGKILL (128 + 9).
const KILLED: i32 = 137;
/// Room for a file operation's answer or error report.
const FILE_OP_REPORT: usize = 64 * 1024;
/// How long the doctor waits for the host to resolve the egress check's names.
const EGRESS_LOOKUP: Duration = Duration::from_secs(10);
/// Isolation levels that are the full design for their mode; anything else
/// is logged as weaker at create time.
const FULL_ISOLATION: &str = "userns-idmap";

/// Process-only sandboxes share the host's network: an explicit network
/// mode or host list cannot be honoured there. (Where the kernel refuses
/// namespaces at create time instead, the keeper refuses them itself.)
/// Nanoseconds since the epoch, as file change times count them.
fn refuse_shared_network(spec: &CreateSpec, process_only: bool) -> Result<()> {
    if process_only && (spec.network.is_some() || !spec.allow_hosts.is_empty()) {
        return Err(ProviderError::Unsupported(
            "this server runs process-only sandboxes, which share the host's network, so \
             network and allow_hosts cannot be enforced; create the sandbox without them"
                .into(),
        ));
    }
    Ok(())
}

/// The local provider.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    config: LocalConfig,
    home: Home,
    /// Shared by clones: one refusal of the small keeper holds for all.
    keepers: std::sync::Arc<spawn::Keepers>,
}

/// Maps an I/O error to the provider's error, saying what was being done.
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProviderError {
    let context = context.into();
    move |source| ProviderError::Io { context, source }
}

/// Runs file and process work of a few syscalls (a record, a lock, a
/// signal) off the async threads: on the blocking pool, or in place on a
/// current-thread runtime, the CLI's, which runs one call at a time and
/// where handing the work to a pool thread and back took longer than the
/// work (≈ 0.1 ms each way). Work that waits on a sandbox's command uses
/// [`pool`] everywhere.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        return Ok(f());
    }
    pool(f).await
}

/// Runs `f` on the blocking pool, so that the caller's runtime goes on
/// (a Ctrl-C, a cancelled call) while it waits.
pub(crate) async fn pool<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ProviderError::Internal(format!("internal task failed: {e}")))
}

impl LocalProvider {
    /// Resolves the state directory to the real, absolute path it names
    /// (keepers and masks need absolute paths; a parent link changed later
    /// must not move it), checks its parents, and creates it.
    pub fn new(config: LocalConfig) -> Result<Self> {
        let abs = state::trusted_path(&config.home).map_err(io_err("check SANDKEEP_HOME"))?;
        let home = Home::new(abs.clone());
        home.ensure().map_err(io_err(format!(
            "create the state directory {}",
            abs.display()
        )))?;
        let exe =
            std::path::absolute(&config.exe).map_err(io_err("resolve the sandkeep executable"))?;
        Ok(Self {
            keepers: std::sync::Arc::new(spawn::Keepers::beside(&exe)),
            config: LocalConfig {
                home: abs,
                exe,
                ..config
            },
            home,
        })
    }

    /// The provider of this process's environment (see
    /// [`LocalConfig::from_env`]); a bad setting is refused as such.
    pub fn from_env() -> Result<Self> {
        let config = LocalConfig::from_env().map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => ProviderError::Misconfigured(e.to_string()),
            _ => io_err("configure the local provider")(e),
        })?;
        Self::new(config)
    }

    pub fn state_dir(&self) -> &Path {
        self.home.root()
    }

    pub(crate) fn home(&self) -> &Home {
        &self.home
    }

    /// Probes what isolation this host gives (in a separate process: the
    /// probes fork and unshare).
    pub async fn doctor(&self) -> Result<DoctorReport> {
        let out = tokio::process::Command::new(&self.config.exe)
            .args([KEEPER_ARG, "probe"])
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(io_err("run the isolation probe"))?;
        let mut report: DoctorReport = serde_json::from_slice(&out.stdout).map_err(|e| {
            ProviderError::Unavailable(format!(
                "the isolation probe failed ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })?;
        report.state_dir = self.home.root().to_path_buf();
        // Speed only: either executable keeps the same guarantees.
        report.checks.push(Check {
            name: "keeper executable".to_owned(),
            ok: true,
            detail: self.keepers.describe(),
        });
        // Without a network namespace sandboxes share the host's network:
        // there is no proxy to judge anything.
        let proxied = report
            .checks
            .iter()
            .any(|c| c.name == "network namespace" && c.ok);
        if proxied && !self.config.process_only {
            let egress = self.egress().await;
            report.checks.push(egress.check);
            report.remediation.extend(egress.remediation);
            report.suggested_egress_trust = egress.suggested_trust;
        }
        Ok(report)
    }

    /// Resolves [`doctor::EGRESS_NAMES`] on the host, each within
    /// [`EGRESS_LOOKUP`], and judges the answers as a sandbox's proxy would.
    async fn egress(&self) -> doctor::Egress {
        use std::net::ToSocketAddrs;
        let lookups: Vec<_> = doctor::EGRESS_NAMES
            .iter()
            .map(|&name| {
                let lookup = tokio::task::spawn_blocking(move || {
                    (name, 443)
                        .to_socket_addrs()
                        .map(|found| found.map(|a| a.ip()).collect::<Vec<_>>())
                });
                (name, lookup)
            })
            .collect();
        let deadline = tokio::time::Instant::now() + EGRESS_LOOKUP;
        let mut answers = Vec::new();
        for (name, lookup) in lookups {
            let answer = match tokio::time::timeout_at(deadline, lookup).await {
                Ok(Ok(found)) => found.map_err(|e| e.to_string()),
                Ok(Err(e)) => Err(format!("the lookup failed: {e}")),
                Err(_) => Err(format!("no answer within {} s", EGRESS_LOOKUP.as_secs())),
            };
            answers.push((name, answer));
        }
        match proxy::host_network() {
            Ok(host) => doctor::egress_check(&answers, &host, &self.config.egress_trust),
            Err(e) => doctor::Egress {
                check: Check {
                    name: "egress".to_owned(),
                    ok: false,
                    detail: format!(
                        "cannot read the host's network ({e}): every egress proxy refuses everything"
                    ),
                },
                suggested_trust: None,
                remediation: None,
            },
        }
    }

    /// `base`, then every directory under `SANDKEEP_HOME/templates/` whose
    /// name is a valid id (it is used in paths), then every snapshot.
    pub fn templates(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.home.templates())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| SandboxId::parse(&e.file_name().to_string_lossy()).ok())
            .map(String::from)
            .filter(|n| n != BASE_TEMPLATE)
            .collect();
        names.sort();
        names.insert(0, BASE_TEMPLATE.to_owned());
        names.extend(snapshots::ids(&self.home));
        names
    }

    /// 64 bits from the OS CSPRNG.
    fn new_id() -> Result<SandboxId> {
        let hex = sandkeep_provider::random_hex(8).map_err(|e| {
            ProviderError::Unavailable(format!(
                "the OS random number generator failed ({e}); no sandbox was created, retry"
            ))
        })?;
        SandboxId::parse(&format!("sb-{hex}")).map_err(ProviderError::Internal)
    }

    /// A snapshot's generated id, `snap-` and 16 hex digits.
    fn new_snapshot_id() -> Result<String> {
        Ok(format!(
            "snap-{}",
            Self::new_id()?.as_str().trim_start_matches("sb-")
        ))
    }

    /// The live record of a sandbox, cleaning it up when its keeper is gone.
    async fn live(&self, id: &SandboxId) -> Result<Meta> {
        let dir = self.home.sandbox(id);
        let id2 = id.clone();
        blocking(move || match inspect(&dir) {
            Presence::Live(meta) => Ok(*meta),
            _ => Err(ProviderError::NoSuchSandbox(id2)),
        })
        .await?
    }

    async fn call(
        &self,
        id: &SandboxId,
        request: Request,
        stdin: Option<Vec<u8>>,
        output_limit: usize,
        timeout: Duration,
    ) -> Result<Outcome> {
        let dir = self.home.sandbox(id);
        let socket = dir.socket();
        let id2 = id.clone();
        // Held by this future: if it is dropped (a client cancelled or went
        // away), the call sees the pipe close and the command is killed.
        let (abandoned, _waiting) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| io_err("cannot make a pipe")(e.into()))?;
        // One trip to the blocking pool for the check and the call: each
        // trip is a thread hand-over both ways, on every command.
        pool(move || {
            if !matches!(inspect(&dir), Presence::Live(_)) {
                return Err(ProviderError::NoSuchSandbox(id2));
            }
            client::call(
                &socket,
                &request,
                stdin.as_deref(),
                output_limit,
                timeout,
                abandoned.as_fd(),
            )
            .map_err(|e| match e {
                CallError::NotSent(_) if !socket.exists() => ProviderError::NoSuchSandbox(id2),
                CallError::NotSent(e) => ProviderError::NotAnswering {
                    sandbox: id2,
                    detail: e.to_string(),
                },
                CallError::Refused(message) => ProviderError::Refused {
                    sandbox: id2,
                    message,
                },
                CallError::Unconfirmed(message) => ProviderError::Unconfirmed {
                    sandbox: id2,
                    message,
                },
            })
        })
        .await?
    }

    /// A file operation: confirmed success, or its error mapped for `path`.
    async fn file_op(
        &self,
        id: &SandboxId,
        path: &str,
        request: Request,
        stdin: Option<Vec<u8>>,
        output_limit: usize,
        size_limit: u64,
    ) -> Result<Vec<u8>> {
        let outcome = self
            .call(id, request, stdin, output_limit, Duration::from_secs(60))
            .await?;
        file_reply::decode(outcome, path, size_limit)
    }

    /// Creates a sandbox of `spec` on `template_dir` (`None`: the host's
    /// own system, as `base`).
    async fn create_from(
        &self,
        spec: CreateSpec,
        template_dir: Option<PathBuf>,
    ) -> Result<SandboxInfo> {
        refuse_shared_network(&spec, self.config.process_only)?;
        if self.config.process_only && !spec.shares.is_empty() {
            return Err(ProviderError::Unsupported(
                "host shares need namespaced sandboxes; this server runs process-only ones (run `sandkeep doctor`)".into(),
            ));
        }
        cgroup::refuse_unenforceable(&spec.limits, self.config.process_only)
            .map_err(ProviderError::Unsupported)?;
        let id = Self::new_id()?;
        let dir = self.home.sandbox(&id);
        let memory_mib = spec
            .limits
            .memory_mib
            .unwrap_or(sandkeep_proto::limits::MEMORY_MIB_DEFAULT);
        let record = Spec {
            sandbox_id: id.clone(),
            template: spec.template,
            timeout: spec.timeout,
            envs: spec.envs,
            created_at: sandkeep_provider::unix_now(),
            exe: self.config.exe.clone(),
            home: self.home.root().to_path_buf(),
            process_only: self.config.process_only,
            template_dir,
            network: spec.network,
            allow_hosts: spec.allow_hosts,
            limits: spec.limits,
            egress_trust: self.config.egress_trust.clone(),
            shares: spec.shares,
            shares_since_ns: sandkeep_provider::unix_now_ns(),
            on_timeout: spec.on_timeout,
        };
        let (home, bounds, at) = (self.home.clone(), self.config.bounds, dir.clone());
        blocking(move || {
            let _room = bounds::reserve(&home, bounds, memory_mib)?;
            // 0700 from the start: a umask can only take bits away.
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&at.path)
                .map_err(io_err(format!("create {}", at.path.display())))?;
            state::write_json(&at.spec(), &record).map_err(io_err("write spec.json"))
        })
        .await??;
        let warnings = self.keepers.start(&self.home, &dir, &id).await?;
        let meta: Meta = state::read_json(&dir.meta()).map_err(io_err("read meta.json"))?;
        if meta.info.isolation != FULL_ISOLATION || !warnings.is_empty() {
            tracing::warn!(
                sandbox = %id,
                isolation = %meta.info.isolation,
                ?warnings,
                "sandbox isolation is weaker than full ({FULL_ISOLATION}); run `sandkeep doctor` for why"
            );
        }
        Ok(meta.info)
    }

    /// Read-modify-write of a live sandbox's record under its lock.
    async fn update(
        &self,
        id: &SandboxId,
        f: impl FnOnce(&mut Meta) + Send + 'static,
    ) -> Result<SandboxInfo> {
        let dir = self.home.sandbox(id);
        let id2 = id.clone();
        blocking(move || {
            let Some(_lock) = lock_sandbox(&dir)? else {
                return Err(ProviderError::NoSuchSandbox(id2));
            };
            let Presence::Live(meta) = inspect(&dir) else {
                return Err(ProviderError::NoSuchSandbox(id2));
            };
            let mut meta = *meta;
            let before = meta.info.clone();
            f(&mut meta);
            // A renewal within the second of the last one (the one right
            // after create, or before and after a short command) changes
            // nothing: no write.
            if meta.info != before {
                state::write_json(&dir.meta(), &meta).map_err(io_err("update meta.json"))?;
            }
            Ok(meta.info)
        })
        .await?
    }
}

/// Why a process could not be started in sandbox `id` (its fork server
/// at `socket`).
fn spawn_error(socket: &std::path::Path, id: &SandboxId, e: std::io::Error) -> ProviderError {
    if socket.exists() {
        ProviderError::NotAnswering {
            sandbox: id.clone(),
            detail: e.to_string(),
        }
    } else {
        ProviderError::NoSuchSandbox(id.clone())
    }
}

impl LocalProvider {
    /// Runs `program` in sandbox `id` (at `/`) with `stdin` and `stdout`
    /// the given descriptors (see `process::spawn_onto`).
    fn spawn_onto(
        &self,
        id: &SandboxId,
        program: sandkeep_provider::Program,
        stdin: std::os::fd::OwnedFd,
        stdout: std::os::fd::OwnedFd,
    ) -> Result<Spawned> {
        let socket = self.home.sandbox(id).socket();
        process::spawn_onto(&socket, program, Some("/".into()), stdin, stdout)
            .map_err(|e| spawn_error(&socket, id, e))
    }
}

#[async_trait]
impl Provider for LocalProvider {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn create(&self, spec: CreateSpec) -> Result<SandboxInfo> {
        // A snapshot: `base` with the snapshot's files restored over it.
        if let Some(archive) = snapshots::archive(&self.home, &spec.template) {
            let info = self.create_from(spec, None).await?;
            if let Err(e) = snapshots::restore(self, &info.sandbox_id, &archive).await {
                let _ = self.kill(&info.sandbox_id).await;
                return Err(e);
            }
            return Ok(info);
        }
        let template_dir = if spec.template == BASE_TEMPLATE {
            None
        } else {
            let available = self.templates();
            if !available.contains(&spec.template) {
                return Err(ProviderError::UnknownTemplate {
                    name: spec.template,
                    available,
                });
            }
            Some(self.home.templates().join(&spec.template))
        };
        self.create_from(spec, template_dir).await
    }

    async fn snapshot(&self, id: &SandboxId, name: Option<String>) -> Result<SnapshotInfo> {
        self.live(id).await?;
        let name = match name {
            Some(name) => name,
            None => Self::new_snapshot_id()?,
        };
        snapshots::take(self, id, name).await
    }

    /// The snapshot is taken while the new sandbox is made from `base`
    /// (each takes about as long as the other), then restored into it
    /// and deleted: a fork costs less than a snapshot and a create one
    /// after the other.
    async fn fork(&self, source: &SandboxId, spec: CreateSpec) -> Result<SandboxInfo> {
        self.live(source).await?;
        let name = Self::new_snapshot_id()?;
        let spec = CreateSpec {
            template: name.clone(),
            ..spec
        };
        let (snapshot, created) = tokio::join!(
            snapshots::take(self, source, name.clone()),
            self.create_from(spec, None)
        );
        let restored = match (&snapshot, &created) {
            (Ok(_), Ok(info)) => match snapshots::archive(&self.home, &name) {
                Some(archive) => snapshots::restore(self, &info.sandbox_id, &archive).await,
                None => Err(ProviderError::Unavailable(format!(
                    "the fork's snapshot {name} is gone"
                ))),
            },
            _ => Ok(()),
        };
        let deleted = if snapshot.is_ok() {
            self.delete_snapshot(&name).await.map(drop)
        } else {
            Ok(())
        };
        match (snapshot, created, restored) {
            (Ok(_), Ok(info), Ok(())) => deleted.map(|()| info),
            (Err(e), created, _) | (_, created, Err(e)) => {
                if let Ok(info) = created {
                    let _ = self.kill(&info.sandbox_id).await;
                }
                Err(e)
            }
            (_, Err(e), _) => Err(e),
        }
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let home = self.home.clone();
        blocking(move || snapshots::list(&home)).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<bool> {
        let (home, id) = (self.home.clone(), snapshot_id.to_owned());
        blocking(move || snapshots::delete(&home, &id)).await?
    }

    async fn kill(&self, id: &SandboxId) -> Result<bool> {
        let dir = self.home.sandbox(id);
        blocking(move || {
            match presence::trusted_record(&dir)
                .and_then(|()| state::read_json::<Meta>(&dir.meta()))
            {
                Ok(meta) => {
                    let was_live =
                        meta.keeper.is_alive() && meta.in_service(sandkeep_provider::unix_now());
                    terminate(&dir, &meta, Until::Removed)?;
                    Ok(was_live)
                }
                Err(_) => match inspect(&dir) {
                    Presence::Unreadable(e) => {
                        Err(io_err(format!("read {}", dir.meta().display()))(e))
                    }
                    _ => Ok(false),
                },
            }
        })
        .await?
    }

    async fn kill_unless_retained(&self, id: &SandboxId) -> Result<Release> {
        let dir = self.home.sandbox(id);
        blocking(move || {
            // The lock `update` takes for `retain`: no retain can land
            // between the look at `retained` and the end of `terminate`.
            let Some(_lock) = lock_sandbox(&dir)? else {
                return Ok(Release::Gone);
            };
            match inspect(&dir) {
                Presence::Live(meta) if meta.info.retained => Ok(Release::Retained),
                // The session's end has no one to look at the files:
                // they follow its processes (see `Until`).
                Presence::Live(meta) => {
                    terminate(&dir, &meta, Until::ProcessesGone).map(|()| Release::Destroyed)
                }
                Presence::Unreadable(e) => Err(io_err(format!("read {}", dir.meta().display()))(e)),
                Presence::Transient | Presence::Gone => Ok(Release::Gone),
            }
        })
        .await?
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let root = self.home.sandboxes();
        let home = self.home.clone();
        blocking(move || {
            let mut out = Vec::new();
            let entries = match std::fs::read_dir(&root) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(io_err(format!("read {}", root.display()))(e)),
            };
            for entry in entries.flatten() {
                let Ok(id) = SandboxId::parse(&entry.file_name().to_string_lossy()) else {
                    continue;
                };
                match inspect(&home.sandbox(&id)) {
                    Presence::Live(meta) => {
                        let mut info = meta.info;
                        info.ports = ports::read(&home.sandbox(&id));
                        out.push(info);
                    }
                    Presence::Unreadable(e) => {
                        tracing::warn!("sandbox {id} is not listed: {e}");
                    }
                    Presence::Transient | Presence::Gone => {}
                }
            }
            out.sort_by(|a, b| (a.created_at, &a.sandbox_id).cmp(&(b.created_at, &b.sandbox_id)));
            Ok(out)
        })
        .await?
    }

    async fn info(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let mut info = self.live(id).await?.info;
        let dir = self.home.sandbox(id);
        info.ports = blocking(move || ports::read(&dir)).await?;
        Ok(info)
    }

    async fn expose_port(&self, id: &SandboxId, port: Port) -> Result<PortForward> {
        self.live(id).await?;
        let dir = self.home.sandbox(id);
        let addr = self.config.expose_addr;
        let id2 = id.clone();
        blocking(move || {
            ports::expose(&dir, port, addr).map_err(|e| match e {
                // The keeper went between the look and the call.
                ports::ExposeError::Unreachable(_) if !dir.meta().exists() => {
                    ProviderError::NoSuchSandbox(id2)
                }
                ports::ExposeError::Unreachable(e) => ProviderError::NotAnswering {
                    sandbox: id2,
                    detail: e.to_string(),
                },
                e @ ports::ExposeError::Listen { .. } => {
                    ProviderError::Unavailable(format!("cannot expose port {port}: {e}"))
                }
                ports::ExposeError::Refused(why) => {
                    ProviderError::Unavailable(format!("cannot expose port {port}: {why}"))
                }
                e @ ports::ExposeError::Full => {
                    ProviderError::LimitReached(format!("cannot expose port {port}: {e}"))
                }
            })
        })
        .await?
    }

    async fn exec(&self, id: &SandboxId, request: ExecRequest) -> Result<ExecOutput> {
        // Read before and after: a rise with a KILL status is the memory
        // limit's doing (SPEC.md §10), said as a task's error says it.
        let memory = cgroup::MemoryCgroup::of(&self.home.sandbox(id).path);
        let kills_before = memory.as_ref().and_then(|m| m.kills());
        let mut outcome = self
            .call(
                id,
                Request::Exec {
                    command: request.command,
                    cwd: request.cwd,
                },
                request.stdin,
                request.output_limit,
                request.timeout,
            )
            .await?;
        if outcome.exit_code == Some(KILLED)
            && memory.as_ref().and_then(|m| m.kills()) > kills_before
        {
            let limit = self
                .live(id)
                .await
                .ok()
                .and_then(|m| m.info.limits.memory_mib);
            let limit = limit.map_or_else(String::new, |mib| format!(" (limit {mib} MiB)"));
            outcome
                .stderr
                .push(format!("\nsandkeep: out of memory{limit}: the sandbox's memory limit killed the command\n").as_bytes());
        }
        let (stdout, stdout_truncated) = outcome.stdout.finish();
        let (stderr, stderr_truncated) = outcome.stderr.finish();
        Ok(ExecOutput {
            exit_code: outcome.exit_code,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            timed_out: outcome.timed_out,
        })
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let request = Request::ReadFile {
            path: path.into(),
            limit,
        };
        // The child refuses files over the limit itself; the cap only has to
        // let a whole file and an error report through.
        let cap = usize::try_from(limit.saturating_add(1))
            .unwrap_or(usize::MAX)
            .max(FILE_OP_REPORT);
        self.file_op(id, path, request, None, cap, limit).await
    }

    async fn write_file(&self, id: &SandboxId, path: &str, content: &[u8]) -> Result<u64> {
        let request = Request::WriteFile { path: path.into() };
        let out = self
            .file_op(id, path, request, Some(content.to_vec()), FILE_OP_REPORT, 0)
            .await?;
        String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .map_err(|_| ProviderError::FileError {
                path: path.into(),
                message: "the sandbox gave no byte count".into(),
            })
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let request = Request::ListFiles { path: path.into() };
        let out = self.file_op(id, path, request, None, 64 << 20, 0).await?;
        serde_json::from_slice(&out).map_err(|e| ProviderError::FileError {
            path: path.into(),
            message: format!("unreadable listing: {e}"),
        })
    }

    async fn renew(&self, id: &SandboxId) -> Result<SandboxInfo> {
        // A paused sandbox has no deadline to move; its resume sets one.
        self.update(id, |m| {
            if m.info.state == SandboxState::Running {
                m.info.expires_at = sandkeep_provider::unix_now() + m.info.timeout
            }
        })
        .await
    }

    async fn pause(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let dir = self.home.sandbox(id);
        blocking(move || pause::pause(&dir)).await?
    }

    async fn pause_files_only(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let dir = self.home.sandbox(id);
        blocking(move || pause::pause_files_only(&dir)).await?
    }

    async fn resume(&self, id: &SandboxId, timeout: Option<u64>) -> Result<SandboxInfo> {
        let dir = self.home.sandbox(id);
        blocking(move || pause::resume(&dir, timeout)).await?
    }

    async fn spawn(&self, id: &SandboxId, request: SpawnRequest) -> Result<Spawned> {
        self.live(id).await?;
        let socket = self.home.sandbox(id).socket();
        process::spawn(&socket, request).map_err(|e| spawn_error(&socket, id, e))
    }

    async fn usage(&self, id: &SandboxId) -> Result<Usage> {
        let info = self.live(id).await?.info;
        let cpus = info.limits.milli_cpus.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            |m| m.div_ceil(1000),
        );
        let dir = self.home.sandbox(id).path;
        blocking(move || usage::read(&dir, cpus))
            .await?
            .ok_or_else(|| {
                ProviderError::Unsupported(
                    "this sandbox has no memory cgroup (the process-only level): its resource \
                     use is not measured"
                        .into(),
                )
            })
    }

    async fn set_timeout(&self, id: &SandboxId, timeout: u64) -> Result<SandboxInfo> {
        let info = self
            .update(id, move |m| {
                m.info.timeout = timeout;
                m.info.expires_at = sandkeep_provider::unix_now() + timeout;
            })
            .await?;
        // A shorter deadline than the one the keeper sleeps to: told.
        let keeper = self.live(id).await?.keeper;
        blocking(move || pause::tell_keeper(&keeper)).await?;
        Ok(info)
    }

    async fn retain(&self, id: &SandboxId) -> Result<()> {
        self.update(id, |m| m.info.retained = true).await.map(drop)
    }

    fn share_layers(&self, info: &SandboxInfo) -> Result<Vec<Layers>> {
        Ok(info
            .shares
            .iter()
            .enumerate()
            .filter(|(_, s)| s.mode == ShareMode::Cow)
            .map(|(i, s)| state::share_layers(i, s))
            .collect())
    }

    async fn task_helper(&self, id: &SandboxId) -> Result<String> {
        Ok(self.live(id).await?.helper)
    }
}
