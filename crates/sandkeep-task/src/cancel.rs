//! The `cancel` verb (docs/tools.md, cancel_task): asks the task's supervisor
//! to stop it and waits at most 3 s for the terminal record.
//!
//! It never signals a process itself: it only writes to the task's control
//! FIFO, which exists only while its supervisor holds it open, so a stale
//! or recycled pid can never be hit. The supervisor owns TERM → grace →
//! KILL.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify;
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::CANCEL_WAIT_MS;
use sandkeep_proto::wire::{CancelReply, StatusRequest};

use crate::error::{HelperError, IoContext};
use crate::status::{observe, open_checked, status_of};
use crate::supervisor::control;
use crate::taskdir::TaskDir;

/// Longest wait between two looks at the record, so a supervisor that
/// dies mid-cancel is noticed without waiting out the full 3 s.
const RECHECK: Duration = Duration::from_millis(100);

pub fn cancel(req: StatusRequest) -> Result<CancelReply, HelperError> {
    let dir = open_checked(&req)?;
    let before = observe(&dir)?;
    if before.state == TaskState::Running {
        // Watch before asking, so the terminal record cannot slip by.
        let watch = watch_records(&dir);
        if let Some(control) = dir
            .open_control_for_writing()
            .context(|| format!("reaching the supervisor of task {}", req.task_id))?
        {
            // A full FIFO already holds a cancel request: that is fine.
            let _ = std::fs::File::from(control).write(&[control::CANCEL]);
            wait_for_ending(&dir, watch.as_ref())?;
        }
    }
    let status = status_of(&dir, &req)?;
    let confirmed = status.summary.state.is_terminal();
    Ok(CancelReply { status, confirmed })
}

/// An inotify descriptor that becomes readable when a new record is
/// renamed into place; `None` if inotify is unavailable (then the record
/// is re-read every [`RECHECK`]).
fn watch_records(dir: &TaskDir) -> Option<OwnedFd> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(&fd, dir.path(), inotify::WatchFlags::MOVED_TO).ok()?;
    Some(fd)
}

fn wait_for_ending(dir: &TaskDir, watch: Option<&OwnedFd>) -> Result<(), HelperError> {
    let deadline = Instant::now() + Duration::from_millis(CANCEL_WAIT_MS);
    loop {
        let state = observe(dir)?.state;
        let now = Instant::now();
        if state != TaskState::Running || now >= deadline {
            return Ok(());
        }
        let wait = (deadline - now).min(RECHECK);
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let mut fds: Vec<PollFd<'_>> = watch
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .into_iter()
            .collect();
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
        if let Some(fd) = watch {
            // Only the wake-up matters; the events themselves are dropped.
            let mut events = [0u8; 4096];
            while matches!(rustix::io::read(fd, &mut events), Ok(n) if n > 0) {}
        }
    }
}
