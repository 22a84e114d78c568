//! The remote provider: sandboxes on E2B cloud, self-hosted E2B or any
//! service speaking E2B's API (SPEC.md §11), behind the same
//! [`Provider`] trait as the local one. It knows nothing of MCP, sessions
//! or what a task means.
//!
//! - The control plane (create, kill, list, info, timeout) is E2B's REST
//!   API (`rest`); sandkeep's sandboxes carry metadata (`sandkeep=1` and a
//!   hash of the API key) so a list shows only its own, for these
//!   credentials.
//! - Commands and files go to the sandbox's envd (`envd`). A command is a
//!   `Start` without a connect timeout, wrapped so that it has its own
//!   process group, killed whole at its timeout (`script`); a process that
//!   outlives the call (the shared task watcher) is one such stream with
//!   live pipes (`spawned`).
//! - The task helper is uploaded once per sandbox and checked by SHA-256
//!   inside the sandbox before each use is handed out.
//! - Retention is decided inside the sandbox by one atomic `ln -s`, so it
//!   holds across server processes.

#![forbid(unsafe_code)]

mod config;
mod envd;
mod helper;
mod rest;
mod script;
mod shares;
mod spawned;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{StreamExt as _, stream};
use sandkeep_envd_wire::filesystem::{ListDirRequest, MoveRequest, PathRequest};
use sandkeep_provider::{
    CreateSpec, ExecOutput, ExecRequest, FileEntry, FileKind, Layers, Limits, Network, OnTimeout,
    Port, PortForward, Provider, ProviderError, Release, Result, SandboxId, SandboxInfo,
    SandboxState, Share, SnapshotInfo, SpawnRequest, Spawned,
};
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio::sync::OnceCell;

pub use config::{E2bConfig, MissingKey};
use envd::{Envd, EnvdError};
use helper::Helper;
pub use helper::{Chosen as ChosenHelper, HELPER_ENV, Origin as HelperOrigin};
use rest::{Detail, NewSandbox, Rest, RestError};
use script::Fate;

/// The provider's kind, as `SANDKEEP_PROVIDER` names it.
pub const KIND: &str = "e2b";
/// The isolation every E2B sandbox gets (a Firecracker microVM on E2B's
/// own infrastructure; the service decides what it is elsewhere).
const ISOLATION: &str = "e2b";
/// Metadata keys sandkeep sets on its sandboxes.
const META_MARK: &str = "sandkeep";
const META_OWNER: &str = "sandkeep_owner";
const META_TIMEOUT: &str = "sandkeep_timeout";
const META_NETWORK: &str = "sandkeep_network";
/// Extra time the client gives a command past its own timeout (the
/// watchdog inside the sandbox acts at the timeout).
const EXEC_GRACE: Duration = Duration::from_secs(10);
/// The bound of the provider's own short scripts.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// How many sandboxes' retention marks a list reads at once.
const LIST_CHECKS: usize = 8;

/// Counts of what this provider sent, for benchmarks and tests.
#[derive(Debug, Default)]
pub struct Stats {
    rest: AtomicU64,
    envd: AtomicU64,
    uploads: AtomicU64,
}

impl Stats {
    fn count_rest(&self) {
        self.rest.fetch_add(1, Ordering::Relaxed);
    }
    fn count_envd(&self) {
        self.envd.fetch_add(1, Ordering::Relaxed);
    }
    /// REST requests sent, retries included.
    pub fn rest_requests(&self) -> u64 {
        self.rest.load(Ordering::Relaxed)
    }
    /// envd requests sent.
    pub fn envd_requests(&self) -> u64 {
        self.envd.load(Ordering::Relaxed)
    }
    /// Helper uploads.
    pub fn helper_uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }
}

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What this process knows of a sandbox: how to reach its envd, and its
/// timeout (E2B reports a deadline, not the renewal period).
#[derive(Debug, Clone)]
struct Known {
    token: Option<String>,
    domain: Option<String>,
    info: SandboxInfo,
}

pub struct E2bProvider {
    config: E2bConfig,
    http: reqwest::Client,
    rest: Rest,
    stats: Arc<Stats>,
    known: Mutex<HashMap<SandboxId, Known>>,
    /// Sandboxes this process saw retained: a fate, once decided, is kept
    /// for good, so a later start there needs no envd round trip for it.
    retained: Mutex<HashSet<SandboxId>>,
    /// Where the helper is read from; `None`: `SANDKEEP_TASK_HELPER`, else
    /// the small one beside this executable, else this executable.
    helper_path: Option<std::path::PathBuf>,
    helper: OnceCell<Arc<Helper>>,
}

impl std::fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn parse_time(text: &str) -> Option<u64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .and_then(|t| u64::try_from(t.timestamp()).ok())
}

/// 64 bits from the OS as hex: the names of temporary uploads.
fn random_hex() -> String {
    sandkeep_provider::random_hex(8).expect("the OS random source works")
}

impl E2bProvider {
    pub fn from_env() -> Result<Self> {
        let config =
            E2bConfig::from_env().map_err(|e| ProviderError::Misconfigured(e.to_string()))?;
        Self::new(config)
    }

    pub fn new(config: E2bConfig) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A kept-alive connection is never reused after the server may
            // have closed it: sandkeep's endpoint closes one idle for 10 s,
            // and a request sent on it as it closes is reset with nothing
            // known of whether it ran (seen under load in CI).
            .pool_idle_timeout(Duration::from_secs(4))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                ProviderError::Unavailable(format!("cannot build an HTTP client: {}", chain(&e)))
            })?;
        let stats = Arc::new(Stats::default());
        let rest = Rest::new(
            http.clone(),
            config.api_url.clone(),
            config.api_key.clone(),
            Arc::clone(&stats),
        );
        Ok(Self {
            config,
            http,
            rest,
            stats,
            known: Mutex::default(),
            retained: Mutex::default(),
            helper_path: None,
            helper: OnceCell::new(),
        })
    }

    /// The same provider uploading `path` as the task helper (an
    /// executable that behaves as `sandkeep-task` of this build).
    pub fn with_helper(self, path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            helper_path: Some(path.into()),
            ..self
        }
    }

    pub fn config(&self) -> &E2bConfig {
        &self.config
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Which task helper this provider uploads, and why (doctor's line).
    pub async fn helper_choice(&self) -> Result<ChosenHelper> {
        match self.helper.get() {
            Some(helper) => Ok(helper.chosen.clone()),
            None => helper::choose(self.helper_path.as_deref()).await,
        }
    }

    /// doctor's check: the API answers these credentials.
    pub async fn check(&self) -> Result<()> {
        self.rest.ping().await.map_err(|e| api_error(e, None))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner_filter(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (META_MARK.to_owned(), "1".to_owned()),
            (META_OWNER.to_owned(), self.config.owner_tag()),
        ])
    }

    /// A sandbox as this provider reports it, from E2B's detail.
    fn info_from(&self, d: &Detail) -> Option<SandboxInfo> {
        let id = SandboxId::parse(&d.sandbox_id).ok()?;
        let meta = d.metadata.clone().unwrap_or_default();
        let created_at = parse_time(&d.started_at).unwrap_or(0);
        let expires_at = parse_time(&d.end_at).unwrap_or(0);
        let timeout = meta
            .get(META_TIMEOUT)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| expires_at.saturating_sub(created_at).max(1));
        let network = match (
            meta.get(META_NETWORK).map(String::as_str),
            d.allow_internet_access,
        ) {
            (_, Some(false)) | (Some("none"), None) => Network::None,
            _ => Network::Internet,
        };
        Some(SandboxInfo {
            sandbox_id: id,
            template: d.alias.clone().unwrap_or_else(|| d.template_id.clone()),
            created_at,
            expires_at,
            timeout,
            retained: false,
            isolation: ISOLATION.to_owned(),
            network: Some(network),
            allow_hosts: Vec::new(),
            shares: meta
                .get(shares::META_SHARES)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
            shares_since_ns: meta
                .get(shares::META_SHARES_SINCE)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            limits: Limits {
                memory_mib: d.memory_mb.filter(|&m| m > 0),
                milli_cpus: d.cpu_count.filter(|&c| c > 0).map(|c| c * 1000),
                pids: None,
                disk_mib: d.disk_size_mb.filter(|&m| m > 0),
            },
            ports: Vec::new(),
            state: if d.state.as_deref() == Some("paused") {
                SandboxState::Paused
            } else {
                SandboxState::Running
            },
            on_timeout: Default::default(),
        })
    }

    /// What is known of `id`, asking the API when this process has not
    /// seen it yet (the access token comes with the detail).
    async fn known(&self, id: &SandboxId) -> Result<Known> {
        if let Some(k) = self.lock().get(id) {
            return Ok(k.clone());
        }
        self.refresh(id).await
    }

    async fn refresh(&self, id: &SandboxId) -> Result<Known> {
        let detail = self
            .rest
            .info(id.as_str())
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        let info = self.info_from(&detail).ok_or_else(|| {
            ProviderError::Unavailable(format!(
                "the E2B API returned an unusable sandbox id {:?}",
                detail.sandbox_id
            ))
        })?;
        let known = Known {
            token: detail.envd_access_token,
            domain: detail.domain,
            info,
        };
        self.lock().insert(id.clone(), known.clone());
        Ok(known)
    }

    fn forget(&self, id: &SandboxId) {
        self.lock().remove(id);
    }

    /// Runs a shell script in the sandbox through envd.
    async fn run(
        &self,
        id: &SandboxId,
        command: &str,
        cwd: Option<&str>,
        stdin: Option<&[u8]>,
        timeout: Duration,
        output_limit: usize,
    ) -> Result<ExecOutput> {
        let envd = self.envd(id).await?;
        let secs = timeout.as_secs().max(1).to_string();
        let args = [
            "-c",
            script::LAUNCH,
            script::EXEC,
            command,
            &secs,
            cwd.unwrap_or(""),
            if stdin.is_some() { "1" } else { "0" },
        ];
        let finished = envd
            .run("/bin/sh", &args, stdin, timeout + EXEC_GRACE, output_limit)
            .await
            .map_err(|e| self.envd_error(e, id, true))?;
        let timed_out = finished.exit_code.is_none_or(|c| c == script::TIMED_OUT);
        Ok(ExecOutput {
            exit_code: if timed_out { None } else { finished.exit_code },
            stdout: finished.stdout.bytes,
            stderr: finished.stderr.bytes,
            stdout_truncated: finished.stdout.truncated,
            stderr_truncated: finished.stderr.truncated,
            timed_out,
        })
    }

    /// Copies the shares into a new sandbox (`shares`' module doc): one
    /// upload of their tar stream, then the setup as root.
    async fn put_shares(
        &self,
        id: &SandboxId,
        list: &[Share],
        packing: shares::Packing,
    ) -> Result<()> {
        // At least 1 MiB/s, whatever the size.
        let within = SCRIPT_TIMEOUT + Duration::from_secs(packing.bytes >> 20);
        let owner = self
            .script(id, r#"printf '%s:%s' "$(id -u)" "$(id -g)""#)
            .await?;
        let envd = self.envd(id).await?;
        let tmp = format!("/tmp/.sandkeep-shares-{}.tar", random_hex());
        let (body, writer) = shares::stream(packing);
        let sent = envd.upload_within(&tmp, body, within).await;
        writer
            .await
            .map_err(|e| ProviderError::Internal(format!("the share upload's reader failed: {e}")))?
            .map_err(|e| ProviderError::Io {
                context: "cannot read a share to upload it".into(),
                source: e,
            })?;
        sent.map_err(|e| self.envd_error(e, id, false))?;
        let mut args = vec![
            "-c".to_owned(),
            shares::SETUP.to_owned(),
            "sandkeep".to_owned(),
            tmp,
            owner,
        ];
        args.extend(shares::setup_args(list));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let finished = envd
            .as_root()
            .run("/bin/sh", &args, None, within, 64 * 1024)
            .await
            .map_err(|e| self.envd_error(e, id, true))?;
        if finished.exit_code != Some(0) {
            return Err(ProviderError::Unavailable(format!(
                "putting the shares into sandbox {id} failed ({}): {}; the sandbox was destroyed",
                finished
                    .exit_code
                    .map_or("no status".to_owned(), |c| format!("status {c}")),
                String::from_utf8_lossy(&finished.stderr.bytes).trim()
            )));
        }
        Ok(())
    }

    /// A short script of the provider's own: its stdout, or why it failed.
    async fn script(&self, id: &SandboxId, script: &str) -> Result<String> {
        let out = match self
            .run(id, script, None, None, SCRIPT_TIMEOUT, 64 * 1024)
            .await
        {
            Ok(out) if out.exit_code == Some(0) => out,
            // A script cut short by the sandbox's destruction says so.
            _ if self.gone(id).await => return Err(ProviderError::NoSuchSandbox(id.clone())),
            failed => failed?,
        };
        if out.exit_code != Some(0) {
            return Err(ProviderError::Unavailable(format!(
                "a sandkeep script failed in sandbox {id} ({}): {}",
                out.exit_code
                    .map_or("no status".to_owned(), |c| format!("status {c}")),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether the API says the sandbox no longer exists.
    async fn gone(&self, id: &SandboxId) -> bool {
        let gone = matches!(self.rest.info(id.as_str()).await, Err(RestError::NotFound));
        if gone {
            self.forget(id);
        }
        gone
    }

    fn envd_error(&self, e: EnvdError, id: &SandboxId, may_have_run: bool) -> ProviderError {
        match e {
            EnvdError::SandboxGone => {
                self.forget(id);
                ProviderError::NoSuchSandbox(id.clone())
            }
            EnvdError::Broken(message) if may_have_run => ProviderError::Unconfirmed {
                sandbox: id.clone(),
                message,
            },
            other => ProviderError::Unavailable(format!("sandbox {id}: {other}")),
        }
    }

    /// The sandbox's envd, as these credentials reach it.
    async fn envd(&self, id: &SandboxId) -> Result<Envd> {
        let known = self.known(id).await?;
        Ok(Envd {
            http: self.http.clone(),
            base: self.config.envd_url(id.as_str(), known.domain.as_deref()),
            sandbox_id: id.as_str().to_owned(),
            token: known.token,
            stats: Arc::clone(&self.stats),
            as_root: false,
        })
    }

    async fn helper(&self) -> Result<Arc<Helper>> {
        self.helper
            .get_or_try_init(|| async {
                let chosen = helper::choose(self.helper_path.as_deref()).await?;
                Ok(Arc::new(helper::load(chosen).await?))
            })
            .await
            .cloned()
    }

    /// Writes the retention decision (or reads the one already made).
    async fn decide(&self, id: &SandboxId, wish: Fate) -> Result<Fate> {
        let out = self.script(id, &script::decide(wish)).await?;
        Fate::parse(&out).ok_or_else(|| {
            ProviderError::Unavailable(format!(
                "sandbox {id}: unreadable retention marker {:?}",
                out.trim()
            ))
        })
    }

    /// An envd error on a call that names `path`: a missing path and envd's
    /// refusal are the caller's file errors, the rest the sandbox's.
    fn path_error(&self, e: EnvdError, id: &SandboxId, path: &str) -> ProviderError {
        match e {
            EnvdError::PathNotFound(_) => ProviderError::NoSuchPath {
                path: path.to_owned(),
            },
            EnvdError::Refused { message, .. } => ProviderError::FileError {
                path: path.to_owned(),
                message,
            },
            e => self.envd_error(e, id, false),
        }
    }

    /// Whether this process saw the sandbox retained (a fate, once
    /// decided, is kept).
    fn seen_retained(&self, id: &SandboxId) -> bool {
        self.retained
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id)
    }

    /// `info` with its retention mark, which lives in the sandbox: read
    /// with an envd call, so not of a paused sandbox, which the call would
    /// resume (autoResume); a paused one shows as not retained.
    async fn with_retained(&self, mut info: SandboxInfo) -> SandboxInfo {
        if info.state == SandboxState::Running {
            info.retained = self.retained(&info.sandbox_id).await;
        }
        info
    }

    async fn retained(&self, id: &SandboxId) -> bool {
        matches!(
            self.script(id, script::READ_FATE)
                .await
                .ok()
                .as_deref()
                .and_then(Fate::parse),
            Some(Fate::Retained)
        )
    }
}

fn api_error(e: RestError, id: Option<&SandboxId>) -> ProviderError {
    match (e, id) {
        (RestError::NotFound, Some(id)) => ProviderError::NoSuchSandbox(id.clone()),
        (e, _) => ProviderError::Unavailable(e.to_string()),
    }
}

fn refuse(what: &str) -> ProviderError {
    ProviderError::Unsupported(format!(
        "the e2b provider cannot enforce {what}: E2B sandboxes get their resources from their template; create it without {what}, or use the local provider. Nothing was created"
    ))
}

#[async_trait]
impl Provider for E2bProvider {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn create(&self, spec: CreateSpec) -> Result<SandboxInfo> {
        let Limits {
            memory_mib,
            milli_cpus,
            pids,
            disk_mib,
        } = spec.limits;
        for (asked, name) in [
            (memory_mib.is_some(), "memory_mib"),
            (milli_cpus.is_some(), "cpus"),
            (pids.is_some(), "pids"),
            (disk_mib.is_some(), "disk_mib"),
        ] {
            if asked {
                return Err(refuse(name));
            }
        }
        shares::refuse_rw(&spec.shares)?;
        // Before the shares are read: a host file changed after this is a
        // conflict for apply_changes.
        let shares_since_ns = sandkeep_provider::unix_now_ns();
        let packing = if spec.shares.is_empty() {
            None
        } else {
            let shares = spec.shares.clone();
            Some(
                tokio::task::spawn_blocking(move || shares::pack(&shares))
                    .await
                    .map_err(|e| {
                        ProviderError::Internal(format!("the share walk failed: {e}"))
                    })??,
            )
        };
        if !spec.allow_hosts.is_empty() {
            return Err(ProviderError::Unsupported(
                "the e2b provider cannot enforce allow_hosts (E2B's API takes no host-name allow list sandkeep can rely on); use network \"internet\" or \"none\", or the local provider. Nothing was created".into(),
            ));
        }
        let network = spec.network.unwrap_or_default();
        let mut metadata = self.owner_filter();
        metadata.insert(META_TIMEOUT.to_owned(), spec.timeout.to_string());
        metadata.insert(META_NETWORK.to_owned(), network.to_string());
        if !spec.shares.is_empty() {
            metadata.insert(
                shares::META_SHARES.to_owned(),
                serde_json::to_string(&spec.shares).expect("shares always encode"),
            );
            metadata.insert(
                shares::META_SHARES_SINCE.to_owned(),
                shares_since_ns.to_string(),
            );
        }
        let created = self
            .rest
            .create(&NewSandbox {
                template_id: &spec.template,
                timeout: spec.timeout,
                metadata: &metadata,
                env_vars: &spec.envs,
                secure: true,
                allow_internet_access: network == Network::Internet,
                auto_pause: spec.on_timeout.pauses(),
                auto_pause_memory: (spec.on_timeout == OnTimeout::PauseFiles).then_some(false),
                // A connection to an exposed port resumes a paused sandbox
                // (SPEC §17); E2B's proxy does so only with `autoResume`,
                // which it takes only with a pause that keeps the memory.
                auto_resume: (spec.on_timeout == OnTimeout::Pause)
                    .then_some(rest::AutoResume { enabled: true }),
            })
            .await
            .map_err(|e| match e {
                RestError::Status {
                    status: 400 | 404,
                    message,
                } => ProviderError::Unavailable(format!(
                    "E2B refused to create a sandbox of template {:?}: {message}",
                    spec.template
                )),
                RestError::Status {
                    status: 429,
                    message,
                } => ProviderError::LimitReached(format!(
                    "E2B refused a new sandbox (a rate or concurrency limit of the account or \
                     server): {message}"
                )),
                e => api_error(e, None),
            })?;
        let id = SandboxId::parse(&created.sandbox_id).map_err(ProviderError::Unavailable)?;
        let detail = match self.rest.info(id.as_str()).await {
            Ok(d) => d,
            Err(e) => {
                let _ = self.rest.kill(id.as_str()).await;
                return Err(api_error(e, None));
            }
        };
        if network == Network::None && detail.allow_internet_access != Some(false) {
            // Never pretend: an API that does not confirm the cut leaves
            // the sandbox on the internet.
            let _ = self.rest.kill(id.as_str()).await;
            return Err(ProviderError::Unsupported(
                "network \"none\": this E2B API did not confirm allowInternetAccess=false for the new sandbox, so it was destroyed; nothing is left".into(),
            ));
        }
        let info = self
            .info_from(&detail)
            .ok_or_else(|| ProviderError::Unavailable("unusable sandbox detail".into()))?;
        let known = Known {
            token: created.envd_access_token.or(detail.envd_access_token),
            domain: created.domain.or(detail.domain),
            info: info.clone(),
        };
        self.lock().insert(id.clone(), known);
        if let Some(packing) = packing
            && let Err(e) = self.put_shares(&id, &spec.shares, packing).await
        {
            let _ = self.kill(&id).await;
            return Err(e);
        }
        Ok(info)
    }

    async fn kill(&self, id: &SandboxId) -> Result<bool> {
        self.forget(id);
        self.rest
            .kill(id.as_str())
            .await
            .map_err(|e| api_error(e, Some(id)))
    }

    async fn kill_unless_retained(&self, id: &SandboxId) -> Result<Release> {
        if self.seen_retained(id) {
            return Ok(Release::Retained);
        }
        // The fate is decided in the sandbox, by an envd call, which
        // resumes a paused one (autoResume): a retained one is paused
        // again, as it was.
        let paused =
            matches!(self.refresh(id).await, Ok(k) if k.info.state == SandboxState::Paused);
        match self.decide(id, Fate::Released).await {
            Ok(Fate::Retained) => {
                if paused {
                    self.pause(id).await?;
                }
                Ok(Release::Retained)
            }
            Ok(Fate::Released) => Ok(if self.kill(id).await? {
                Release::Destroyed
            } else {
                Release::Gone
            }),
            Err(ProviderError::NoSuchSandbox(_)) => Ok(Release::Gone),
            Err(e) => Err(e),
        }
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let details = self
            .rest
            .list(&self.owner_filter())
            .await
            .map_err(|e| api_error(e, None))?;
        // One envd call a sandbox, a few at a time: one after the other, a
        // list of a hundred sandboxes took a hundred round trips to E2B.
        let infos: Vec<SandboxInfo> = details.iter().filter_map(|d| self.info_from(d)).collect();
        let checks = infos.into_iter().map(|info| self.with_retained(info));
        Ok(stream::iter(checks).buffered(LIST_CHECKS).collect().await)
    }

    /// A remote sandbox's cow shares are copies, compared with the
    /// pristine copies kept beside them.
    fn share_layers(&self, info: &SandboxInfo) -> Result<Vec<Layers>> {
        Ok(shares::layers(&info.shares))
    }

    /// E2B's edge already routes every port of a sandbox by its host name:
    /// nothing to set up, nothing to keep (so no `ports` in its listings).
    async fn expose_port(&self, id: &SandboxId, port: Port) -> Result<PortForward> {
        let known = self.refresh(id).await?;
        Ok(PortForward {
            port,
            url: self
                .config
                .port_url(id.as_str(), port.get(), known.domain.as_deref()),
        })
    }

    async fn info(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let info = self.refresh(id).await?.info;
        Ok(self.with_retained(info).await)
    }

    async fn exec(&self, id: &SandboxId, request: ExecRequest) -> Result<ExecOutput> {
        self.run(
            id,
            &request.command,
            request.cwd.as_deref(),
            request.stdin.as_deref(),
            request.timeout,
            request.output_limit,
        )
        .await
    }

    async fn spawn(&self, id: &SandboxId, request: SpawnRequest) -> Result<Spawned> {
        let envd = self.envd(id).await?;
        spawned::spawn(envd, request)
            .await
            .map_err(|e| self.envd_error(e, id, false))
    }

    async fn pause(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let paused = self
            .rest
            .pause(id.as_str())
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        if !paused {
            return Err(ProviderError::AlreadyInState {
                sandbox: id.clone(),
                state: SandboxState::Paused,
            });
        }
        self.info(id).await
    }

    /// E2B's connect resumes a paused sandbox; a running one is refused
    /// first, as the local provider refuses it.
    async fn resume(&self, id: &SandboxId, timeout: Option<u64>) -> Result<SandboxInfo> {
        let info = self.refresh(id).await?.info;
        if info.state == SandboxState::Running {
            return Err(ProviderError::AlreadyInState {
                sandbox: id.clone(),
                state: SandboxState::Running,
            });
        }
        let timeout = timeout.unwrap_or(info.timeout);
        self.rest
            .connect(id.as_str(), timeout)
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        let mut known = self.refresh(id).await?;
        known.info.timeout = timeout;
        self.lock().insert(id.clone(), known.clone());
        Ok(known.info)
    }

    /// E2B's `createSnapshot`. E2B says neither a snapshot's size nor its
    /// time: 0 and now.
    async fn snapshot(&self, id: &SandboxId, name: Option<String>) -> Result<SnapshotInfo> {
        let snapshot_id = self
            .rest
            .create_snapshot(id.as_str(), name.as_deref())
            .await
            .map_err(|e| match (e, &name) {
                (RestError::Status { status: 409, .. }, Some(name)) => {
                    ProviderError::SnapshotExists(name.clone())
                }
                (e, _) => api_error(e, Some(id)),
            })?;
        Ok(SnapshotInfo {
            snapshot_id,
            sandbox_id: id.clone(),
            size_bytes: 0,
            created_at: sandkeep_provider::unix_now(),
        })
    }

    /// The snapshots of this owner's sandboxes, running or paused. E2B's
    /// `GET /snapshots` without `sandboxID` lists every snapshot of the
    /// team, but each as its id and names alone: not the sandbox it was
    /// taken of, nor whose it is (other servers' and people's under the
    /// same key), nor its size or time. Asked by sandbox, it answers for
    /// running and paused ones only, so a killed sandbox's snapshots are
    /// not listed (they can still be created from and deleted by id).
    /// Size and time unknown (0).
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let sandboxes = self
            .rest
            .list(&self.owner_filter())
            .await
            .map_err(|e| api_error(e, None))?;
        let mut out = Vec::new();
        for detail in sandboxes {
            let Ok(sandbox_id) = SandboxId::parse(&detail.sandbox_id) else {
                continue;
            };
            let ids = match self.rest.snapshots_of(sandbox_id.as_str()).await {
                Ok(ids) => ids,
                // Killed meanwhile.
                Err(RestError::NotFound) => continue,
                Err(e) => return Err(api_error(e, None)),
            };
            out.extend(ids.into_iter().map(|snapshot_id| SnapshotInfo {
                snapshot_id,
                sandbox_id: sandbox_id.clone(),
                size_bytes: 0,
                created_at: 0,
            }));
        }
        Ok(out)
    }

    /// A sandbox's resources come from its template (a fork's: the
    /// snapshot); the reported ones are no limits a create may ask for.
    fn fork_limits(&self, _source: &SandboxInfo) -> Limits {
        Limits::default()
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<bool> {
        self.rest
            .delete_template(snapshot_id)
            .await
            .map_err(|e| api_error(e, None))
    }

    async fn set_timeout(&self, id: &SandboxId, timeout: u64) -> Result<SandboxInfo> {
        self.rest
            .set_timeout(id.as_str(), timeout)
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        let mut known = self.known(id).await?;
        known.info.timeout = timeout;
        known.info.expires_at = sandkeep_provider::unix_now() + timeout;
        self.lock().insert(id.clone(), known.clone());
        Ok(known.info)
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let envd = self.envd(id).await?;
        let (data, size) = envd
            .download(path, limit)
            .await
            .map_err(|e| self.path_error(e, id, path))?;
        if size > limit || data.len() as u64 > limit {
            return Err(ProviderError::FileTooLarge {
                path: path.to_owned(),
                size,
                limit,
            });
        }
        Ok(data)
    }

    async fn write_file(&self, id: &SandboxId, path: &str, content: &[u8]) -> Result<u64> {
        let envd = self.envd(id).await?;
        let file_error = |e: EnvdError| match e {
            EnvdError::PathNotFound(message) | EnvdError::Refused { message, .. } => {
                ProviderError::FileError {
                    path: path.to_owned(),
                    message,
                }
            }
            e => self.envd_error(e, id, false),
        };
        // envd truncates in place; an upload beside the target and a
        // rename make the replacement atomic.
        let (dir, name) = match path.rsplit_once('/') {
            Some((dir, name)) => (format!("{dir}/"), name),
            None => (String::new(), path),
        };
        let tmp = format!("{dir}.{name}.sandkeep-{}", random_hex());
        // The trait lends the content; a request body must own it.
        envd.upload(&tmp, content.to_vec())
            .await
            .map_err(file_error)?;
        if let Err(e) = envd
            .unary::<_, IgnoredAny>(
                "/filesystem.Filesystem/Move",
                &MoveRequest {
                    source: tmp.clone(),
                    destination: path.to_owned(),
                },
            )
            .await
        {
            // Nothing may stay beside the target (a Move that did happen
            // left nothing to remove, and removing a missing path succeeds).
            if let Err(left) = envd
                .unary::<_, IgnoredAny>(
                    "/filesystem.Filesystem/Remove",
                    &PathRequest { path: tmp.clone() },
                )
                .await
            {
                tracing::warn!(%id, "cannot remove the temporary upload {tmp}: {left}");
            }
            return Err(file_error(e));
        }
        Ok(content.len() as u64)
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let envd = self.envd(id).await?;
        // The answer is read leniently (a size as a number or a string), so
        // it stays a JSON value rather than the wire crate's EntryInfo.
        let answer: Value = envd
            .unary(
                "/filesystem.Filesystem/ListDir",
                &ListDirRequest {
                    path: path.to_owned(),
                    depth: 1,
                },
            )
            .await
            .map_err(|e| self.path_error(e, id, path))?;
        let entries = answer
            .get("entries")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(entries
            .iter()
            .map(|e| {
                let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
                // envd describes a link by its target's type and marks
                // it with the resolved target.
                let kind = match text("type") {
                    _ if e.get("symlinkTarget").is_some() => FileKind::Symlink,
                    "FILE_TYPE_FILE" => FileKind::File,
                    "FILE_TYPE_DIRECTORY" => FileKind::Dir,
                    "FILE_TYPE_SYMLINK" => FileKind::Symlink,
                    _ => FileKind::Other,
                };
                let size = match e.get("size") {
                    Some(Value::String(s)) => s.parse().unwrap_or(0),
                    Some(v) => v.as_u64().unwrap_or(0),
                    None => 0,
                };
                FileEntry {
                    name: text("name").to_owned(),
                    kind,
                    size,
                    modified_at: parse_time(text("modifiedTime")).unwrap_or(0),
                }
            })
            .collect())
    }

    async fn renew(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let timeout = self.known(id).await?.info.timeout;
        self.set_timeout(id, timeout).await
    }

    async fn retain(&self, id: &SandboxId) -> Result<()> {
        if self.seen_retained(id) {
            return Ok(());
        }
        match self.decide(id, Fate::Retained).await? {
            Fate::Retained => {
                self.retained
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone());
                Ok(())
            }
            // Its session ended first and it is being destroyed.
            Fate::Released => Err(ProviderError::NoSuchSandbox(id.clone())),
        }
    }

    async fn task_helper(&self, id: &SandboxId) -> Result<String> {
        let parse = |out: &str| {
            let (path, hash) = out.trim().split_once(' ').unwrap_or((out.trim(), ""));
            (path.to_owned(), hash.to_owned())
        };
        // The check answers fast for a sandbox that is gone; the helper
        // is chosen and hashed (the first time) meanwhile.
        let check = script::helper_check();
        let (helper, out) = tokio::try_join!(self.helper(), self.script(id, &check))?;
        let (path, hash) = parse(&out);
        if hash == helper.hash {
            return Ok(path);
        }
        let tmp = format!(
            "{}/.{}.upload-{}",
            script::HELPER_DIR,
            script::HELPER_NAME,
            random_hex()
        );
        let envd = self.envd(id).await?;
        self.stats.uploads.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "sandkeep_e2b::http", "uploading the task helper ({} bytes) to sandbox {id}", helper.bytes.len());
        let began = std::time::Instant::now();
        envd.upload(&tmp, helper.bytes.clone())
            .await
            .map_err(|e| self.envd_error(e, id, false))?;
        tracing::debug!(target: "sandkeep_e2b::http", "uploaded the task helper in {} us", began.elapsed().as_micros());
        let (path, hash) = parse(
            &self
                .script(id, &script::helper_install(&tmp, &helper.hash))
                .await?,
        );
        if hash != helper.hash {
            return Err(ProviderError::Unavailable(format!(
                "sandbox {id}: the uploaded task helper hashes to {hash:?} inside the sandbox, not {}; it was removed",
                helper.hash
            )));
        }
        Ok(path)
    }
}
