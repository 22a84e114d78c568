//! The provider's side of a process that outlives the call that started it
//! ([`sandkeep_provider::Provider::spawn`]): one fork-server connection per
//! process, held for the process's life.
//!
//! The request is the ordinary `exec` of [`super::wire`], sent with fresh
//! pipes whose other ends become the caller's live stdin, stdout and
//! stderr. A thread waits on the connection for the exit status; signals
//! travel on the same connection as [`Control`] messages (the leader only),
//! and anything else on it kills the process group, as for a foreground
//! exec. When the server process goes away the connection closes and the
//! fork server kills the group: a spawned process never outlives the
//! server that holds it.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use sandkeep_provider::{
    ExitStatus, Program, ProviderError, Result, RunningProcess, SpawnRequest, Spawned,
};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::wire::{self, Control, Reply, Request};

/// What the fork server finally said: the exit status, or why none came.
type Exit = std::result::Result<ExitStatus, String>;

/// Connects, sends the request with fresh pipes, and hands the pipes over.
/// Must run inside a tokio runtime (the pipes register with its reactor).
pub fn spawn(socket: &Path, request: SpawnRequest) -> io::Result<Spawned> {
    let mk = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let (out_r, out_w) = mk()?;
    let (in_child, in_ours): (OwnedFd, Option<OwnedFd>) = if request.stdin {
        let (r, w) = mk()?;
        (r, Some(w))
    } else {
        (std::fs::File::open("/dev/null")?.into(), None)
    };
    let mut spawned = spawn_onto(socket, request.program, request.cwd, in_child, out_w)?;
    spawned.stdout = Box::new(pipe::Receiver::from_owned_fd(out_r)?);
    if let Some(fd) = in_ours {
        spawned.stdin = Some(Box::new(pipe::Sender::from_owned_fd(fd)?));
    }
    Ok(spawned)
}

/// [`spawn`] with the caller's own `stdin` and `stdout` (a snapshot's
/// archive file: the sandbox's `tar` reads or writes it directly, and no
/// byte of it passes through this process). The result has no stdin, and
/// its stdout reads nothing.
pub fn spawn_onto(
    socket: &Path,
    program: Program,
    cwd: Option<String>,
    stdin: OwnedFd,
    stdout: OwnedFd,
) -> io::Result<Spawned> {
    let conn = wire::connect(socket)?;
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let body = serde_json::to_vec(&match program {
        Program::Shell(command) => Request::Exec { command, cwd },
        Program::Argv { argv, env } => Request::Run { argv, env, cwd },
    })
    .map_err(io::Error::other)?;
    wire::send(
        &conn,
        &body,
        &[stdin.as_fd(), stdout.as_fd(), err_w.as_fd()],
    )?;
    drop((stdin, stdout, err_w));

    let conn = Arc::new(conn);
    let (exit_tx, exit_rx) = watch::channel(None);
    let waiter = Arc::clone(&conn);
    std::thread::Builder::new()
        .name("sandkeep-spawn-wait".into())
        .spawn(move || {
            let _ = exit_tx.send(Some(wait_reply(&waiter)));
        })?;
    Ok(Spawned {
        stdin: None,
        stdout: Box::new(tokio::io::empty()),
        stderr: Box::new(pipe::Receiver::from_owned_fd(err_r)?),
        process: Box::new(LocalProcess {
            conn,
            exit: exit_rx,
        }),
    })
}

/// Blocks until the fork server reports the child's end.
fn wait_reply(conn: &OwnedFd) -> Exit {
    let mut buf = [0u8; 4096];
    loop {
        match wire::recv(conn, &mut buf) {
            Ok((0, _)) => {
                return Err(
                    "the sandbox went away while the process ran (killed or expired)".into(),
                );
            }
            Ok((n, _)) => {
                return match serde_json::from_slice::<Reply>(&buf[..n]) {
                    Ok(Reply::Exited(code)) => Ok(ExitStatus::Code(code)),
                    Ok(Reply::Signaled(signal)) => Ok(ExitStatus::Signal(signal)),
                    Ok(Reply::Failed(message)) => Err(format!(
                        "the sandbox refused to start the process: {message}"
                    )),
                    Err(e) => Err(format!("unreadable answer from the sandbox: {e}")),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("lost the sandbox's answer: {e}")),
        }
    }
}

struct LocalProcess {
    conn: Arc<OwnedFd>,
    exit: watch::Receiver<Option<Exit>>,
}

impl LocalProcess {
    fn send(&self, message: &[u8]) -> Result<()> {
        wire::send(&*self.conn, message, &[]).map_err(|e| ProviderError::Io {
            context: "signal the process".into(),
            source: e,
        })
    }
}

#[async_trait]
impl RunningProcess for LocalProcess {
    fn signal(&self, signal: i32) -> Result<()> {
        let message = serde_json::to_vec(&Control::Signal(signal)).map_err(|e| {
            ProviderError::Internal(format!("cannot encode the signal request: {e}"))
        })?;
        self.send(&message)
    }

    fn kill_group(&self) -> Result<()> {
        self.send(b"kill")
    }

    async fn wait(&self) -> Result<ExitStatus> {
        let mut exit = self.exit.clone();
        let done = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ProviderError::ProcessLost("the process's waiter is gone".into()))?;
        match done.as_ref().expect("waited for Some") {
            Ok(code) => Ok(*code),
            Err(message) => Err(ProviderError::ProcessLost(message.clone())),
        }
    }
}
