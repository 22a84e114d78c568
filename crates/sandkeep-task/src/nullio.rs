//! Stand-ins for `/dev/null`, which a minimal sandbox may lack.
//!
//! Owns only the choice between `/dev/null` and an equivalent pipe.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::process::Stdio;

use rustix::pipe::{PipeFlags, pipe_with};

/// An input that reads as empty: `/dev/null`, or a pipe whose writer is
/// already closed.
pub fn empty_input() -> io::Result<Stdio> {
    if let Ok(f) = File::open("/dev/null") {
        return Ok(f.into());
    }
    let (reader, _writer) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok(reader.into())
}

/// An output that discards: `/dev/null`, or a pipe without a reader
/// (writes fail with EPIPE, which a Rust program ignores).
pub fn discarding_output() -> io::Result<OwnedFd> {
    if let Ok(f) = File::options().write(true).open("/dev/null") {
        return Ok(f.into());
    }
    let (_reader, writer) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok(writer)
}
