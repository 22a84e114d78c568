//! An interactive task's input queue (SPEC.md §15): the bytes send_input
//! accepted, held in the task's directory until the supervisor has written
//! them to the task, so input outlives whichever server accepted it.
//!
//! Layout, in the task directory's `input/` (created by the supervisor
//! before its first record, only for interactive tasks):
//!
//! - `NNNNNNNNNNNNNNNNNNNN` (20 digits): one accepted call's bytes, written
//!   to `tmp` and renamed into place whole, so the supervisor never sees
//!   part of one. Numbers grow in the order calls were accepted (each is
//!   one more than the largest present), and the supervisor always takes
//!   the smallest present: that is the order of delivery.
//! - `closed`: a caller closed stdin. Created after that caller's last
//!   chunk; nothing is accepted after it.
//!
//! Writers (the helper's `input` and `resize` verbs) serialise on a lock
//! of the directory; the supervisor needs none: it only reads whole
//! chunks and removes a chunk once every byte of it was written to the
//! task. It keeps how far it got into the current chunk in memory; losing
//! that with the supervisor loses nothing that could still be delivered,
//! since the task's stdin goes with it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::taskdir::TaskDir;

const TEMP: &str = "tmp";
const CLOSED: &str = "closed";
const DIGITS: usize = 20;

fn file_flags() -> OFlags {
    OFlags::CLOEXEC | OFlags::NOFOLLOW
}

/// The `input/` directory of one task.
pub struct InputQueue {
    fd: OwnedFd,
}

/// Held while a writer checks and appends; released on drop.
pub struct QueueLock {
    _fd: OwnedFd,
}

impl InputQueue {
    /// The task's queue; `None` for a task started without input.
    pub fn open(dir: &TaskDir) -> io::Result<Option<Self>> {
        Ok(dir.open_input_dir()?.map(|fd| Self { fd }))
    }

    pub fn lock(&self) -> io::Result<QueueLock> {
        let fd = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::flock(&fd, FlockOperation::LockExclusive)?;
        Ok(QueueLock { _fd: fd })
    }

    pub fn is_closed(&self) -> io::Result<bool> {
        match rustix::fs::statat(&self.fd, CLOSED, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The chunks present, smallest (oldest) first.
    fn chunks(&self) -> io::Result<Vec<u64>> {
        let mut numbers = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name.len() == DIGITS
                && name.iter().all(u8::is_ascii_digit)
                && let Some(n) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok())
            {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Bytes accepted and not yet completely written to the task (a chunk
    /// the supervisor is part way through counts whole).
    pub fn backlog(&self, _lock: &QueueLock) -> io::Result<u64> {
        let mut total = 0;
        for n in self.chunks()? {
            match rustix::fs::statat(&self.fd, name_of(n), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => total += st.st_size as u64,
                // Delivered and removed meanwhile.
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(total)
    }

    /// Appends one chunk, whole or not at all.
    pub fn push(&self, _lock: &QueueLock, bytes: &[u8]) -> io::Result<()> {
        let next = self.chunks()?.last().map_or(0, |n| n + 1);
        let fd = rustix::fs::openat(
            &self.fd,
            TEMP,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | file_flags(),
            Mode::from_raw_mode(0o600),
        )?;
        File::from(fd).write_all(bytes)?;
        rustix::fs::renameat(&self.fd, TEMP, &self.fd, name_of(next))?;
        Ok(())
    }

    /// Marks stdin closed, after every chunk pushed so far.
    pub fn close(&self, _lock: &QueueLock) -> io::Result<()> {
        rustix::fs::openat(
            &self.fd,
            CLOSED,
            OFlags::WRONLY | OFlags::CREATE | file_flags(),
            Mode::from_raw_mode(0o600),
        )?;
        Ok(())
    }

    /// The oldest chunk, read whole; `None` when the queue is empty.
    fn first(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        for n in self.chunks()? {
            let fd = match rustix::fs::openat(
                &self.fd,
                name_of(n),
                OFlags::RDONLY | file_flags(),
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut bytes = Vec::new();
            File::from(fd).read_to_end(&mut bytes)?;
            return Ok(Some((n, bytes)));
        }
        Ok(None)
    }

    fn remove(&self, n: u64) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name_of(n), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Empties the queue for good: the task no longer reads its stdin.
    fn abandon(&self) {
        if let Ok(lock) = self.lock() {
            let _ = self.close(&lock);
            for n in self.chunks().unwrap_or_default() {
                let _ = self.remove(n);
            }
        }
    }
}

fn name_of(n: u64) -> String {
    format!("{n:0DIGITS$}")
}

/// What closing stdin means for this task's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eof {
    /// Close the pipe: the task reads end-of-file.
    ClosePipe,
    /// Type `^D` on the terminal (its line discipline makes that an
    /// end-of-file for a reader in canonical mode); the terminal stays.
    ControlD,
}

/// Bytes being written to the task: a chunk (removed from the queue once
/// written whole) or the terminal's `^D`.
struct Pending {
    chunk: Option<u64>,
    bytes: Vec<u8>,
    written: usize,
}

/// The supervisor's side: moves queued chunks into the task's stdin
/// without ever blocking.
pub struct Pump {
    queue: InputQueue,
    /// The pipe's write end or the terminal's master, non-blocking; `None`
    /// once input is over.
    target: Option<OwnedFd>,
    eof: Eof,
    pending: Option<Pending>,
    /// The last write found the target full: wait until it is writable.
    blocked: bool,
}

impl Pump {
    /// `target` must be non-blocking.
    pub fn new(queue: InputQueue, target: OwnedFd, eof: Eof) -> Self {
        Self {
            queue,
            target: Some(target),
            eof,
            pending: None,
            blocked: false,
        }
    }

    /// The descriptor to poll for writability, while a write waits on it.
    pub fn waiting_on(&self) -> Option<&OwnedFd> {
        self.target.as_ref().filter(|_| self.blocked)
    }

    /// Writes what is queued until the queue is empty or the target full.
    pub fn pump(&mut self) {
        self.blocked = false;
        while self.target.is_some() {
            if self.pending.is_none() {
                match self.next_pending() {
                    Ok(Some(p)) => self.pending = Some(p),
                    Ok(None) => return,
                    // An unreadable queue is retried at the next wake-up.
                    Err(_) => return,
                }
            }
            let (Some(target), Some(pending)) = (&self.target, self.pending.as_mut()) else {
                // The end of a pipe's input: nothing is left to write.
                return;
            };
            if pending.written < pending.bytes.len() {
                match rustix::io::write(target, &pending.bytes[pending.written..]) {
                    Ok(n) => pending.written += n,
                    Err(Errno::INTR) => continue,
                    Err(Errno::AGAIN) => {
                        self.blocked = true;
                        return;
                    }
                    // The reader is gone (EPIPE) or the terminal hung up:
                    // nothing queued can be delivered any more.
                    Err(_) => {
                        self.target = None;
                        self.queue.abandon();
                        return;
                    }
                }
                continue;
            }
            let done = self.pending.take().expect("set just above");
            match done.chunk {
                Some(n) => {
                    let _ = self.queue.remove(n);
                }
                // The ^D is out: nothing follows it.
                None => self.target = None,
            }
        }
    }

    /// The next bytes to write: the oldest chunk, else the end of input
    /// once stdin is closed and every chunk before that is written.
    fn next_pending(&mut self) -> io::Result<Option<Pending>> {
        // Closed is looked at first: it is created after the closer's
        // last chunk, so when it is seen every chunk is already in place.
        let closed = self.queue.is_closed()?;
        if let Some((n, bytes)) = self.queue.first()? {
            return Ok(Some(Pending {
                chunk: Some(n),
                bytes,
                written: 0,
            }));
        }
        if !closed {
            return Ok(None);
        }
        match self.eof {
            Eof::ClosePipe => {
                self.target = None;
                Ok(None)
            }
            Eof::ControlD => Ok(Some(Pending {
                chunk: None,
                bytes: vec![0x04],
                written: 0,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::pipe::{PipeFlags, pipe_with};

    fn queue() -> (tempfile::TempDir, TaskDir, InputQueue) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open_path(tmp.path().to_owned()).unwrap();
        dir.create_input_dir().unwrap();
        let q = InputQueue::open(&dir).unwrap().unwrap();
        (tmp, dir, q)
    }

    fn drain(fd: &OwnedFd) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = rustix::io::read(fd, &mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn chunks_are_delivered_in_order_once_then_eof() {
        let (_tmp, dir, q) = queue();
        let (r, w) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).unwrap();
        let lock = q.lock().unwrap();
        q.push(&lock, b"one ").unwrap();
        q.push(&lock, b"two ").unwrap();
        assert_eq!(q.backlog(&lock).unwrap(), 8);
        drop(lock);
        let mut pump = Pump::new(InputQueue::open(&dir).unwrap().unwrap(), w, Eof::ClosePipe);
        pump.pump();
        pump.pump();
        assert_eq!(drain(&r), b"one two ");
        let lock = q.lock().unwrap();
        assert_eq!(q.backlog(&lock).unwrap(), 0);
        q.push(&lock, b"three").unwrap();
        q.close(&lock).unwrap();
        drop(lock);
        pump.pump();
        // End of file: the write end is closed, so the read sees 0.
        assert_eq!(drain(&r), b"three");
        assert!(pump.target.is_none());
    }

    #[test]
    fn a_full_target_waits_and_resumes_where_it_stopped() {
        let (_tmp, _dir, q) = queue();
        let (r, w) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).unwrap();
        let size = rustix::pipe::fcntl_getpipe_size(&w).unwrap();
        let big: Vec<u8> = (0..size * 3).map(|i| (i % 251) as u8).collect();
        let lock = q.lock().unwrap();
        q.push(&lock, &big).unwrap();
        drop(lock);
        let mut pump = Pump::new(q, w, Eof::ControlD);
        let mut got = Vec::new();
        for _ in 0..10 {
            pump.pump();
            got.extend(drain(&r));
        }
        assert_eq!(got, big);
        assert!(pump.waiting_on().is_none());
    }
}
