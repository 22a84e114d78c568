//! `sandkeep task start`: submits a command as a background task and prints
//! its handle, or the unconfirmed handle with exit code 75.

use clap::Args;
use sandkeep_proto::TaskState;

use crate::cli::Outcome;
use crate::cli::context::{SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output::{self, OutputArgs, outln};
use crate::service::{StartInteractiveTaskArgs, StartTaskArgs};

/// Start a command in the background and print its handle.
#[derive(Debug, Args)]
#[command(
    long_about = "Start a command in the background in a sandbox and print its handle, \
        `SANDBOX TASK`, on stdout.\n\n\
        The words after `--` are joined with spaces and run by bash -c in the sandbox. Starting \
        a task retains the sandbox: it then lives until its deadline or `sandkeep sandbox kill`, \
        whoever started it. The task's timeout does not extend the sandbox's deadline.\n\n\
        With --interactive the task takes input from `sandkeep task send` (with --pty, on a \
        terminal).\n\n\
        If the start cannot be confirmed, the handle is still printed, the state is `unknown` \
        and the exit code is 75: check it with `sandkeep task get` and do not start the command \
        again, it may be running.",
    after_help = "Examples:\n  sandkeep task start --sandbox \"$SB\" --cwd /src -- 'make test'\n  \
        set -- $(sandkeep task start --sandbox \"$SB\" --timeout 3600 -- ./long-job)\n  \
        sandkeep task logs \"$1\" \"$2\" --follow"
)]
pub struct StartArgs {
    /// Sandbox to run in (see `sandkeep sandbox list`).
    #[arg(long, value_name = "ID", required = true)]
    pub sandbox: String,
    /// Working directory in the sandbox; must exist [default: the sandbox
    /// user's home].
    #[arg(long, value_name = "D")]
    pub cwd: Option<String>,
    /// Seconds before the task is stopped (state timed_out), 1-3600
    /// [default: 300].
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Let the task take input: send it with `sandkeep task send` (stdin
    /// is a pipe, or a terminal with --pty).
    #[arg(long)]
    pub interactive: bool,
    /// Run the task on a terminal (TERM=xterm-256color); its output,
    /// stdout and stderr together, is the task's stdout.
    #[arg(long, requires = "interactive")]
    pub pty: bool,
    /// Terminal columns with --pty, 1-1000 [default: 80].
    #[arg(long, value_name = "N", requires = "pty")]
    pub cols: Option<u64>,
    /// Terminal rows with --pty, 1-1000 [default: 24].
    #[arg(long, value_name = "N", requires = "pty")]
    pub rows: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The command to run.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub async fn run(args: StartArgs) -> Outcome {
    let request = StartTaskArgs {
        command: args.command.join(" "),
        sandbox_id: Some(args.sandbox),
        cwd: args.cwd,
        timeout: args.timeout,
    };
    let interactive = args.interactive.then_some(StartInteractiveTaskArgs {
        command: request.command.clone(),
        sandbox_id: request.sandbox_id.clone(),
        cwd: request.cwd.clone(),
        timeout: request.timeout,
        pty: Some(args.pty),
        cols: args.cols,
        rows: args.rows,
    });
    with_context(SessionKind::Ordinary, async |ctx| {
        let started = match interactive {
            Some(i) => ctx.service.start_interactive_task(&ctx.session, i).await?,
            None => ctx.service.start_task(&ctx.session, request).await?,
        };
        if args.output.json {
            output::print_json(&started);
        } else {
            outln!("{} {}", started.sandbox_id, started.task_id);
        }
        let handle = format!("{} {}", started.sandbox_id, started.task_id);
        if let Some(error) = &started.error {
            eprintln!("sandkeep: warning: {error}");
            eprintln!("  hint: check it with `sandkeep task get {handle}`; do not start the command again");
        } else if !args.output.json {
            eprintln!(
                "task {} in sandbox {} is {}; follow it with `sandkeep task logs {handle} --follow`",
                started.task_id, started.sandbox_id, started.state
            );
        }
        Ok(if started.state == TaskState::Unknown {
            exit::TASK_UNKNOWN
        } else {
            exit::OK
        })
    })
    .await
}
