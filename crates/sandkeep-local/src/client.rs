//! The provider's side of one fork-server call: connect to the sandbox's
//! socket, send the request with fresh pipes, pump stdin/stdout/stderr,
//! enforce the timeout and collect the exit status. A caller that stops
//! waiting hangs up, and the fork server kills the command's process group.
//! Also the one request that runs no child: a new boot id for the sandbox.
//!
//! Blocking code, run on tokio's blocking pool. It knows nothing of what the
//! request means.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::wire::{self, Reply, Request};

/// After the exit status arrives, how long to keep reading output that a
/// background process of the command may still hold open.
const DRAIN_GRACE: Duration = Duration::from_millis(50);
/// After a timeout kill, how long to wait for the fork server's answer.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// The poll slot of the caller's abandon pipe.
const ABANDONED: usize = usize::MAX;

/// The last `limit` bytes of a stream.
#[derive(Debug, Default)]
pub struct Tail {
    buf: Vec<u8>,
    limit: usize,
    total: u64,
}

impl Tail {
    fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit,
            total: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > self.limit.saturating_mul(2).max(64 * 1024) {
            let cut = self.buf.len() - self.limit;
            self.buf.drain(..cut);
        }
    }

    /// The kept bytes and whether anything was dropped.
    pub fn finish(mut self) -> (Vec<u8>, bool) {
        if self.buf.len() > self.limit {
            let cut = self.buf.len() - self.limit;
            self.buf.drain(..cut);
        }
        (self.buf, self.total > self.limit as u64)
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub stdout: Tail,
    pub stderr: Tail,
    pub timed_out: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing reached the sandbox.
    #[error("cannot reach the sandbox: {0}")]
    NotSent(#[source] io::Error),
    /// The fork server answered that it could not start the request:
    /// nothing of it ran.
    #[error("the sandbox refused the request: {0}")]
    Refused(String),
    /// The request may have run.
    #[error("{0}")]
    Unconfirmed(String),
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    rustix::io::ioctl_fionbio(fd, true)?;
    Ok(())
}

/// Runs `request` and collects its outcome. `abandoned` is the read end of
/// a pipe whose write end the caller holds while it still wants the
/// answer: once that end is closed the call hangs up at once, which makes
/// the fork server kill the command's process group.
pub fn call(
    socket: &Path,
    request: &Request,
    stdin: Option<&[u8]>,
    output_limit: usize,
    timeout: Duration,
    abandoned: BorrowedFd<'_>,
) -> Result<Outcome, CallError> {
    let started = Instant::now();
    let conn = wire::connect(socket).map_err(CallError::NotSent)?;
    let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let (out_r, out_w) = pipe().map_err(|e| CallError::NotSent(e.into()))?;
    let (err_r, err_w) = pipe().map_err(|e| CallError::NotSent(e.into()))?;
    let (in_child, mut in_ours): (OwnedFd, Option<OwnedFd>) = match stdin {
        Some(_) => {
            let (r, w) = pipe().map_err(|e| CallError::NotSent(e.into()))?;
            (r, Some(w))
        }
        None => (
            std::fs::File::open("/dev/null")
                .map_err(CallError::NotSent)?
                .into(),
            None,
        ),
    };
    let body = serde_json::to_vec(request).map_err(|e| CallError::NotSent(io::Error::other(e)))?;
    wire::send(
        &conn,
        &body,
        &[in_child.as_fd(), out_w.as_fd(), err_w.as_fd()],
    )
    .map_err(CallError::NotSent)?;
    drop((in_child, out_w, err_w));
    let unconfirmed = |what: &str, e: io::Error| CallError::Unconfirmed(format!("{what}: {e}"));
    for fd in [&out_r, &err_r, &conn] {
        nonblocking(fd).map_err(|e| unconfirmed("set non-blocking", e))?;
    }
    if let Some(w) = &in_ours {
        nonblocking(w).map_err(|e| unconfirmed("set non-blocking", e))?;
    }

    let mut input = stdin.unwrap_or_default();
    if input.is_empty() {
        in_ours = None;
    }
    let mut out = Tail::new(output_limit);
    let mut err = Tail::new(output_limit);
    let mut streams: [Option<(OwnedFd, bool)>; 2] = [Some((out_r, true)), Some((err_r, false))];
    let mut conn = Some(conn);
    let mut exit_code = None;
    let mut timed_out = false;
    let mut deadline = started + timeout;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if exit_code.is_some() && (streams.iter().all(Option::is_none) || now >= deadline) {
            break;
        }
        if exit_code.is_none() && now >= deadline {
            if timed_out {
                // The fork server never answered the kill.
                break;
            }
            timed_out = true;
            if let Some(c) = &conn {
                let _ = wire::send(c, b"kill", &[]);
            }
            deadline = now + KILL_GRACE;
            continue;
        }
        let wait = deadline - now;
        let ts = rustix::event::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let mut fds = Vec::with_capacity(5);
        let mut kinds = Vec::with_capacity(5);
        fds.push(PollFd::from_borrowed_fd(abandoned, PollFlags::IN));
        kinds.push(ABANDONED);
        if let Some(c) = &conn {
            fds.push(PollFd::new(c, PollFlags::IN));
            kinds.push(0usize);
        }
        for (i, s) in streams.iter().enumerate() {
            if let Some((fd, _)) = s {
                fds.push(PollFd::new(fd, PollFlags::IN));
                kinds.push(1 + i);
            }
        }
        if let Some(w) = &in_ours {
            fds.push(PollFd::new(w, PollFlags::OUT));
            kinds.push(3);
        }
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) => {}
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(e) => return Err(unconfirmed("poll", e.into())),
        }
        let ready: Vec<usize> = fds
            .iter()
            .zip(&kinds)
            .filter(|(f, _)| !f.revents().is_empty())
            .map(|(_, &k)| k)
            .collect();
        drop(fds);
        for k in ready {
            match k {
                ABANDONED => {
                    // Dropping `conn` on return is the hang-up the fork
                    // server answers by killing the process group.
                    return Err(CallError::Unconfirmed(
                        "the caller stopped waiting; the command was killed".into(),
                    ));
                }
                0 => {
                    let mut reply = [0u8; 4096];
                    match wire::recv(conn.as_ref().expect("polled"), &mut reply) {
                        Ok((0, _)) => {
                            conn = None;
                            if exit_code.is_none() {
                                return Err(CallError::Unconfirmed(
                                    "the sandbox went away while the command ran (killed or expired)".into(),
                                ));
                            }
                        }
                        Ok((n, _)) => match serde_json::from_slice::<Reply>(&reply[..n]) {
                            Ok(Reply::Exited(code)) => {
                                exit_code = Some(code);
                                conn = None;
                                deadline = Instant::now() + DRAIN_GRACE;
                            }
                            // A command's result counts a signal the
                            // shell's way (128+N).
                            Ok(Reply::Signaled(signal)) => {
                                exit_code = Some(128 + signal);
                                conn = None;
                                deadline = Instant::now() + DRAIN_GRACE;
                            }
                            // Sent before any fork succeeded (or instead of
                            // one): a definite non-run.
                            Ok(Reply::Failed(message)) => return Err(CallError::Refused(message)),
                            Err(e) => return Err(unconfirmed("bad reply", io::Error::other(e))),
                        },
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(unconfirmed("read the reply", e)),
                    }
                }
                1 | 2 => {
                    let slot = &mut streams[k - 1];
                    let (fd, is_out) = slot.as_ref().expect("polled");
                    match rustix::io::read(fd, &mut chunk) {
                        Ok(0) => *slot = None,
                        Ok(n) => {
                            if *is_out {
                                out.push(&chunk[..n]);
                            } else {
                                err.push(&chunk[..n]);
                            }
                        }
                        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {
                        }
                        Err(_) => *slot = None,
                    }
                }
                _ => {
                    let w = in_ours.as_ref().expect("polled");
                    match rustix::io::write(w, input) {
                        Ok(n) => {
                            input = &input[n..];
                            if input.is_empty() {
                                in_ours = None;
                            }
                        }
                        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {
                        }
                        // The command closed its stdin early: not an error.
                        Err(_) => in_ours = None,
                    }
                }
            }
        }
    }
    Ok(Outcome {
        exit_code,
        stdout: out,
        stderr: err,
        timed_out,
    })
}

/// Asks the sandbox's init for a new kernel boot id (see `boot_id`): no
/// child runs, and the answer comes within `within` or the call fails.
pub fn new_boot_id(socket: &Path, within: Duration) -> Result<(), CallError> {
    let conn = wire::connect(socket).map_err(CallError::NotSent)?;
    let body = serde_json::to_vec(&Request::NewBootId)
        .map_err(|e| CallError::NotSent(io::Error::other(e)))?;
    wire::send(&conn, &body, &[]).map_err(CallError::NotSent)?;
    let ts = rustix::event::Timespec {
        tv_sec: within.as_secs() as i64,
        tv_nsec: i64::from(within.subsec_nanos()),
    };
    let mut fds = [PollFd::new(&conn, PollFlags::IN)];
    let unconfirmed = |why: String| CallError::Unconfirmed(format!("a new boot id: {why}"));
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(0) => return Err(unconfirmed(format!("no answer within {within:?}"))),
        Ok(_) => {}
        Err(e) => return Err(unconfirmed(e.to_string())),
    }
    let mut buf = [0u8; 4096];
    let (n, _) = wire::recv(&conn, &mut buf).map_err(|e| unconfirmed(e.to_string()))?;
    match serde_json::from_slice(&buf[..n]) {
        Ok(Reply::Exited(0)) => Ok(()),
        Ok(Reply::Failed(why)) => Err(CallError::Refused(why)),
        other => Err(unconfirmed(format!("unexpected answer {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::Tail;

    #[test]
    fn tail_keeps_the_last_bytes_and_flags_truncation() {
        let mut t = Tail::new(4);
        for chunk in [&b"abc"[..], b"defgh", &[b'x'; 200_000]] {
            t.push(chunk);
        }
        t.push(b"1234");
        assert_eq!(t.finish(), (b"1234".to_vec(), true));
        let mut t = Tail::new(10);
        t.push(b"short");
        assert_eq!(t.finish(), (b"short".to_vec(), false));
    }
}
