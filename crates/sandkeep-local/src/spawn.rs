//! Starting a sandbox's keeper: the detached keeper process with a clean
//! environment, from the small `sandkeep-keeper` executable when one of
//! this build sits beside `sandkeep`, else from `sandkeep` itself, and
//! waiting (bounded) for its readiness report. Owns the create timeout and
//! the keeper-log excerpt in setup errors. It must not write any sandbox
//! record (the provider writes `spec.json` before, the keeper
//! `meta.json`) nor decide anything about templates or isolation.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::keeper::{BUILD, REFUSED, Readiness};
use crate::presence::clean_stale;
use crate::state::{self, Home, Meta, SandboxDir};
use crate::{KEEPER_ARG, blocking, io_err, pool};
use sandkeep_provider::{ProviderError, Result, SandboxId};

/// How long create waits for a keeper to report.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of the keeper's log a setup error quotes.
const LOG_TAIL_CHARS: usize = 2000;
/// The keeper's own executable, looked for beside `sandkeep`.
pub const SMALL_KEEPER: &str = "sandkeep-keeper";

/// The executables a keeper can be started from.
///
/// A keeper is exec'd for every sandbox, and it and the init forked from
/// it live as long as the sandbox. From the whole static `sandkeep`
/// (25 MB) a keeper starts about a millisecond later, with more page
/// faults, than from its own 2.6 MB executable, and an idle sandbox costs
/// 826 KiB PSS instead of 234 (docs/benchmarks-log.md). The small one is used
/// until it proves not to be of this build.
#[derive(Debug)]
pub struct Keepers {
    /// `sandkeep`, run as `sandkeep __keeper`.
    whole: PathBuf,
    /// `sandkeep-keeper` beside it, while not refused.
    small: Option<PathBuf>,
    small_refused: AtomicBool,
}

impl Keepers {
    /// The keepers of the `sandkeep` executable `exe` (absolute).
    pub fn beside(exe: &Path) -> Self {
        let small = exe.with_file_name(SMALL_KEEPER);
        Self {
            whole: exe.to_path_buf(),
            small: small.is_file().then_some(small),
            small_refused: AtomicBool::new(false),
        }
    }

    /// Which executable the next keeper is started from.
    pub fn describe(&self) -> String {
        match &self.small {
            Some(small) if !self.small_refused.load(Ordering::Relaxed) => {
                small.display().to_string()
            }
            Some(small) => format!(
                "{} (refused: not of this build), so {} {KEEPER_ARG}",
                small.display(),
                self.whole.display()
            ),
            None => format!("{} {KEEPER_ARG}", self.whole.display()),
        }
    }

    /// Starts the keeper of the sandbox prepared in `dir` and waits until
    /// it reports; returns its warnings. A keeper that never reports is
    /// killed and its files removed.
    pub async fn start(
        &self,
        home: &Home,
        dir: &SandboxDir,
        id: &SandboxId,
    ) -> Result<Vec<String>> {
        if let Some(small) = self.small.as_ref()
            && !self.small_refused.load(Ordering::Relaxed)
        {
            let started = match Standby::assign(small, home, id) {
                Some(standby) => standby.report(dir).await?,
                None => start_keeper(small, &[], home, dir, id).await?,
            };
            match started {
                Started::Ready(warnings) => return Ok(warnings),
                Started::Refused => {
                    self.small_refused.store(true, Ordering::Relaxed);
                    tracing::warn!(
                        keeper = %small.display(),
                        "the keeper executable beside sandkeep is not of this build; using sandkeep \
                         itself (install both from one build, e.g. `cargo install --path crates/sandkeep`)"
                    );
                }
            }
        }
        let started = match Standby::assign(&self.whole, home, id) {
            Some(standby) => standby.report(dir).await?,
            None => start_keeper(&self.whole, &[KEEPER_ARG], home, dir, id).await?,
        };
        match started {
            Started::Ready(warnings) => Ok(warnings),
            Started::Refused => Err(ProviderError::Keeper(format!(
                "{} is not of this server's build (replaced since the server started?): \
                 restart the server; {}",
                self.whole.display(),
                log_tail(dir)
            ))),
        }
    }
}

/// A keeper started ahead of its sandbox, by a one-shot CLI that is about
/// to create one ([`prestart`]): its exec and libc's start (≈ 1 ms here,
/// most of it trapped `cpuid`) overlap the CLI's own work up to the create
/// instead of following it. It reads `HOME<TAB>ID` from its stdin, up to
/// the end; an end without one (the CLI never got to create) ends it.
struct Standby {
    exe: PathBuf,
    child: std::process::Child,
}

/// The standby of this process, for its next create.
static STANDBY: std::sync::Mutex<Option<Standby>> = std::sync::Mutex::new(None);

/// Starts a standby keeper from the executable a provider of this process
/// would start keepers from (`sandkeep-keeper` beside it, else itself).
/// Best effort: without one, the create starts its keeper as usual.
pub fn prestart() {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let keepers = Keepers::beside(&exe);
    let (path, args): (&Path, &[&str]) = match &keepers.small {
        Some(small) => (small, &[]),
        None => (&keepers.whole, &[KEEPER_ARG]),
    };
    let child = std::process::Command::new(path)
        .args(args)
        .arg("standby")
        .arg(BUILD)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    if let Ok(child) = child {
        let standby = Standby {
            exe: path.to_path_buf(),
            child,
        };
        *STANDBY.lock().unwrap_or_else(|e| e.into_inner()) = Some(standby);
    }
}

impl Standby {
    /// Gives this process's standby, if it was started from `exe`, the
    /// sandbox `id` of `home` (prepared). None if there is none, or it is
    /// gone (refused its arguments, killed): the caller starts a keeper.
    fn assign(exe: &Path, home: &Home, id: &SandboxId) -> Option<Self> {
        use std::io::Write;
        let mut standby = {
            let mut slot = STANDBY.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref()?.exe != exe {
                return None;
            }
            slot.take()?
        };
        use std::os::unix::ffi::OsStrExt;
        let job = [
            home.root().as_os_str().as_bytes(),
            b"\t",
            id.as_str().as_bytes(),
        ]
        .concat();
        // A short message into an empty pipe, closed after it (the end
        // tells the standby the message is whole): the write does not
        // block, and fails only when the standby is gone.
        let mut stdin = standby.child.stdin.take().expect("piped");
        stdin.write_all(&job).ok()?;
        drop(stdin);
        Some(standby)
    }

    /// Waits for its report.
    async fn report(mut self, dir: &SandboxDir) -> Result<Started> {
        let stdout = self.child.stdout.take().expect("piped");
        let stdout = tokio::process::ChildStdout::from_std(stdout)
            .map_err(io_err("watch the keeper's report"))?;
        await_report(stdout, self.child, dir).await
    }
}

enum Started {
    Ready(Vec<String>),
    /// The executable exited without a report: a keeper of another build
    /// (or one that does not know this build's arguments).
    Refused,
}

/// Starts `exe ARGS… run HOME ID BUILD` and waits for its report.
async fn start_keeper(
    exe: &Path,
    args: &[&str],
    home: &Home,
    dir: &SandboxDir,
    id: &SandboxId,
) -> Result<Started> {
    let log = std::fs::File::create(dir.log()).map_err(io_err("create keeper.log"))?;
    let mut child = tokio::process::Command::new(exe)
        .args(args)
        .arg("run")
        .arg(home.root())
        .arg(id.as_str())
        .arg(BUILD)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(io_err(format!("start {}", exe.display())))?;
    let stdout = child.stdout.take().expect("piped");
    // A keeper that reported lives on, and the runtime reaps it whenever
    // it exits (a dropped child is not waited for here).
    await_report(stdout, child, dir).await
}

/// A keeper's process as its starter holds it: tokio's child (reaped by
/// the runtime once dropped), or a standby's std one.
trait KeeperProcess {
    async fn exit_code(&mut self) -> Option<i32>;
    /// Kills it and waits for its end.
    async fn kill(&mut self);
}

impl KeeperProcess for tokio::process::Child {
    async fn exit_code(&mut self) -> Option<i32> {
        self.wait().await.ok()?.code()
    }

    async fn kill(&mut self) {
        let _ = self.start_kill();
        let _ = self.wait().await;
    }
}

impl KeeperProcess for std::process::Child {
    async fn exit_code(&mut self) -> Option<i32> {
        let pid = rustix::process::Pid::from_raw(self.id() as i32);
        let waited =
            pool(move || rustix::process::waitpid(pid, rustix::process::WaitOptions::empty()))
                .await;
        waited.ok()?.ok()??.1.exit_status()
    }

    async fn kill(&mut self) {
        let _ = std::process::Child::kill(self);
        let _ = self.exit_code().await;
    }
}

/// Reads the report a keeper writes on `stdout` and returns once it has
/// it; a keeper that does not report within the create timeout is killed
/// and its files removed.
async fn await_report(
    mut stdout: tokio::process::ChildStdout,
    mut child: impl KeeperProcess,
    dir: &SandboxDir,
) -> Result<Started> {
    // A sandbox's commands run from tokio's blocking pool, which starts a
    // thread at its first use: in a one-shot CLI that is on the way to the
    // sandbox's first command. Started now, it overlaps the keeper's setup.
    drop(tokio::task::spawn_blocking(|| ()));
    let mut buf = Vec::new();
    let read = tokio::time::timeout(CREATE_TIMEOUT, stdout.read_to_end(&mut buf)).await;
    // Silent, it exited at once with the code of refused arguments.
    if buf.is_empty() && matches!(read, Ok(Ok(_))) && child.exit_code().await == Some(REFUSED) {
        return Ok(Started::Refused);
    }
    let readiness = match read {
        Ok(Ok(_)) => serde_json::from_slice::<Readiness>(&buf).map_err(|_| {
            ProviderError::Keeper(format!(
                "the sandbox keeper died during setup: {}",
                log_tail(dir)
            ))
        })?,
        _ => {
            // The keeper first: its init dies with it.
            child.kill().await;
            let dir2 = dir.clone();
            let meta = state::read_json::<Meta>(&dir.meta()).ok();
            blocking(move || clean_stale(&dir2, meta.as_ref())).await?;
            return Err(ProviderError::Keeper(format!(
                "the sandbox did not become ready within {}s",
                CREATE_TIMEOUT.as_secs()
            )));
        }
    };
    match readiness {
        Readiness::Ready { warnings, .. } => Ok(Started::Ready(warnings)),
        Readiness::Unsupported(e) => Err(ProviderError::Unsupported(e)),
        Readiness::Failed(e) => Err(ProviderError::Keeper(format!(
            "cannot create a local sandbox: {e}"
        ))),
    }
}

/// The end of the keeper's log: why setup failed, in its own words.
fn log_tail(dir: &SandboxDir) -> String {
    let log = std::fs::read_to_string(dir.log()).unwrap_or_default();
    let skip = log.chars().count().saturating_sub(LOG_TAIL_CHARS);
    log.chars().skip(skip).collect()
}
