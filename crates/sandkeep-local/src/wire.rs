//! The protocol between a provider (any server process) and a sandbox's
//! pid-1 fork server.
//!
//! One `SOCK_SEQPACKET` connection per operation: the provider sends one
//! [`Request`] with the child's stdin, stdout and stderr attached as
//! `SCM_RIGHTS`; the init forks the child and later sends one [`Reply`] when
//! it has exited. Any message from the provider meanwhile, or its hang-up,
//! makes the init kill the child's process group. This module only frames
//! messages; it decides nothing.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use serde::{Deserialize, Serialize};

/// Largest request: a 64 KiB command plus room for JSON escaping.
pub const MAX_REQUEST: usize = 512 * 1024;

/// What the fork server is asked to run in a fresh child.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// `sh -c COMMAND` in `cwd` (default: the home).
    Exec {
        command: String,
        cwd: Option<String>,
    },
    /// `argv` run directly (no shell), `argv[0]` looked up on `PATH`, with
    /// `env` added to the sandbox's environment; in `cwd` as for `Exec`.
    Run {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    /// Copies the file to stdout, or fails with [`FileOpError::TooLarge`].
    ReadFile { path: String, limit: u64 },
    /// Replaces the file with stdin's bytes; prints the count.
    WriteFile { path: String },
    /// Prints the directory's entries as JSON.
    ListFiles { path: String },
    /// No child: the init writes the sandbox a new kernel boot id (see
    /// `boot_id`) and answers `Exited(0)`, or `Failed` (a process-only
    /// sandbox shows the host's). Sent without descriptors.
    NewBootId,
}

/// A message to the fork server while its child runs. Anything that does
/// not parse as one (the historical `kill`, a hang-up) kills the child's
/// process group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Send this signal to the child itself (the group leader) only.
    Signal(i32),
}

/// The fork server's answer once the child is gone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The child exited with this code (any of 0-255).
    Exited(i32),
    /// The child was killed by this signal.
    Signaled(i32),
    /// Nothing was forked (malformed request, fork refused): the request
    /// did not run.
    Failed(String),
}

/// A file operation's failure, printed by the child on stderr as JSON with
/// exit status [`FILE_OP_FAILED`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileOpError {
    NotFound,
    TooLarge { size: u64 },
    Other { message: String },
}

pub const FILE_OP_FAILED: i32 = 3;

/// A close-on-exec unix seqpacket socket, the only kind this protocol uses.
fn seqpacket_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&fd, 64)?;
    Ok(fd)
}

pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// Sends one message with `fds` attached.
pub fn send(sock: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != bytes.len() {
        return Err(io::Error::other("short send on a packet socket"));
    }
    Ok(())
}

/// Receives one message into `buf`; returns its length (0 at hang-up) and
/// the descriptors that came with it.
pub fn recv(sock: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message larger than the receive buffer",
        ));
    }
    Ok((msg.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_as_tagged_json() {
        let r = Request::ReadFile {
            path: "a/b".into(),
            limit: 7,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"op":"read_file","path":"a/b","limit":7}"#);
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
    }

    #[test]
    fn descriptors_travel_with_the_message() {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        send(&a, b"hello", &[r.as_fd(), w.as_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 2);
        drop(a);
        assert_eq!(recv(&b, &mut buf).unwrap().0, 0);
    }
}
