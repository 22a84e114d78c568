//! envd's process service (`/process.Process/*`) over
//! [`Provider::spawn`]: the table of processes started through this server,
//! their live output fanned out to whoever is connected, and envd's
//! bookkeeping rules, traps included (docs/e2b.md):
//!
//! - output goes only to streams connected when it is produced; nothing is
//!   replayed to a later Connect. A connected stream loses nothing: each
//!   has a bounded queue, and a full one holds the reader of the process's
//!   pipe, so a slow client slows the process down (as a full pipe would)
//!   instead of missing chunks;
//! - a process leaves List when it exits, and its end event stays for
//!   Connect for [`END_RETENTION`] (or what [`END_RETENTION_ENV`] says);
//! - `Connect-Timeout-Ms` on Start SIGKILLs the process when it expires,
//!   attached or not; closing the stream otherwise leaves it running;
//! - SendSignal accepts SIGTERM and SIGKILL and reaches the leader only.
//!
//! A PTY process (`pty` in Start) is the sandbox's helper relaying a
//! terminal (`sandkeep-task pty`, the terminal code of sandkeep's pty
//! tasks): its output comes as `data.pty`, `input.pty` is typed on it and
//! Update resizes it, both as frames on the relay's stdin; the relay ends
//! as its command does, so its exit is the process's.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use sandkeep_envd_wire::base64_bytes;
use sandkeep_envd_wire::connect::{Empty, Frames};
use sandkeep_envd_wire::header as envd_header;
use sandkeep_envd_wire::process::{
    Data, End, Event, EventMessage, Input, ListResponse, ProcessConfig, ProcessInfo, PtySize,
    SelectRequest, Selector, SendInputRequest, SendSignalRequest, StartRequest, StreamInputRequest,
    UpdateRequest,
};
use sandkeep_proto::wire::{PtyFrame, PtyRequest, TermSize, verb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::connect::{self, Code, RpcError};
use super::users::RunAs;
use sandkeep_provider::{ExitStatus, Program, Provider, RunningProcess, SandboxId, SpawnRequest};

/// How long an ended process's end event is kept for Connect (envd's
/// `terminatedRetentionTTL`), unless [`END_RETENTION_ENV`] says otherwise.
pub const END_RETENTION: Duration = Duration::from_secs(30);
/// The environment variable that sets another end retention, in
/// milliseconds: envd has no such setting; it is there for tests that must
/// outlive the window and would otherwise wait 30 s.
pub const END_RETENTION_ENV: &str = "SANDKEEP_E2B_END_RETENTION_MS";

/// The end retention [`END_RETENTION_ENV`] sets, [`END_RETENTION`] when it
/// is unset; an error names a value that is not a number of milliseconds.
pub fn end_retention_from_env() -> Result<Duration, String> {
    match std::env::var(END_RETENTION_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(END_RETENTION),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{END_RETENTION_ENV}={v:?} is not a number of milliseconds")),
        Err(e) => Err(format!("{END_RETENTION_ENV}: {e}")),
    }
}
/// The largest data event (envd's chunk size).
const CHUNK: usize = 32 * 1024;
/// Without a `Keepalive-Ping-Interval` header, envd's interval.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);
/// After the exit, how long to keep reading output that a child of the
/// process may still hold open (envd stops at the exit too).
const DRAIN_GRACE: Duration = Duration::from_millis(50);
/// After the exit, the most that is still read: the rest of what the
/// process wrote before it exited (a pipe holds at most 1 MiB), not a
/// lingering child's endless output.
const DRAIN_TAIL: usize = 1 << 20;
/// Output chunks queued per connected stream; a full queue holds the
/// process's output back until the stream catches up.
const QUEUE: usize = 16;

#[derive(Debug, Clone)]
enum Output {
    Stdout(Bytes),
    Stderr(Bytes),
    Pty(Bytes),
}

type Stdin = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

struct Proc {
    pid: u32,
    tag: Option<String>,
    config: ProcessConfig,
    /// Whether it runs on a terminal: its stdin is then the relay's, which
    /// takes [`PtyFrame`]s.
    terminal: bool,
    stdin: tokio::sync::Mutex<Option<Stdin>>,
    /// The queues of the connected streams; `None` once the output is over
    /// (a stream connecting then gets only the end event).
    listeners: Mutex<Option<Vec<mpsc::Sender<Output>>>>,
    end: watch::Sender<Option<Ending>>,
    control: Arc<dyn RunningProcess>,
}

impl Proc {
    fn ended(&self) -> bool {
        self.end.borrow().is_some()
    }

    /// A queue of the output produced from now on, closed when the output
    /// is over.
    fn listen(&self) -> mpsc::Receiver<Output> {
        let (tx, rx) = mpsc::channel(QUEUE);
        if let Some(listeners) = self.listeners.lock().expect("listeners lock").as_mut() {
            listeners.push(tx);
        }
        rx
    }

    /// Hands a chunk to every connected stream, waiting for room in each
    /// queue; a stream that went away is dropped from the list.
    async fn deliver(&self, output: Output) {
        let listeners = self.listeners.lock().expect("listeners lock").clone();
        let mut gone = false;
        for l in listeners.into_iter().flatten() {
            gone |= l.send(output.clone()).await.is_err();
        }
        if gone && let Some(l) = self.listeners.lock().expect("listeners lock").as_mut() {
            l.retain(|s| !s.is_closed());
        }
    }

    /// No more output: every connected stream's queue ends after what it
    /// holds.
    fn close_output(&self) {
        self.listeners.lock().expect("listeners lock").take();
    }
}

/// Every process started through this server, by sandbox.
pub struct Processes {
    table: Mutex<HashMap<SandboxId, BTreeMap<u32, Arc<Proc>>>>,
    next_pid: AtomicU32,
    /// How long an ended process's end event is kept for Connect.
    end_retention: Duration,
}

impl Default for Processes {
    fn default() -> Self {
        Self::new(END_RETENTION)
    }
}

impl Processes {
    /// An empty table whose ended processes stay for Connect for
    /// `end_retention`.
    pub fn new(end_retention: Duration) -> Self {
        Self {
            table: Mutex::default(),
            next_pid: AtomicU32::default(),
            end_retention,
        }
    }

    fn find(&self, id: &SandboxId, sel: &Selector) -> Result<Arc<Proc>, RpcError> {
        let table = self.table.lock().expect("process table lock");
        let procs = table.get(id);
        let found = match (sel.pid, &sel.tag) {
            (Some(pid), _) => procs.and_then(|p| p.get(&pid)),
            (None, Some(tag)) => {
                procs.and_then(|p| p.values().find(|p| p.tag.as_deref() == Some(tag.as_str())))
            }
            (None, None) => {
                return Err(RpcError::new(
                    Code::InvalidArgument,
                    "process selector needs a pid or a tag",
                ));
            }
        };
        found.cloned().ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                match (sel.pid, &sel.tag) {
                    (Some(pid), _) => format!("process with pid {pid} not found"),
                    (_, tag) => format!("process with tag {tag:?} not found"),
                },
            )
        })
    }

    fn remove(&self, id: &SandboxId, pid: u32) {
        let mut table = self.table.lock().expect("process table lock");
        if let Some(procs) = table.get_mut(id) {
            procs.remove(&pid);
            if procs.is_empty() {
                table.remove(id);
            }
        }
    }

    /// Forgets a killed sandbox's processes (they died with it).
    pub fn forget(&self, id: &SandboxId) {
        self.table.lock().expect("process table lock").remove(id);
    }
}

/// envd runs `cmd args…` directly (no shell) with the request's
/// environment added; so does the provider, given an argv.
fn program(config: &ProcessConfig) -> Result<Program, RpcError> {
    for name in config.envs.keys() {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(RpcError::new(
                Code::InvalidArgument,
                format!("environment variable name {name:?} is not a valid name"),
            ));
        }
    }
    Ok(Program::Argv {
        argv: std::iter::once(config.cmd.clone())
            .chain(config.args.iter().cloned())
            .collect(),
        env: config
            .envs
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    })
}

/// The `Connect-Timeout-Ms` header: `None` when absent or zero.
pub fn connect_timeout(headers: &HeaderMap) -> Result<Option<Duration>, RpcError> {
    let Some(value) = headers.get(envd_header::CONNECT_TIMEOUT_MS) else {
        return Ok(None);
    };
    let ms: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            RpcError::new(
                Code::InvalidArgument,
                "Connect-Timeout-Ms must be a whole number of milliseconds",
            )
        })?;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

/// The `Keepalive-Ping-Interval` header's interval, envd's default without.
pub fn keepalive(headers: &HeaderMap) -> Duration {
    headers
        .get(envd_header::KEEPALIVE_PING_INTERVAL)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
}

/// A server stream that failed before its first message.
pub fn stream_error(error: &RpcError) -> Response {
    (
        [(header::CONTENT_TYPE, connect::STREAM_JSON)],
        connect::end_stream(Some(error)),
    )
        .into_response()
}

pub async fn start(
    processes: &Arc<Processes>,
    provider: &Arc<dyn Provider>,
    id: &SandboxId,
    headers: &HeaderMap,
    request: StartRequest,
    user: &RunAs,
) -> Result<Response, RpcError> {
    let timeout = connect_timeout(headers)?;
    let mut program = program(&request.process)?;
    let mut stdin = request.stdin.unwrap_or(true);
    if let Some(pty) = &request.pty {
        program = relay(provider, id, &program, pty.size).await?;
        stdin = true;
    }
    let (program, cwd) = user.program(
        program,
        request.process.cwd.clone().filter(|c| !c.is_empty()),
    );
    let spawned = provider
        .spawn(
            id,
            SpawnRequest {
                program,
                cwd,
                stdin,
            },
        )
        .await?;
    let pid = processes.next_pid.fetch_add(1, Ordering::Relaxed) + 1000;
    let (end, end_rx) = watch::channel(None);
    let proc = Arc::new(Proc {
        pid,
        tag: request.tag,
        config: request.process,
        terminal: request.pty.is_some(),
        stdin: tokio::sync::Mutex::new(spawned.stdin),
        listeners: Mutex::new(Some(Vec::new())),
        end,
        control: Arc::from(spawned.process),
    });
    let rx = proc.listen();
    processes
        .table
        .lock()
        .expect("process table lock")
        .entry(id.clone())
        .or_default()
        .insert(pid, Arc::clone(&proc));

    let out = if proc.terminal {
        Output::Pty
    } else {
        Output::Stdout
    };
    let pumps = [
        tokio::spawn(pump(spawned.stdout, Arc::clone(&proc), out)),
        tokio::spawn(pump(spawned.stderr, Arc::clone(&proc), Output::Stderr)),
    ];
    if let Some(timeout) = timeout {
        let proc = Arc::clone(&proc);
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if !proc.ended() {
                let _ = proc.control.signal(9);
            }
        });
    }
    {
        let proc = Arc::clone(&proc);
        let processes = Arc::clone(processes);
        let retention = processes.end_retention;
        let id = id.clone();
        tokio::spawn(async move {
            let waited = proc.control.wait().await;
            for p in pumps {
                let _ = p.await;
            }
            proc.close_output();
            let end = match waited {
                Ok(ExitStatus::Code(code)) => Ok(End::exited(code)),
                Ok(ExitStatus::Signal(signal)) => Ok(End::signaled(signal)),
                // The sandbox went away under it: streams break (see
                // `lost_stream`), no exit is made up.
                Err(e) => Err(e.to_string()),
            };
            proc.end.send_replace(Some(end));
            drop(proc.stdin.lock().await.take());
            tokio::time::sleep(retention).await;
            processes.remove(&id, proc.pid);
        });
    }
    Ok(event_stream(pid, rx, end_rx, keepalive(headers), timeout))
}

/// Reads one pipe of the process to its end, or, once the process has
/// exited, until the pipe stays empty for [`DRAIN_GRACE`] (a child holds
/// it open) or [`DRAIN_TAIL`] more bytes came.
async fn pump(
    mut from: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    proc: Arc<Proc>,
    wrap: fn(Bytes) -> Output,
) {
    let control = Arc::clone(&proc.control);
    let exit = async move { control.wait().await };
    tokio::pin!(exit);
    let mut exited = false;
    let mut tail = 0;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = if exited {
            match tokio::time::timeout(DRAIN_GRACE, from.read(&mut buf)).await {
                Ok(r) => r,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                r = from.read(&mut buf) => r,
                _ = &mut exit => {
                    exited = true;
                    continue;
                }
            }
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if exited {
            tail += n;
            if tail > DRAIN_TAIL {
                break;
            }
        }
        // Nobody connected: the chunk is dropped, as envd drops it.
        proc.deliver(wrap(Bytes::copy_from_slice(&buf[..n]))).await;
    }
}

pub fn connect(
    processes: &Processes,
    id: &SandboxId,
    headers: &HeaderMap,
    request: SelectRequest,
) -> Result<Response, RpcError> {
    let timeout = connect_timeout(headers)?;
    let proc = processes.find(id, &request.process)?;
    let rx = proc.listen();
    let end_rx = proc.end.subscribe();
    Ok(event_stream(
        proc.pid,
        rx,
        end_rx,
        keepalive(headers),
        timeout,
    ))
}

/// How a stream ends when its process's end is unknown: its sandbox was
/// killed or expired under it (the process forgotten with the sandbox, or
/// its wait lost). E2B's proxy drops such a connection, so the response
/// body breaks off without Connect's end-of-stream: the SDKs see the
/// connection terminated, probe the sandbox's `/health`, find it gone and
/// raise "sandbox not running" (Python `SandboxNotRunningException`, JS
/// `TimeoutError`), not a command exit with a made-up code.
fn lost_stream(why: Option<String>) -> std::io::Error {
    std::io::Error::other(format!(
        "the sandbox went away under the stream: {}",
        why.unwrap_or_else(|| "killed or ended".to_owned())
    ))
}

/// How a process ended: its end event, or why its end is unknown.
type Ending = Result<End, String>;

/// The ending, once there is one (`None` if the process was forgotten).
async fn ended(rx: &mut watch::Receiver<Option<Ending>>) -> Option<Ending> {
    let end = rx.wait_for(Option::is_some).await.ok()?;
    end.clone()
}

fn event(event: Event) -> Bytes {
    connect::envelope(&EventMessage { event })
}

/// Where a Start/Connect response stands.
enum Phase {
    /// The start event is next.
    Start,
    Running,
    /// The end-stream message was sent.
    Done,
}

/// A Start/Connect response being produced. It is the body itself, polled
/// by the connection as it sends (no task and no queue between the output
/// and the socket): a slow client holds the output queue, and so the
/// process, back.
struct Events {
    pid: u32,
    rx: mpsc::Receiver<Output>,
    end_rx: watch::Receiver<Option<Ending>>,
    keepalive: Duration,
    ping: Instant,
    deadline: Option<Instant>,
    phase: Phase,
}

impl Events {
    /// The next envelopes to send; `None` after the end-stream message.
    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        match self.phase {
            Phase::Done => return None,
            Phase::Start => {
                self.phase = Phase::Running;
                self.ping = Instant::now() + self.keepalive;
                return Some(Ok(event(Event::Start { pid: self.pid })));
            }
            Phase::Running => {}
        }
        let deadline = self.deadline;
        let expired = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let message = tokio::select! {
            biased;
            r = self.rx.recv() => match r {
                Some(Output::Stdout(b)) => event(Event::Data(Data::stdout(&b))),
                Some(Output::Stderr(b)) => event(Event::Data(Data::stderr(&b))),
                Some(Output::Pty(b)) => event(Event::Data(Data::pty(&b))),
                // The output is over: the end event follows it (none if
                // the process was forgotten with its sandbox), then the
                // end of the stream, in one write.
                None => {
                    self.phase = Phase::Done;
                    return Some(match ended(&mut self.end_rx).await {
                        Some(Ok(end)) => {
                            let mut last = event(Event::End(end)).to_vec();
                            last.extend_from_slice(&connect::end_stream(None));
                            Ok(Bytes::from(last))
                        }
                        Some(Err(why)) => Err(lost_stream(Some(why))),
                        None => Err(lost_stream(None)),
                    });
                }
            },
            () = tokio::time::sleep_until(self.ping) => event(Event::Keepalive {}),
            () = expired => {
                self.phase = Phase::Done;
                let e = RpcError::new(Code::DeadlineExceeded, "the Connect-Timeout-Ms deadline expired");
                return Some(Ok(connect::end_stream(Some(&e))));
            }
        };
        self.ping = Instant::now() + self.keepalive;
        Some(Ok(message))
    }
}

/// The Start/Connect response: start, data…, keepalives, end.
fn event_stream(
    pid: u32,
    rx: mpsc::Receiver<Output>,
    end_rx: watch::Receiver<Option<Ending>>,
    keepalive: Duration,
    timeout: Option<Duration>,
) -> Response {
    let now = Instant::now();
    let events = Events {
        pid,
        rx,
        end_rx,
        keepalive,
        ping: now + keepalive,
        deadline: timeout.map(|t| now + t),
        phase: Phase::Start,
    };
    let body = futures_util::stream::unfold(events, |mut events| async move {
        let message = events.next().await?;
        Some((message, events))
    });
    (
        [(header::CONTENT_TYPE, connect::STREAM_JSON)],
        Body::from_stream(body),
    )
        .into_response()
}

pub fn list(processes: &Processes, id: &SandboxId) -> Response {
    let table = processes.table.lock().expect("process table lock");
    let processes = table
        .get(id)
        .into_iter()
        .flat_map(|p| p.values())
        .filter(|p| !p.ended())
        .map(|p| ProcessInfo {
            config: p.config.clone(),
            pid: p.pid,
            tag: p.tag.clone(),
        })
        .collect();
    connect::unary_response(&ListResponse { processes })
}

/// The bytes to write on a process's stdin for `input`: as they are for
/// a plain process, a frame for a PTY process's relay. Each takes its own
/// kind of input, as envd's do.
fn stdin_bytes(proc: &Proc, input: &Input) -> Result<Vec<u8>, RpcError> {
    let decode = |field: &str, b64: &str| {
        base64_bytes::decode(b64).map_err(|e| {
            RpcError::new(
                Code::InvalidArgument,
                format!("input.{field} is not base64: {e}"),
            )
        })
    };
    match (proc.terminal, &input.stdin, &input.pty) {
        (false, stdin, None) => decode("stdin", stdin.as_deref().unwrap_or("")),
        (true, None, Some(pty)) => Ok(PtyFrame::Input(decode("pty", pty)?).encode()),
        (false, _, Some(_)) => Err(RpcError::new(
            Code::FailedPrecondition,
            format!("process {} has no terminal; send input.stdin", proc.pid),
        )),
        (true, _, _) => Err(RpcError::new(
            Code::FailedPrecondition,
            format!("process {} runs on a terminal; send input.pty", proc.pid),
        )),
    }
}

async fn write_stdin(proc: &Proc, bytes: &[u8]) -> Result<(), RpcError> {
    let mut stdin = proc.stdin.lock().await;
    let Some(w) = stdin.as_mut() else {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!(
                "process {} has no open stdin (started with stdin false, closed, or exited)",
                proc.pid
            ),
        ));
    };
    let written = async {
        w.write_all(bytes).await?;
        w.flush().await
    };
    written.await.map_err(|e| {
        RpcError::new(
            Code::Internal,
            format!("cannot write to the stdin of process {}: {e}", proc.pid),
        )
    })
}

pub async fn send_input(
    processes: &Processes,
    id: &SandboxId,
    request: SendInputRequest,
) -> Result<Response, RpcError> {
    let proc = processes.find(id, &request.process)?;
    let bytes = stdin_bytes(&proc, &request.input)?;
    write_stdin(&proc, &bytes).await?;
    Ok(connect::unary_response(&Empty {}))
}

/// StreamInput: each message is acted on as it comes, not once the body
/// has ended, so one stream kept open carries all of a process's input
/// (the e2b provider sends a spawned process's input so: one request for
/// the process's life instead of a SendInput per write).
pub async fn stream_input(
    processes: &Processes,
    id: &SandboxId,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, RpcError> {
    connect::stream_content_type(headers)?;
    let mut body = body.into_data_stream();
    let mut frames = Frames::default();
    let mut proc = None;
    loop {
        while let Some(m) = connect::next_message::<StreamInputRequest>(&mut frames)? {
            if let Some(start) = m.start {
                proc = Some(processes.find(id, &start.process)?);
            }
            if let Some(data) = m.data {
                let Some(p) = &proc else {
                    return Err(RpcError::new(
                        Code::InvalidArgument,
                        "StreamInput data came before its start message",
                    ));
                };
                write_stdin(p, &stdin_bytes(p, &data.input)?).await?;
            }
        }
        match body.next().await {
            Some(Ok(chunk)) => frames.push(&chunk),
            Some(Err(e)) => {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("the input stream broke: {e}"),
                ));
            }
            None => break,
        }
    }
    connect::body_ended(&frames)?;
    Ok((
        [(header::CONTENT_TYPE, connect::STREAM_JSON)],
        [connect::envelope(&Empty {}), connect::end_stream(None)].concat(),
    )
        .into_response())
}

pub async fn close_stdin(
    processes: &Processes,
    id: &SandboxId,
    request: SelectRequest,
) -> Result<Response, RpcError> {
    let proc = processes.find(id, &request.process)?;
    drop(proc.stdin.lock().await.take());
    Ok(connect::unary_response(&Empty {}))
}

/// Update: a PTY process's terminal gets its new size.
pub async fn update(
    processes: &Processes,
    id: &SandboxId,
    request: UpdateRequest,
) -> Result<Response, RpcError> {
    let proc = processes.find(id, &request.process)?;
    let Some(pty) = request.pty else {
        return Ok(connect::unary_response(&Empty {}));
    };
    if !proc.terminal {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            format!("process {} has no terminal to resize", proc.pid),
        ));
    }
    write_stdin(&proc, &PtyFrame::Resize(term_size(pty.size)?).encode()).await?;
    Ok(connect::unary_response(&Empty {}))
}

/// A PTY size as the helper takes it, within its bounds.
fn term_size(size: PtySize) -> Result<TermSize, RpcError> {
    let invalid = |e: String| RpcError::new(Code::InvalidArgument, format!("pty.size: {e}"));
    let size = TermSize {
        cols: u16::try_from(size.cols).map_err(|e| invalid(e.to_string()))?,
        rows: u16::try_from(size.rows).map_err(|e| invalid(e.to_string()))?,
    };
    size.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(size)
}

/// The sandbox's helper relaying a terminal of `size` to `program`.
async fn relay(
    provider: &Arc<dyn Provider>,
    id: &SandboxId,
    program: &Program,
    size: PtySize,
) -> Result<Program, RpcError> {
    let request = PtyRequest {
        command: program.to_shell(),
        size: term_size(size)?,
    };
    let helper = provider.task_helper(id).await?;
    Ok(Program::Argv {
        argv: vec![
            helper,
            verb::PTY.to_owned(),
            serde_json::to_string(&request).expect("pty requests always encode"),
        ],
        env: Vec::new(),
    })
}

pub fn send_signal(
    processes: &Processes,
    id: &SandboxId,
    request: SendSignalRequest,
) -> Result<Response, RpcError> {
    let Some(signal) = request.number() else {
        return Err(RpcError::new(
            Code::Unimplemented,
            format!(
                "signal {} is not supported; send SIGNAL_SIGTERM or SIGNAL_SIGKILL",
                request.signal
            ),
        ));
    };
    let proc = processes.find(id, &request.process)?;
    if proc.ended() {
        return Err(RpcError::new(
            Code::NotFound,
            format!("process with pid {} has already exited", proc.pid),
        ));
    }
    proc.control.signal(signal)?;
    Ok(connect::unary_response(&Empty {}))
}
