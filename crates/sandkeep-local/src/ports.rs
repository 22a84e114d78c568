//! The provider's side of a sandbox's port forwards (SPEC.md §14): the
//! request a server process sends the sandbox's keeper, and the record of
//! the forwards the keeper keeps (`ports.json`), which any server reads.
//!
//! The server binds the host listener itself (on its `--expose-addr`) and
//! hands it over with the request; from then on it is the keeper's (see
//! `forward`), so the forward outlives the server that asked for it.

use std::io;
use std::net::{IpAddr, TcpListener};
use std::os::fd::AsFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::state::{self, SandboxDir};
use super::wire;
use sandkeep_proto::limits::PORTS_MAX;
use sandkeep_provider::{Port, PortForward};

/// How long a server waits for the keeper's answer; it answers from a
/// loop that never blocks, so only a keeper that is gone or stuck takes it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// What a server asks the keeper, with the listener attached.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub port: Port,
}

/// The keeper's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// The port's forward: the one just made, or the one it already had
    /// (the attached listener is then closed).
    Exposed(PortForward),
    /// Nothing was made, and why.
    Failed(String),
    /// Nothing was made: the sandbox has all the forwards it may have.
    Full,
}

/// Why a forward was not made.
#[derive(Debug, thiserror::Error)]
pub enum ExposeError {
    /// The keeper could not be asked (the sandbox is going or gone).
    #[error("cannot reach the sandbox's keeper: {0}")]
    Unreachable(#[source] io::Error),
    /// The host listener could not be made.
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: IpAddr,
        #[source]
        source: io::Error,
    },
    /// The keeper refused, in its words.
    #[error("{0}")]
    Refused(String),
    /// The sandbox has [`PORTS_MAX`] forwards already.
    #[error(
        "the sandbox has {PORTS_MAX} port forwards, the most one may have; they end with the \
         sandbox (a new sandbox has none)"
    )]
    Full,
}

/// The forwards the sandbox has, by port (none when it has no record).
pub fn read(dir: &SandboxDir) -> Vec<PortForward> {
    state::read_json(&dir.ports()).unwrap_or_default()
}

/// The sandbox's forward of `port`, made with a listener on `addr` (a free
/// port) unless it has one already.
pub fn expose(dir: &SandboxDir, port: Port, addr: IpAddr) -> Result<PortForward, ExposeError> {
    // The common repeat needs no listener and no trip to the keeper.
    if let Some(known) = read(dir).into_iter().find(|f| f.port == port) {
        return Ok(known);
    }
    let listener =
        TcpListener::bind((addr, 0)).map_err(|source| ExposeError::Listen { addr, source })?;
    let conn = wire::connect(&dir.ports_socket()).map_err(ExposeError::Unreachable)?;
    let body = serde_json::to_vec(&Request { port }).map_err(io::Error::other);
    let body = body.map_err(ExposeError::Unreachable)?;
    wire::send(&conn, &body, &[listener.as_fd()]).map_err(ExposeError::Unreachable)?;
    drop(listener);
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Recv,
        Some(ANSWER_TIMEOUT),
    )
    .map_err(|e| ExposeError::Unreachable(e.into()))?;
    let mut buf = [0u8; 4096];
    let (n, _) = wire::recv(&conn, &mut buf).map_err(ExposeError::Unreachable)?;
    if n == 0 {
        return Err(ExposeError::Unreachable(io::Error::other(
            "the keeper hung up without an answer (the sandbox is going away)",
        )));
    }
    match serde_json::from_slice(&buf[..n]) {
        Ok(Reply::Exposed(forward)) => Ok(forward),
        Ok(Reply::Failed(why)) => Err(ExposeError::Refused(why)),
        Ok(Reply::Full) => Err(ExposeError::Full),
        Err(e) => Err(ExposeError::Unreachable(io::Error::other(format!(
            "unreadable answer: {e}"
        )))),
    }
}
