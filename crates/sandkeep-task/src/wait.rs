//! The `wait` verb (SPEC.md §4 wait_task): a long-poll on one task.
//!
//! It answers as soon as the task is settled (terminal or `unknown`),
//! either log has saved bytes past the caller's offset, or the timeout
//! passes. Nothing spins: it sleeps in one `poll` on
//!
//! - an inotify watch on the task directory (the supervisor renames a new
//!   record into place and appends to the logs there),
//! - a pidfd of the supervisor (a supervisor killed without recording its
//!   ending changes no file, yet makes the task `unknown`),
//! - its own stdout: when the caller goes away (the host dropped the call)
//!   the pipe reports an error or hang-up and the waiter exits at once, so
//!   an abandoned wait leaves no process behind.
//!
//! Where inotify or pidfds are unavailable it falls back to looking again
//! every [`RECHECK_NO_INOTIFY`] / [`RECHECK_NO_PIDFD`].

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify;
use rustix::process::{Pid, PidfdFlags};
use sandkeep_proto::wire::{WaitReply, WaitRequest};

use crate::error::{HelperError, IoContext};
use crate::status::{observe, open_checked, status_of};
use crate::taskdir::{STDERR_LOG, STDOUT_LOG, TaskDir};

/// Without inotify a change is only seen by looking: often enough to stay
/// within the 50 ms the contract promises.
const RECHECK_NO_INOTIFY: Duration = Duration::from_millis(25);

/// Without a pidfd a lost supervisor is only noticed by looking; losing one
/// is rare, so a slow look suffices.
const RECHECK_NO_PIDFD: Duration = Duration::from_secs(1);

pub fn wait(req: WaitRequest) -> Result<WaitReply, HelperError> {
    req.validate()?;
    let status_req = req.status_request();
    let dir = open_checked(&status_req)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(req.timeout);
    // Watch before the first look, so a change right after it still wakes us.
    let watch = watch_dir(&dir);
    let mut supervisor: Option<OwnedFd> = None;
    let mut pidfd_failed = false;
    loop {
        let observation = observe(&dir)?;
        let context = |name: &str| format!("reading the size of {name} of task {}", req.task_id);
        let ready = observation.state.is_settled()
            || dir.log_len(STDOUT_LOG).context(|| context(STDOUT_LOG))? > req.stdout_offset
            || dir.log_len(STDERR_LOG).context(|| context(STDERR_LOG))? > req.stderr_offset;
        let now = Instant::now();
        if ready || now >= deadline {
            let status = status_of(&dir, &status_req)?;
            let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            return Ok(WaitReply { status, waited_ms });
        }
        if supervisor.is_none()
            && !pidfd_failed
            && let Some(record) = &observation.record
        {
            match Pid::from_raw(record.supervisor.pid as i32)
                .map(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()))
            {
                // Opened after a look that found it alive: the pidfd is of
                // that very process. Look once more before sleeping, in
                // case it died between that look and the open.
                Some(Ok(fd)) => {
                    supervisor = Some(fd);
                    continue;
                }
                _ => pidfd_failed = true,
            }
        }
        let mut wait = deadline - now;
        if watch.is_none() {
            wait = wait.min(RECHECK_NO_INOTIFY);
        }
        if supervisor.is_none() {
            wait = wait.min(RECHECK_NO_PIDFD);
        }
        if sleep(watch.as_ref(), supervisor.as_ref(), wait) == Wake::CallerGone {
            return Err(HelperError::Internal(
                "the caller stopped reading before the task changed; nothing was done".into(),
            ));
        }
    }
}

/// An inotify descriptor that becomes readable when anything in the task
/// directory changes; `None` if inotify is unavailable.
fn watch_dir(dir: &TaskDir) -> Option<OwnedFd> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    let events = inotify::WatchFlags::MODIFY
        | inotify::WatchFlags::MOVED_TO
        | inotify::WatchFlags::CREATE
        | inotify::WatchFlags::DELETE_SELF
        | inotify::WatchFlags::ONLYDIR;
    inotify::add_watch(&fd, dir.path(), events).ok()?;
    Some(fd)
}

#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// Something may have changed, or the wait is over: look again.
    Look,
    /// Our stdout's reader is gone: no one will read the answer.
    CallerGone,
}

fn sleep(watch: Option<&OwnedFd>, supervisor: Option<&OwnedFd>, wait: Duration) -> Wake {
    let timeout = Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    let stdout = rustix::stdio::stdout();
    // No events asked of stdout: poll still reports POLLERR (a pipe whose
    // reader closed) and POLLHUP (a socket whose peer went away).
    let mut fds = vec![PollFd::from_borrowed_fd(stdout, PollFlags::empty())];
    fds.extend(watch.map(|fd| PollFd::new(fd, PollFlags::IN)));
    fds.extend(supervisor.map(|fd| PollFd::new(fd, PollFlags::IN)));
    // EINTR or any other failure: just look again.
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
    let gone = fds[0]
        .revents()
        .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL);
    if let Some(fd) = watch {
        // Only the wake-up matters; the events themselves are dropped.
        let mut events = [0u8; 4096];
        while matches!(rustix::io::read(fd.as_fd(), &mut events), Ok(n) if n > 0) {}
    }
    if gone { Wake::CallerGone } else { Wake::Look }
}
