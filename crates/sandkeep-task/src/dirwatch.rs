//! `watch-dir`: E2B's directory watch (envd's `WatchDir`), on inotify in
//! the sandbox, as the user who asked (the kernel decides what they may
//! watch). Changes are reported as envd's fsnotify reports them: one line
//! per operation, named relative to the watched directory, with the
//! directories below it watched too when `recursive` (new ones as they
//! appear).
//!
//! One difference is hidden: the endpoint's `/files` stages an upload in a
//! temporary file ([`UPLOAD_STAGING_PREFIX`]) renamed over its target once
//! whole, where envd writes the target in place. The staging file's own
//! changes are not reported; its rename onto the target is, as what envd's
//! write of that target shows: create (for a new file), chmod (envd's
//! chown), write.
//!
//! Nothing spins: one `poll` on the inotify descriptor and stdin. A line
//! on stdin asks for [`DirWatchLine::Synced`]: inotify queues an event in
//! the very call that makes the change, so draining the queue before
//! answering reports every change made before the request; the endpoint
//! asks after its own changes and before answering a poll. The end of
//! stdin (the endpoint dropped the watch) ends the process.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use sandkeep_proto::wire::{
    DirWatchLine, DirWatchRequest, FsOp, UPLOAD_STAGING_NEW_PREFIX, UPLOAD_STAGING_PREFIX,
};

use crate::error::{HelperError, IoContext};

/// What is watched on each directory.
fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    recursive: bool,
    /// Each watch's directory, relative to the root (`""` for the root).
    dirs: HashMap<i32, PathBuf>,
    /// The rename cookies of staged uploads moved away from their staging
    /// name: whether the upload makes a new file.
    staged: HashMap<u32, bool>,
    /// What the last drain's scans of new directories reported as created.
    /// A path made after its directory's watch was in place and before
    /// the scan listed it is also queued by inotify, for the next drain:
    /// that create is not reported twice.
    scanned: HashSet<PathBuf>,
}

/// Runs the watch until stdin ends; the exit code.
pub fn run(request: DirWatchRequest) -> i32 {
    let mut out = std::io::stdout().lock();
    let mut watch = match Watch::begin(&request) {
        Ok(w) => w,
        Err(e) => return crate::reply::<()>(Err(e)),
    };
    let started = DirWatchLine::Started {
        path: watch.root.to_string_lossy().into_owned(),
    };
    if emit(&mut out, &started).is_err() {
        return 0;
    }
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut fds = [
            PollFd::new(&watch.fd, PollFlags::IN),
            PollFd::new(&stdin, PollFlags::IN),
        ];
        // EINTR: look again.
        if rustix::event::poll(&mut fds, None).is_err() {
            continue;
        }
        let (changed, asked) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if changed && watch.drain(&mut out).is_err() {
            return 0;
        }
        if asked {
            let mut buf = [0u8; 256];
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return 0,
                Ok(n) => n,
            };
            for _ in buf[..n].iter().filter(|&&b| b == b'\n') {
                if watch.drain(&mut out).is_err() || emit(&mut out, &DirWatchLine::Synced).is_err()
                {
                    return 0;
                }
            }
        }
    }
}

fn emit(out: &mut impl Write, line: &DirWatchLine) -> std::io::Result<()> {
    let mut json = serde_json::to_vec(line).expect("watch lines always encode");
    json.push(b'\n');
    out.write_all(&json)?;
    out.flush()
}

impl Watch {
    fn begin(request: &DirWatchRequest) -> Result<Self, HelperError> {
        let cwd = std::env::current_dir().context(|| "reading the working directory".into())?;
        let root = cwd.join(&request.path);
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .context(|| "creating an inotify instance".into())?;
        let mut watch = Self {
            fd,
            root,
            recursive: request.recursive,
            dirs: HashMap::new(),
            staged: HashMap::new(),
            scanned: HashSet::new(),
        };
        watch
            .add(PathBuf::new(), None)
            .context(|| format!("watching {}", watch.root.display()))?;
        Ok(watch)
    }

    /// Watches the directory `rel` (below the root) and, when recursive,
    /// every directory under it; with `found`, what is already in them is
    /// added there.
    fn add(&mut self, rel: PathBuf, mut found: Option<&mut Vec<PathBuf>>) -> std::io::Result<()> {
        let wd = inotify::add_watch(&self.fd, self.root.join(&rel), mask())?;
        self.dirs.insert(wd, rel.clone());
        if !self.recursive {
            return Ok(());
        }
        let mut entries: Vec<_> = std::fs::read_dir(self.root.join(&rel))?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let child = rel.join(entry.file_name());
            if let Some(found) = found.as_deref_mut() {
                found.push(child.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                // A directory gone meanwhile, or one that may not be
                // read: watched as far as it can be, as fsnotify does.
                let _ = self.add(child, found.as_deref_mut());
            }
        }
        Ok(())
    }

    /// Reports every queued change.
    fn drain(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        let mut buf = [MaybeUninit::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        let mut changes = Vec::new();
        while let Ok(event) = reader.next() {
            changes.push((
                event.wd(),
                event.events(),
                event.cookie(),
                event
                    .file_name()
                    .map(|n| OsStr::from_bytes(n.to_bytes()).to_owned()),
            ));
        }
        let mut scanned = std::mem::take(&mut self.scanned);
        for (wd, flags, cookie, name) in changes {
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&wd);
                continue;
            }
            // An event of a watched directory itself (no name) is reported
            // by its parent's watch, or is the root's own.
            let (Some(dir), Some(name)) = (self.dirs.get(&wd), name) else {
                continue;
            };
            let rel = dir.join(&name);
            let mut ops = self.ops(flags, cookie, &name);
            if ops.contains(&FsOp::Create) && scanned.remove(&rel) {
                ops.retain(|op| *op != FsOp::Create);
            }
            if flags.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM) {
                // Its inotify create, if any, came before: a later one is new.
                scanned.remove(&rel);
            }
            for op in ops {
                let line = DirWatchLine::Event {
                    name: rel.to_string_lossy().into_owned(),
                    op,
                };
                emit(out, &line)?;
            }
            let new_dir = flags.contains(ReadFlags::ISDIR)
                && flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
            if self.recursive && new_dir {
                // What was made in it before its watch was in place (`mkdir
                // -p a/b`, a tree moved in) is reported as created, once
                // (`scanned`). Gone again already: nothing to watch.
                let mut found = Vec::new();
                let _ = self.add(rel, Some(&mut found));
                for name in found {
                    self.scanned.insert(name.clone());
                    let line = DirWatchLine::Event {
                        name: name.to_string_lossy().into_owned(),
                        op: FsOp::Create,
                    };
                    emit(out, &line)?;
                }
            }
        }
        Ok(())
    }

    /// envd's operations for one inotify event, in fsnotify's order.
    fn ops(&mut self, flags: ReadFlags, cookie: u32, name: &OsStr) -> Vec<FsOp> {
        let bytes = name.as_bytes();
        if bytes.starts_with(UPLOAD_STAGING_PREFIX.as_bytes()) {
            if flags.contains(ReadFlags::MOVED_FROM) {
                let new = bytes.starts_with(UPLOAD_STAGING_NEW_PREFIX.as_bytes());
                self.staged.insert(cookie, new);
            }
            return Vec::new();
        }
        if flags.contains(ReadFlags::MOVED_TO)
            && let Some(new) = self.staged.remove(&cookie)
        {
            return if new {
                vec![FsOp::Create, FsOp::Chmod, FsOp::Write]
            } else {
                vec![FsOp::Chmod, FsOp::Write]
            };
        }
        [
            (ReadFlags::CREATE | ReadFlags::MOVED_TO, FsOp::Create),
            (ReadFlags::MOVED_FROM, FsOp::Rename),
            (ReadFlags::ATTRIB, FsOp::Chmod),
            (ReadFlags::MODIFY, FsOp::Write),
            (ReadFlags::DELETE, FsOp::Remove),
        ]
        .into_iter()
        .filter(|(bits, _)| flags.intersects(*bits))
        .map(|(_, op)| op)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn watch(dir: &Path, recursive: bool) -> Watch {
        Watch::begin(&DirWatchRequest {
            path: dir.to_string_lossy().into_owned(),
            recursive,
        })
        .unwrap()
    }

    fn lines(w: &mut Watch) -> Vec<(String, FsOp)> {
        let mut out = Vec::new();
        w.drain(&mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| match serde_json::from_str(l).unwrap() {
                DirWatchLine::Event { name, op } => (name, op),
                other => panic!("not an event: {other:?}"),
            })
            .collect()
    }

    fn ev(name: &str, op: FsOp) -> (String, FsOp) {
        (name.to_owned(), op)
    }

    #[test]
    fn changes_are_reported_as_fsnotify_reports_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = watch(dir.path(), false);
        std::fs::write(dir.path().join("a"), "x").unwrap();
        std::fs::rename(dir.path().join("a"), dir.path().join("b")).unwrap();
        std::fs::remove_file(dir.path().join("b")).unwrap();
        assert_eq!(
            lines(&mut w),
            [
                ev("a", FsOp::Create),
                ev("a", FsOp::Write),
                ev("a", FsOp::Rename),
                ev("b", FsOp::Create),
                ev("b", FsOp::Remove),
            ]
        );
    }

    #[test]
    fn a_staged_upload_is_the_write_of_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = watch(dir.path(), false);
        let staged = |prefix: &str| dir.path().join(format!("{prefix}0123"));
        std::fs::write(staged(UPLOAD_STAGING_NEW_PREFIX), "new").unwrap();
        std::fs::rename(staged(UPLOAD_STAGING_NEW_PREFIX), dir.path().join("f")).unwrap();
        std::fs::write(staged(UPLOAD_STAGING_PREFIX), "again").unwrap();
        std::fs::rename(staged(UPLOAD_STAGING_PREFIX), dir.path().join("f")).unwrap();
        assert_eq!(
            lines(&mut w),
            [
                ev("f", FsOp::Create),
                ev("f", FsOp::Chmod),
                ev("f", FsOp::Write),
                ev("f", FsOp::Chmod),
                ev("f", FsOp::Write),
            ]
        );
    }

    #[test]
    fn recursive_watches_reach_new_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("old")).unwrap();
        let mut w = watch(dir.path(), true);
        std::fs::write(dir.path().join("old/f"), "").unwrap();
        std::fs::create_dir(dir.path().join("new")).unwrap();
        assert_eq!(
            lines(&mut w),
            [ev("old/f", FsOp::Create), ev("new", FsOp::Create)]
        );
        std::fs::write(dir.path().join("new/g"), "").unwrap();
        assert_eq!(lines(&mut w), [ev("new/g", FsOp::Create)]);
        // Made before the watch of its directory was in place.
        std::fs::create_dir_all(dir.path().join("p/q/r")).unwrap();
        assert_eq!(
            lines(&mut w),
            [
                ev("p", FsOp::Create),
                ev("p/q", FsOp::Create),
                ev("p/q/r", FsOp::Create)
            ]
        );
        let mut flat = watch(dir.path(), false);
        std::fs::write(dir.path().join("new/h"), "").unwrap();
        assert_eq!(lines(&mut flat), []);
    }

    #[test]
    fn a_path_a_scan_reported_is_not_reported_again_by_its_inotify_create() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = watch(dir.path(), true);
        std::fs::create_dir(dir.path().join("a")).unwrap();
        assert_eq!(lines(&mut w), [ev("a", FsOp::Create)]);
        // As if a scan of `a` had listed `b` just after inotify queued its
        // create (the race of `mkdir -p a/b` against the new watch).
        w.scanned.insert(PathBuf::from("a/b"));
        std::fs::create_dir(dir.path().join("a/b")).unwrap();
        assert_eq!(lines(&mut w), []);
        // Made again: a change of its own.
        std::fs::remove_dir(dir.path().join("a/b")).unwrap();
        std::fs::create_dir(dir.path().join("a/b")).unwrap();
        assert_eq!(
            lines(&mut w),
            [ev("a/b", FsOp::Remove), ev("a/b", FsOp::Create)]
        );
        // A scanned path removed before its create came: the next create
        // is reported.
        w.scanned.insert(PathBuf::from("a/c"));
        std::fs::create_dir(dir.path().join("a/c")).unwrap();
        std::fs::remove_dir(dir.path().join("a/c")).unwrap();
        std::fs::create_dir(dir.path().join("a/c")).unwrap();
        assert_eq!(
            lines(&mut w),
            [ev("a/c", FsOp::Remove), ev("a/c", FsOp::Create)]
        );
    }
}
