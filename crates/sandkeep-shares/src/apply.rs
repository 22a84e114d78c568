//! Writes a sandbox's changes into host share directories, from the
//! helper's export stream (`sandkeep-task export`).
//!
//! Every path is resolved beneath its share's directory, component by
//! component, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: no
//! symlink of the host's or the sandbox's is ever followed, so nothing is
//! written outside the share whatever either side planted. Files and
//! symlinks are made under a temporary name beside their place and renamed
//! over it (atomic per path); modes lose setuid and setgid; when this
//! process is root, what it makes is owned by the share directory's owner.
//! A host path that changed after the sandbox was made (its ctime is
//! later than `since`) is a conflict, left alone, and so is everything
//! below it.

use std::io::{self, BufRead, Read};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{
    AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, Stat, fchmod, fchown, fstat, mkdirat,
    openat2, renameat, statat, symlinkat, unlinkat,
};
use rustix::io::Errno;
use rustix::process::{Gid, Uid};
use sandkeep_proto::shares::{
    Applied, ChangeKind, Conflict, EntryType, ExportHeader, Share, ShareMode, is_under,
};

/// The export stream broke or a share directory cannot be opened: nothing
/// after the failure was applied (what came before stays applied).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the sandbox's change stream broke: {0}")]
    Stream(String),
    #[error("{path}: {source}")]
    Host {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Applies the export stream `reader` to `shares` (their cow ones).
/// `since_ns`: when the sandbox was made, nanoseconds since the epoch.
pub async fn apply(
    shares: Vec<Share>,
    since_ns: u64,
    reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> Result<Applied, ApplyError> {
    tokio::task::spawn_blocking(move || {
        let reader = io::BufReader::new(tokio_util::io::SyncIoBridge::new(reader));
        apply_blocking(&shares, since_ns, reader)
    })
    .await
    .map_err(|e| ApplyError::Stream(format!("the applying thread failed: {e}")))?
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

fn apply_blocking(
    shares: &[Share],
    since_ns: u64,
    mut reader: impl BufRead,
) -> Result<Applied, ApplyError> {
    let mut roots = Vec::new();
    for share in shares.iter().filter(|s| s.mode == ShareMode::Cow) {
        roots.push(Root::open(share)?);
    }
    let mut done = Applied::default();
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| ApplyError::Stream(e.to_string()))?;
        if n == 0 {
            return Ok(done);
        }
        let header: ExportHeader = serde_json::from_str(&line)
            .map_err(|e| ApplyError::Stream(format!("malformed entry: {e}")))?;
        let mut content = (&mut reader).take(match header.change.entry {
            EntryType::File if header.change.kind != ChangeKind::Deleted => header.change.size,
            _ => 0,
        });
        let path = header.change.path.clone();
        let outcome = match roots.iter().find(|r| is_under(&path, &r.path)) {
            None => Err(format!("{path} is in no cow share of this sandbox")),
            Some(_) if done.conflicts.iter().any(|c| is_under(&path, &c.path)) => {
                Err("a directory above it conflicts".to_owned())
            }
            Some(root) => root.apply(&header, &mut content, since_ns),
        };
        // Whatever happened, the file's bytes are consumed: the stream goes on.
        io::copy(&mut content, &mut io::sink()).map_err(|e| ApplyError::Stream(e.to_string()))?;
        if content.limit() != 0 {
            return Err(ApplyError::Stream(format!("{path}: content cut short")));
        }
        match outcome {
            Ok(()) => done.applied.push(path),
            Err(reason) => done.conflicts.push(Conflict { path, reason }),
        }
    }
}

/// A share directory, opened once.
struct Root {
    path: String,
    fd: OwnedFd,
    /// Who owns what is made: the directory's owner, when this process
    /// can give files away (root).
    owner: Option<(Uid, Gid)>,
}

impl Root {
    fn open(share: &Share) -> Result<Self, ApplyError> {
        let host = |source: io::Error| ApplyError::Host {
            path: share.path.clone(),
            source,
        };
        let fd = openat2(
            CWD,
            &share.path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| host(e.into()))?;
        let st = fstat(&fd).map_err(|e| host(e.into()))?;
        let owner = rustix::process::geteuid()
            .is_root()
            .then(|| (Uid::from_raw(st.st_uid), Gid::from_raw(st.st_gid)));
        Ok(Self {
            path: share.path.trim_end_matches('/').to_owned(),
            fd,
            owner,
        })
    }

    /// Applies one entry; `Err` is the conflict's reason.
    fn apply(
        &self,
        header: &ExportHeader,
        content: &mut impl Read,
        since_ns: u64,
    ) -> Result<(), String> {
        let rel = header.change.path[self.path.len()..].trim_start_matches('/');
        let mut parts: Vec<&str> = rel.split('/').collect();
        if rel.is_empty() || parts.iter().any(|p| matches!(*p, "" | "." | "..")) {
            return Err("not a path below the share directory".into());
        }
        let name = parts.pop().expect("non-empty");
        let kind = header.change.kind;
        let parent = self.parent(&parts, kind != ChangeKind::Deleted)?;
        let host = match statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(format!("cannot inspect it on the host: {e}")),
        };
        match (kind, &host) {
            (ChangeKind::Added, Some(_)) => {
                return Err("it was created on the host after the sandbox was".into());
            }
            (ChangeKind::Modified | ChangeKind::Deleted, None) => {
                return Err("it was removed on the host after the sandbox was created".into());
            }
            (_, Some(st)) if ctime_ns(st) > since_ns => {
                return Err("it changed on the host after the sandbox was created".into());
            }
            _ => {}
        }
        let is_dir = host
            .as_ref()
            .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        // Setuid and setgid never reach the host.
        let mode = Mode::from_raw_mode(header.mode & 0o1777);
        fn failed(what: &'static str) -> impl Fn(Errno) -> String {
            move |e| format!("{what}: {e}")
        }
        match (kind, header.change.entry) {
            (ChangeKind::Deleted, _) if is_dir => {
                remove_tree(&parent, name).map_err(failed("remove the directory"))
            }
            (ChangeKind::Deleted, _) => {
                unlinkat(&parent, name, AtFlags::empty()).map_err(failed("remove"))
            }
            (_, EntryType::Dir) if is_dir => {
                let dir = open_dir(&parent, name).map_err(failed("open the directory"))?;
                fchmod(&dir, mode).map_err(failed("chmod"))
            }
            (_, EntryType::Dir) => {
                if host.is_some() {
                    unlinkat(&parent, name, AtFlags::empty()).map_err(failed("replace"))?;
                }
                mkdirat(&parent, name, mode).map_err(failed("mkdir"))?;
                let dir = open_dir(&parent, name).map_err(failed("open the directory"))?;
                // mkdir's mode passed through the umask.
                fchmod(&dir, mode).map_err(failed("chmod"))?;
                self.give(&dir).map_err(failed("chown"))
            }
            (_, EntryType::File) => {
                let tmp = TempName::new();
                let file = rustix::fs::openat(
                    &parent,
                    tmp.as_str(),
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(failed("create a temporary file"))?;
                let written = io::copy(
                    content,
                    &mut std::fs::File::from(file.try_clone().map_err(|e| format!("{e}"))?),
                )
                .map_err(|e| format!("write: {e}"))
                .and_then(|_| fchmod(&file, mode).map_err(failed("chmod")))
                .and_then(|()| self.give(&file).map_err(failed("chown")));
                self.replace(&parent, tmp, name, is_dir, written)
            }
            (_, EntryType::Symlink) => {
                let target = header
                    .target
                    .as_deref()
                    .ok_or("a symlink without its target")?;
                let tmp = TempName::new();
                symlinkat(target, &parent, tmp.as_str()).map_err(failed("make the symlink"))?;
                let owned = match self.owner {
                    Some((uid, gid)) => rustix::fs::chownat(
                        &parent,
                        tmp.as_str(),
                        Some(uid),
                        Some(gid),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(failed("chown")),
                    None => Ok(()),
                };
                self.replace(&parent, tmp, name, is_dir, owned)
            }
            (_, EntryType::Other) => {
                Err("special files (devices, fifos, sockets) are never applied".into())
            }
        }
    }

    /// Renames the prepared `tmp` over `name` (a directory there is
    /// removed first), or removes `tmp` when its preparation failed.
    fn replace(
        &self,
        parent: &OwnedFd,
        tmp: TempName,
        name: &str,
        is_dir: bool,
        prepared: Result<(), String>,
    ) -> Result<(), String> {
        let renamed = prepared.and_then(|()| {
            if is_dir {
                remove_tree(parent, name).map_err(|e| format!("remove the directory: {e}"))?;
            }
            renameat(parent, tmp.as_str(), parent, name).map_err(|e| format!("rename: {e}"))
        });
        if renamed.is_err() {
            let _ = unlinkat(parent, tmp.as_str(), AtFlags::empty());
        }
        renamed
    }

    /// The directory of `parts` below the share, each level opened without
    /// following anything; missing levels made when `create`.
    fn parent(&self, parts: &[&str], create: bool) -> Result<OwnedFd, String> {
        let mut dir = self.fd.try_clone().map_err(|e| e.to_string())?;
        for part in parts {
            dir = match open_dir(&dir, part) {
                Ok(next) => next,
                Err(Errno::NOENT) if create => {
                    mkdirat(&dir, *part, Mode::from_raw_mode(0o755))
                        .map_err(|e| format!("mkdir {part}: {e}"))?;
                    let next = open_dir(&dir, part).map_err(|e| format!("open {part}: {e}"))?;
                    self.give(&next).map_err(|e| format!("chown {part}: {e}"))?;
                    next
                }
                Err(Errno::NOENT) => {
                    return Err("a directory above it was removed on the host".into());
                }
                Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => {
                    return Err(format!(
                        "{part} above it is not a directory on the host (a symlink is never followed)"
                    ));
                }
                Err(e) => return Err(format!("open {part}: {e}")),
            };
        }
        Ok(dir)
    }

    fn give(&self, fd: &OwnedFd) -> Result<(), Errno> {
        match self.owner {
            Some((uid, gid)) => fchown(fd, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }
}

fn open_dir(parent: impl AsFd, name: &str) -> Result<OwnedFd, Errno> {
    openat2(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        RESOLVE,
    )
}

fn ctime_ns(st: &Stat) -> u64 {
    (st.st_ctime as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_ctime_nsec)
}

/// Removes the directory `name` of `parent` with everything in it,
/// following no symlink.
fn remove_tree(parent: impl AsFd, name: &str) -> Result<(), Errno> {
    let dir = open_dir(&parent, name)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let n = entry.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push((n, entry.file_type()));
        }
    }
    for (n, t) in names {
        if t == FileType::Directory {
            remove_tree(dir.as_fd(), &n)?;
        } else {
            unlinkat(&dir, n.as_str(), AtFlags::empty())?;
        }
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR)
}

/// A name for a file being prepared beside its place.
struct TempName(String);

impl TempName {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self(format!(
            ".sandkeep-apply.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandkeep_proto::shares::Change;

    fn entry(path: &str, kind: ChangeKind, entry: EntryType, body: &[u8], mode: u32) -> Vec<u8> {
        let header = ExportHeader {
            change: Change {
                path: path.into(),
                kind,
                entry,
                size: body.len() as u64,
            },
            mode,
            target: (entry == EntryType::Symlink).then(|| String::from_utf8_lossy(body).into()),
        };
        let mut out = serde_json::to_vec(&header).unwrap();
        out.push(b'\n');
        if entry == EntryType::File {
            out.extend_from_slice(body);
        }
        out
    }

    #[test]
    fn changes_land_beneath_the_share_and_never_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let share = tmp.path().join("share");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(share.join("gone/deep")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(share.join("keep"), "old").unwrap();
        std::fs::write(share.join("gone/deep/x"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, share.join("link")).unwrap();
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            + 1_000_000_000;
        let s = share.to_str().unwrap();
        let mut stream = Vec::new();
        for part in [
            entry(
                &format!("{s}/gone"),
                ChangeKind::Deleted,
                EntryType::Dir,
                b"",
                0,
            ),
            entry(
                &format!("{s}/keep"),
                ChangeKind::Modified,
                EntryType::File,
                b"new",
                0o4755,
            ),
            entry(
                &format!("{s}/link/evil"),
                ChangeKind::Added,
                EntryType::File,
                b"no",
                0o644,
            ),
            entry(
                &format!("{s}/new/dir/f"),
                ChangeKind::Added,
                EntryType::File,
                b"f",
                0o600,
            ),
            entry(
                &format!("{s}/new/../../escape"),
                ChangeKind::Added,
                EntryType::File,
                b"",
                0o644,
            ),
            entry(
                &format!("{s}/ln"),
                ChangeKind::Added,
                EntryType::Symlink,
                b"/etc/passwd",
                0o777,
            ),
        ] {
            stream.extend(part);
        }
        let shares = vec![Share {
            path: s.into(),
            mode: ShareMode::Cow,
        }];
        let done = apply_blocking(&shares, since, io::Cursor::new(stream)).unwrap();
        assert_eq!(
            done.applied,
            [
                format!("{s}/gone"),
                format!("{s}/keep"),
                format!("{s}/new/dir/f"),
                format!("{s}/ln")
            ]
        );
        let conflicts: Vec<&str> = done.conflicts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            conflicts,
            [format!("{s}/link/evil"), format!("{s}/new/../../escape")]
        );
        assert!(!share.join("gone").exists());
        assert_eq!(std::fs::read_to_string(share.join("keep")).unwrap(), "new");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(share.join("keep"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "setuid dropped");
        assert_eq!(
            std::fs::read_to_string(share.join("new/dir/f")).unwrap(),
            "f"
        );
        assert_eq!(
            std::fs::read_link(share.join("ln")).unwrap(),
            std::path::Path::new("/etc/passwd")
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert!(!tmp.path().join("escape").exists());
    }

    #[test]
    fn a_host_change_after_the_sandbox_is_a_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        let s = tmp.path().to_str().unwrap();
        std::fs::write(tmp.path().join("f"), "host").unwrap();
        let mut stream = entry(
            &format!("{s}/f"),
            ChangeKind::Modified,
            EntryType::File,
            b"sb",
            0o644,
        );
        stream.extend(entry(
            &format!("{s}/g"),
            ChangeKind::Modified,
            EntryType::File,
            b"sb",
            0o644,
        ));
        let shares = vec![Share {
            path: s.into(),
            mode: ShareMode::Cow,
        }];
        // Made "before" the file was last changed.
        let done = apply_blocking(&shares, 0, io::Cursor::new(stream)).unwrap();
        assert!(done.applied.is_empty());
        assert_eq!(done.conflicts.len(), 2);
        assert!(
            done.conflicts[0].reason.contains("changed on the host"),
            "{:?}",
            done.conflicts
        );
        assert!(
            done.conflicts[1].reason.contains("removed on the host"),
            "{:?}",
            done.conflicts
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("f")).unwrap(),
            "host"
        );
    }
}
