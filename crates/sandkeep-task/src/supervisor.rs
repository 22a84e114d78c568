//! The supervisor: one detached process per task that runs the command,
//! saves its output and records how it ended (SPEC.md §5).
//!
//! It owns the task's process group from spawn to the terminal record: the
//! only signals ever sent to the group come from here, and only while the
//! group's leader is an unreaped child of this process, so the group id
//! cannot have been recycled. It is a single-threaded poll loop over the
//! two output pipes (or a pty task's terminal), a pidfd for the leader's
//! exit, the control FIFO for cancel and the wake-ups of input and resize,
//! an interactive task's stdin while a write waits on it, and timers for
//! timeout, grace and drain. It must never write to its own stdout after
//! the readiness byte, nor block on the task.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use sandkeep_proto::record::{
    Ending, Outcome, ProcessIdentity, RECORD_VERSION, StateRecord, exit_code_of, unix_now,
};
use sandkeep_proto::shell::SHELLS;
use sandkeep_proto::wire::{InputMode, StartRequest};

use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::capture::{Capture, Saved};
use crate::input::{Eof, InputQueue, Pump};
use crate::nullio::{discarding_output, empty_input};
use crate::oom::MemoryCgroup;
use crate::procfs;
use crate::pty;
use crate::redact::{Redactor, secrets_of_env};
use crate::taskdir::{STDERR_LOG, STDOUT_LOG, TaskDir};

/// The hidden verb under which the helper re-executes itself as a
/// supervisor: `sandkeep-task __supervise TASK_DIR`, the start request on
/// stdin, the readiness pipe on stdout.
pub const SUPERVISE_VERB: &str = "__supervise";

/// First byte on the readiness pipe once the first record is on disk. Any
/// other content is an error message: nothing was started.
pub const READY: u8 = b'R';

/// The exit code of a task whose process the OOM killer ended (KILL).
const OOM_EXIT_CODE: i32 = 128 + 9;
/// Between TERM and KILL.
const GRACE: Duration = Duration::from_secs(1);
/// How long output is still read after the leader exited, for processes
/// that escaped the group but hold the pipes.
const DRAIN: Duration = Duration::from_secs(1);
/// How long after KILL the group may take to disappear before the ending
/// is recorded anyway (a process stuck in the kernel).
const KILL_WAIT: Duration = Duration::from_secs(1);
/// Re-check interval while waiting for the rest of the group to go.
const GROUP_TICK: Duration = Duration::from_millis(5);
const READ_CHUNK: usize = 64 * 1024;
/// A stream that floods past its cap gets a larger pipe, for fewer
/// wake-ups (the kernel may refuse). Only then: pipe capacity counts
/// against the user's pipe quota (`pipe-user-pages-soft`, 64 MiB), and
/// large pipes for every task would starve the sandbox's other pipes.
const FLOOD_PIPE_SIZE: usize = 1024 * 1024;
/// Bytes moved per splice when discarding output beyond the cap.
const DISCARD_CHUNK: usize = 1024 * 1024;
/// Pacing beyond the cap needs a pipe large enough to absorb a pause.
const MIN_PIPE_FOR_PAUSE: usize = 512 * 1024;
const FIRST_PAUSE: Duration = Duration::from_micros(100);
const SHORTEST_PAUSE: Duration = Duration::from_micros(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(2);
/// Reads per stream per wake-up, so one flooding stream cannot starve the
/// other or the exit watch.
const READS_PER_WAKEUP: usize = 16;

/// What the control FIFO carries, one byte per request.
pub mod control {
    /// Stop the task (cancel).
    pub const CANCEL: u8 = b'c';
    /// New input is queued.
    pub const INPUT: u8 = b'i';
    /// A new terminal size is recorded.
    pub const RESIZE: u8 = b'w';
}

/// Entry point of the hidden verb; the return value is the exit code.
pub fn main(args: &[String]) -> i32 {
    // Own session first: the starter's death or hangup never reaches us.
    let _ = rustix::process::setsid();
    let Some(dir) = args.first() else {
        return fail_before_start("missing task directory argument".into());
    };
    let mut order = Vec::new();
    if let Err(e) = io::stdin().read_to_end(&mut order) {
        return fail_before_start(format!("reading the start request: {e}"));
    }
    let order: StartRequest = match serde_json::from_slice(&order) {
        Ok(o) => o,
        Err(e) => return fail_before_start(format!("decoding the start request: {e}")),
    };
    match Supervisor::start(PathBuf::from(dir), order) {
        Ok(Some(sup)) => sup.run(),
        Ok(None) => 0,
        Err(message) => fail_before_start(message),
    }
}

fn fail_before_start(message: String) -> i32 {
    let mut out = io::stdout();
    let _ = out.write_all(message.as_bytes()).and_then(|()| out.flush());
    1
}

/// Makes this process the child subreaper of what it will spawn, with
/// SIGCHLD blocked and read from a descriptor instead (the spawned command
/// starts with an empty signal mask: std resets it). `None`, and no
/// subreaper, if either cannot be had: orphans that nothing reaps would
/// pile up here as zombies.
fn adopt_orphans() -> Option<SignalFd> {
    let mut chld = SigSet::empty();
    chld.add(nix::sys::signal::Signal::SIGCHLD);
    chld.thread_block().ok()?;
    let fd = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).ok()?;
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).ok()?;
    Some(fd)
}

/// `bash -c COMMAND`, or `sh -c COMMAND` where bash is missing, in its own
/// process group; stdin from `/dev/null`, or a pipe for an interactive
/// task, the OOM killer's first choice ([`crate::oom::volunteer`]). A pty
/// task goes through [`pty::spawn_session`] instead.
// The one `unsafe` here is std's `pre_exec`: the score must be set before
// the shell runs, since what it forks first (the two sides of a pipeline)
// inherits it; a write to `/proc/PID` after the spawn would race them.
#[allow(unsafe_code)]
fn spawn_command(order: &StartRequest) -> io::Result<Child> {
    let mut last_err = None;
    for shell in SHELLS {
        let mut cmd = Command::new(shell);
        let stdin = match order.input {
            None => empty_input()?,
            Some(_) => Stdio::piped(),
        };
        cmd.arg("-c")
            .arg(&order.command)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: `volunteer` makes only async-signal-safe system calls
        // (open, write, close) and allocates nothing, as the code between
        // fork and exec must.
        unsafe {
            cmd.pre_exec(|| {
                crate::oom::volunteer();
                Ok(())
            });
        }
        if let Some(cwd) = &order.cwd {
            cmd.current_dir(cwd);
        }
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.kind() == io::ErrorKind::NotFound => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.expect("the loop tries at least one shell"))
}

/// An interactive task's input side, prepared before the spawn.
enum Wiring {
    /// stdin from `/dev/null` (start_task).
    None,
    Pipe(InputQueue),
    /// The terminal's master and slave.
    Pty(InputQueue, OwnedFd, OwnedFd),
}

impl Wiring {
    /// Creates the input queue (and records the terminal's size) before
    /// the first record, so input is accepted as soon as the task is.
    fn prepare(dir: &TaskDir, mode: Option<InputMode>) -> Result<Self, String> {
        let Some(mode) = mode else {
            return Ok(Self::None);
        };
        dir.create_input_dir()
            .map_err(|e| format!("creating the input queue: {e}"))?;
        let queue = InputQueue::open(dir)
            .ok()
            .flatten()
            .ok_or("opening the input queue failed")?;
        Ok(match mode {
            InputMode::Pipe => Self::Pipe(queue),
            InputMode::Pty(size) => {
                dir.write_winsize(size)
                    .map_err(|e| format!("recording the terminal size: {e}"))?;
                let (master, slave) =
                    pty::open(size).map_err(|e| format!("opening a pseudo-terminal: {e}"))?;
                Self::Pty(queue, master, slave)
            }
        })
    }
}

/// How output beyond the cap is collected. Waking for each small write of
/// a flood costs the task more than the copy itself, so after each drain
/// the stream is left alone for a pause, adapted so that the next drain
/// finds the pipe between 1/8 and 1/2 full: few wake-ups, and the writer
/// never waits on a full pipe. A writer that half fills the pipe even in
/// the shortest pause is faster than any pause helps: a pipe that fills
/// between drains cycles through cold pages (1 GiB of zeros took twice as
/// long paced as drained at once), while such a writer rarely finds the
/// pipe empty, so draining at once costs it few wake-ups.
#[derive(Debug, PartialEq)]
enum Pacing {
    /// The cap is not reached yet.
    Unset,
    Paced {
        pipe: usize,
        pause: Duration,
    },
    /// The pipe could not be enlarged, or the writer outruns any pause:
    /// drain at once.
    Unpaced,
}

impl Pacing {
    /// The pause after a drain of `n` bytes; `None` when unpaced.
    fn after_drain(&mut self, n: usize) -> Option<Duration> {
        let Self::Paced { pipe, pause } = self else {
            return None;
        };
        if n >= *pipe / 2 {
            if *pause == SHORTEST_PAUSE {
                *self = Self::Unpaced;
                return None;
            }
            *pause = (*pause / 2).max(SHORTEST_PAUSE);
        } else if n < *pipe / 8 {
            *pause = (*pause * 2).min(LONGEST_PAUSE);
        }
        Some(*pause)
    }
}

struct Stream {
    fd: OwnedFd,
    capture: Capture,
    pacing: Pacing,
    /// Not polled before this instant (pacing beyond the cap).
    paused_until: Option<Instant>,
}

impl Stream {
    fn new(fd: OwnedFd, log: File, redactor: Redactor) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(Self {
            fd,
            capture: Capture::new(log, redactor),
            pacing: Pacing::Unset,
            paused_until: None,
        })
    }
}

/// How the main process ended, and the clean-up after it.
struct Exited {
    exit_code: Option<i32>,
    at: Instant,
    /// No other member of the group is left (or KILL_WAIT passed).
    group_gone: bool,
    /// When `/proc` was last scanned for the group, to scan at most once
    /// per [`GROUP_TICK`] however busy the pipes are.
    scanned_at: Option<Instant>,
}

enum Source {
    Stream(usize),
    Exit,
    /// A child other than the leader may have died.
    Orphan,
    Control,
    /// The task's stdin can take more of the input waiting for it.
    Input,
}

struct Supervisor {
    dir: TaskDir,
    record: StateRecord,
    leader: Pid,
    exit_watch: Option<OwnedFd>,
    /// SIGCHLD as a descriptor, when this process is the task's child
    /// subreaper: the task's orphans come to it, are reaped as they die
    /// (none piles up as a zombie), and "no child but the leader" proves
    /// the group empty without a `/proc` scan. `None`: neither.
    orphans: Option<SignalFd>,
    control: OwnedFd,
    /// An interactive task's queued input on its way to the task.
    input: Option<Pump>,
    /// A pty task's terminal master, for resizes.
    terminal: Option<OwnedFd>,
    /// stdout, stderr; `None` once closed.
    streams: [Option<Stream>; 2],
    deadline: Instant,
    /// Why the supervisor stopped the task, if it did.
    stop: Option<Ending>,
    kill_at: Option<Instant>,
    killed_at: Option<Instant>,
    exited: Option<Exited>,
    /// The sandbox's memory cgroup and its OOM-kill count before the
    /// spawn, when it has a memory limit.
    memory: Option<(u64, MemoryCgroup)>,
    buf: Vec<u8>,
    /// `/dev/null`, where output beyond the cap is spliced without being
    /// copied into this process; `None` where it is missing or refuses.
    discard: Option<OwnedFd>,
}

impl Supervisor {
    /// Prepares the task directory, spawns the command and writes the
    /// first record, then sends the readiness byte. `Ok(None)`: the
    /// command could not be spawned and that is recorded as `failed`.
    fn start(dir: PathBuf, order: StartRequest) -> Result<Option<Self>, String> {
        let dir =
            TaskDir::open_path(dir).map_err(|e| format!("opening the task directory: {e}"))?;
        // Do not pin the starter's working directory (or its mount) for
        // the task's lifetime; the command gets its own cwd.
        let _ = std::env::set_current_dir("/");
        let identity = ProcessIdentity::own()
            .map_err(|e| format!("reading this process's identity from /proc: {e}"))?;
        let logs = [dir.create_log(STDOUT_LOG), dir.create_log(STDERR_LOG)];
        let [Ok(out_log), Ok(err_log)] = logs else {
            return Err("creating the log files in the task directory failed".into());
        };
        dir.create_control()
            .map_err(|e| format!("creating the control FIFO: {e}"))?;
        let control = dir
            .open_control_for_reading()
            .map_err(|e| format!("opening the control FIFO: {e}"))?;
        let secrets = secrets_of_env(std::env::vars_os());

        let mut record = StateRecord {
            version: RECORD_VERSION,
            task_id: order.task_id.clone(),
            supervisor: identity,
            pgid: None,
            started_at: None,
            stdout_truncated: false,
            stderr_truncated: false,
            outcome: None,
            error: None,
        };
        let wiring = Wiring::prepare(&dir, order.input)?;
        let orphans = adopt_orphans();
        // Read before the spawn: a kill the task causes raises the count.
        let memory = MemoryCgroup::find().and_then(|m| Some((m.kills()?, m)));
        let spawned = match &wiring {
            Wiring::Pty(_, _, slave) => {
                pty::spawn_session(&order.command, order.cwd.as_deref(), slave)
            }
            _ => spawn_command(&order),
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                // The reason goes where the user will look for it.
                let _ = (&err_log).write_all(
                    format!("sandkeep-task: could not run the command with bash or sh: {e}\n")
                        .as_bytes(),
                );
                record.outcome = Some(Outcome {
                    ending: Ending::Failed,
                    exit_code: None,
                    finished_at: unix_now(),
                });
                write_first_record(&dir, &record)?;
                return Ok(None);
            }
        };
        let pid = child.id();
        let leader = Pid::from_raw(pid as i32).expect("a spawned child has a positive pid");
        record.pgid = Some(pid);
        record.started_at = Some(unix_now());
        let wired = wire_up(&mut child, wiring, out_log, err_log, secrets);
        let Ok((streams, input, terminal)) = wired else {
            kill_unstarted(leader);
            return Err("preparing the task's pipes or terminal failed".into());
        };
        if let Err(e) = write_first_record(&dir, &record) {
            kill_unstarted(leader);
            return Err(e);
        }
        Ok(Some(Self {
            dir,
            record,
            leader,
            // Without pidfds (Linux < 5.3) the exit is polled instead.
            exit_watch: rustix::process::pidfd_open(leader, PidfdFlags::empty()).ok(),
            orphans,
            control,
            input,
            terminal,
            streams,
            deadline: Instant::now() + Duration::from_secs(order.timeout),
            stop: None,
            kill_at: None,
            killed_at: None,
            exited: None,
            memory,
            buf: vec![0; READ_CHUNK],
            discard: File::options()
                .write(true)
                .open("/dev/null")
                .ok()
                .map(OwnedFd::from),
        }))
    }

    fn run(mut self) -> i32 {
        loop {
            let now = Instant::now();
            self.on_timers(now);
            self.check_group(now);
            if self.is_done(now) {
                break;
            }
            let timeout = self.next_wakeup(now).saturating_duration_since(now);
            for source in self.wait(timeout) {
                match source {
                    Source::Stream(i) => self.read_stream(i),
                    Source::Exit => self.check_exit(),
                    Source::Orphan => self.reap_orphans(),
                    Source::Control => self.read_control(),
                    Source::Input => self.pump_input(),
                }
            }
        }
        self.finish();
        0
    }

    fn wait(&self, timeout: Duration) -> Vec<Source> {
        let mut fds = Vec::with_capacity(4);
        let mut sources = Vec::with_capacity(4);
        let now = Instant::now();
        for (i, s) in self.streams.iter().enumerate() {
            if let Some(s) = s
                && s.paused_until.is_none_or(|t| t <= now)
            {
                fds.push(PollFd::new(&s.fd, PollFlags::IN));
                sources.push(Source::Stream(i));
            }
        }
        if let Some(fd) = &self.orphans {
            fds.push(PollFd::new(fd, PollFlags::IN));
            sources.push(Source::Orphan);
        }
        if self.exited.is_none() {
            if let Some(fd) = &self.exit_watch {
                fds.push(PollFd::new(fd, PollFlags::IN));
                sources.push(Source::Exit);
            }
            fds.push(PollFd::new(&self.control, PollFlags::IN));
            sources.push(Source::Control);
            if let Some(fd) = self.input.as_ref().and_then(Pump::waiting_on) {
                fds.push(PollFd::new(fd, PollFlags::OUT));
                sources.push(Source::Input);
            }
        }
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(_) => Vec::new(),
            Ok(_) => fds
                .iter()
                .zip(sources)
                .filter(|(fd, _)| !fd.revents().is_empty())
                .map(|(_, s)| s)
                .collect(),
        }
    }

    fn signal_group(&self, signal: Signal) {
        // Safe from recycling: the leader is our unreaped child until
        // `finish`, so its pid, the group id, stays taken.
        let _ = rustix::process::kill_process_group(self.leader, signal);
    }

    fn on_timers(&mut self, now: Instant) {
        if self.exited.is_none() && self.stop.is_none() && now >= self.deadline {
            self.request_stop(Ending::TimedOut, now);
        }
        if let Some(kill_at) = self.kill_at
            && self.killed_at.is_none()
            && now >= kill_at
        {
            self.signal_group(Signal::KILL);
            self.killed_at = Some(now);
        }
        if self.exit_watch.is_none() && self.exited.is_none() {
            self.check_exit();
        }
    }

    fn request_stop(&mut self, why: Ending, now: Instant) {
        self.stop = Some(why);
        self.signal_group(Signal::TERM);
        self.kill_at = Some(now + GRACE);
    }

    fn check_exit(&mut self) {
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
        let Ok(Some(status)) = rustix::process::waitid(WaitId::Pid(self.leader), options) else {
            return;
        };
        let now = Instant::now();
        self.exited = Some(Exited {
            exit_code: exit_code_of(status.exit_status(), status.terminating_signal()),
            at: now,
            group_gone: false,
            scanned_at: None,
        });
        // What is left of the group goes too: TERM now, KILL after the
        // grace (or at the KILL already scheduled by a stop).
        if self.killed_at.is_none() {
            self.signal_group(Signal::TERM);
            let kill_at = now + GRACE;
            self.kill_at = Some(self.kill_at.map_or(kill_at, |k| k.min(kill_at)));
        }
    }

    fn check_group(&mut self, now: Instant) {
        let leader = self.leader.as_raw_nonzero().get() as u32;
        let Some(exited) = &mut self.exited else {
            return;
        };
        if exited.group_gone || exited.scanned_at.is_some_and(|t| now < t + GROUP_TICK) {
            return;
        }
        exited.scanned_at = Some(now);
        let members = !self.only_the_leader_is_left(leader)
            && procfs::group_has_members(leader, leader).unwrap_or(false);
        let given_up = self
            .killed_at
            .is_some_and(|k| now.saturating_duration_since(k) >= KILL_WAIT);
        if let Some(exited) = &mut self.exited {
            exited.group_gone = !members || given_up;
        }
    }

    /// Whether, as the task's child subreaper, this process has no child
    /// but the leader once the dead ones are reaped. Then the group is
    /// empty: every member is in the task's session (a process joins a
    /// group of its own session only), so a descendant of this process,
    /// and one whose parent died came to this process.
    fn only_the_leader_is_left(&self, leader: u32) -> bool {
        if self.orphans.is_none() {
            return false;
        }
        self.reap_orphans();
        procfs::own_children().is_some_and(|children| children.iter().all(|&c| c == leader))
    }

    /// Reaps the dead among the task's orphans (never the leader, which
    /// stays unreaped until the end so that its group id stays taken).
    fn reap_orphans(&self) {
        let Some(orphans) = &self.orphans else {
            return;
        };
        // Each read takes one pending SIGCHLD; they only wake us.
        while let Ok(Some(_)) = orphans.read_signal() {}
        let leader = self.leader.as_raw_nonzero().get() as u32;
        for child in procfs::own_children().unwrap_or_default() {
            if child != leader
                && let Some(pid) = Pid::from_raw(child as i32)
            {
                let _ = rustix::process::waitid(
                    WaitId::Pid(pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                );
            }
        }
    }

    fn is_done(&self, now: Instant) -> bool {
        let Some(exited) = &self.exited else {
            return false;
        };
        let pipes_done = self.streams.iter().all(Option::is_none) || now >= exited.at + DRAIN;
        exited.group_gone && pipes_done
    }

    fn next_wakeup(&self, now: Instant) -> Instant {
        let mut next = now + Duration::from_secs(3600);
        if self.exited.is_none() && self.stop.is_none() {
            next = next.min(self.deadline);
        }
        if let (Some(kill_at), None) = (self.kill_at, self.killed_at) {
            next = next.min(kill_at);
        }
        if let Some(exited) = &self.exited {
            if !exited.group_gone {
                next = next.min(now + GROUP_TICK);
            }
            next = next.min(exited.at + DRAIN);
        } else if self.exit_watch.is_none() {
            next = next.min(now + GROUP_TICK);
        }
        for s in self.streams.iter().flatten() {
            if let Some(t) = s.paused_until {
                next = next.min(t);
            }
        }
        next
    }

    fn read_stream(&mut self, i: usize) {
        for _ in 0..READS_PER_WAKEUP {
            let Some(stream) = &mut self.streams[i] else {
                return;
            };
            stream.paused_until = None;
            if stream.capture.is_dropping()
                && let Some(null) = &self.discard
            {
                if let Pacing::Unset = stream.pacing {
                    stream.pacing =
                        match rustix::pipe::fcntl_setpipe_size(&stream.fd, FLOOD_PIPE_SIZE) {
                            Ok(pipe) if pipe >= MIN_PIPE_FOR_PAUSE => Pacing::Paced {
                                pipe,
                                pause: FIRST_PAUSE,
                            },
                            _ => Pacing::Unpaced,
                        };
                }
                match rustix::pipe::splice(
                    &stream.fd,
                    None,
                    null,
                    None,
                    DISCARD_CHUNK,
                    rustix::pipe::SpliceFlags::NONBLOCK,
                ) {
                    Ok(0) => return self.close_stream(i),
                    Ok(n) => {
                        let pause = stream.pacing.after_drain(n);
                        stream.paused_until = pause.map(|p| Instant::now() + p);
                        if stream.capture.dropped(n) == Saved::NowTruncated {
                            self.note_truncated(i);
                        }
                        if pause.is_some() {
                            return;
                        }
                        continue;
                    }
                    Err(Errno::AGAIN) => return,
                    Err(Errno::INTR) => continue,
                    // Splicing is refused: read and drop instead.
                    Err(_) => self.discard = None,
                }
                continue;
            }
            match rustix::io::read(&stream.fd, &mut self.buf[..]) {
                Ok(0) => return self.close_stream(i),
                Ok(n) => {
                    if stream.capture.take(&self.buf[..n]) == Saved::NowTruncated {
                        self.note_truncated(i);
                    }
                }
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR) => {}
                Err(_) => return self.close_stream(i),
            }
        }
    }

    fn close_stream(&mut self, i: usize) {
        if let Some(mut stream) = self.streams[i].take()
            && stream.capture.finish() == Saved::NowTruncated
        {
            self.note_truncated(i);
        }
    }

    fn note_truncated(&mut self, i: usize) {
        if i == 0 {
            self.record.stdout_truncated = true;
        } else {
            self.record.stderr_truncated = true;
        }
        let _ = self.dir.write_record(&self.record);
    }

    fn read_control(&mut self) {
        let mut bytes = [0u8; 64];
        let n = rustix::io::read(&self.control, &mut bytes).unwrap_or(0);
        let requests = &bytes[..n];
        if requests.contains(&control::CANCEL) && self.exited.is_none() && self.stop.is_none() {
            self.request_stop(Ending::Cancelled, Instant::now());
        }
        if requests.contains(&control::RESIZE)
            && let Some(terminal) = &self.terminal
            && let Ok(Some(size)) = self.dir.read_winsize()
        {
            let _ = pty::set_size(terminal, size);
        }
        if requests.contains(&control::INPUT) {
            self.pump_input();
        }
    }

    fn pump_input(&mut self) {
        if let Some(pump) = &mut self.input {
            pump.pump();
        }
    }

    /// Records the ending, then reaps the leader: after this nothing may
    /// signal the group.
    fn finish(mut self) {
        for i in 0..self.streams.len() {
            // Output still arriving after the drain is no longer saved.
            self.close_stream(i);
        }
        let exit_code = self.exited.as_ref().and_then(|e| e.exit_code);
        let ending = ending_of(self.stop, exit_code);
        if ending == Ending::Failed && exit_code == Some(OOM_EXIT_CODE) {
            self.record.error = self
                .memory
                .as_ref()
                .and_then(|(before, m)| m.kills().filter(|now| now > before).map(|_| m.error()));
        }
        self.record.outcome = Some(Outcome {
            ending,
            exit_code,
            finished_at: unix_now(),
        });
        let _ = self.dir.write_record(&self.record);
        let _ = rustix::process::waitid(WaitId::Pid(self.leader), WaitIdOptions::EXITED);
    }
}

/// How a task ended: a stop the supervisor made (timeout, cancel) wins
/// over the exit status it caused; otherwise only status 0 is success.
fn ending_of(stop: Option<Ending>, exit_code: Option<i32>) -> Ending {
    match (stop, exit_code) {
        (Some(why), _) => why,
        (None, Some(0)) => Ending::Succeeded,
        (None, _) => Ending::Failed,
    }
}

/// Writes the first record and tells the starter it is on disk; from then
/// on the supervisor's stdout is discarded.
fn write_first_record(dir: &TaskDir, record: &StateRecord) -> Result<(), String> {
    dir.write_record(record)
        .map_err(|e| format!("writing the first state record: {e}"))?;
    let mut out = io::stdout();
    let _ = out.write_all(&[READY]).and_then(|()| out.flush());
    if let Ok(sink) = discarding_output() {
        let _ = rustix::stdio::dup2_stdout(sink.as_fd());
    }
    Ok(())
}

type Wired = ([Option<Stream>; 2], Option<Pump>, Option<OwnedFd>);

/// The spawned child's pipes (or terminal) as the supervisor holds them:
/// the output streams, the input pump, a pty task's terminal master.
fn wire_up(
    child: &mut Child,
    wiring: Wiring,
    out_log: File,
    err_log: File,
    secrets: Vec<Vec<u8>>,
) -> io::Result<Wired> {
    if let Wiring::Pty(queue, master, slave) = wiring {
        // Only the command may hold the slave: once it is gone, reading
        // the master ends.
        drop(slave);
        let stdout = Stream::new(master.try_clone()?, out_log, Redactor::new(secrets))?;
        let pump = Pump::new(queue, master.try_clone()?, Eof::ControlD);
        // stderr.log stays empty: the terminal joins both streams.
        drop(err_log);
        return Ok(([Some(stdout), None], Some(pump), Some(master)));
    }
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        unreachable!("both outputs were requested as pipes")
    };
    let streams = [
        Some(Stream::new(
            out.into(),
            out_log,
            Redactor::new(secrets.clone()),
        )?),
        Some(Stream::new(err.into(), err_log, Redactor::new(secrets))?),
    ];
    let pump = match wiring {
        Wiring::Pipe(queue) => {
            let stdin: OwnedFd = child
                .stdin
                .take()
                .expect("stdin was requested as a pipe")
                .into();
            rustix::io::ioctl_fionbio(&stdin, true)?;
            Some(Pump::new(queue, stdin, Eof::ClosePipe))
        }
        _ => None,
    };
    Ok((streams, pump, None))
}

/// A command spawned but never announced: nothing may outlive the failure.
fn kill_unstarted(leader: Pid) {
    let _ = rustix::process::kill_process_group(leader, Signal::KILL);
    let _ = rustix::process::waitid(WaitId::Pid(leader), WaitIdOptions::EXITED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_keeps_the_pipe_between_an_eighth_and_half_full() {
        let mut p = Pacing::Paced {
            pipe: 1 << 20,
            pause: FIRST_PAUSE,
        };
        assert_eq!(p.after_drain(900 << 10), Some(FIRST_PAUSE / 2));
        assert_eq!(p.after_drain(300 << 10), Some(FIRST_PAUSE / 2));
        assert_eq!(p.after_drain(4 << 10), Some(FIRST_PAUSE));
        for _ in 0..20 {
            p.after_drain(1);
        }
        assert_eq!(p.after_drain(1), Some(LONGEST_PAUSE));
        assert_eq!(Pacing::Unpaced.after_drain(1), None);
    }

    #[test]
    fn a_writer_that_outruns_the_shortest_pause_is_drained_at_once() {
        let mut p = Pacing::Paced {
            pipe: 1 << 20,
            pause: FIRST_PAUSE,
        };
        let mut pauses = Vec::new();
        while let Some(pause) = p.after_drain(1 << 20) {
            pauses.push(pause);
            assert!(pauses.len() < 20, "never gave up pacing: {pauses:?}");
        }
        assert_eq!(pauses.last(), Some(&SHORTEST_PAUSE));
        assert_eq!(p, Pacing::Unpaced);
        assert_eq!(p.after_drain(1), None, "unpaced for good");
    }

    #[test]
    fn stops_win_and_only_zero_succeeds() {
        assert_eq!(ending_of(None, Some(0)), Ending::Succeeded);
        assert_eq!(ending_of(None, Some(1)), Ending::Failed);
        assert_eq!(ending_of(None, Some(137)), Ending::Failed);
        assert_eq!(ending_of(None, None), Ending::Failed);
        assert_eq!(
            ending_of(Some(Ending::Cancelled), Some(0)),
            Ending::Cancelled
        );
        assert_eq!(
            ending_of(Some(Ending::TimedOut), Some(143)),
            Ending::TimedOut
        );
    }
}
