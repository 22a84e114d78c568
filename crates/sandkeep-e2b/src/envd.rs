//! One sandbox's envd: the process service's Start as a Connect JSON
//! server stream (never with a `Connect-Timeout-Ms`, which envd turns into
//! a kill timer) read event by event, StreamInput (one request carrying a
//! process's input as it is written), SendInput and CloseStdin, `/files`
//! upload and ranged download, and unary calls such as the filesystem
//! service's Move, Remove and ListDir.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use sandkeep_envd_wire::connect::{self, Code};
use sandkeep_envd_wire::process::{
    self as wire, Input, ProcessConfig, SelectRequest, SendInputRequest, StartRequest,
    StreamInputRequest,
};
use sandkeep_envd_wire::{ENVD_PORT, base64_bytes, header};
use serde::Serialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use sandkeep_provider::ExitStatus;

use crate::Stats;

/// The bound of a unary call or a file transfer.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// envd emits a keepalive event after this long without data, so idle
/// proxies do not cut a long stream (the SDKs ask for 50 s); a StreamInput
/// sends one as often while it has no input.
pub const KEEPALIVE: Duration = Duration::from_secs(50);

#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    /// E2B's proxy: the sandbox is not running.
    #[error("the sandbox was not found")]
    SandboxGone,
    /// A file or directory that does not exist.
    #[error("not found: {0}")]
    PathNotFound(String),
    /// envd refused the request: nothing happened.
    #[error("envd answered {code}: {message}")]
    Refused { code: String, message: String },
    /// envd (or a proxy before it) does not serve the method: nothing of
    /// the request was done.
    #[error("envd does not serve {0}")]
    Unimplemented(String),
    /// The request never reached envd.
    #[error("cannot reach envd: {0}")]
    Unreachable(String),
    /// The call broke after the request may have reached envd.
    #[error("{0}")]
    Broken(String),
}

/// What a process run through Start did.
#[derive(Debug, Default)]
pub struct Finished {
    /// Exit status, or 128+N for signal N; `None` without an end event.
    pub exit_code: Option<i32>,
    pub stdout: Tail,
    pub stderr: Tail,
}

/// The last `limit` bytes of a stream.
#[derive(Debug, Default)]
pub struct Tail {
    pub bytes: Vec<u8>,
    pub truncated: bool,
    limit: usize,
}

impl Tail {
    fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            truncated: false,
            limit,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > self.limit {
            let cut = self.bytes.len() - self.limit;
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

/// One event of a process stream.
#[derive(Debug)]
pub enum Event {
    /// Always first: envd's id of the process, for SendInput and CloseStdin.
    Start {
        pid: u32,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// How the process ended.
    End(ExitStatus),
    /// A keepalive, or what this client does not know.
    Other,
}

impl Event {
    /// A stream message; what does not read as a known event is
    /// [`Event::Other`] (envd may add events).
    fn from_json(v: Value) -> Self {
        let Ok(message) = serde_json::from_value::<wire::EventMessage>(v) else {
            return Self::Other;
        };
        let decode = |s: &str| base64_bytes::decode(s).unwrap_or_default();
        match message.event {
            wire::Event::Start { pid } => Self::Start { pid },
            wire::Event::End(end) => Self::End(match end.signal() {
                Some(signal) => ExitStatus::Signal(signal),
                None => ExitStatus::Code(end.exit_code),
            }),
            wire::Event::Data(wire::Data {
                stdout: Some(s), ..
            }) => Self::Stdout(decode(&s)),
            wire::Event::Data(wire::Data {
                stderr: Some(s), ..
            }) => Self::Stderr(decode(&s)),
            wire::Event::Data(_) | wire::Event::Keepalive {} => Self::Other,
        }
    }
}

/// Start's answer: a Connect stream of enveloped messages, read one event
/// at a time.
pub struct Stream {
    response: reqwest::Response,
    frames: connect::Frames,
}

impl Stream {
    /// The next event; `Ok(None)` at the end-of-stream message.
    pub async fn next(&mut self) -> Result<Option<Event>, EnvdError> {
        loop {
            if let Some(frame) = self.frames.pop() {
                let unreadable = |e: serde_json::Error| {
                    EnvdError::Broken(format!("unreadable message from envd: {e}"))
                };
                if frame.flags & connect::END_STREAM == 0 {
                    let v: Value = serde_json::from_slice(&frame.message).map_err(unreadable)?;
                    return Ok(Some(Event::from_json(v)));
                }
                let end: connect::EndStream =
                    serde_json::from_slice(&frame.message).map_err(unreadable)?;
                return match end.error {
                    Some(error) => Err(EnvdError::Broken(format!(
                        "the process stream ended with {}: {}",
                        error.code, error.message
                    ))),
                    None => Ok(None),
                };
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.frames.push(&chunk),
                Ok(None) => {
                    return Err(EnvdError::Broken(
                        "the process stream was cut before its end".into(),
                    ));
                }
                Err(e) => return Err(EnvdError::Broken(crate::chain(&e))),
            }
        }
    }
}

/// `/files?path=…`, the path encoded.
fn files_path(path: &str) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("path", path)
        .finish();
    format!("/files?{query}")
}

/// A sandbox's envd, as these credentials reach it.
#[derive(Clone)]
pub struct Envd {
    pub http: reqwest::Client,
    pub base: String,
    pub sandbox_id: String,
    pub token: Option<String>,
    pub stats: Arc<Stats>,
    /// Requests run as the sandbox's root instead of its default user.
    pub as_root: bool,
}

impl Envd {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.stats.count_envd();
        tracing::debug!(target: "sandkeep_e2b::http", "e2b request: envd {method} {path}");
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header(header::SANDBOX_ID, &self.sandbox_id)
            .header(header::SANDBOX_PORT, ENVD_PORT.to_string());
        if let Some(token) = &self.token {
            r = r.header(header::ACCESS_TOKEN, token);
        }
        if self.as_root {
            // envd's user of a request: Basic base64("root:").
            r = r.header("Authorization", "Basic cm9vdDo=");
        }
        r
    }

    /// The same envd, its requests run as the sandbox's root.
    pub fn as_root(&self) -> Self {
        Self {
            as_root: true,
            ..self.clone()
        }
    }

    /// An error answer: the proxy's "not found" (sandbox gone), a Connect
    /// error `{code, message}`, or anything else.
    fn refused(status: StatusCode, body: &[u8]) -> EnvdError {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let message = v
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned());
        if status == StatusCode::BAD_GATEWAY && message.contains("not found") {
            return EnvdError::SandboxGone;
        }
        let code = match v.get("code") {
            Some(Value::String(s)) => s.clone(),
            _ => status.as_u16().to_string(),
        };
        if code == Code::NotFound.name() || status == StatusCode::NOT_FOUND {
            return EnvdError::PathNotFound(message);
        }
        EnvdError::Refused { code, message }
    }

    fn transport(e: &reqwest::Error) -> EnvdError {
        if e.is_connect() {
            EnvdError::Unreachable(crate::chain(e))
        } else {
            EnvdError::Broken(crate::chain(e))
        }
    }

    /// Starts `cmd args…` (no connect timeout; stdin a pipe when `stdin`,
    /// else /dev/null, with `envs` added to its environment): its stream
    /// once envd accepted it.
    pub async fn start(
        &self,
        cmd: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        stdin: bool,
    ) -> Result<Stream, EnvdError> {
        let message = StartRequest {
            process: ProcessConfig {
                cmd: cmd.to_owned(),
                args: args.iter().map(|&a| a.to_owned()).collect(),
                envs: envs
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                cwd: None,
            },
            stdin: Some(stdin),
            ..StartRequest::default()
        };
        let response = self
            .request(reqwest::Method::POST, "/process.Process/Start")
            .header("Content-Type", connect::STREAM_JSON)
            .header(header::CONNECT_PROTOCOL_VERSION, "1")
            .header(header::KEEPALIVE_PING_INTERVAL, KEEPALIVE.as_secs())
            .body(connect::envelope(&message))
            .send()
            .await
            .map_err(|e| Self::transport(&e))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.unwrap_or_default();
            return Err(Self::refused(status, &bytes));
        }
        Ok(Stream {
            response,
            frames: connect::Frames::default(),
        })
    }

    /// Runs `cmd args…` through Start (no connect timeout), feeding
    /// `stdin` if given, and collects its output until the end event or
    /// `deadline`. `Ok` with `exit_code: None` means the deadline passed.
    pub async fn run(
        &self,
        cmd: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        deadline: Duration,
        output_limit: usize,
    ) -> Result<Finished, EnvdError> {
        let mut stream = self.start(cmd, args, &[], stdin.is_some()).await?;
        let mut finished = Finished {
            exit_code: None,
            stdout: Tail::new(output_limit),
            stderr: Tail::new(output_limit),
        };
        let read = async {
            let mut stdin = stdin;
            while let Some(event) = stream.next().await? {
                match event {
                    Event::Start { pid } => {
                        if let Some(input) = stdin.take() {
                            self.send_input(pid, input).await?;
                            self.close_stdin(pid).await?;
                        }
                    }
                    Event::Stdout(bytes) => finished.stdout.push(&bytes),
                    Event::Stderr(bytes) => finished.stderr.push(&bytes),
                    Event::End(status) => finished.exit_code = Some(status.shell_code()),
                    Event::Other => {}
                }
            }
            if finished.exit_code.is_none() {
                return Err(EnvdError::Broken(
                    "the process stream ended without an end event".into(),
                ));
            }
            Ok(())
        };
        match tokio::time::timeout(deadline, read).await {
            Ok(result) => result.map(|()| finished),
            Err(_) => Ok(finished),
        }
    }

    /// Writes `input` to the stdin of envd's process `pid`.
    pub async fn send_input(&self, pid: u32, input: &[u8]) -> Result<(), EnvdError> {
        let message = SendInputRequest {
            process: wire::Selector::pid(pid),
            input: Input::stdin(input),
        };
        self.unary::<_, IgnoredAny>("/process.Process/SendInput", &message)
            .await
            .map(drop)
    }

    /// StreamInput to envd's process `pid`: a start message, then each of
    /// `messages` as it comes, on one request whose body stays open until
    /// `messages` ends. envd's answer comes at that end, or before it if
    /// envd refuses the stream ([`EnvdError::Unimplemented`]: it does not
    /// serve StreamInput).
    pub async fn stream_input(
        &self,
        pid: u32,
        messages: impl futures_util::Stream<Item = StreamInputRequest> + Send + 'static,
    ) -> Result<(), EnvdError> {
        let start = StreamInputRequest::start(wire::Selector::pid(pid));
        let messages = futures_util::stream::iter([start])
            .chain(messages)
            .map(|m| Ok::<_, std::convert::Infallible>(connect::envelope(&m)));
        let request = self
            .request(reqwest::Method::POST, "/process.Process/StreamInput")
            .header("Content-Type", connect::STREAM_JSON)
            .header(header::CONNECT_PROTOCOL_VERSION, "1")
            .body(reqwest::Body::wrap_stream(messages));
        let (status, bytes) = Self::answer(request).await?;
        // A method it does not know, connect-go answers with a bare 404
        // (and a stream's own errors with 200 and an end-stream message);
        // a proxy may say 405 or 501.
        if matches!(status.as_u16(), 404 | 405 | 415 | 501) {
            return Err(EnvdError::Unimplemented(format!(
                "StreamInput (it answered {status})"
            )));
        }
        if !status.is_success() {
            return Err(Self::refused(status, &bytes));
        }
        let mut frames = connect::Frames::default();
        frames.push(&bytes);
        while let Some(frame) = frames.pop() {
            if frame.flags & connect::END_STREAM == 0 {
                continue;
            }
            let end: connect::EndStream = serde_json::from_slice(&frame.message)
                .map_err(|e| EnvdError::Broken(format!("unreadable answer from envd: {e}")))?;
            return match end.error {
                None => Ok(()),
                Some(e) if e.code == Code::Unimplemented.name() => Err(EnvdError::Unimplemented(
                    format!("StreamInput ({})", e.message),
                )),
                Some(e) => Err(EnvdError::Refused {
                    code: e.code,
                    message: e.message,
                }),
            };
        }
        Err(EnvdError::Broken(
            "envd's answer to StreamInput has no end-stream message".into(),
        ))
    }

    /// Closes the stdin of envd's process `pid`.
    pub async fn close_stdin(&self, pid: u32) -> Result<(), EnvdError> {
        let message = SelectRequest {
            process: wire::Selector::pid(pid),
        };
        self.unary::<_, IgnoredAny>("/process.Process/CloseStdin", &message)
            .await
            .map(drop)
    }

    /// Sends `request` and reads its whole answer.
    async fn answer(
        request: reqwest::RequestBuilder,
    ) -> Result<(reqwest::StatusCode, bytes::Bytes), EnvdError> {
        let response = request.send().await.map_err(|e| Self::transport(&e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| EnvdError::Broken(crate::chain(&e)))?;
        Ok((status, bytes))
    }

    /// A unary Connect call with the JSON codec.
    pub async fn unary<M: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        message: &M,
    ) -> Result<A, EnvdError> {
        let request = self
            .request(reqwest::Method::POST, path)
            .header("Content-Type", connect::UNARY_JSON)
            .header(header::CONNECT_PROTOCOL_VERSION, "1")
            .timeout(CALL_TIMEOUT)
            .json(message);
        let (status, bytes) = Self::answer(request).await?;
        if !status.is_success() {
            return Err(Self::refused(status, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| EnvdError::Broken(format!("unreadable answer from envd: {e}")))
    }

    /// Writes a file (envd creates missing parents and truncates).
    pub async fn upload(
        &self,
        path: &str,
        content: impl Into<reqwest::Body>,
    ) -> Result<(), EnvdError> {
        self.upload_within(path, content, CALL_TIMEOUT).await
    }

    /// [`Envd::upload`] of a stream that may take longer than a call.
    pub async fn upload_within(
        &self,
        path: &str,
        content: impl Into<reqwest::Body>,
        timeout: Duration,
    ) -> Result<(), EnvdError> {
        let response = self
            .request(reqwest::Method::POST, &files_path(path))
            .header("Content-Type", "application/octet-stream")
            .timeout(timeout)
            .body(content)
            .send()
            .await
            .map_err(|e| Self::transport(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let bytes = response.bytes().await.unwrap_or_default();
        Err(Self::refused(status, &bytes))
    }

    /// At most the first `limit + 1` bytes of a file and its full size.
    pub async fn download(&self, path: &str, limit: u64) -> Result<(Vec<u8>, u64), EnvdError> {
        let mut response = self
            .request(reqwest::Method::GET, &files_path(path))
            .header("Range", format!("bytes=0-{limit}"))
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| Self::transport(&e))?;
        let status = response.status();
        if status == StatusCode::RANGE_NOT_SATISFIABLE {
            // Range 0- of an empty file.
            return Ok((Vec::new(), 0));
        }
        if !status.is_success() {
            let bytes = response.bytes().await.unwrap_or_default();
            return Err(Self::refused(status, &bytes));
        }
        let total = response
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .and_then(|n| n.parse::<u64>().ok());
        let mut data = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| EnvdError::Broken(crate::chain(&e)))?
        {
            data.extend_from_slice(&chunk);
            if data.len() as u64 > limit {
                break;
            }
        }
        let total = total.unwrap_or(data.len() as u64);
        Ok((data, total))
    }
}
