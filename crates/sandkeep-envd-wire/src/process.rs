//! The process service's messages (`/process.Process/*`).
//!
//! Decoding is lenient, as envd's SDKs are: missing fields take their
//! defaults and unknown ones are ignored. Encoding writes what envd writes
//! (absent options left out).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What to run: `cmd` with `args`, `envs` added to the environment, in
/// `cwd` (the user's home when absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessConfig {
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Start's request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StartRequest {
    pub process: ProcessConfig,
    /// A pseudo-terminal for the process: its output then comes as
    /// `data.pty`, and input goes to it as `input.pty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Whether stdin is a pipe; unset means true (envd ≥ 0.3.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
}

/// A pseudo-terminal's settings (Start, Update).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Pty {
    #[serde(default)]
    pub size: PtySize,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct PtySize {
    #[serde(default)]
    pub cols: u32,
    #[serde(default)]
    pub rows: u32,
}

/// Update's request: a PTY process's new size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UpdateRequest {
    #[serde(default)]
    pub process: Selector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

/// Which process a call is for: envd's pid, or the tag it was started with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

impl Selector {
    pub fn pid(pid: u32) -> Self {
        Self {
            pid: Some(pid),
            tag: None,
        }
    }
}

/// The request of Connect and CloseStdin.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SelectRequest {
    #[serde(default)]
    pub process: Selector,
}

/// Input for a process: base64 bytes for its stdin (or its pty).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Input {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<String>,
}

impl Input {
    pub fn stdin(bytes: &[u8]) -> Self {
        Self {
            stdin: Some(crate::base64_bytes::encode(bytes)),
            pty: None,
        }
    }
}

/// SendInput's request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SendInputRequest {
    #[serde(default)]
    pub process: Selector,
    #[serde(default)]
    pub input: Input,
}

/// SendSignal's request. The signal is an enum name
/// (`SIGNAL_SIGKILL`) in proto3 JSON; its number is accepted too.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SendSignalRequest {
    #[serde(default)]
    pub process: Selector,
    #[serde(default)]
    pub signal: serde_json::Value,
}

impl SendSignalRequest {
    /// The signal's number, if it is one envd sends (SIGTERM or SIGKILL).
    pub fn number(&self) -> Option<i32> {
        match &self.signal {
            serde_json::Value::String(s) if s == "SIGNAL_SIGKILL" => Some(9),
            serde_json::Value::String(s) if s == "SIGNAL_SIGTERM" => Some(15),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(n @ (9 | 15)) => Some(n as i32),
                _ => None,
            },
            _ => None,
        }
    }
}

/// One message of a StreamInput client stream: a start naming the
/// process, then data, and keepalives while there is none (a oneof).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamInputRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<SelectRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<crate::connect::Empty>,
}

impl StreamInputRequest {
    pub fn start(process: Selector) -> Self {
        Self {
            start: Some(SelectRequest { process }),
            ..Self::default()
        }
    }

    pub fn stdin(bytes: &[u8]) -> Self {
        Self {
            data: Some(DataInput {
                input: Input::stdin(bytes),
            }),
            ..Self::default()
        }
    }

    pub fn keepalive() -> Self {
        Self {
            keepalive: Some(crate::connect::Empty {}),
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DataInput {
    #[serde(default)]
    pub input: Input,
}

/// One message of a Start or Connect stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventMessage {
    pub event: Event,
}

/// envd's process event, a oneof: `start` always first, then `data` and
/// `keepalive`, then `end`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    Start { pid: u32 },
    Data(Data),
    End(End),
    Keepalive {},
}

/// A chunk of output, base64.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Data {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<String>,
}

impl Data {
    pub fn stdout(bytes: &[u8]) -> Self {
        Self {
            stdout: Some(crate::base64_bytes::encode(bytes)),
            ..Self::default()
        }
    }

    pub fn stderr(bytes: &[u8]) -> Self {
        Self {
            stderr: Some(crate::base64_bytes::encode(bytes)),
            ..Self::default()
        }
    }

    pub fn pty(bytes: &[u8]) -> Self {
        Self {
            pty: Some(crate::base64_bytes::encode(bytes)),
            ..Self::default()
        }
    }
}

/// How a process ended. envd reports an exit as `exited` with its code
/// and `exit status N`, and a signal death as exit code -1, not exited,
/// and Go's `signal: NAME`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct End {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub exited: bool,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Linux's signals as Go's `syscall.Signal` names them in envd's
/// statuses (`signal: killed`); a number past the table is Go's
/// `signal N`.
const SIGNAL_NAMES: &[&str] = &[
    "hangup",
    "interrupt",
    "quit",
    "illegal instruction",
    "trace/breakpoint trap",
    "aborted",
    "bus error",
    "floating point exception",
    "killed",
    "user defined signal 1",
    "segmentation fault",
    "user defined signal 2",
    "broken pipe",
    "alarm clock",
    "terminated",
    "stack fault",
    "child exited",
    "continued",
    "stopped (signal)",
    "stopped",
    "stopped (tty input)",
    "stopped (tty output)",
    "urgent I/O condition",
    "CPU time limit exceeded",
    "file size limit exceeded",
    "virtual timer expired",
    "profiling timer expired",
    "window changed",
    "I/O possible",
    "power failure",
    "bad system call",
];

impl End {
    /// A process that exited with `code` (any of 0-255). As envd (Go's
    /// `cmd.Wait` error), a non-zero exit repeats the status as `error`.
    pub fn exited(code: i32) -> Self {
        let status = format!("exit status {code}");
        Self {
            exit_code: code,
            exited: true,
            error: (code != 0).then(|| status.clone()),
            status,
        }
    }

    /// A process killed by `signal`: exit code -1, not exited, and Go's
    /// `signal: NAME`, as envd reports it.
    pub fn signaled(signal: i32) -> Self {
        let name = usize::try_from(signal - 1)
            .ok()
            .and_then(|i| SIGNAL_NAMES.get(i))
            .map_or_else(|| format!("signal {signal}"), |n| (*n).to_owned());
        let status = format!("signal: {name}");
        Self {
            exit_code: -1,
            exited: false,
            error: Some(status.clone()),
            status,
        }
    }

    /// The signal that killed the process, read back from the status;
    /// `None` for an exit (or a status this cannot read).
    pub fn signal(&self) -> Option<i32> {
        if self.exited {
            return None;
        }
        let name = self.status.strip_prefix("signal: ")?;
        if let Some(n) = name.strip_prefix("signal ") {
            return n.parse().ok();
        }
        let i = SIGNAL_NAMES.iter().position(|n| *n == name)?;
        i32::try_from(i + 1).ok()
    }
}

/// One entry of List's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub config: ProcessConfig,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// List's answer: the running processes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListResponse {
    #[serde(default)]
    pub processes: Vec<ProcessInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_envds_json() {
        let json = |e: Event| serde_json::to_string(&EventMessage { event: e }).unwrap();
        assert_eq!(
            json(Event::Start { pid: 7 }),
            r#"{"event":{"start":{"pid":7}}}"#
        );
        assert_eq!(json(Event::Keepalive {}), r#"{"event":{"keepalive":{}}}"#);
        assert_eq!(
            json(Event::Data(Data::stdout(b"hi"))),
            r#"{"event":{"data":{"stdout":"aGk="}}}"#
        );
        assert_eq!(
            json(Event::End(End::exited(3))),
            r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}"#
        );
        let read: EventMessage =
            serde_json::from_str(r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed"}}}"#)
                .unwrap();
        assert!(matches!(read.event, Event::End(ref e) if e.signal() == Some(9)));
    }

    #[test]
    fn exits_and_signals_stay_apart() {
        for code in [0, 1, 3, 127, 128, 129, 137, 200, 255] {
            let end = End::exited(code);
            assert_eq!(
                (end.exit_code, end.exited, end.signal()),
                (code, true, None)
            );
            assert_eq!(end.status, format!("exit status {code}"));
        }
        for signal in 1..=64 {
            let end = End::signaled(signal);
            assert_eq!((end.exit_code, end.exited), (-1, false));
            assert_eq!(end.signal(), Some(signal), "{}", end.status);
        }
        assert_eq!(End::signaled(9).status, "signal: killed");
        assert_eq!(End::signaled(11).status, "signal: segmentation fault");
        assert_eq!(End::signaled(40).status, "signal: signal 40");
    }

    #[test]
    fn signals_are_names_or_numbers() {
        let number = |v: serde_json::Value| {
            SendSignalRequest {
                signal: v,
                ..Default::default()
            }
            .number()
        };
        assert_eq!(number("SIGNAL_SIGKILL".into()), Some(9));
        assert_eq!(number(15.into()), Some(15));
        assert_eq!(number("SIGNAL_SIGHUP".into()), None);
        assert_eq!(number(2.into()), None);
    }
}
