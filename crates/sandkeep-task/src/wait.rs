//! The `wait` verb (docs/tools.md, wait_task): a long-poll on one task.
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
//!
//! `wait --stream` ([`stream`]) is the same watch over many tasks for one
//! host: one process and one inotify instance (instances are few per user:
//! `fs.inotify.max_user_instances`), told on stdin which tasks to watch and
//! writing a line on stdout whenever one changes. The host decides which of
//! its waiters that answers; this side only reports.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify;
use rustix::process::{Pid, PidfdFlags};
use sandkeep_proto::TaskId;
use sandkeep_proto::wire::{ErrorBody, WaitReply, WaitRequest, WatchCommand, WatchEvent};

use crate::error::{HelperError, IoContext};
use crate::status::{Observation, observe, open_checked, status_of};
use crate::taskdir::{STDERR_LOG, STDOUT_LOG, TaskDir, TaskRoot};

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
    let fd = new_inotify()?;
    add_watch(&fd, dir)?;
    Some(fd)
}

fn new_inotify() -> Option<OwnedFd> {
    inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()
}

/// Watches what the supervisor changes in a task directory: the record
/// renamed into place, the logs appended to, the directory deleted.
fn add_watch(fd: &OwnedFd, dir: &TaskDir) -> Option<i32> {
    let events = inotify::WatchFlags::MODIFY
        | inotify::WatchFlags::MOVED_TO
        | inotify::WatchFlags::CREATE
        | inotify::WatchFlags::DELETE_SELF
        | inotify::WatchFlags::ONLYDIR;
    inotify::add_watch(fd, dir.path(), events).ok()
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

/// A task watched by [`stream`].
struct Watched {
    dir: TaskDir,
    /// Its inotify watch; `None` without inotify.
    wd: Option<i32>,
    supervisor: Supervisor,
    /// The last line written about it: only changes are reported.
    last: Option<WatchEvent>,
}

/// The pidfd of a running task's supervisor, which becomes readable when
/// the supervisor dies (possibly without recording its ending).
enum Supervisor {
    /// Not opened yet (no record, or the task is settled).
    Unopened,
    Open(OwnedFd),
    /// Fired, or could not be opened: nothing more to wait on.
    Done,
}

/// `wait --stream`: reports the watched tasks until stdin ends or stdout's
/// reader goes away. Nothing it meets ends it early: a task it cannot
/// watch is reported as [`WatchEvent::Refused`].
pub fn stream() {
    let inotify = new_inotify();
    let mut tasks: HashMap<TaskId, Watched> = HashMap::new();
    let mut input = Vec::new();
    loop {
        let mut wait = None;
        if !tasks.is_empty() && inotify.is_none() {
            wait = Some(RECHECK_NO_INOTIFY);
        } else if tasks.values().any(|t| t.pidfd_failed()) {
            wait = Some(RECHECK_NO_PIDFD);
        }
        let woke = poll_stream(inotify.as_ref(), &tasks, wait);
        if woke.caller_gone {
            return;
        }
        let mut dirty: HashSet<TaskId> = woke.supervisors.into_iter().collect();
        for id in &dirty {
            if let Some(task) = tasks.get_mut(id) {
                task.supervisor = Supervisor::Done;
            }
        }
        if woke.input {
            let mut chunk = [0u8; 4096];
            match rustix::io::read(rustix::stdio::stdin(), &mut chunk) {
                Ok(0) => return,
                Ok(n) => input.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(_) => return,
            }
            while let Some(end) = input.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = input.drain(..=end).collect();
                match serde_json::from_slice(&line) {
                    Ok(WatchCommand::Watch(id)) => match start_watching(inotify.as_ref(), &id) {
                        Ok(task) => {
                            tasks.insert(id.clone(), task);
                            dirty.insert(id);
                        }
                        Err(e) => {
                            if !write_event(&refused(&id, e)) {
                                return;
                            }
                        }
                    },
                    Ok(WatchCommand::Unwatch(id)) => {
                        if let Some(Watched { wd: Some(wd), .. }) = tasks.remove(&id)
                            && let Some(fd) = &inotify
                        {
                            // The directory may be gone, taking its watch along.
                            let _ = inotify::remove_watch(fd, wd);
                        }
                    }
                    // Only the host writes here; a line it garbled is
                    // dropped rather than ending every waiter's watch.
                    Err(e) => eprintln!("ignoring a malformed watch command: {e}"),
                }
            }
        }
        match (&inotify, woke.timed_out) {
            (_, true) | (None, _) => dirty.extend(tasks.keys().cloned()),
            (Some(fd), false) => dirty.extend(changed_tasks(fd, &tasks)),
        }
        for id in dirty {
            let Some(task) = tasks.get_mut(&id) else {
                continue;
            };
            let event = task.look(&id);
            if task.last.as_ref() == Some(&event) {
                continue;
            }
            if !write_event(&event) {
                return;
            }
            if matches!(event, WatchEvent::Refused { .. }) {
                tasks.remove(&id);
            } else {
                task.last = Some(event);
            }
        }
    }
}

fn start_watching(inotify: Option<&OwnedFd>, id: &TaskId) -> Result<Watched, HelperError> {
    let dir = TaskRoot::open_existing()?
        .map(|root| root.open_task_dir(id))
        .transpose()?
        .flatten()
        .ok_or_else(|| HelperError::NoSuchTask(id.clone()))?;
    Ok(Watched {
        wd: inotify.and_then(|fd| add_watch(fd, &dir)),
        dir,
        supervisor: Supervisor::Unopened,
        last: None,
    })
}

impl Watched {
    fn pidfd_failed(&self) -> bool {
        matches!(self.supervisor, Supervisor::Done) && self.last_running()
    }

    fn last_running(&self) -> bool {
        matches!(&self.last, Some(WatchEvent::Seen { state, .. }) if !state.is_settled())
    }

    /// The task as it is now. A running task gets its supervisor's pidfd
    /// first, then is looked at again, so a death between the look and
    /// the open is not missed.
    fn look(&mut self, id: &TaskId) -> WatchEvent {
        loop {
            let seen = match self.seen(id) {
                Ok(seen) => seen,
                Err(e) => return refused(id, e),
            };
            if let (Supervisor::Unopened, Some(record)) = (&self.supervisor, &seen.0.record)
                && !seen.0.state.is_settled()
            {
                self.supervisor = match Pid::from_raw(record.supervisor.pid as i32)
                    .map(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()))
                {
                    Some(Ok(fd)) => Supervisor::Open(fd),
                    _ => Supervisor::Done,
                };
                continue;
            }
            return seen.1;
        }
    }

    fn seen(&self, id: &TaskId) -> Result<(Observation, WatchEvent), HelperError> {
        let observation = observe(&self.dir)?;
        let context = |name: &str| format!("reading the size of {name} of task {id}");
        let event = WatchEvent::Seen {
            task_id: id.clone(),
            state: observation.state,
            stdout_bytes: self
                .dir
                .log_len(STDOUT_LOG)
                .context(|| context(STDOUT_LOG))?,
            stderr_bytes: self
                .dir
                .log_len(STDERR_LOG)
                .context(|| context(STDERR_LOG))?,
        };
        Ok((observation, event))
    }
}

fn refused(id: &TaskId, e: HelperError) -> WatchEvent {
    WatchEvent::Refused {
        task_id: id.clone(),
        error: ErrorBody {
            kind: e.kind(),
            message: e.to_string(),
        },
    }
}

/// Writes one line; false when no one reads stdout any more.
fn write_event(event: &WatchEvent) -> bool {
    let mut line = serde_json::to_vec(event).expect("events always encode");
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line).and_then(|()| out.flush()).is_ok()
}

struct StreamWake {
    caller_gone: bool,
    input: bool,
    timed_out: bool,
    /// Tasks whose supervisor's pidfd fired.
    supervisors: Vec<TaskId>,
}

fn poll_stream(
    inotify: Option<&OwnedFd>,
    tasks: &HashMap<TaskId, Watched>,
    wait: Option<Duration>,
) -> StreamWake {
    let timeout = wait.map(|wait| Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(wait.subsec_nanos()),
    });
    let pidfds: Vec<(&TaskId, &OwnedFd)> = tasks
        .iter()
        .filter_map(|(id, t)| match &t.supervisor {
            Supervisor::Open(fd) => Some((id, fd)),
            _ => None,
        })
        .collect();
    let mut fds = vec![
        PollFd::from_borrowed_fd(rustix::stdio::stdin(), PollFlags::IN),
        // No events asked: poll still reports a reader that went away.
        PollFd::from_borrowed_fd(rustix::stdio::stdout(), PollFlags::empty()),
    ];
    fds.extend(inotify.map(|fd| PollFd::new(fd, PollFlags::IN)));
    let first_pidfd = fds.len();
    fds.extend(pidfds.iter().map(|(_, fd)| PollFd::new(*fd, PollFlags::IN)));
    // EINTR or any other failure: look at everything again.
    let ready = rustix::event::poll(&mut fds, timeout.as_ref()).unwrap_or(0);
    let fired = |fd: &PollFd| !fd.revents().is_empty();
    StreamWake {
        caller_gone: fds[1]
            .revents()
            .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL),
        input: fired(&fds[0]),
        timed_out: ready == 0,
        supervisors: pidfds
            .iter()
            .zip(&fds[first_pidfd..])
            .filter(|(_, fd)| fired(fd))
            .map(|((id, _), _)| (*id).clone())
            .collect(),
    }
}

/// The tasks whose directories the queued inotify events are about; all
/// of them if the queue overflowed.
fn changed_tasks(fd: &OwnedFd, tasks: &HashMap<TaskId, Watched>) -> Vec<TaskId> {
    let mut buf = [MaybeUninit::uninit(); 4096];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    let mut wds = HashSet::new();
    let mut overflow = false;
    while let Ok(event) = reader.next() {
        overflow |= event.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW);
        wds.insert(event.wd());
    }
    tasks
        .iter()
        .filter(|(_, t)| overflow || t.wd.is_some_and(|wd| wds.contains(&wd)))
        .map(|(id, _)| id.clone())
        .collect()
}
