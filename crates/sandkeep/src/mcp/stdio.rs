//! `sandkeep serve` over stdio: one session for the process's lifetime.
//!
//! stdout carries protocol only. The protocol writer gets its own copy of
//! the original stdout, and fd 1 is then pointed at stderr, so a stray
//! print (ours, a library's, or a child process that inherited fd 1)
//! cannot corrupt the JSON-RPC stream. The session ends on stdin EOF,
//! SIGTERM or SIGINT: the destruction set is destroyed, then the process
//! exits without waiting for the (uncancellable) stdin read.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::signal::unix::{SignalKind, signal};

use super::{SandkeepMcp, Whereabouts};
use crate::service::{Service, Session};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Serves MCP on stdin/stdout until the session ends; returns the exit
/// code.
pub fn run(service: Arc<Service>, whereabouts: Whereabouts) -> i32 {
    let Some(runtime) = crate::runtime::serve_runtime() else {
        return 1;
    };
    let code = runtime.block_on(serve(service, whereabouts));
    // A blocking stdin read may still be pending; do not wait for it.
    runtime.shutdown_background();
    code
}

async fn serve(service: Arc<Service>, whereabouts: Whereabouts) -> i32 {
    let (reader, writer) = match protocol_streams() {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("sandkeep serve: cannot set up stdin/stdout for MCP: {e}");
            return 1;
        }
    };
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("sandkeep serve: cannot install signal handlers: {e}");
            return 1;
        }
    };
    let session = Arc::new(Session::new());
    let handler =
        SandkeepMcp::stdio(service.clone(), session.clone()).with_whereabouts(whereabouts);
    let connection = async move {
        match handler.serve((reader, writer)).await {
            Ok(running) => {
                let reason = running.waiting().await;
                tracing::info!(?reason, "MCP connection closed");
            }
            // A notification as first message, or EOF before any request,
            // is a client that went away: a normal end, not a crash.
            Err(e) => tracing::info!("MCP connection ended before a session was established: {e}"),
        }
    };
    tokio::select! {
        () = connection => {}
        _ = term.recv() => tracing::info!("SIGTERM: ending the session"),
        _ = int.recv() => tracing::info!("SIGINT: ending the session"),
    }
    let end = service.end_session(&session).await;
    tracing::info!(
        destroyed = %super::id_list(&end.destroyed),
        kept = %super::id_list(&end.kept),
        retained = %super::id_list(&session.retained()),
        "session ended"
    );
    for (id, why) in &end.failed {
        tracing::warn!("could not destroy sandbox {id} ({why}); it is destroyed at its deadline");
    }
    0
}

/// The protocol's stdin and stdout, and fd 1 redirected to stderr.
fn protocol_streams() -> std::io::Result<(Reader, Writer)> {
    // Close-on-exec: children must not inherit the protocol channel.
    let out: OwnedFd = rustix::io::fcntl_dupfd_cloexec(std::io::stdout().as_fd(), 3)?;
    rustix::stdio::dup2_stdout(std::io::stderr().as_fd())?;
    let reader: Reader = match reopen_fifo(std::io::stdin().as_raw_fd(), false) {
        Some(fd) => Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?),
        None => Box::new(tokio::io::stdin()),
    };
    let writer: Writer = match reopen_fifo(out.as_raw_fd(), true) {
        Some(fd) => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        None => Box::new(tokio::fs::File::from_std(File::from(out))),
    };
    Ok((reader, writer))
}

/// MCP clients connect pipes; a FIFO is reopened with O_NONBLOCK on its
/// own open file description so it runs on the reactor without changing the
/// flags children inherit. Anything else uses tokio's blocking wrappers.
fn reopen_fifo(fd: i32, write: bool) -> Option<OwnedFd> {
    let path = format!("/proc/self/fd/{fd}");
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(path)
        .ok()?;
    file.metadata()
        .ok()?
        .file_type()
        .is_fifo()
        .then(|| file.into())
}
