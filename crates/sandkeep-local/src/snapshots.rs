//! Snapshots of a sandbox's files (SPEC §17), under
//! `SANDKEEP_HOME/snapshots/<id>/`: `files.tar` and `snapshot.json`.
//!
//! The archive is made **inside** the sandbox, by `tar` run as the sandbox
//! user through its fork server, and restored inside the new sandbox the
//! same way. The archive comes out of the sandbox through a pipe that
//! this process splices into the file, never reading a byte of it, let
//! alone parsing a file the sandbox wrote (SPEC §10), and bounded by
//! twice the sandbox's disk (the file's own descriptor in the sandbox
//! could grow it on the host without bound); to restore, the new
//! sandbox's `tar` gets the file, read-only, as its stdin. It holds the places a sandbox
//! can write to: `/etc` (what changed), `/root`, `/tmp`, `/var/tmp` and
//! every directory of its own at the top (`/home`, `/app`, …), each within
//! its own file system (`--one-file-system`), so neither shares nor masks
//! are in it. Processes are not (no CRIU). A snapshot is written aside
//! (`.tmp-…`) and renamed into place complete; deletion renames it aside
//! first. `snapshot.json` is the host's own record.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use sandkeep_provider::{Program, ProviderError, Result, SandboxId, SnapshotInfo};

use crate::state::{self, Home};
use crate::{LocalProvider, blocking, io_err};

/// The archive's name in a snapshot directory.
const ARCHIVE: &str = "files.tar";
/// The record's name in a snapshot directory.
const RECORD: &str = "snapshot.json";
/// The archive pipe's size.
const ARCHIVE_PIPE_BYTES: usize = 1 << 20;
/// Most of tar's complaints kept for an error message.
const STDERR_KEPT: u64 = 16 * 1024;

/// Archives the sandbox's writable places to stdout (see the module doc),
/// run with `$since` set before it: when the sandbox was ready, in Unix
/// seconds (to the nanosecond).
/// Top-level entries left out: the host's own directories (read-only or
/// copy-on-write views of the host), the kernel's, sandkeep's helper and
/// `/run`; every mount point below the archived ones (masks, shares) is
/// left out with what it holds. `/etc` is a copy-on-write view of the
/// host's that every sandbox starts from: only what changed in it since
/// then (a newer change time: written, copied up, chmodded) is taken,
/// listed by `find` (within its file system, mount points pruned), as an
/// archive of its own ahead of the rest's (restored with
/// `--ignore-zeros`). Not `tar --newer`: that still takes every
/// directory, and GNU tar rewrites the mode, owner and times of every
/// directory it extracts, even with `--no-overwrite-dir` (1.34): in the
/// new sandbox that copied all of `/etc`'s directories up, most of a
/// create from a snapshot. Records of 128 KiB, not tar's 10 KiB: half
/// the time of a large archive, in a twelfth of the writes, for at most
/// 128 KiB of padding. tar's exit 1 ("changed as we read it") is a
/// running sandbox's lot and is accepted.
const TAKE: &str = r#"cd / || exit 2
set -- root tmp var/tmp
for e in * .[!.]*; do
  case "$e" in
    .sandkeep|bin|sbin|lib|lib32|lib64|libx32|usr|opt|srv|var|proc|sys|dev|run|etc|root|tmp) ;;
    *) [ -d "$e" ] && [ ! -L "$e" ] && set -- "$@" "$e" ;;
  esac
done
skip=$(while read -r _ _ _ _ m _; do
  case "$m" in /|/etc|/root|/tmp|/var/tmp) ;; *) echo "${m#/}" ;; esac
done </proc/self/mountinfo)
tar_out() {
  tar --create --file=- --blocking-factor=256 --numeric-owner --ignore-failed-read "$@"
}
ok() { [ "$1" -le 1 ] || exit "$1"; }
etc_changed() {
  set -f
  set --
  for m in $skip; do
    case "$m" in etc/*) set -- "$@" -path "$m" -prune -o ;; esac
  done
  set +f
  find etc -xdev "$@" -newerct "@$since" -print0
}
etc_changed | tar_out --no-recursion --null --files-from=-
ok $?
{ [ -z "$skip" ] || printf '%s\n' "$skip"; } | tar_out --one-file-system --exclude-from=- "$@"
ok $?"#;

/// Restores an archive of [`TAKE`] from stdin over `/` (no shell: one
/// process start less in every create from a snapshot).
/// Directories that exist keep their own metadata (`--no-overwrite-dir`):
/// the new sandbox's masks and mount points are read-only.
const RESTORE: &[&str] = &[
    "tar",
    "--extract",
    "--file=-",
    "--ignore-zeros",
    "--numeric-owner",
    "--preserve-permissions",
    "--no-overwrite-dir",
    "-C",
    "/",
];

/// The directory of every snapshot.
fn root(home: &Home) -> PathBuf {
    home.root().join("snapshots")
}

/// What `snapshot.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    sandbox_id: SandboxId,
    size_bytes: u64,
    created_at: u64,
}

/// The ids of the complete snapshots.
pub fn ids(home: &Home) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(root(home))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| sandkeep_provider::snapshot_id_ok(n))
        .collect();
    ids.sort();
    ids
}

/// The archive of snapshot `id`, if it exists.
pub fn archive(home: &Home, id: &str) -> Option<PathBuf> {
    if !sandkeep_provider::snapshot_id_ok(id) {
        return None;
    }
    let path = root(home).join(id).join(ARCHIVE);
    path.is_file().then_some(path)
}

/// Every snapshot's record, oldest first.
pub fn list(home: &Home) -> Vec<SnapshotInfo> {
    let mut all: Vec<SnapshotInfo> = ids(home)
        .into_iter()
        .filter_map(|id| {
            let r: Record = state::read_json(&root(home).join(&id).join(RECORD)).ok()?;
            Some(SnapshotInfo {
                snapshot_id: id,
                sandbox_id: r.sandbox_id,
                size_bytes: r.size_bytes,
                created_at: r.created_at,
            })
        })
        .collect();
    all.sort_by(|a, b| (a.created_at, &a.snapshot_id).cmp(&(b.created_at, &b.snapshot_id)));
    all
}

/// Deletes snapshot `id`: renamed aside, then removed.
pub fn delete(home: &Home, id: &str) -> Result<bool> {
    if !sandkeep_provider::snapshot_id_ok(id) {
        return Ok(false);
    }
    let dir = root(home).join(id);
    let aside = root(home).join(format!(".del-{id}-{}", suffix()?));
    match std::fs::rename(&dir, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(format!("delete snapshot {id}"))(e)),
    }
    state::remove_tree(&aside).map_err(io_err(format!("remove {}", aside.display())))?;
    Ok(true)
}

fn suffix() -> Result<String> {
    sandkeep_provider::random_hex(6).map_err(|e| {
        ProviderError::Unavailable(format!(
            "the OS random number generator failed ({e}); retry"
        ))
    })
}

/// Takes snapshot `name` of sandbox `id` (see the module doc).
pub async fn take(p: &LocalProvider, id: &SandboxId, name: String) -> Result<SnapshotInfo> {
    if !sandkeep_provider::snapshot_id_ok(&name) {
        return Err(ProviderError::Internal(format!(
            "snapshot id {name:?} reached the provider unchecked"
        )));
    }
    let home = p.home();
    if p.templates().contains(&name) {
        return Err(ProviderError::SnapshotExists(name));
    }
    let tmp = root(home).join(format!(".tmp-{}", suffix()?));
    let (snapshots, made) = (root(home), tmp.clone());
    blocking(move || {
        std::fs::create_dir_all(&snapshots)?;
        std::fs::DirBuilder::new().mode(0o700).create(&made)
    })
    .await?
    .map_err(io_err(format!("create {}", tmp.display())))?;
    let outcome = archive_into(p, id, &tmp.join(ARCHIVE)).await;
    let finished = match outcome {
        Ok(size_bytes) => {
            let record = Record {
                sandbox_id: id.clone(),
                size_bytes,
                created_at: sandkeep_provider::unix_now(),
            };
            let (tmp2, dest) = (tmp.clone(), root(home).join(&name));
            let name2 = name.clone();
            blocking(move || {
                state::write_json(&tmp2.join(RECORD), &record)
                    .map_err(io_err("write snapshot.json"))?;
                // A directory renamed onto another that exists (and is
                // not empty) fails: two snapshots of one name cannot both
                // appear.
                std::fs::rename(&tmp2, &dest).map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOTEMPTY | libc::EEXIST) => ProviderError::SnapshotExists(name2),
                    _ => io_err(format!("move the snapshot to {}", dest.display()))(e),
                })?;
                Ok(SnapshotInfo {
                    snapshot_id: dest
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    sandbox_id: record.sandbox_id,
                    size_bytes: record.size_bytes,
                    created_at: record.created_at,
                })
            })
            .await?
        }
        Err(e) => Err(e),
    };
    if finished.is_err() {
        let _ = blocking(move || state::remove_tree(&tmp)).await;
    }
    finished
}

/// Runs [`TAKE`] in the sandbox with a pipe as its stdout, which this
/// process moves into `file`, made now (see [`drain`]); the bytes written.
async fn archive_into(p: &LocalProvider, id: &SandboxId, file: &Path) -> Result<u64> {
    let meta = p.live(id).await?;
    // `find -newerct` is strict, and a change within the clock tick of
    // the ready moment has that tick's time.
    let ready = meta.ready_ns.saturating_sub(1);
    let since = format!("{}.{:09}", ready / 1_000_000_000, ready % 1_000_000_000);
    let cap = archive_cap(meta.info.limits.disk_mib);
    let out = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .await
        .map_err(io_err(format!("create {}", file.display())))?
        .into_std()
        .await;
    let (from, into) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_err("make the archive's pipe")(e.into()))?;
    // Room for several of tar's 128 KiB records: fewer hand-offs between
    // the tar and the splice. The default (64 KiB) where refused.
    let _ = rustix::pipe::fcntl_setpipe_size(&from, ARCHIVE_PIPE_BYTES);
    let spawned = p.spawn_onto(
        id,
        Program::Shell(format!("since={since}\n{TAKE}")),
        null().await?,
        into,
    )?;
    let exited = Arc::new(AtomicBool::new(false));
    let drained = tokio::task::spawn_blocking({
        let exited = exited.clone();
        move || drain(&from, &out, cap, &exited)
    });
    let done = tar_done(spawned, "archiving the sandbox's files").await;
    exited.store(true, Ordering::SeqCst);
    let size = drained
        .await
        .map_err(|e| ProviderError::Internal(format!("the archive's writer failed: {e}")))?
        .map_err(io_err(format!("write {}", file.display())))?;
    done?;
    Ok(size)
}

/// The most an archive may hold: what a sandbox can write lives on its
/// disk of `disk_mib`, and tar adds a 512-byte header per file (many empty
/// files are many headers on no disk space) and a record of padding.
fn archive_cap(disk_mib: Option<u64>) -> u64 {
    let disk = disk_mib.unwrap_or(sandkeep_proto::limits::DISK_MIB_DEFAULT) << 20;
    2 * disk + (1 << 20)
}

/// Moves the archive from `pipe` into `file` with `splice` (no byte
/// through this process's memory) until the sandbox's `tar` has exited
/// (`exited`) and the pipe is empty; the bytes moved, or an error past
/// `cap`. The end is the `tar`'s exit, not the pipe's: another sandbox
/// process may have taken the write end (through `/proc/PID/fd`) and
/// keep it open, and whatever it writes counts against `cap`. The host
/// file itself is never the sandbox's to write: an open descriptor of it
/// in the sandbox could grow it on the host's disk without bound.
fn drain(pipe: &OwnedFd, file: &std::fs::File, cap: u64, exited: &AtomicBool) -> io::Result<u64> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    use rustix::pipe::SpliceFlags;
    let mut moved = 0u64;
    // Set once the exit was seen; the pipe is then drained of what the
    // tar wrote before it, and the next empty read ends the copy.
    let mut finished = false;
    loop {
        match rustix::pipe::splice(pipe, None, file, None, 1 << 20, SpliceFlags::NONBLOCK) {
            Ok(0) => return Ok(moved),
            Ok(n) => {
                moved += n as u64;
                if moved > cap {
                    return Err(io::Error::other(format!(
                        "the archive outgrew {} MiB, twice the sandbox's disk",
                        cap >> 20
                    )));
                }
            }
            Err(rustix::io::Errno::AGAIN) if finished => return Ok(moved),
            Err(rustix::io::Errno::AGAIN) => {
                finished = exited.load(Ordering::SeqCst);
                if !finished {
                    let mut fds = [PollFd::new(pipe, PollFlags::IN)];
                    let tick = Timespec {
                        tv_sec: 0,
                        tv_nsec: 20_000_000,
                    };
                    match rustix::event::poll(&mut fds, Some(&tick)) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Restores snapshot archive `file` into the new sandbox `id`: its `tar`
/// reads the file as its stdin.
pub async fn restore(p: &LocalProvider, id: &SandboxId, file: &Path) -> Result<()> {
    let input = tokio::fs::File::open(file)
        .await
        .map_err(io_err(format!("open {}", file.display())))?
        .into_std()
        .await;
    let restore = Program::Argv {
        argv: RESTORE.iter().map(|&a| a.to_owned()).collect(),
        env: Vec::new(),
    };
    let spawned = p.spawn_onto(id, restore, input.into(), null().await?)?;
    tar_done(spawned, "restoring the snapshot's files").await
}

async fn null() -> Result<OwnedFd> {
    let null = tokio::fs::File::open("/dev/null")
        .await
        .map_err(io_err("open /dev/null"))?;
    Ok(null.into_std().await.into())
}

/// Waits for a `tar` of [`TAKE`] or [`RESTORE`]: an error with what it
/// said when it failed.
async fn tar_done(spawned: sandkeep_provider::Spawned, what: &str) -> Result<()> {
    let mut stderr = String::new();
    // Read while it runs: tar blocks on a full stderr pipe otherwise.
    let _ = spawned
        .stderr
        .take(STDERR_KEPT)
        .read_to_string(&mut stderr)
        .await;
    let status = spawned.process.wait().await?;
    if !status.success() {
        return Err(ProviderError::Unavailable(format!(
            "{what} failed (tar: {status:?}): {}",
            stderr.trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (OwnedFd, std::fs::File) {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        (r, w.into())
    }

    /// A write end kept open past the tar's exit (another sandbox process
    /// holding it) neither holds the copy open nor loses what came before.
    #[test]
    fn the_copy_ends_with_the_tar_not_with_the_pipe() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("a.tar")).unwrap();
        let (from, mut kept) = pipe();
        kept.write_all(&[7u8; 4096]).unwrap();
        let exited = Arc::new(AtomicBool::new(false));
        let copy = std::thread::spawn({
            let exited = exited.clone();
            move || drain(&from, &file, 1 << 20, &exited)
        });
        exited.store(true, Ordering::SeqCst);
        let moved = copy.join().unwrap().unwrap();
        assert_eq!(moved, 4096);
        assert_eq!(
            std::fs::read(dir.path().join("a.tar")).unwrap(),
            [7u8; 4096]
        );
        // What the holder writes afterwards goes nowhere near the file.
        let _ = kept.write_all(b"later");
        assert_eq!(
            std::fs::metadata(dir.path().join("a.tar")).unwrap().len(),
            4096
        );
    }

    #[test]
    fn an_archive_past_its_cap_fails() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("a.tar")).unwrap();
        let (from, mut writer) = pipe();
        let exited = AtomicBool::new(false);
        let feeder = std::thread::spawn(move || {
            let chunk = [0u8; 65536];
            while writer.write_all(&chunk).is_ok() {}
        });
        let e = drain(&from, &file, 1 << 20, &exited).unwrap_err();
        assert!(e.to_string().contains("outgrew"), "{e}");
        drop(from);
        feeder.join().unwrap();
    }

    #[test]
    fn the_cap_is_twice_the_disk_and_a_record() {
        assert_eq!(archive_cap(Some(64)), (128 << 20) + (1 << 20));
        assert_eq!(
            archive_cap(None),
            2 * (sandkeep_proto::limits::DISK_MIB_DEFAULT << 20) + (1 << 20)
        );
    }
}
