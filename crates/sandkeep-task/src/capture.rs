//! One output stream of a task on its way to its log: redaction, then the
//! 1 MiB cap (SPEC.md §5).
//!
//! Owns what is saved and whether anything was dropped. It must never
//! block the task: beyond the cap, input is accepted and dropped. Reading
//! the pipe and recording the truncation flag belong to the supervisor.

use std::fs::File;
use std::io::Write;

use sandkeep_proto::limits::LOG_CAP_BYTES;

use crate::redact::Redactor;

/// What a call changed that the supervisor must record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Saved {
    /// Nothing the record shows changed.
    Unchanged,
    /// This call dropped the first byte: the log is truncated from now on.
    NowTruncated,
}

pub struct Capture {
    redactor: Redactor,
    log: File,
    saved: u64,
    /// False once the cap is reached or the log cannot be written: the
    /// rest is dropped.
    saving: bool,
    truncated: bool,
    scratch: Vec<u8>,
}

impl Capture {
    pub fn new(log: File, redactor: Redactor) -> Self {
        Self {
            redactor,
            log,
            saved: 0,
            saving: true,
            truncated: false,
            scratch: Vec::new(),
        }
    }

    #[cfg(test)]
    fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// True once every further byte will be dropped: the reader may then
    /// discard input without handing it over, and report it with
    /// [`Capture::dropped`].
    pub fn is_dropping(&self) -> bool {
        !self.saving
    }

    /// Takes the next bytes read from the task.
    pub fn take(&mut self, raw: &[u8]) -> Saved {
        if raw.is_empty() {
            return Saved::Unchanged;
        }
        if !self.saving {
            return self.mark_truncated();
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        self.redactor.push(raw, &mut out);
        let change = self.save(&out);
        self.scratch = out;
        change
    }

    /// `n` bytes were discarded without being handed over.
    pub fn dropped(&mut self, n: usize) -> Saved {
        debug_assert!(!self.saving, "only input beyond the cap may be discarded");
        if n == 0 {
            Saved::Unchanged
        } else {
            self.mark_truncated()
        }
    }

    /// The stream ended (or is abandoned): saves what redaction held back.
    pub fn finish(&mut self) -> Saved {
        let mut out = Vec::new();
        self.redactor.finish(&mut out);
        if out.is_empty() {
            return Saved::Unchanged;
        }
        if !self.saving {
            return self.mark_truncated();
        }
        self.save(&out)
    }

    fn save(&mut self, out: &[u8]) -> Saved {
        let room = (LOG_CAP_BYTES - self.saved) as usize;
        let keep = room.min(out.len());
        if self.log.write_all(&out[..keep]).is_err() {
            // A log that cannot be written (disk full) is a truncated log.
            self.saving = false;
            return self.mark_truncated();
        }
        self.saved += keep as u64;
        if self.saved == LOG_CAP_BYTES {
            self.saving = false;
        }
        if keep < out.len() {
            return self.mark_truncated();
        }
        Saved::Unchanged
    }

    fn mark_truncated(&mut self) -> Saved {
        if self.truncated {
            Saved::Unchanged
        } else {
            self.truncated = true;
            Saved::NowTruncated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn capture(secrets: Vec<Vec<u8>>) -> (Capture, tempfile::NamedTempFile) {
        let file = tempfile::NamedTempFile::new().unwrap();
        let log = file.reopen().unwrap();
        (Capture::new(log, Redactor::new(secrets)), file)
    }

    fn saved(file: &tempfile::NamedTempFile) -> Vec<u8> {
        let mut v = Vec::new();
        file.reopen().unwrap().read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn exactly_the_cap_is_not_truncated_one_more_byte_is() {
        let (mut c, f) = capture(vec![]);
        let chunk = vec![b'x'; 4096];
        for _ in 0..(LOG_CAP_BYTES / 4096) {
            assert_eq!(c.take(&chunk), Saved::Unchanged);
        }
        assert!(!c.is_truncated());
        assert!(c.is_dropping());
        assert_eq!(c.take(b"y"), Saved::NowTruncated);
        assert_eq!(c.take(b"z"), Saved::Unchanged);
        assert!(c.is_truncated());
        assert_eq!(saved(&f).len() as u64, LOG_CAP_BYTES);
    }

    #[test]
    fn cap_counts_bytes_after_redaction() {
        let (mut c, f) = capture(vec![b"abcd".to_vec()]);
        let mut input = vec![b'.'; LOG_CAP_BYTES as usize - 5];
        input.extend_from_slice(b"abcd");
        assert_eq!(c.take(&input), Saved::NowTruncated);
        let log = saved(&f);
        assert_eq!(log.len() as u64, LOG_CAP_BYTES);
        assert!(log.ends_with(b".[REDA"));
    }

    #[test]
    fn held_back_bytes_are_saved_at_the_end() {
        let (mut c, f) = capture(vec![b"secret-value".to_vec()]);
        assert_eq!(c.take(b"ok secr"), Saved::Unchanged);
        assert_eq!(saved(&f), b"ok ");
        assert_eq!(c.finish(), Saved::Unchanged);
        assert_eq!(saved(&f), b"ok secr");
    }
}
