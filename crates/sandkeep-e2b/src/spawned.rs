//! Processes that outlive a call (`Provider::spawn`) over envd: one Start
//! stream without a connect timeout, run by [`script::SPAWN`] so the
//! process has its own group. Its stdout and stderr events become pipes,
//! what is written to its stdin pipe goes out on one StreamInput kept open
//! (by SendInput where envd refuses it; CloseStdin at the end), and
//! signals and the group kill are small scripts run inside the sandbox
//! (envd signals only the process it started, and only with TERM or
//! KILL).
//!
//! As a local pipe would, dropping the stdout pipe ends the process (it is
//! killed at its next output); dropping stderr only discards it. Dropping
//! the control ends nothing.

use std::time::Duration;

use async_trait::async_trait;
use sandkeep_provider::{ExitStatus, ProviderError, Result, RunningProcess, SpawnRequest, Spawned};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::envd::{Envd, EnvdError, Event, KEEPALIVE, Stream};
use crate::script;
use sandkeep_envd_wire::process::StreamInputRequest;

/// Output held for a pipe's reader before the stream waits for it.
const PIPE: usize = 64 * 1024;
/// The bound of the wait for the process's pid line.
const STARTUP: Duration = Duration::from_secs(60);
/// The bound of a signal script.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(30);

/// The exit once known: a status, or why none will come.
type Exit = Option<std::result::Result<ExitStatus, String>>;

/// Starts `request` in the sandbox behind `envd`; returns once the process
/// runs (its pid line came).
pub async fn spawn(envd: Envd, request: SpawnRequest) -> std::result::Result<Spawned, EnvdError> {
    let cwd = request.cwd.as_deref().unwrap_or("");
    let mut stream = envd
        .start(
            "/bin/sh",
            &["-c", script::LAUNCH, script::SPAWN, cwd],
            &[(script::SPAWN_COMMAND, &request.program.to_shell())],
            request.stdin,
        )
        .await?;
    let started = tokio::time::timeout(STARTUP, started(&mut stream))
        .await
        .map_err(|_| {
            EnvdError::Broken(format!(
                "the process did not report its pid within {} s",
                STARTUP.as_secs()
            ))
        })??;
    let (stdout, stdout_ours) = tokio::io::duplex(PIPE);
    let (stderr, stderr_ours) = tokio::io::duplex(PIPE);
    let (exit, exit_rx) = watch::channel(None);
    let process = EnvdProcess {
        envd: envd.clone(),
        pid: started.pid,
        exit: exit_rx,
    };
    let stdin = request.stdin.then(|| {
        let (theirs, ours) = tokio::io::duplex(PIPE);
        tokio::spawn(feed(envd, started.envd_pid, ours));
        Box::new(theirs) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>
    });
    tokio::spawn(pump(
        stream,
        started,
        process.clone(),
        stdout_ours,
        stderr_ours,
        exit,
    ));
    Ok(Spawned {
        stdin,
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        process: Box::new(process),
    })
}

/// What came before the process ran: envd's id of it, its pid in the
/// sandbox, and the output that came with them.
struct Started {
    envd_pid: u32,
    pid: u32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

async fn started(stream: &mut Stream) -> std::result::Result<Started, EnvdError> {
    let (mut envd_pid, mut stdout, mut stderr) = (None, Vec::new(), Vec::new());
    loop {
        match stream.next().await? {
            Some(Event::Start { pid }) => envd_pid = Some(pid),
            Some(Event::Stdout(bytes)) => stdout.extend_from_slice(&bytes),
            Some(Event::Stderr(bytes)) => stderr.extend_from_slice(&bytes),
            Some(Event::End(status)) => {
                return Err(EnvdError::Refused {
                    code: format!("exit status {}", status.shell_code()),
                    message: format!(
                        "the process ended before it ran: {}",
                        String::from_utf8_lossy(&stderr).trim()
                    ),
                });
            }
            Some(Event::Other) => {}
            None => {
                return Err(EnvdError::Broken(
                    "the process stream ended before the process ran".into(),
                ));
            }
        }
        if let (Some(envd_pid), Some(end)) = (&envd_pid, stdout.iter().position(|&b| b == b'\n')) {
            let line = String::from_utf8_lossy(&stdout[..end]).into_owned();
            let pid = line.trim().parse().map_err(|_| {
                EnvdError::Broken(format!("the process reported {line:?}, not its pid"))
            })?;
            return Ok(Started {
                envd_pid: *envd_pid,
                pid,
                stdout: stdout.split_off(end + 1),
                stderr,
            });
        }
    }
}

/// Passes the stream's output to the pipes until the process ends, then
/// closes them and records the exit.
async fn pump(
    mut stream: Stream,
    started: Started,
    process: EnvdProcess,
    stdout: DuplexStream,
    stderr: DuplexStream,
    exit: watch::Sender<Exit>,
) {
    let (mut stdout, mut stderr) = (Some(stdout), Some(stderr));
    let mut pending = vec![Event::Stdout(started.stdout), Event::Stderr(started.stderr)];
    let ended = loop {
        let event = match pending.pop() {
            Some(event) => event,
            None => match stream.next().await {
                Ok(Some(event)) => event,
                Ok(None) => break Err("the process stream ended without an end event".into()),
                Err(e) => break Err(e.to_string()),
            },
        };
        match event {
            Event::Stdout(bytes) if !bytes.is_empty() => {
                if let Some(pipe) = &mut stdout
                    && pipe.write_all(&bytes).await.is_err()
                {
                    // Its reader is gone, as a closed pipe would end it.
                    stdout = None;
                    let _ = process.kill_group();
                }
            }
            Event::Stderr(bytes) if !bytes.is_empty() => {
                if let Some(pipe) = &mut stderr
                    && pipe.write_all(&bytes).await.is_err()
                {
                    stderr = None;
                }
            }
            Event::End(code) => break Ok(code),
            _ => {}
        }
    };
    drop((stdout, stderr));
    exit.send_replace(Some(ended));
}

/// Sends what is written to the stdin pipe, in order, then closes the
/// process's stdin. It all goes on one StreamInput, a request for the
/// process's life rather than one per write; where envd refuses StreamInput
/// (it does not serve it: nothing sent on it was written), by one SendInput
/// per read of the pipe. A failed send ends the input: the pipe is dropped,
/// so the writer sees it, and the process's stdin is closed, so the
/// process sees its end (a reader or watcher then exits and is replaced).
async fn feed(envd: Envd, pid: u32, mut from: DuplexStream) {
    let mut buf = vec![0; PIPE];
    if let Some(unsent) = stream(&envd, pid, &mut from, &mut buf).await {
        let sent = async {
            if !unsent.is_empty() {
                envd.send_input(pid, &unsent).await?;
            }
            loop {
                match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return Ok::<_, EnvdError>(()),
                    Ok(n) => envd.send_input(pid, &buf[..n]).await?,
                }
            }
        };
        let _ = sent.await;
    }
    drop(from);
    let _ = envd.close_stdin(pid).await;
}

/// Sends the pipe's input on one StreamInput until the pipe ends. Where
/// envd refuses StreamInput: what went on it, to go by SendInput with the
/// rest of the pipe; `None` once the stream is over (ended or failed).
async fn stream(envd: &Envd, pid: u32, from: &mut DuplexStream, buf: &mut [u8]) -> Option<Vec<u8>> {
    // One message waits at most: a stream that is not taken holds the
    // pipe, and so its writer, back.
    let (messages, queued) = mpsc::channel(1);
    let answer = envd.stream_input(pid, ReceiverStream::new(queued));
    tokio::pin!(answer);
    // What went on the stream, for a refusal to send again. A refusal
    // answers the request's head, so it comes long before this is full;
    // past it, the stream is taken.
    let mut sent = Some(Vec::new());
    let ended = |answered: Result<(), EnvdError>, sent: Option<Vec<u8>>| match (answered, sent) {
        (Err(EnvdError::Unimplemented(why)), Some(sent)) => {
            tracing::debug!(
                sandbox = envd.sandbox_id,
                "input by SendInput: envd does not serve {why}"
            );
            Some(sent)
        }
        (answered, _) => {
            let why = answered.map_or_else(|e| e.to_string(), |()| "envd ended it".into());
            tracing::debug!(
                sandbox = envd.sandbox_id,
                "the input stream of process {pid} ended before its pipe: {why}"
            );
            None
        }
    };
    loop {
        let message = tokio::select! {
            answered = &mut answer => return ended(answered, sent),
            read = from.read(buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(kept) = &mut sent {
                        kept.extend_from_slice(&buf[..n]);
                        if kept.len() > PIPE {
                            sent = None;
                        }
                    }
                    StreamInputRequest::stdin(&buf[..n])
                }
            },
            // As the Start stream's keepalives: an idle proxy would cut a
            // request that carries nothing for long.
            () = tokio::time::sleep(KEEPALIVE) => StreamInputRequest::keepalive(),
        };
        tokio::select! {
            answered = &mut answer => return ended(answered, sent),
            queued = messages.send(message) => if queued.is_err() {
                // The request is over: its answer says why.
                return ended(answer.await, sent);
            },
        }
    }
    drop(messages);
    match answer.await {
        Ok(()) => None,
        answered => ended(answered, sent),
    }
}

/// The control of a spawned process, by its pid inside the sandbox.
#[derive(Clone)]
struct EnvdProcess {
    envd: Envd,
    pid: u32,
    exit: watch::Receiver<Exit>,
}

impl EnvdProcess {
    /// Runs `script` with `args` in the sandbox, without waiting for it.
    fn fire(&self, script: &'static str, args: Vec<String>) -> Result<()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            ProviderError::Unavailable(format!("cannot signal process {}: {e}", self.pid))
        })?;
        let envd = self.envd.clone();
        runtime.spawn(async move {
            let mut argv = vec!["-c", script, "sandkeep"];
            argv.extend(args.iter().map(String::as_str));
            if let Err(e) = envd.run("/bin/sh", &argv, None, SIGNAL_TIMEOUT, 4096).await {
                tracing::debug!(sandbox = envd.sandbox_id, "a signal script failed: {e}");
            }
        });
        Ok(())
    }

    fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

#[async_trait]
impl RunningProcess for EnvdProcess {
    fn signal(&self, signal: i32) -> Result<()> {
        if self.exited() {
            return Ok(());
        }
        self.fire(
            script::SIGNAL,
            vec![signal.to_string(), self.pid.to_string()],
        )
    }

    fn kill_group(&self) -> Result<()> {
        // Once it has exited, its pid may be another process's.
        if self.exited() {
            return Ok(());
        }
        self.fire(script::KILL_GROUP, vec![self.pid.to_string()])
    }

    async fn wait(&self) -> Result<ExitStatus> {
        let mut exit = self.exit.clone();
        let done = exit.wait_for(Option::is_some).await.map_err(|_| {
            ProviderError::ProcessLost("the process's stream reader is gone".into())
        })?;
        match done.as_ref().expect("waited for Some") {
            Ok(code) => Ok(*code),
            Err(message) => Err(ProviderError::ProcessLost(format!(
                "the exit of process {} is unknown: {message}",
                self.pid
            ))),
        }
    }
}
