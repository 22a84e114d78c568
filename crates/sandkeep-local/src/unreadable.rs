//! Finding what others cannot read under a host directory that a sandbox
//! sees idmapped (`/etc` of the `base` template): there host root is the
//! sandbox's root, so owner permissions would let sandbox users in, and
//! the rootfs masks each entry found here instead.
//!
//! The walk is found afresh for every sandbox (a host change is never
//! missed) but off the create's critical path: the keeper forks a walker
//! process before any namespace is entered, which walks a detached clone
//! of the directory's mount (exactly the tree the sandbox's lower layer
//! is: no submounts) while the init builds the sandbox, and writes the
//! list into a pipe that the init reads only when it masks. The walker
//! waits for its [`Go`] before it clones and walks: the keeper lets it go
//! once it has forked the init, and waits itself from then on. Walking
//! while the keeper was still forking and unsharing made a create about a
//! millisecond slower on two cores (docs/benchmarks.md). The clone is
//! released only when the walker exits, after it has answered: releasing
//! it unmounts it, which waits for an RCU grace period.
//! This module walks and reports; it mounts nothing.

use std::ffi::CStr;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::mount::OpenTreeFlags;
use serde::{Deserialize, Serialize};

use super::sys;

/// An entry that others cannot read, relative to the sandbox's `/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unreadable {
    /// A file (or fifo, socket, device) without the "other" read bit.
    File(PathBuf),
    /// A directory others cannot list or enter; its content is not walked.
    Dir(PathBuf),
}

/// A walk under way in a child of the keeper.
pub struct Walk {
    /// The walker, for the keeper to reap.
    pub pid: i32,
    /// Where its answer arrives: handed to the init, which reads it.
    pub answer: OwnedFd,
    /// Lets the walker begin.
    pub go: Go,
}

/// The walker's signal to begin: dropped, on whatever path, it lets the
/// walker walk. Should the keeper die first, the walker sees the end of
/// the pipe once the keeper's other children (which die with it) are gone.
pub struct Go(OwnedFd);

impl Drop for Go {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.0, b"g");
    }
}

/// Forks a walker for `host` (a directory the sandbox sees at `rel`). Run
/// by the keeper as root before it enters any namespace: the walker's
/// clone of the mount is the host's.
pub fn start(host: &'static Path, rel: &'static Path) -> Result<Walk, String> {
    let (answer, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let (wait, go) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    match sys::fork().map_err(|e| format!("fork the /etc walker: {e}"))? {
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
            while rustix::io::read(&wait, &mut byte) == Err(rustix::io::Errno::INTR) {}
            drop(wait);
            // The clone of the mount goes when its last descriptor
            // closes, and that waits for an RCU grace period: at this
            // process's exit, after the answer is out.
            let tree = clone_mount(host);
            let found = tree
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|t| walk(t, host, rel));
            let bytes = serde_json::to_vec(&found).unwrap_or_default();
            let written = std::fs::File::from(write).write_all(&bytes);
            sys::exit_now(i32::from(written.is_err()))
        }
        sys::Forked::Parent(pid) => Ok(Walk {
            pid,
            answer,
            go: Go(go),
        }),
    }
}

/// The walker's list, read by the init. A walker that failed or died
/// leaves no valid list, and the sandbox is not made.
pub fn collect(answer: OwnedFd) -> Result<Vec<Unreadable>, String> {
    let mut bytes = Vec::new();
    std::fs::File::from(answer)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("read the /etc walk: {e}"))?;
    serde_json::from_slice::<Result<Vec<Unreadable>, String>>(&bytes)
        .map_err(|_| "the /etc walker died before it answered".to_owned())?
}

/// A detached clone of `host`'s mount: no submounts, as the sandbox sees
/// it.
fn clone_mount(host: &Path) -> Result<OwnedFd, String> {
    rustix::mount::open_tree(
        rustix::fs::CWD,
        host,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| format!("open_tree {}: {e}", host.display()))
}

/// Walks `tree`, the clone of `host`'s mount.
fn walk(tree: &OwnedFd, host: &Path, rel: &Path) -> Result<Vec<Unreadable>, String> {
    // The clone is a path descriptor; its directory is read through a
    // real one.
    let dir = rustix::fs::openat(
        tree,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {}: {e}", host.display()))?;
    Ok(scan(dir, rel))
}

/// Names, relative to `rel`, every entry below the directory `tree` that
/// the "other" permission bits keep from others. A directory that cannot
/// be walked is named whole, so an error hides too much rather than too
/// little.
pub fn scan(tree: OwnedFd, rel: &Path) -> Vec<Unreadable> {
    let mut found = Vec::new();
    let mut pending = vec![(tree, rel.to_path_buf())];
    while let Some((fd, inside)) = pending.pop() {
        let Ok(mut dir) = Dir::new(fd) else {
            found.push(Unreadable::Dir(inside));
            continue;
        };
        while let Some(entry) = dir.read() {
            let Ok(entry) = entry else {
                found.push(Unreadable::Dir(inside.clone()));
                break;
            };
            let name = entry.file_name();
            if name == c"." || name == c".." || entry.file_type() == FileType::Symlink {
                continue;
            }
            let Ok(fd) = dir.fd() else { break };
            // A file removed meanwhile is gone inside too.
            let Ok(st) = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let path = inside.join(os_str(name));
            let mode = st.st_mode;
            match FileType::from_raw_mode(mode) {
                FileType::Symlink => {}
                FileType::Directory if mode & 0o005 == 0o005 => {
                    match rustix::fs::openat(
                        fd,
                        name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    ) {
                        Ok(child) => pending.push((child, path)),
                        Err(_) => found.push(Unreadable::Dir(path)),
                    }
                }
                FileType::Directory => found.push(Unreadable::Dir(path)),
                _ if mode & 0o004 == 0 => found.push(Unreadable::File(path)),
                _ => {}
            }
        }
    }
    found
}

fn os_str(name: &CStr) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(name.to_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn open(p: &Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    #[test]
    fn names_what_others_cannot_read_and_walks_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        std::fs::create_dir_all(root.join("open/deeper")).unwrap();
        std::fs::create_dir(root.join("closed")).unwrap();
        std::fs::write(root.join("closed/inner"), "x").unwrap();
        for (name, m) in [
            ("public", 0o644),
            ("secret", 0o600),
            ("group", 0o640),
            ("open/deeper/key", 0o400),
            ("open/deeper/ok", 0o444),
        ] {
            std::fs::write(root.join(name), "x").unwrap();
            mode(&root.join(name), m);
        }
        mode(&root.join("closed"), 0o700);
        std::os::unix::fs::symlink("secret", root.join("link")).unwrap();
        let mut found = scan(open(root), Path::new("etc"));
        found.sort_by_key(|u| format!("{u:?}"));
        assert_eq!(
            found,
            vec![
                Unreadable::Dir("etc/closed".into()),
                Unreadable::File("etc/group".into()),
                Unreadable::File("etc/open/deeper/key".into()),
                Unreadable::File("etc/secret".into()),
            ]
        );
    }

    #[test]
    fn a_walker_that_answers_nothing_makes_no_list() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(w);
        assert!(collect(r).unwrap_err().contains("died"));
        let (r, w) = rustix::pipe::pipe().unwrap();
        let answer: Result<Vec<Unreadable>, String> = Ok(vec![Unreadable::File("etc/a".into())]);
        std::fs::File::from(w)
            .write_all(&serde_json::to_vec(&answer).unwrap())
            .unwrap();
        assert_eq!(collect(r).unwrap(), vec![Unreadable::File("etc/a".into())]);
    }
}
