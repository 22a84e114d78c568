//! The on-disk state of the local provider under `SANDKEEP_HOME`.
//!
//! Owns the directory layout, the per-sandbox records (`spec.json` written by
//! the provider before the keeper starts, `meta.json` written by the keeper
//! once the sandbox accepts exec and updated by providers under a lock), and
//! the pid + start-time identity that tells a live keeper from a stale one.
//! It never starts, signals or enters a process.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sandkeep_proto::record::ProcessIdentity;
use sandkeep_provider::{Limits, Network, SandboxId, SandboxInfo};

use crate::netpolicy::EgressTrust;

/// Where the task helper appears inside every namespaced sandbox:
/// `/HELPER_DIR/HELPER_NAME` (and `bin/HELPER_NAME` in a process-only
/// sandbox's directory).
pub const HELPER_DIR: &str = ".sandkeep";
pub const HELPER_NAME: &str = "sandkeep-task";

/// Where the sandbox's exec/file socket is found, relative to its directory.
/// Kept short: unix socket paths are limited to 108 bytes.
const SOCKET_NAME: &str = "sock";

/// The state directory of one provider configuration.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sandboxes(&self) -> PathBuf {
        self.root.join("sb")
    }

    pub fn sandbox(&self, id: &SandboxId) -> SandboxDir {
        SandboxDir {
            path: self.sandboxes().join(id.as_str()),
        }
    }

    /// Root filesystems usable as templates, one directory each.
    pub fn templates(&self) -> PathBuf {
        self.root.join("templates")
    }

    /// Creates the home, 0700 (it holds every sandbox's files). An
    /// existing home keeps its mode: process-only sandboxes run by root
    /// need it traversable (0711).
    pub fn ensure(&self) -> io::Result<()> {
        let fresh = !self.root.exists();
        fs::create_dir_all(self.sandboxes())?;
        if fresh {
            fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700))?;
            fs::set_permissions(self.sandboxes(), fs::Permissions::from_mode(0o700))?;
        }
        for dir in [self.root.clone(), self.sandboxes()] {
            check_trusted(&dir)?;
        }
        Ok(())
    }
}

/// Refuses a path this user does not own, a symbolic link, or one that
/// group or others can write, as OpenSSH refuses such key files: another
/// user could plant records there (a keeper pid the provider would signal,
/// a spec it would run).
pub fn check_trusted(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(path)?;
    let me = rustix::process::geteuid().as_raw();
    let why = if meta.file_type().is_symlink() {
        "is a symbolic link".to_owned()
    } else if meta.uid() != me {
        format!(
            "is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        )
    } else if meta.mode() & 0o022 != 0 {
        format!(
            "is writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} {why}: sandkeep refuses state another user could have written; make it yours \
             and private (`chown {me} PATH && chmod go-w PATH`) or set SANDKEEP_HOME to a \
             directory of your own",
            path.display()
        ),
    ))
}

/// One sandbox's directory on the host.
#[derive(Debug, Clone)]
pub struct SandboxDir {
    pub path: PathBuf,
}

impl SandboxDir {
    pub fn spec(&self) -> PathBuf {
        self.path.join("spec.json")
    }
    pub fn meta(&self) -> PathBuf {
        self.path.join("meta.json")
    }
    pub fn lock(&self) -> PathBuf {
        self.path.join("lock")
    }
    pub fn socket(&self) -> PathBuf {
        self.path.join(SOCKET_NAME)
    }
    pub fn log(&self) -> PathBuf {
        self.path.join("keeper.log")
    }
    /// The process-only mode's home. (A namespaced sandbox keeps its
    /// home, and every other writable layer, on its disk: a tmpfs that its
    /// init mounts over this very directory in its own mount namespace,
    /// so on the host the directory holds records only.)
    pub fn home(&self) -> PathBuf {
        self.path.join("home")
    }
    /// The process-only mode's temporary directory (`TMPDIR`).
    pub fn tmp(&self) -> PathBuf {
        self.path.join("tmp")
    }
}

/// What the provider asks the keeper to build.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub sandbox_id: SandboxId,
    pub template: String,
    pub timeout: u64,
    pub envs: BTreeMap<String, String>,
    pub created_at: u64,
    /// The `sandkeep` executable, bound into the sandbox as the task helper.
    pub exe: PathBuf,
    /// The state directory, masked inside the sandbox.
    pub home: PathBuf,
    /// A template's root filesystem; `None` for `base` (the host's own
    /// system directories).
    #[serde(default)]
    pub template_dir: Option<PathBuf>,
    /// Skip namespaces: the weaker subreaper + Landlock mode.
    #[serde(default)]
    pub process_only: bool,
    /// As requested; `None` means the default.
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// As requested; a `None` field means the default.
    #[serde(default)]
    pub limits: Limits,
    /// The provider's `SANDKEEP_EGRESS_TRUST` when the sandbox was made.
    #[serde(default)]
    pub egress_trust: EgressTrust,
}

/// What a live sandbox's record holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub info: SandboxInfo,
    pub keeper: ProcessIdentity,
    pub init: ProcessIdentity,
    /// The task helper's path as the sandbox sees it.
    #[serde(default = "namespaced_helper")]
    pub helper: String,
    /// No namespaces: destruction must kill the init's whole tree.
    #[serde(default)]
    pub process_only: bool,
}

fn namespaced_helper() -> String {
    format!("/{HELPER_DIR}/{HELPER_NAME}")
}

/// Writes `bytes` to `path` via a temporary file and a rename, so readers see
/// the old or the new content, never a torn one. Not synced to disk: a
/// record only describes processes, which a crash of the machine ends too
/// (a record torn by one is cleaned up like any stale one), and a sync
/// costs create and every renewal a disk flush (1–30 ms on a busy disk).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    fs::rename(&tmp, path)
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<T> {
    let bytes = fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes)
}

/// An exclusive advisory lock, released when the file closes on drop.
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(Self { _file: f })
    }
}

/// Removes a tree even where the sandbox left directories without
/// permissions (overlay work dirs are mode 000); never follows symlinks.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    open_up(path);
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn open_up(path: &Path) {
    let Ok(md) = fs::symlink_metadata(path) else {
        return;
    };
    if !md.is_dir() {
        return;
    }
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
    if let Ok(entries) = fs::read_dir(path) {
        for entry in entries.flatten() {
            open_up(&entry.path());
        }
    }
}
