//! Root's base sandboxes' `/etc`: a snapshot of what others may read of
//! the host's `/etc`, shown as the sandbox's own copy-on-write tree, its
//! host-root files the sandbox root's (idmapped).
//!
//! Why a snapshot and not the host's live tree: the sandbox's root must
//! own its `/etc` to edit it, and whatever owner a live host file shows
//! with inside, the sandbox's root then owns it too, so a host file made
//! private after the sandbox exists (a new 0600 file, a `chmod`) would be
//! readable inside. A snapshot holds only what was public when it was
//! made, and never changes.
//!
//! What is in it is decided by the kernel's own rule, not a list: it is
//! copied by a process that has become the sandbox root's host uid with no
//! group and no capability, an identity that owns nothing of the host's,
//! so every open is decided by the "other" permission bits; what it cannot
//! open or list is not in the snapshot at all. Then host root takes it
//! over (owner 0), and it is renamed into place.
//!
//! Snapshots live in the state directory (`etc-snapshots/FINGERPRINT`),
//! shared by its sandboxes: a create only fingerprints the host's `/etc`
//! (every entry's name and metadata, ctime included, so any change is
//! seen) and builds a snapshot only when none has that fingerprint. The
//! keeper forks the snapshotter before any namespace (it must see the
//! host's `/etc`, through a clone of its mount: exactly the tree, no
//! submounts); it waits for its [`Go`] (the keeper lets it go once it has
//! forked the init) and works while the init builds the rest; the init
//! takes its answer, the snapshot's path, only to mount `/etc` last. A
//! snapshot is removed once a newer one existed before every sandbox of
//! the state directory was created: none of them can be using it.
//!
//! Not copied: timestamps, extended attributes and ACLs, sockets, fifos
//! and devices; host files of other owners are root's in the snapshot.
//! This module walks, copies and answers; it mounts nothing.

use std::ffi::CStr;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::OpenTreeFlags;
use serde::Deserialize;

use super::state::Home;
use super::step::{Step, StepError};
use super::sys;
use sandkeep_provider::SandboxId;

/// The host directory snapshotted.
const HOST_ETC: &str = "/etc";
/// Where a state directory keeps its snapshots.
const STORE: &str = "etc-snapshots";
/// Deeper than any `/etc`: a directory below this depth is left out
/// rather than followed (each level holds two descriptors).
const MAX_DEPTH: usize = 32;
/// A snapshot left half-built (its builder died) is removed after this.
const ABANDONED: Duration = Duration::from_secs(3600);

/// A snapshotter started by the keeper.
pub struct Snapshotter {
    /// The snapshotter, for the keeper to reap.
    pub pid: i32,
    /// Where its answer arrives: handed to the init, see [`collect`].
    pub answer: OwnedFd,
    /// Lets the snapshotter begin.
    pub go: Go,
}

/// The snapshotter's signal to begin: dropped, on whatever path, it lets
/// it walk. Should the keeper die first, the snapshotter sees the end of
/// the pipe once the keeper's other children (which die with it) are gone.
pub struct Go(OwnedFd);

impl Drop for Go {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.0, b"g");
    }
}

/// Why the sandbox's `/etc` snapshot could not be had.
#[derive(Debug, thiserror::Error)]
pub enum EtcSnapshotError {
    #[error(transparent)]
    Step(#[from] StepError),
    /// What the snapshotter or its copier reported: child processes,
    /// whose errors reach their parent as text.
    #[error("{0}")]
    Reported(String),
    /// The snapshotter or the copier ended without an answer.
    #[error("the /etc {0} died before it answered")]
    Died(String),
}

/// Forks the snapshotter of `home`'s sandboxes, which copies (when it
/// must) as host uid and gid `base`, the new sandbox root's. Run by the
/// keeper as root before it enters any namespace.
pub fn start(home: &Home, base: u32) -> Result<Snapshotter, EtcSnapshotError> {
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .step(|| "make a pipe to the /etc snapshotter".into())
    };
    let (answer, write) = pipe()?;
    let (wait, go) = pipe()?;
    match sys::fork().step(|| "fork the /etc snapshotter".into())? {
        sys::Forked::Child => {
            drop(answer);
            drop(go);
            // Nothing of the keeper's: its readiness pipe must close when
            // the keeper is done, whatever this process still does.
            if sys::close_fds_except(&[write.as_raw_fd(), wait.as_raw_fd()]).is_err() {
                sys::exit_now(1);
            }
            // A byte, the end of the pipe or an error: each means go.
            let mut byte = [0u8; 1];
            while rustix::io::read(&wait, &mut byte) == Err(Errno::INTR) {}
            drop(wait);
            let found = snapshot(home, base).map_err(|e| e.to_string());
            let bytes = serde_json::to_vec(&found).unwrap_or_default();
            let written = std::fs::File::from(write).write_all(&bytes);
            // The clone of the mount goes with this process, and that
            // waits for an RCU grace period: after the answer is out.
            sys::exit_now(i32::from(written.is_err()))
        }
        sys::Forked::Parent(pid) => Ok(Snapshotter {
            pid,
            answer,
            go: Go(go),
        }),
    }
}

/// The snapshot to show as the sandbox's `/etc`, read by the init. A
/// snapshotter that failed or died leaves no answer, and the sandbox is
/// not made.
pub fn collect(answer: OwnedFd) -> Result<PathBuf, EtcSnapshotError> {
    let mut bytes = Vec::new();
    std::fs::File::from(answer)
        .read_to_end(&mut bytes)
        .step(|| "read the /etc snapshotter's answer".into())?;
    serde_json::from_slice::<Result<PathBuf, String>>(&bytes)
        .map_err(|_| EtcSnapshotError::Died("snapshotter".into()))?
        .map_err(EtcSnapshotError::Reported)
}

/// The snapshotter's whole job, in the child: the snapshot of the host's
/// `/etc` as it is now, built if there is none.
fn snapshot(home: &Home, base: u32) -> Result<PathBuf, EtcSnapshotError> {
    let store = home.root().join(STORE);
    std::fs::create_dir_all(&store).step(|| format!("create {}", store.display()))?;
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        HOST_ETC,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .step(|| format!("open_tree {HOST_ETC}"))?;
    // DefaultHasher::new() hashes alike in every process of a build; a
    // build whose algorithm differs only makes one snapshot anew.
    let mut hasher = DefaultHasher::new();
    fingerprint(open_dir_of(&tree)?, &mut hasher, 0);
    let name = format!("{:016x}", hasher.finish());
    let snapshot = store.join(&name);
    if !snapshot.is_dir() {
        build(&tree, &store, &snapshot, base)?;
        remove_unused(home, &store, &snapshot);
    }
    point_latest_at(&store, &name);
    Ok(snapshot)
}

/// The snapshot a create may mount before the snapshotter has answered,
/// should the host's `/etc` be unchanged: the one the last create was
/// answered (see [`latest`]).
const LATEST: &str = "latest";

/// Names `name` as the latest snapshot, unless it is so already. Best
/// effort: a create whose guess is off only mounts its `/etc` later.
fn point_latest_at(store: &Path, name: &str) {
    let link = store.join(LATEST);
    if std::fs::read_link(&link).is_ok_and(|t| t.as_os_str() == name) {
        return;
    }
    let new = store.join(format!(".new-{LATEST}-{}", std::process::id()));
    let _ = std::fs::remove_file(&new);
    if std::os::unix::fs::symlink(name, &new).is_ok() && std::fs::rename(&new, &link).is_err() {
        let _ = std::fs::remove_file(&new);
    }
}

/// The latest snapshot of `home` (the state directory's path), a guess
/// for the init to mount early, confirmed or replaced by [`collect`].
pub fn latest(home: &Path) -> Option<PathBuf> {
    let store = home.join(STORE);
    let name = std::fs::read_link(store.join(LATEST)).ok()?;
    // Only a plain name in the store, whatever the link says.
    let name = name
        .file_name()
        .filter(|n| n.as_bytes() == name.as_os_str().as_bytes())?;
    Some(store.join(name))
}

/// A directory descriptor of the clone of `/etc`'s mount (a path
/// descriptor, whose directory is read through a real one).
fn open_dir_of(tree: &OwnedFd) -> Result<OwnedFd, StepError> {
    rustix::fs::openat(
        tree,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .step(|| format!("open {HOST_ETC}"))
}

/// Feeds every entry below `dir` (as root: private ones too) to `hasher`:
/// its name, depth and metadata, so that a change of content, mode, owner
/// or name anywhere gives another fingerprint. Entries are taken in the
/// directory's own order, which changes only with the directory, whose
/// metadata is in the fingerprint already.
fn fingerprint(dir: OwnedFd, hasher: &mut DefaultHasher, depth: usize) {
    let Ok(mut dir) = Dir::new(dir) else { return };
    while let Some(Ok(entry)) = dir.read() {
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(fd) = dir.fd() else { return };
        (depth, name.to_bytes(), entry.ino()).hash(hasher);
        // A symlink is copied by its target alone, and a new target is a
        // new link, which changes its directory: nothing to stat (most
        // of /etc's entries are links).
        if entry.file_type() == FileType::Symlink {
            continue;
        }
        let Ok(st) = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size).hash(hasher);
        (st.st_mtime, st.st_mtime_nsec, st.st_ctime, st.st_ctime_nsec).hash(hasher);
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory && depth < MAX_DEPTH {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(child) = rustix::fs::openat(fd, name, flags, Mode::empty()) {
                fingerprint(child, hasher, depth + 1);
            }
        }
    }
}

/// Builds `snapshot`: copied by a child that has become uid `base`, then
/// given to host root and renamed into place. Another create that built
/// the same snapshot meanwhile wins; this one's copy is dropped.
fn build(tree: &OwnedFd, store: &Path, snapshot: &Path, base: u32) -> Result<(), EtcSnapshotError> {
    let name = snapshot.file_name().unwrap_or_default().to_string_lossy();
    let new = store.join(format!(".new-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&new);
    std::fs::create_dir(&new).step(|| format!("create {}", new.display()))?;
    let result = copy_as(tree, &new, base).and_then(|()| {
        let mode = std::fs::metadata(HOST_ETC).map_or(0o755, |m| m.mode() & 0o7777);
        Ok(take_over(&new, mode)?)
    });
    let result = result.and_then(|()| match std::fs::rename(&new, snapshot) {
        Err(_) if snapshot.is_dir() => Ok(()),
        other => Ok(other.step(|| format!("rename {}", new.display()))?),
    });
    if snapshot.is_dir() {
        let _ = std::fs::remove_dir_all(&new);
    }
    result
}

/// Copies the clone `tree` into the directory `into` in a child that has
/// become uid and gid `base` with no groups and no capability.
fn copy_as(tree: &OwnedFd, into: &Path, base: u32) -> Result<(), EtcSnapshotError> {
    std::os::unix::fs::chown(into, Some(base), Some(base))
        .step(|| format!("chown {}", into.display()))?;
    let dest: OwnedFd = std::fs::File::open(into)
        .step(|| format!("open {}", into.display()))?
        .into();
    let source = open_dir_of(tree)?;
    let (answer, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .step(|| "make a pipe to the /etc copier".into())?;
    match sys::fork().step(|| "fork the /etc copier".into())? {
        sys::Forked::Child => {
            drop(answer);
            let copied = sys::become_id(base, base, true)
                .step(|| format!("become uid {base}"))
                .and_then(|()| {
                    rustix::process::umask(Mode::empty());
                    copy_tree(source, &dest, Path::new(HOST_ETC), 0)
                });
            let failed = copied.err().map(|e| e.to_string()).unwrap_or_default();
            let _ = std::fs::File::from(write).write_all(failed.as_bytes());
            sys::exit_now(0)
        }
        sys::Forked::Parent(pid) => {
            drop(write);
            let mut failed = String::new();
            let _ = std::fs::File::from(answer).read_to_string(&mut failed);
            let status = sys::wait_for(pid).step(|| "wait for the /etc copier".into())?;
            match (status, failed.is_empty()) {
                (0, true) => Ok(()),
                (_, false) => Err(EtcSnapshotError::Reported(failed)),
                (status, true) => Err(EtcSnapshotError::Died(format!("copier (status {status})"))),
            }
        }
    }
}

/// Gives every entry below `dir` to host root (the copier made them its
/// own), and `dir` the mode `mode`.
fn take_over(dir: &Path, mode: u32) -> Result<(), StepError> {
    let chown = |p: &Path| {
        std::os::unix::fs::lchown(p, Some(0), Some(0)).step(|| format!("chown {}", p.display()))
    };
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        chown(&d)?;
        let entries = std::fs::read_dir(&d).step(|| format!("read {}", d.display()))?;
        for entry in entries {
            let entry = entry.step(|| format!("read {}", d.display()))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            } else {
                chown(&entry.path())?;
            }
        }
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .step(|| format!("chmod {}", dir.display()))
}

/// What a sandbox's `spec.json` says of its creation (the rest is not
/// read).
#[derive(Deserialize)]
struct Created {
    created_at: u64,
}

/// Removes the snapshots that no sandbox of `home` can be using: those
/// older than a snapshot that existed before every sandbox there was
/// created (each fingerprinted `/etc` after its creation began, and found
/// that one or a newer one). Half-built ones are removed once abandoned.
/// Best effort: whatever it cannot read or remove stays.
fn remove_unused(home: &Home, store: &Path, current: &Path) {
    let Ok(sandboxes) = std::fs::read_dir(home.sandboxes()) else {
        return;
    };
    let mut oldest = u64::MAX;
    for entry in sandboxes.flatten() {
        let Ok(id) = SandboxId::parse(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        // A sandbox whose creation time cannot be read keeps every snapshot.
        let created = super::state::read_json::<Created>(&home.sandbox(&id).spec())
            .map_or(0, |c| c.created_at);
        oldest = oldest.min(created);
    }
    let Ok(entries) = std::fs::read_dir(store) else {
        return;
    };
    let mut snapshots: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(md) = entry.metadata() else { continue };
        let path = entry.path();
        if entry.file_name().as_bytes() == LATEST.as_bytes() {
            continue;
        }
        if entry.file_name().as_bytes().starts_with(b".new-") {
            let age = md
                .modified()
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            if age.is_some_and(|a| a > ABANDONED) {
                let _ = std::fs::remove_dir_all(&path);
            }
            continue;
        }
        snapshots.push((u64::try_from(md.mtime()).unwrap_or(0), path));
    }
    // The newest snapshot made before the oldest sandbox was created: any
    // older one serves nobody.
    let Some(floor) = snapshots
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| *t < oldest)
        .max()
    else {
        return;
    };
    for (made, path) in snapshots {
        if made < floor && path != current {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Copies what this process may read of the directory `source` (`at`,
/// for messages) into the directory `dest`. An entry it may not open or
/// list is left out; an error writing the copy (a full disk) fails the
/// whole copy.
pub fn copy_tree(
    source: OwnedFd,
    dest: &OwnedFd,
    at: &Path,
    depth: usize,
) -> Result<(), StepError> {
    let mut dir = Dir::new(source).step(|| format!("read {}", at.display()))?;
    while let Some(entry) = dir.read() {
        // A directory that fails midway is copied as far as it was read.
        let Ok(entry) = entry else { break };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(from) = dir.fd() else { break };
        // Removed meanwhile, or not for others to see: not in the copy.
        let Ok(st) = rustix::fs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let mode = Mode::from_raw_mode(st.st_mode & 0o1777);
        let path = at.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let step = || format!("copy {}", path.display());
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => copy_symlink(from, name, dest).step(step)?,
            FileType::RegularFile => copy_file(from, name, dest, mode).step(step)?,
            FileType::Directory if depth < MAX_DEPTH => {
                let Some((source, target)) = open_dir(from, name, dest).step(step)? else {
                    continue;
                };
                copy_tree(source, &target, &path, depth + 1)?;
                // Filled while it was the owner's to write; now the host's mode.
                rustix::fs::fchmod(&target, mode).step(step)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn copy_symlink(from: BorrowedFd<'_>, name: &CStr, dest: &OwnedFd) -> Result<(), Errno> {
    match rustix::fs::readlinkat(from, name, Vec::new()) {
        Ok(target) => rustix::fs::symlinkat(target.as_c_str(), dest, name),
        Err(_) => Ok(()),
    }
}

fn copy_file(from: BorrowedFd<'_>, name: &CStr, dest: &OwnedFd, mode: Mode) -> Result<(), Errno> {
    // The open is the permission check. O_NONBLOCK: a file swapped for a
    // fifo since the stat must not hang the copy.
    let Ok(source) = rustix::fs::openat(
        from,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Ok(());
    };
    let Ok(st) = rustix::fs::fstat(&source) else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(());
    }
    let target = rustix::fs::openat(
        dest,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        mode,
    )?;
    // In the kernel, from page cache to page cache: one call for most
    // files of /etc.
    let mut left = u64::try_from(st.st_size).unwrap_or(0);
    while left > 0 {
        let chunk = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::sendfile(&target, &source, None, chunk)? {
            0 => break,
            n => left = left.saturating_sub(n as u64),
        }
    }
    Ok(())
}

/// Opens the directory `name` to copy and makes its copy in `dest`, empty
/// and writable by its owner; `None` when others may not list it (then it
/// is not in the copy at all).
fn open_dir(
    from: BorrowedFd<'_>,
    name: &CStr,
    dest: &OwnedFd,
) -> Result<Option<(OwnedFd, OwnedFd)>, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(source) = rustix::fs::openat(from, name, flags, Mode::empty()) else {
        return Ok(None);
    };
    rustix::fs::mkdirat(dest, name, Mode::RWXU)?;
    let target = rustix::fs::openat(dest, name, flags, Mode::empty())?;
    Ok(Some((source, target)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn open(p: &Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    /// Copies what is readable and keeps each mode; leaves out what this
    /// process may not open. As root every file is readable, so the
    /// private half of this test needs an ordinary user, which the
    /// end-to-end tests (local_hostfiles) cover; here the copy's shape.
    #[test]
    fn copies_files_links_and_directories_with_their_modes() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let root = from.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(root.join("a/b/deep"), vec![7u8; 300_000]).unwrap();
        std::fs::set_permissions(root.join("a/b/deep"), PermissionsExt::from_mode(0o444)).unwrap();
        std::fs::set_permissions(root.join("a"), PermissionsExt::from_mode(0o555)).unwrap();
        std::os::unix::fs::symlink("../hosts", root.join("link")).unwrap();
        copy_tree(open(root), &open(to.path()), Path::new("/etc"), 0).unwrap();
        let out = to.path();
        assert_eq!(
            std::fs::read_to_string(out.join("hosts")).unwrap(),
            "127.0.0.1 localhost\n"
        );
        assert_eq!(
            std::fs::read(out.join("a/b/deep")).unwrap(),
            vec![7u8; 300_000]
        );
        assert_eq!(
            std::fs::read_link(out.join("link")).unwrap(),
            Path::new("../hosts")
        );
        let mode = |p: &str| std::fs::symlink_metadata(out.join(p)).unwrap().mode() & 0o7777;
        assert_eq!((mode("a"), mode("a/b/deep")), (0o555, 0o444));
        std::fs::set_permissions(root.join("a"), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::set_permissions(out.join("a"), PermissionsExt::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_snapshotter_that_answers_nothing_makes_no_sandbox() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(w);
        let e = collect(r).unwrap_err();
        assert!(matches!(e, EtcSnapshotError::Died(_)), "{e:?}");
        assert!(e.to_string().contains("died"), "{e}");
    }
}
