//! `sandkeep task attach`: a person's terminal joined to a pty task, as
//! tmux attaches to a session. The saved output is shown first, then the
//! output as it is saved; keys go to the task (send_input) and the window
//! size follows this terminal's (resize_terminal). Ctrl-] detaches and
//! leaves the task running. Everything goes through the service, as the
//! tools do: nothing here reaches into a sandbox.

use std::io::{IsTerminal, Read, Write};

use base64::Engine;
use clap::Args;
use rustix::termios::{OptionalActions, Termios};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::Outcome;
use crate::cli::context::{CliError, SessionKind, with_context};
use crate::cli::exit;
use crate::service::{ResizeTerminalArgs, SendInputArgs, Service, WaitTaskArgs};

use super::handle::HandleArgs;

/// Ctrl-]: the key that detaches, as with telnet.
const DETACH: u8 = 0x1d;
/// How long one wait for output lasts before it is asked again.
const WAIT_SECS: u64 = 30;

/// Join this terminal to a task started with `--interactive --pty`.
#[derive(Debug, Args)]
#[command(
    long_about = "Join this terminal to a task started with `sandkeep task start --interactive \
        --pty`: its saved output first, then what it prints as it prints it; what you type goes \
        to the task, and its terminal takes this window's size.\n\n\
        Ctrl-] detaches and leaves the task running; attach again to see everything it printed \
        meanwhile. Attach ends by itself when the task ends."
)]
pub struct AttachArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
}

pub async fn run(args: AttachArgs) -> Outcome {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            "task attach needs a terminal on stdin; from a script, use `sandkeep task send`",
        ));
    }
    with_context(SessionKind::Ordinary, async |ctx| {
        let handle = &args.handle;
        // Also the check that the task has a terminal, before raw mode.
        resize(&ctx.service, handle).await?;
        let raw = RawMode::enter()?;
        let mut keys = keys_from_stdin();
        let mut window = signal(SignalKind::window_change())
            .map_err(|e| CliError::new(format!("watching the window size: {e}")))?;
        let mut offset = 0u64;
        let mut out = std::io::stdout();
        let detached = loop {
            let request = WaitTaskArgs {
                sandbox_id: handle.sandbox_id.clone(),
                task_id: handle.task_id.clone(),
                stdout_offset: Some(offset),
                stderr_offset: None,
                limit: Some(sandkeep_proto::limits::PAGE_LIMIT_MAX),
                timeout: Some(WAIT_SECS),
            };
            tokio::select! {
                page = ctx.service.wait_task(request) => {
                    let task = page?.task;
                    let _ = out
                        .write_all(task.stdout.as_bytes())
                        .and_then(|()| out.flush());
                    let more = task.stdout_next_offset > offset;
                    offset = task.stdout_next_offset;
                    if !more && task.state.is_settled() {
                        break None;
                    }
                }
                typed = keys.recv() => {
                    let typed = typed.unwrap_or_else(|| vec![DETACH]);
                    let (before, detach) = match typed.iter().position(|&b| b == DETACH) {
                        Some(at) => (&typed[..at], true),
                        None => (&typed[..], false),
                    };
                    if !before.is_empty() {
                        send(&ctx.service, handle, before).await?;
                    }
                    if detach {
                        break Some(());
                    }
                }
                _ = window.recv() => resize(&ctx.service, handle).await?,
            }
        };
        drop(raw);
        let id = format!("{} {}", handle.sandbox_id, handle.task_id);
        match detached {
            Some(()) => eprintln!(
                "\r\nsandkeep: detached; the task runs on (`sandkeep task attach {id}` to return)"
            ),
            None => eprintln!("\r\nsandkeep: the task has ended (`sandkeep task get {id}`)"),
        }
        Ok(exit::OK)
    })
    .await
}

async fn send(service: &Service, handle: &HandleArgs, bytes: &[u8]) -> Result<(), CliError> {
    let request = SendInputArgs {
        sandbox_id: handle.sandbox_id.clone(),
        task_id: handle.task_id.clone(),
        // Keys need not be UTF-8 (a split character, Alt as ESC + byte).
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
        encoding: Some("base64".to_owned()),
        close: None,
    };
    service.send_input(request).await?;
    Ok(())
}

/// Gives the task's terminal this window's size.
async fn resize(service: &Service, handle: &HandleArgs) -> Result<(), CliError> {
    let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdout()) else {
        return Ok(());
    };
    if size.ws_col == 0 || size.ws_row == 0 {
        return Ok(());
    }
    let request = ResizeTerminalArgs {
        sandbox_id: handle.sandbox_id.clone(),
        task_id: handle.task_id.clone(),
        cols: u64::from(size.ws_col),
        rows: u64::from(size.ws_row),
    };
    service.resize_terminal(request).await?;
    Ok(())
}

/// What is typed, as it is typed. A thread of its own: a read of the
/// terminal blocks, and it is left blocked when attach ends.
fn keys_from_stdin() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The terminal in raw mode (keys as typed, no echo, no signals from ^C:
/// they are the task's), put back as it was when dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Result<Self, CliError> {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin)
            .map_err(|e| CliError::new(format!("reading the terminal's mode: {e}")))?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, OptionalActions::Flush, &raw)
            .map_err(|e| CliError::new(format!("setting the terminal to raw mode: {e}")))?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Flush, &self.saved);
    }
}
