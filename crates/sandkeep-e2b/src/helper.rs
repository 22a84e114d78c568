//! Which task helper executable is uploaded into sandboxes, and its bytes.
//!
//! The small `sandkeep-task` beside this executable (as `cargo build
//! --release` and `cargo install` of both crates place it) when it speaks
//! exactly this build's helper protocol: it must print this library's
//! [`sandkeep_task::version_line`], source fingerprint included, so a stale
//! development binary is never trusted. Otherwise, loudly, this executable
//! itself (the whole `sandkeep`, also a helper under that name). A helper
//! named by `SANDKEEP_TASK_HELPER` or [`crate::E2bProvider::with_helper`]
//! must pass the same check; one that fails it is an error, not replaced.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandkeep_provider::{ProviderError, Result};
use sha2::{Digest, Sha256};

/// Names the helper to upload instead of the one found beside this
/// executable.
pub const HELPER_ENV: &str = "SANDKEEP_TASK_HELPER";
/// The helper's executable name (also what makes `sandkeep` behave as it).
const HELPER_NAME: &str = "sandkeep-task";
/// The bound of `--version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How the helper was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `SANDKEEP_TASK_HELPER` or the provider's configuration.
    Configured,
    /// The `sandkeep-task` beside this executable.
    Beside,
    /// This executable, because the small helper could not be used: why.
    Fallback(String),
}

/// The helper to upload.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub path: PathBuf,
    pub size: u64,
    pub origin: Origin,
}

impl std::fmt::Display for Chosen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = self.size as f64 / 1e6;
        let path = self.path.display();
        match &self.origin {
            Origin::Configured => write!(f, "{path} ({size:.1} MB, {HELPER_ENV})"),
            Origin::Beside => write!(f, "{path} ({size:.1} MB, beside this executable)"),
            Origin::Fallback(why) => write!(
                f,
                "{path} ({size:.1} MB, this whole executable: {why}; build or install \
                 sandkeep-task beside it for a small upload)"
            ),
        }
    }
}

/// The helper's bytes and their SHA-256.
pub struct Helper {
    pub chosen: Chosen,
    pub bytes: bytes::Bytes,
    pub hash: String,
}

/// Chooses the helper: `configured`, else `SANDKEEP_TASK_HELPER`, else the
/// small one beside this executable, else this executable.
pub async fn choose(configured: Option<&Path>) -> Result<Chosen> {
    let configured = configured
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(HELPER_ENV).map(Into::into));
    if let Some(path) = configured {
        speaks_this_protocol(&path).await.map_err(|why| {
            ProviderError::Unavailable(format!(
                "the task helper {} cannot be used: {why}",
                path.display()
            ))
        })?;
        return with_size(path, Origin::Configured).await;
    }
    let this = std::env::current_exe().map_err(|e| ProviderError::Io {
        context: "cannot locate this executable (the task helper's fallback)".into(),
        source: e,
    })?;
    let beside = this.with_file_name(HELPER_NAME);
    let why = match speaks_this_protocol(&beside).await {
        Ok(()) => return with_size(beside, Origin::Beside).await,
        Err(why) => format!("{}: {why}", beside.display()),
    };
    tracing::warn!(
        "the e2b provider uploads this whole executable ({}) as the task helper: {why}",
        this.display()
    );
    with_size(this, Origin::Fallback(why)).await
}

/// Reads the chosen helper.
pub async fn load(chosen: Chosen) -> Result<Helper> {
    let bytes = tokio::fs::read(&chosen.path)
        .await
        .map_err(|e| ProviderError::Io {
            context: format!("cannot read the task helper {}", chosen.path.display()),
            source: e,
        })?;
    let hash = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Helper {
        chosen,
        bytes: bytes.into(),
        hash,
    })
}

async fn with_size(path: PathBuf, origin: Origin) -> Result<Chosen> {
    let size = tokio::fs::metadata(&path)
        .await
        .map_err(|e| ProviderError::Io {
            context: format!("cannot read the task helper {}", path.display()),
            source: e,
        })?
        .len();
    Ok(Chosen { path, size, origin })
}

/// Whether `path` prints exactly this build's helper version line; if
/// not, what it did instead.
async fn speaks_this_protocol(path: &Path) -> std::result::Result<(), String> {
    if !path.is_file() {
        return Err("no such file".into());
    }
    let mut command = std::process::Command::new(path);
    // Under that name `sandkeep` behaves as the helper too.
    command
        .arg0(HELPER_NAME)
        .arg("--version")
        .stdin(std::process::Stdio::null());
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let out = tokio::time::timeout(VERSION_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("`--version` did not answer within {VERSION_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot run it: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let expected = sandkeep_task::version_line();
    if out.status.success() && line == expected {
        return Ok(());
    }
    Err(format!(
        "it is another build: `--version` printed {:?}, this build's helper prints {expected:?}",
        line.chars().take(200).collect::<String>()
    ))
}
