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
//! `wait --stream` ([`stream`]) is the same watch over many waits for one
//! host: one process and one inotify instance (instances are few per user:
//! `fs.inotify.max_user_instances`), told on stdin which waits to answer
//! (a task and offsets each) and writing each one's answer on stdout when
//! it is due: the same rule, the same answer as this verb's.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify;
use rustix::process::{Pid, PidfdFlags};
use sandkeep_proto::TaskId;
use sandkeep_proto::wire::{StatusRequest, TaskStatus, WaitReply, WaitRequest, WatchCommand};

use crate::error::{HelperError, IoContext};
use crate::status::{Observation, observe, open_checked, status, status_of, status_seen};
use crate::taskdir::{STDERR_LOG, STDOUT_LOG, TaskDir};

/// Without inotify a change is only seen by looking: often enough to stay
/// within the 50 ms the contract promises.
const RECHECK_NO_INOTIFY: Duration = Duration::from_millis(25);

/// Without a pidfd a lost supervisor is only noticed by looking; losing one
/// is rare, so a slow look suffices.
const RECHECK_NO_PIDFD: Duration = Duration::from_secs(1);

/// The most answer bytes `wait --stream` holds before writing them: an
/// answer carries up to two 64 KiB pages (escaped, up to six times that),
/// and a look may answer hundreds of waits.
const ANSWERS_HELD: usize = 1024 * 1024;

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
        let ready = status_req.is_due(
            observation.state,
            dir.log_len(STDOUT_LOG).context(|| context(STDOUT_LOG))?,
            dir.log_len(STDERR_LOG).context(|| context(STDERR_LOG))?,
        );
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
    /// Its waits not answered yet, by the host's numbers.
    waits: HashMap<u64, StatusRequest>,
    /// The last look found it not settled.
    running: bool,
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

/// `wait --stream`: answers the host's waits until stdin ends or stdout's
/// reader goes away. Each answer is the `status` of the wait's request,
/// read when the wait is due, so the host needs no read of its own (with
/// 100 waits due at once that read was most of the time from a task's
/// record to its waiter's answer: docs/benchmarks-log.md). The answers
/// of one look leave in one write. Nothing it meets ends it early: a wait
/// on a task it cannot watch is answered with what `status` says of it.
pub fn stream() {
    let inotify = new_inotify();
    let mut tasks: HashMap<TaskId, Watched> = HashMap::new();
    // The task of each unanswered wait.
    let mut waits: HashMap<u64, TaskId> = HashMap::new();
    let mut input = Vec::new();
    let mut answers = Vec::new();
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
                    Ok(WatchCommand::Watch { number, request }) => {
                        let id = request.task_id.clone();
                        let task = match tasks.entry(id.clone()) {
                            Entry::Occupied(task) => task.into_mut(),
                            Entry::Vacant(vacant) => {
                                match start_watching(inotify.as_ref(), &request) {
                                    Ok(task) => vacant.insert(task),
                                    Err(e) => {
                                        answer(&mut answers, number, Err(e));
                                        continue;
                                    }
                                }
                            }
                        };
                        task.waits.insert(number, request);
                        waits.insert(number, id.clone());
                        dirty.insert(id);
                    }
                    Ok(WatchCommand::Unwatch { number }) => {
                        if let Some(id) = waits.remove(&number)
                            && let Some(task) = tasks.get_mut(&id)
                        {
                            task.waits.remove(&number);
                            if task.waits.is_empty() {
                                unwatch(inotify.as_ref(), &mut tasks, &id);
                            }
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
            let seen = task.look();
            task.waits.retain(|&number, request| {
                // Each wait's page read after the look: a terminal state
                // comes with its complete logs.
                let status = match &seen {
                    // No record (the task was deleted since), or none
                    // readable: answered as `status` would answer now,
                    // from a fresh look by its id.
                    Ok(observation) if observation.record.is_some() => {
                        status_seen(&task.dir, observation, request)
                    }
                    _ => status(request.clone()),
                };
                let due = status.as_ref().map_or(true, |s| {
                    request.is_due(s.summary.state, s.stdout_bytes, s.stderr_bytes)
                });
                if due {
                    answer(&mut answers, number, status);
                    waits.remove(&number);
                }
                !due
            });
            if task.waits.is_empty() {
                unwatch(inotify.as_ref(), &mut tasks, &id);
            }
        }
        if !answers.is_empty() {
            if !crate::serve::write_answers(&answers) {
                return;
            }
            answers.clear();
        }
    }
}

/// Appends a wait's answer line: what `status` would exit with and print.
/// Past [`ANSWERS_HELD`] bytes the lines held so far are written at once
/// (a failed write shows at the look's own write).
fn answer(answers: &mut Vec<u8>, number: u64, status: Result<TaskStatus, HelperError>) {
    let (reply, code) = crate::encode(status);
    crate::serve::push_answer(answers, number, code, &reply);
    if answers.len() > ANSWERS_HELD && crate::serve::write_answers(answers) {
        answers.clear();
    }
}

/// Opens the task of a wait's request, as `status` would (so a task that
/// cannot be opened is refused as `status` refuses it), and watches it.
fn start_watching(
    inotify: Option<&OwnedFd>,
    request: &StatusRequest,
) -> Result<Watched, HelperError> {
    let dir = open_checked(request)?;
    Ok(Watched {
        wd: inotify.and_then(|fd| add_watch(fd, &dir)),
        dir,
        supervisor: Supervisor::Unopened,
        waits: HashMap::new(),
        running: false,
    })
}

/// Stops watching a task that has no wait left.
fn unwatch(inotify: Option<&OwnedFd>, tasks: &mut HashMap<TaskId, Watched>, id: &TaskId) {
    if let Some(Watched { wd: Some(wd), .. }) = tasks.remove(id)
        && let Some(fd) = inotify
    {
        // The directory may be gone, taking its watch along.
        let _ = inotify::remove_watch(fd, wd);
    }
}

impl Watched {
    fn pidfd_failed(&self) -> bool {
        matches!(self.supervisor, Supervisor::Done) && self.running
    }

    /// The task's record and state now. A running task gets its
    /// supervisor's pidfd first, then is looked at again, so a death
    /// between the look and the open is not missed.
    fn look(&mut self) -> Result<Observation, HelperError> {
        loop {
            let observation = observe(&self.dir)?;
            self.running = !observation.state.is_settled();
            if let (Supervisor::Unopened, Some(record)) = (&self.supervisor, &observation.record)
                && self.running
            {
                self.supervisor = match Pid::from_raw(record.supervisor.pid as i32)
                    .map(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()))
                {
                    Some(Ok(fd)) => Supervisor::Open(fd),
                    _ => Supervisor::Done,
                };
                continue;
            }
            return Ok(observation);
        }
    }
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
