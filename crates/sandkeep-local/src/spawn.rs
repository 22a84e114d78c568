//! Starting a sandbox's keeper: the detached `sandkeep __keeper run`
//! process with a clean environment, and waiting (bounded) for its
//! readiness report. Owns the create timeout and the keeper-log excerpt in
//! setup errors. It must not write any sandbox record (the provider writes
//! `spec.json` before, the keeper `meta.json`) nor decide anything about
//! templates or isolation.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::keeper::Readiness;
use crate::presence::clean_stale;
use crate::state::{self, Home, Meta, SandboxDir};
use crate::{KEEPER_ARG, blocking, io_err};
use sandkeep_provider::{ProviderError, Result, SandboxId};

/// How long create waits for a keeper to report.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of the keeper's log a setup error quotes.
const LOG_TAIL_CHARS: usize = 2000;

/// Starts the keeper of the sandbox prepared in `dir` and waits until it
/// reports; returns its warnings. A keeper that never reports is killed and
/// its files removed.
pub async fn start_keeper(
    exe: &Path,
    home: &Home,
    dir: &SandboxDir,
    id: &SandboxId,
) -> Result<Vec<String>> {
    let log = std::fs::File::create(dir.log()).map_err(io_err("create keeper.log"))?;
    let mut child = tokio::process::Command::new(exe)
        .arg(KEEPER_ARG)
        .arg("run")
        .arg(home.root())
        .arg(id.as_str())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(io_err(format!("start {}", exe.display())))?;
    let mut stdout = child.stdout.take().expect("piped");
    // The direct child forks the keeper and exits at once: reap it now.
    let _ = child.wait().await;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(CREATE_TIMEOUT, stdout.read_to_end(&mut buf)).await;
    let readiness = match read {
        Ok(Ok(_)) => serde_json::from_slice::<Readiness>(&buf).map_err(|_| {
            ProviderError::Unavailable(format!(
                "the sandbox keeper died during setup: {}",
                log_tail(dir)
            ))
        })?,
        _ => {
            let dir2 = dir.clone();
            let meta = state::read_json::<Meta>(&dir.meta()).ok();
            blocking(move || clean_stale(&dir2, meta.as_ref())).await?;
            return Err(ProviderError::Unavailable(format!(
                "the sandbox did not become ready within {}s",
                CREATE_TIMEOUT.as_secs()
            )));
        }
    };
    match readiness {
        Readiness::Ready { warnings, .. } => Ok(warnings),
        Readiness::Unsupported(e) => Err(ProviderError::Unsupported(e)),
        Readiness::Failed(e) => Err(ProviderError::Unavailable(format!(
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
