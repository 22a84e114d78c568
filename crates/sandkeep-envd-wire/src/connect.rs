//! The Connect protocol's framing with the JSON codec, as envd speaks it:
//! unary calls carry a bare JSON body (`application/json`); streams carry
//! envelopes `flags (1 byte) | length (4 bytes, big-endian) | JSON`
//! (`application/connect+json`), the last one flagged end-stream and
//! holding `{}` or `{"error": …}`. Errors are `{code, message}` with a
//! string code.

use serde::{Deserialize, Serialize};

/// The content type of a unary call, both ways.
pub const UNARY_JSON: &str = "application/json";
/// The content type of a stream, both ways.
pub const STREAM_JSON: &str = "application/connect+json";

/// The bytes before an envelope's message: its flags and length.
pub const HEADER_LEN: usize = 5;
/// Envelope flag of a compressed message (sandkeep sends none, accepts none).
pub const COMPRESSED: u8 = 0x01;
/// Envelope flag of the last message of a stream.
pub const END_STREAM: u8 = 0x02;

/// One enveloped message.
pub fn frame(flags: u8, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + message.len());
    out.push(flags);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// One stream message, enveloped.
pub fn envelope(message: &impl Serialize) -> Vec<u8> {
    frame(0, &to_json(message))
}

/// The end-stream envelope, with the error if the stream failed.
pub fn end_stream(error: Option<&Error>) -> Vec<u8> {
    let end = EndStream {
        error: error.cloned(),
    };
    frame(END_STREAM, &to_json(&end))
}

/// The flags and the announced message length of the envelope that starts
/// `buf`, once its header is there.
pub fn read_header(buf: &[u8]) -> Option<(u8, usize)> {
    let header: [u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    Some((header[0], len as usize))
}

/// Envelopes taken from a byte stream as its chunks come, whatever their
/// boundaries: a stream's messages are acted on one by one as they arrive.
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
}

/// One envelope: its flags and its message.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub flags: u8,
    pub message: Vec<u8>,
}

impl Frames {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The flags and length the next envelope announces, once its header
    /// is there: a reader with a limit refuses a length before it holds it.
    pub fn announced(&self) -> Option<(u8, usize)> {
        read_header(&self.buf)
    }

    /// The next envelope, once all of it is there.
    pub fn pop(&mut self) -> Option<Frame> {
        let (flags, len) = self.announced()?;
        let end = HEADER_LEN.checked_add(len)?;
        if self.buf.len() < end {
            return None;
        }
        let message = self.buf[HEADER_LEN..end].to_vec();
        self.buf.drain(..end);
        Some(Frame { flags, message })
    }

    /// What was pushed of an envelope that is not whole yet.
    pub fn partial(&self) -> &[u8] {
        &self.buf
    }
}

/// A message as JSON; the messages of this crate always serialize, so a
/// failure (a caller's own type) degrades to the empty message.
pub fn to_json(message: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec())
}

/// Connect's error codes, as envd returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    ResourceExhausted,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
}

impl Code {
    /// The code as the wire spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::FailedPrecondition => "failed_precondition",
            Self::ResourceExhausted => "resource_exhausted",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code (Connect's table).
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidArgument | Self::FailedPrecondition => 400,
            Self::DeadlineExceeded => 504,
            Self::NotFound => 404,
            Self::ResourceExhausted => 429,
            Self::AlreadyExists => 409,
            Self::Unimplemented => 501,
            Self::Internal => 500,
            Self::Unavailable => 503,
            Self::Unauthenticated => 401,
        }
    }
}

/// A Connect error: the body of a failed unary call, or the `error` of an
/// end-stream message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    pub code: String,
    pub message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code: code.name().to_owned(),
            message: message.into(),
        }
    }
}

/// The end-stream message.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EndStream {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
}

/// The empty message (`{}`), the answer of SendInput, CloseStdin,
/// SendSignal and Remove.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_carry_flags_length_and_json() {
        let e = envelope(&Empty {});
        assert_eq!(e, b"\x00\x00\x00\x00\x02{}");
        assert_eq!(read_header(&e), Some((0, 2)));
        assert_eq!(read_header(&e[..4]), None);
        assert_eq!(end_stream(None), b"\x02\x00\x00\x00\x02{}");
        let failed = end_stream(Some(&Error::new(Code::NotFound, "gone")));
        assert_eq!(
            &failed[HEADER_LEN..],
            br#"{"error":{"code":"not_found","message":"gone"}}"#
        );
        assert_eq!(failed[0], END_STREAM);
    }

    #[test]
    fn frames_come_whole_whatever_the_chunks() {
        let stream = [envelope(&Empty {}), frame(0, b"[1,2]"), end_stream(None)].concat();
        for size in 1..=stream.len() {
            let mut frames = Frames::default();
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                frames.push(chunk);
                while let Some(f) = frames.pop() {
                    got.push((f.flags, f.message));
                }
            }
            assert_eq!(
                got,
                vec![
                    (0, b"{}".to_vec()),
                    (0, b"[1,2]".to_vec()),
                    (END_STREAM, b"{}".to_vec())
                ],
                "chunks of {size}"
            );
            assert!(frames.partial().is_empty());
        }
        let mut frames = Frames::default();
        frames.push(&stream[..6]);
        assert_eq!(frames.pop(), None);
        assert_eq!(frames.announced(), Some((0, 2)));
        assert_eq!(frames.partial().len(), 6);
    }
}
