//! Task identity and state.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A task id: exactly 32 lowercase hexadecimal characters (128 bits).
///
/// The only way to get one is [`TaskId::parse`] (or serde, which calls it),
/// so a value of this type is always valid.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

/// Why a string is not a task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIdError(String);

impl fmt::Display for TaskIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task_id must be 32 lowercase hexadecimal characters (^[0-9a-f]{{32}}$), got {:?}",
            self.0
        )
    }
}

impl std::error::Error for TaskIdError {}

impl TaskId {
    pub const LEN: usize = 32;

    pub fn parse(s: &str) -> Result<Self, TaskIdError> {
        let valid = s.len() == Self::LEN
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if valid {
            Ok(Self(s.to_owned()))
        } else {
            Err(TaskIdError(s.chars().take(80).collect()))
        }
    }

    /// Builds an id from 16 random bytes (the caller supplies them from the
    /// OS CSPRNG; this crate does no I/O).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        use fmt::Write;
        let mut s = String::with_capacity(Self::LEN);
        for b in bytes {
            let _ = write!(s, "{b:02x}");
        }
        Self(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0)
    }
}

impl FromStr for TaskId {
    type Err = TaskIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for TaskId {
    type Error = TaskIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.0
    }
}

/// The state of a task, as docs/tools.md (get_task) defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
    Unknown,
}

impl TaskState {
    /// Terminal states never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Cancelled | Self::TimedOut
        )
    }

    /// Settled states are the last a reader will see: the terminal ones,
    /// and `unknown`, where the supervisor is gone without recording a
    /// result, so polling for a change is pointless.
    pub fn is_settled(self) -> bool {
        self.is_terminal() || self == Self::Unknown
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed_out",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_32_lowercase_hex_is_a_task_id() {
        assert!(TaskId::parse("0123456789abcdef0123456789abcdef").is_ok());
        for bad in [
            "",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789abcdeg0123456789abcdef",
            "../../../../etc/passwd0123456789",
        ] {
            let err = TaskId::parse(bad).unwrap_err();
            assert!(err.to_string().contains("task_id"), "{err}");
        }
    }

    #[test]
    fn serde_rejects_invalid_ids() {
        let ok: TaskId = serde_json::from_str("\"ffffffffffffffffffffffffffffffff\"").unwrap();
        assert_eq!(ok.as_str(), "ffffffffffffffffffffffffffffffff");
        assert!(serde_json::from_str::<TaskId>("\"nope\"").is_err());
    }

    #[test]
    fn from_bytes_is_lowercase_hex() {
        let id = TaskId::from_bytes([0xAB; 16]);
        assert_eq!(id.as_str(), "abababababababababababababababab");
        assert!(TaskId::parse(id.as_str()).is_ok());
    }

    #[test]
    fn states_serialize_as_spec_names() {
        use TaskState::*;
        for (state, name) in [
            (Running, "running"),
            (Succeeded, "succeeded"),
            (Failed, "failed"),
            (Cancelled, "cancelled"),
            (TimedOut, "timed_out"),
            (Unknown, "unknown"),
        ] {
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(state.to_string(), name);
        }
    }

    #[test]
    fn only_running_is_unsettled_and_unknown_is_not_terminal() {
        use TaskState::*;
        for (state, terminal, settled) in [
            (Running, false, false),
            (Succeeded, true, true),
            (Failed, true, true),
            (Cancelled, true, true),
            (TimedOut, true, true),
            (Unknown, false, true),
        ] {
            assert_eq!(state.is_terminal(), terminal, "{state} terminal");
            assert_eq!(state.is_settled(), settled, "{state} settled");
        }
    }
}
