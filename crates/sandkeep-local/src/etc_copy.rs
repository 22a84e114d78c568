//! A root-mode sandbox's own `/etc` (the `base` template): a copy, made at
//! create, of what others may read of the host's `/etc`, owned by the
//! sandbox's root and as writable for it as any file of its own.
//!
//! Why a copy and not the host's live tree: the sandbox's root must own
//! its `/etc` to edit it, and whatever owner a live host file shows with
//! inside, the sandbox's root then owns it too. A host file that becomes
//! private after the sandbox exists (a new 0600 file, a `chmod`) would be
//! readable inside. A copy holds only what was public when it was made.
//!
//! The copy is made by the kernel's own rule, not a list: a copier process
//! that the keeper forks before any namespace (it must see the host's
//! `/etc`) clones the mount of `/etc` while still root (exactly the tree,
//! no submounts), then becomes the sandbox root's host uid with no groups:
//! an identity that owns nothing of the host's, so every open is decided
//! by the "other" permission bits. What it cannot open or list is not in
//! the copy at all. It writes into the directory the init hands it
//! (`SCM_RIGHTS` on a packet socket) on the sandbox's disk, so its files
//! are the sandbox root's by birth and count against `disk_mib`. The
//! copier waits for its [`Go`] (the keeper lets it go once it has forked
//! the init) and copies while the init builds the rest; the init waits
//! for its answer only before it pivots.
//!
//! Not copied: timestamps, extended attributes and ACLs, sockets, fifos
//! and devices. Host files of other owners are the sandbox root's in the
//! copy. The copy's pages (≈2 MB on a Debian host) are charged to the
//! creator's memory cgroup, not to the sandbox's `memory_mib`: the copier
//! is forked before the sandbox's cgroups exist. This module copies and
//! answers; it mounts nothing.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::OpenTreeFlags;

use super::{sys, wire};

/// The host directory copied.
const HOST_ETC: &str = "/etc";
/// Deeper than any `/etc`: a directory below this depth is left out
/// rather than followed (each level holds two descriptors).
const MAX_DEPTH: usize = 32;

/// A copier started by the keeper.
pub struct Copier {
    /// The copier, for the keeper to reap.
    pub pid: i32,
    /// The init's end of the conversation: see [`hand_over`] and [`finish`].
    pub channel: OwnedFd,
    /// Lets the copier begin.
    pub go: Go,
}

/// The copier's signal to begin: dropped, on whatever path, it lets the
/// copier clone `/etc`. Should the keeper die first, the copier sees the
/// end of the pipe once the keeper's other children (which die with it)
/// are gone.
pub struct Go(OwnedFd);

impl Drop for Go {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.0, b"g");
    }
}

/// Forks the copier, which will copy as host uid and gid `base` (the
/// sandbox root's). Run by the keeper as root before it enters any
/// namespace.
pub fn start(base: u32) -> Result<Copier, String> {
    let (channel, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("socketpair: {e}"))?;
    let (wait, go) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    match sys::fork().map_err(|e| format!("fork the /etc copier: {e}"))? {
        sys::Forked::Child => {
            drop(channel);
            drop(go);
            // Nothing of the keeper's: its readiness pipe must close when
            // the keeper is done, whatever this process still does.
            if sys::close_fds_except(&[theirs.as_raw_fd(), wait.as_raw_fd()]).is_err() {
                sys::exit_now(1);
            }
            // A byte, the end of the pipe or an error: each means go.
            let mut byte = [0u8; 1];
            while rustix::io::read(&wait, &mut byte) == Err(Errno::INTR) {}
            drop(wait);
            let answer = copier(&theirs, base);
            let bytes = serde_json::to_vec(&answer).unwrap_or_default();
            let sent = wire::send(&theirs, &bytes, &[]);
            // The clone of the mount goes with this process, and that
            // waits for an RCU grace period: after the answer is out.
            sys::exit_now(i32::from(sent.is_err()))
        }
        sys::Forked::Parent(pid) => Ok(Copier {
            pid,
            channel,
            go: Go(go),
        }),
    }
}

/// The init's part, first: hands the copier the directory to fill (the
/// sandbox's `/etc`, empty, writable by the sandbox's root).
pub fn hand_over(channel: &OwnedFd, dest: BorrowedFd<'_>) -> Result<(), String> {
    wire::send(channel, b"", &[dest]).map_err(|e| format!("hand /etc to its copier: {e}"))
}

/// The init's part, last: waits for the copier's answer. A copier that
/// failed or died leaves no answer, and the sandbox is not made.
pub fn finish(channel: OwnedFd) -> Result<(), String> {
    let mut buf = vec![0u8; 64 * 1024];
    let (n, _) = wire::recv(&channel, &mut buf).map_err(|e| format!("read the /etc copy: {e}"))?;
    serde_json::from_slice::<Result<(), String>>(&buf[..n])
        .map_err(|_| "the /etc copier died before it answered".to_owned())?
}

/// The copier's whole job, in the child.
fn copier(channel: &OwnedFd, base: u32) -> Result<(), String> {
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        HOST_ETC,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| format!("open_tree {HOST_ETC}: {e}"))?;
    // From here on this process is nobody the host knows: no capability,
    // no group, a uid that owns nothing of the host's.
    sys::become_id(base, base, true).map_err(|e| format!("become uid {base}: {e}"))?;
    rustix::process::umask(Mode::empty());
    let source = rustix::fs::openat(
        &tree,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {HOST_ETC}: {e}"))?;
    let mut byte = [0u8; 1];
    let (_, mut fds) =
        wire::recv(channel, &mut byte).map_err(|e| format!("receive /etc's place: {e}"))?;
    let dest = fds.pop().ok_or("the init handed no directory for /etc")?;
    copy_tree(source, &dest, Path::new(HOST_ETC), 0)
}

/// Copies what this process may read of the directory `source` (`at`,
/// for messages) into the directory `dest`. An entry it may not open or
/// list is left out; an error writing the copy (a full disk) fails the
/// whole copy.
pub fn copy_tree(source: OwnedFd, dest: &OwnedFd, at: &Path, depth: usize) -> Result<(), String> {
    let mut dir = Dir::new(source).map_err(|e| format!("read {}: {e}", at.display()))?;
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
        let failed = |e: Errno| format!("copy {}: {e}", path.display());
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => copy_symlink(from, name, dest).map_err(failed)?,
            FileType::RegularFile => copy_file(from, name, dest, mode).map_err(failed)?,
            FileType::Directory if depth < MAX_DEPTH => {
                let Some((source, target)) = open_dir(from, name, dest).map_err(failed)? else {
                    continue;
                };
                copy_tree(source, &target, &path, depth + 1)?;
                // Filled while it was the owner's to write; now the host's mode.
                rustix::fs::fchmod(&target, mode).map_err(failed)?;
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
    fn a_copier_that_answers_nothing_makes_no_sandbox() {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        drop(theirs);
        assert!(finish(ours).unwrap_err().contains("died"));
    }
}
