//! Whether a sandbox directory holds a live sandbox, and the cleanup that
//! goes with the answer: the per-sandbox lock, presence by the keeper's
//! recorded identity, removal of what a dead keeper left, and asking a live
//! keeper to destroy its sandbox. It signals processes only through pidfds
//! checked against their recorded identity; it must never enter a sandbox
//! nor read anything inside it.

use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::io_err;
use crate::state::{self, Lock, Meta, SandboxDir};
use sandkeep_provider::{ProviderError, Result};

/// How long kill waits for a keeper to finish destroying.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// A sandbox directory without a record older than this is a crashed
/// creation.
const CREATING_GRACE_SECS: u64 = 120;

/// Takes a sandbox's lock; `None` only when its directory is really absent.
/// Any other failure is an error: reading it as "gone" would silently skip
/// a destruction or a retain.
pub fn lock_sandbox(dir: &SandboxDir) -> Result<Option<Lock>> {
    match Lock::acquire(&dir.lock()) {
        Ok(lock) => Ok(Some(lock)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(&dir.path)
                    .is_err_and(|d| d.kind() == std::io::ErrorKind::NotFound) =>
        {
            Ok(None)
        }
        Err(e) => Err(io_err(format!("take the lock {}", dir.lock().display()))(e)),
    }
}

/// What a sandbox directory holds, as far as the provider can tell.
pub enum Presence {
    Live(Box<Meta>),
    /// Being created, or being destroyed after its deadline.
    Transient,
    /// Its record exists but cannot be read (permissions, a directory in
    /// its place): not known to be gone, so never treated as gone.
    Unreadable(std::io::Error),
    Gone,
}

/// Nothing is read from, nor signalled for, a record another user could
/// have planted: the sandbox directory and its `meta.json` (when there is
/// one) must be this user's and private.
pub fn trusted_record(dir: &SandboxDir) -> std::io::Result<()> {
    state::check_trusted(&dir.path)?;
    match state::check_trusted(&dir.meta()) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Decides whether a sandbox directory is a live sandbox; removes it when
/// its keeper is dead (crash, reboot) so it is never reported.
pub fn inspect(dir: &SandboxDir) -> Presence {
    match trusted_record(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Presence::Gone,
        Err(e) => return Presence::Unreadable(e),
        Ok(()) => {}
    }
    match state::read_json::<Meta>(&dir.meta()) {
        Ok(meta) if meta.keeper.is_alive() => {
            if meta.in_service(sandkeep_provider::unix_now()) {
                Presence::Live(Box::new(meta))
            } else {
                Presence::Transient
            }
        }
        Ok(meta) => {
            clean_stale(dir, Some(&meta));
            Presence::Gone
        }
        // No record yet (being created), or an unreadable one: only age
        // tells a crashed creation from one in progress.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData
            ) =>
        {
            if !dir.path.exists() {
                return Presence::Gone;
            }
            // The directory's own mtime: a half-removed directory may
            // have lost its spec.json already.
            let age = std::fs::metadata(&dir.path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .map_or(0, |d| d.as_secs());
            if age > CREATING_GRACE_SECS {
                clean_stale(dir, None);
                Presence::Gone
            } else {
                Presence::Transient
            }
        }
        Err(e) => Presence::Unreadable(e),
    }
}

/// Removes what a dead keeper left (its files and cgroups); kills its init
/// first should it have outlived the keeper.
pub fn clean_stale(dir: &SandboxDir, meta: Option<&Meta>) {
    if let Some(meta) = meta
        && meta.init.is_alive()
        && let Some(pid) = Pid::from_raw(meta.init.pid as i32)
        && let Ok(fd) = rustix::process::pidfd_open(pid, PidfdFlags::empty())
        && meta.init.is_alive()
    {
        let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
        // A paused sandbox's processes die only once thawed (cgroup v1).
        crate::pause::thaw_recorded(&dir.path);
        wait_exit(&fd, KILL_TIMEOUT);
    }
    crate::pause::thaw_recorded(&dir.path);
    crate::cgroup::remove_recorded(&dir.path);
    let _ = state::remove_tree(&dir.path);
    crate::slots::release_slot(&dir.path, None);
}

/// Polls a pidfd until the process exits or `timeout` passes.
fn wait_exit(fd: &impl rustix::fd::AsFd, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) if !left.is_zero() => {}
            Err(_) => return false,
        }
    }
}

/// How much of a destruction [`terminate`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Every process of the sandbox is dead. Its cgroups and files follow
    /// (the keeper removes them; should it die first, whoever next finds
    /// them stale does). For a session end, whose caller has nothing to
    /// look at afterwards.
    ProcessesGone,
    /// The keeper has finished: cgroups and files are gone too. For
    /// kill_sandbox, whose caller may look right after.
    Removed,
}

/// Asks a keeper to destroy its sandbox and waits for `until`.
pub fn terminate(dir: &SandboxDir, meta: &Meta, until: Until) -> Result<()> {
    let Some(pid) = Pid::from_raw(meta.keeper.pid as i32) else {
        return Ok(());
    };
    let fd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(_) => {
            clean_stale(dir, Some(meta));
            return Ok(());
        }
    };
    // Checked after opening the pidfd: the fd now pins this very process.
    if !meta.keeper.is_alive() {
        clean_stale(dir, Some(meta));
        return Ok(());
    }
    // The init of a pid namespace exits only after the kernel has killed
    // and reaped every other process in it, setsid and double forks
    // included: its exit is the death of the whole sandbox. (Without
    // namespaces only the keeper's end says so.)
    let init = match until {
        Until::ProcessesGone if !meta.process_only => pin(&meta.init),
        _ => None,
    };
    let _ = rustix::process::pidfd_send_signal(&fd, Signal::TERM);
    match &init {
        Some(Pinned::Alive(init)) if wait_exit(init, KILL_TIMEOUT) => return Ok(()),
        Some(Pinned::Gone) => return Ok(()),
        _ => {}
    }
    if wait_exit(&fd, KILL_TIMEOUT) {
        // A keeper killed meanwhile (SIGKILL, OOM) leaves its files behind.
        if dir.path.exists() {
            clean_stale(dir, Some(meta));
        }
    } else {
        let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
        clean_stale(dir, Some(meta));
        return Err(ProviderError::Keeper(format!(
            "the keeper of {} did not finish within {}s; it was killed and its files removed",
            meta.info.sandbox_id,
            KILL_TIMEOUT.as_secs()
        )));
    }
    Ok(())
}

/// A recorded process, pinned by a pidfd while it is still the very one
/// recorded.
enum Pinned {
    Alive(rustix::fd::OwnedFd),
    Gone,
}

fn pin(process: &sandkeep_proto::record::ProcessIdentity) -> Option<Pinned> {
    let pid = Pid::from_raw(process.pid as i32)?;
    let Ok(fd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) else {
        return Some(Pinned::Gone);
    };
    // After opening: the fd pins whatever holds the pid now.
    Some(if process.is_alive() {
        Pinned::Alive(fd)
    } else {
        Pinned::Gone
    })
}
