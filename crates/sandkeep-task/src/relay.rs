//! `pty`: E2B's PTY process (envd's `Start` with `pty`), a terminal
//! attached to its caller rather than a task: the command runs on a new
//! pseudo-terminal (the same terminal and session as a pty task's,
//! `pty::open` and `pty::spawn_session`), the terminal's output goes to
//! stdout as it comes, and [`PtyFrame`]s read on stdin are typed on it or
//! resize it. Nothing is saved: no log, no cap, no task directory; envd
//! keeps none either.
//!
//! It ends when the command does (after what the command wrote before it
//! exited), with the command's exit code, or killed by the same signal,
//! so whoever spawned it sees the command's own ending. The end of stdin
//! only stops the input; a caller that goes away (stdout closed) ends the
//! relay and, with its terminal's master, the session (`SIGHUP`).

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};
use sandkeep_proto::wire::{PtyFrame, PtyRequest};

use crate::error::{HelperError, IoContext};
use crate::pty;

/// The most read from the terminal at once (envd's pty chunk size).
const CHUNK: usize = 16 * 1024;

/// Runs the relay; the exit code (when the command was not killed by a
/// signal this process could take on).
pub fn run(request: PtyRequest) -> i32 {
    match relay(request) {
        Ok(status) => exit_like(status),
        Err(e) => crate::reply::<()>(Err(e)),
    }
}

fn relay(request: PtyRequest) -> Result<std::process::ExitStatus, HelperError> {
    request.size.validate()?;
    let (master, slave) = pty::open(request.size).context(|| "opening a pseudo-terminal".into())?;
    let mut child = pty::spawn_session(&request.command, None, &slave)
        .context(|| "starting the command on the terminal".into())?;
    drop(slave);
    let pid = Pid::from_child(&child);
    let exited = rustix::process::pidfd_open(pid, PidfdFlags::empty())
        .context(|| "watching the command's exit".into())?;
    let mut relay = Relay {
        master,
        pending: Vec::new(),
        frames: Vec::new(),
        stdin_open: true,
    };
    // A broken stdout (the caller went away) ends the relay; dropping the
    // master then hangs the session up, so the wait ends too.
    let _ = relay.pump(&exited);
    drop(relay);
    child.wait().context(|| "waiting for the command".into())
}

struct Relay {
    master: OwnedFd,
    /// Input not yet taken by the terminal.
    pending: Vec<u8>,
    /// Bytes of stdin not yet a whole frame.
    frames: Vec<u8>,
    stdin_open: bool,
}

impl Relay {
    /// Moves bytes both ways until the command has exited and its
    /// output is read.
    fn pump(&mut self, exited: &OwnedFd) -> io::Result<()> {
        let stdin = io::stdin();
        let mut out = io::stdout().lock();
        loop {
            let mut master_flags = PollFlags::IN;
            if !self.pending.is_empty() {
                master_flags |= PollFlags::OUT;
            }
            // No events asked of stdout: it reports an error once the
            // caller closed its end.
            let mut fds = vec![
                PollFd::new(&self.master, master_flags),
                PollFd::new(exited, PollFlags::IN),
                PollFd::new(&out, PollFlags::empty()),
            ];
            // A closed stdin would report a hang-up on every poll.
            if self.stdin_open {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let fired: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            if fired[2] {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if fired[0] && !self.read_terminal(&mut out)? {
                return Ok(());
            }
            if fired.get(3) == Some(&true) {
                self.read_input(&stdin)?;
            }
            let exit = fired[1];
            self.write_terminal()?;
            if exit {
                // What it wrote before it exited is all in the master now.
                while self.read_terminal(&mut out)? {}
                return Ok(());
            }
        }
    }

    /// Copies what the terminal has to stdout; `false` once there is
    /// nothing (more) to read for now or ever.
    fn read_terminal(&mut self, out: &mut impl Write) -> io::Result<bool> {
        let mut buf = [0u8; CHUNK];
        match rustix::io::read(&self.master, &mut buf) {
            Ok(0) => Ok(false),
            Ok(n) => {
                out.write_all(&buf[..n])?;
                out.flush()?;
                Ok(true)
            }
            Err(Errno::INTR) => Ok(true),
            // EAGAIN: nothing now; EIO: every slave is closed.
            Err(_) => Ok(false),
        }
    }

    /// Takes what stdin has (read from the descriptor itself: a buffer
    /// in between would hide data from `poll`).
    fn read_input(&mut self, stdin: &io::Stdin) -> io::Result<()> {
        let mut buf = [0u8; CHUNK];
        let n = match rustix::io::read(stdin.as_fd(), &mut buf) {
            Ok(n) => n,
            Err(Errno::INTR | Errno::AGAIN) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            self.stdin_open = false;
            return Ok(());
        }
        self.frames.extend_from_slice(&buf[..n]);
        let mut used = 0;
        while let Some((frame, len)) =
            PtyFrame::decode(&self.frames[used..]).map_err(io::Error::other)?
        {
            used += len;
            match frame {
                PtyFrame::Input(bytes) => self.pending.extend_from_slice(&bytes),
                PtyFrame::Resize(size) => pty::set_size(&self.master, size)?,
            }
        }
        self.frames.drain(..used);
        Ok(())
    }

    /// Types what input the terminal takes now (the master is
    /// non-blocking: the rest waits for room).
    fn write_terminal(&mut self) -> io::Result<()> {
        while !self.pending.is_empty() {
            match rustix::io::write(&self.master, &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Ends this process as the command ended: its exit code, or the same
/// signal (128+N where the signal does not end this process).
fn exit_like(status: std::process::ExitStatus) -> i32 {
    if let Some(signal) = status.signal() {
        if let Some(sig) = Signal::from_named_raw(signal) {
            let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
        }
        return 128 + signal;
    }
    status.code().unwrap_or(1)
}
