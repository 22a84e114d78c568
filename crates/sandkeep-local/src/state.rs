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
use sandkeep_provider::{
    LayerKind, Layers, Limits, Network, OnTimeout, SandboxId, SandboxInfo, SandboxState, Share,
};

use crate::netpolicy::EgressTrust;

/// Where the task helper appears inside every namespaced sandbox:
/// `/HELPER_DIR/HELPER_NAME` (and `bin/HELPER_NAME` in a process-only
/// sandbox's directory).
pub const HELPER_DIR: &str = ".sandkeep";
pub const HELPER_NAME: &str = "sandkeep-task";

/// Where the sandbox shows the layers of its `index`th share (a cow one),
/// read-only, for the helper's `changes` and `export`: below
/// `/HELPER_DIR/shares/INDEX/`.
pub fn share_layers(index: usize, share: &Share) -> Layers {
    Layers {
        path: share.path.clone(),
        upper: format!("/{HELPER_DIR}/shares/{index}/upper"),
        lower: format!("/{HELPER_DIR}/shares/{index}/lower"),
        kind: LayerKind::Overlay,
    }
}

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

    /// Held by a create while it counts the sandboxes and writes its
    /// own record ([`crate::bounds`]).
    pub fn create_lock(&self) -> PathBuf {
        self.root.join("create.lock")
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

/// The real directory `path` names (absolute, `.`, `..`, repeated and
/// trailing slashes resolved, and every symbolic link among its parents
/// followed), refusing it when another user could change where it leads,
/// as OpenSSH checks the parents of a key file: each existing directory on
/// the way must be owned by root or this user and not writable by group or
/// others unless sticky (as `/tmp`), and a link in a sticky shared
/// directory must be root's or this user's (as `fs.protected_symlinks`
/// would have it). A last component that is a link is returned as it is,
/// for [`check_trusted`] to refuse. The caller keeps the result: a parent
/// link changed later does not move it.
pub fn trusted_path(path: &Path) -> io::Result<PathBuf> {
    use std::collections::VecDeque;
    use std::os::unix::fs::MetadataExt;
    use std::path::Component;
    /// Linux's own limit on links followed in one lookup.
    const MAX_LINKS: usize = 40;
    /// What is left to walk: names, and `..`.
    fn steps(path: &Path) -> impl DoubleEndedIterator<Item = Option<std::ffi::OsString>> + '_ {
        path.components().filter_map(|c| match c {
            Component::Normal(name) => Some(Some(name.to_owned())),
            Component::ParentDir => Some(None),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
    }
    let home = std::path::absolute(path)?;
    let me = rustix::process::geteuid().as_raw();
    let refuse = |dir: &Path, why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} (a parent of the state directory {}) {why}: another user could put another \
                 state directory in its place; set SANDKEEP_HOME to a directory whose parents \
                 only you and root can change",
                dir.display(),
                home.display()
            ),
        )
    };
    let check_dir = |dir: &Path, meta: &fs::Metadata| {
        let mode = meta.mode() & 0o7777;
        if meta.uid() != 0 && meta.uid() != me {
            Err(refuse(
                dir,
                format!(
                    "is owned by uid {}, neither root nor this user (uid {me})",
                    meta.uid()
                ),
            ))
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            Err(refuse(
                dir,
                format!("is writable by group or others (mode {mode:o}) and not sticky"),
            ))
        } else {
            Ok(())
        }
    };
    let mut pending: VecDeque<_> = steps(&home).collect();
    let mut links = 0;
    let mut resolved = PathBuf::from("/");
    check_dir(&resolved, &fs::metadata(&resolved)?)?;
    while let Some(step) = pending.pop_front() {
        let Some(name) = step else {
            // `resolved` holds no link, so its parent is the real one.
            resolved.pop();
            continue;
        };
        let next = resolved.join(&name);
        let meta = match fs::symlink_metadata(&next) {
            // The rest does not exist yet: the provider creates it, as
            // this user.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                resolved = next;
                for step in pending {
                    match step {
                        Some(name) => resolved.push(name),
                        None => {
                            resolved.pop();
                        }
                    }
                }
                return Ok(resolved);
            }
            Err(e) => return Err(e),
            Ok(meta) => meta,
        };
        if meta.file_type().is_symlink() && !pending.is_empty() {
            let shared = fs::metadata(&resolved)?.mode() & 0o1002 == 0o1002;
            if shared && meta.uid() != 0 && meta.uid() != me {
                return Err(refuse(
                    &next,
                    format!(
                        "is a symbolic link owned by uid {} in the shared directory {}",
                        meta.uid(),
                        resolved.display()
                    ),
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::other(format!(
                    "{}: more than {MAX_LINKS} symbolic links on the way",
                    home.display()
                )));
            }
            let target = fs::read_link(&next)?;
            if target.is_absolute() {
                resolved = PathBuf::from("/");
            }
            for step in steps(&target).rev() {
                pending.push_front(step);
            }
            continue;
        }
        // The state directory itself is `check_trusted`'s, stricter.
        if meta.is_dir() && !pending.is_empty() {
            check_dir(&next, &meta)?;
        }
        resolved = next;
    }
    Ok(resolved)
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
    /// Where servers ask the keeper for port forwards (see `forward`).
    pub fn ports_socket(&self) -> PathBuf {
        self.path.join("ports.sock")
    }
    /// The keeper's record of the sandbox's port forwards.
    pub fn ports(&self) -> PathBuf {
        self.path.join("ports.json")
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
    /// Host directories mounted at their own paths (SPEC §13).
    #[serde(default)]
    pub shares: Vec<Share>,
    /// When the shares were looked at, nanoseconds since the epoch.
    #[serde(default)]
    pub shares_since_ns: u64,
    /// What the deadline does to the sandbox.
    #[serde(default)]
    pub on_timeout: OnTimeout,
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
    /// When the sandbox was ready (its filesystem built, nothing of its
    /// own run yet), in Unix nanoseconds on the clock of file change
    /// times (`sys::file_clock_now_ns`): what changed in its `/etc` since
    /// is what a snapshot takes of it (`snapshots`). A change in the
    /// clock tick before it is taken too (an `/etc` snapshot of the host
    /// made by this very create, when its last files fall in that tick):
    /// a larger snapshot, never one short of a change.
    #[serde(default)]
    pub ready_ns: u64,
}

impl Meta {
    /// Whether the sandbox is still to be used at `now` (its keeper aside):
    /// before its deadline, paused (no deadline then), or about to be
    /// paused by its keeper rather than destroyed (`on_timeout: pause`).
    pub fn in_service(&self, now: u64) -> bool {
        self.info.expires_at > now
            || self.info.state == SandboxState::Paused
            || self.info.on_timeout.pauses()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_normalised_before_it_is_checked() {
        let base = tempfile::tempdir().unwrap();
        let asked = base.path().join("./missing/a/../b/");
        let asked = PathBuf::from(format!("{}/", asked.display()));
        assert_eq!(trusted_path(&asked).unwrap(), base.path().join("missing/b"));
    }
}
