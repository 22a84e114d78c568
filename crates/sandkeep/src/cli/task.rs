//! `sandkeep task start|get|cancel|list|wait|logs`: the task tools from a
//! shell. `logs` lives in [`super::logs`].

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::OFFSET_MAX;

use crate::service::{Service, StartTaskArgs, TaskQueryArgs, TaskResult};

use super::Outcome;
use super::context::{CliError, SessionKind, with_context};
use super::exit;
use super::logs::{self, LogsArgs};
use super::output::outln;
use super::output::{self, OutputArgs, Table};
use super::status_line::{self, StatusLine};

/// How often `wait` and `logs --follow` ask for news when there is none.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Start background tasks and read their state and logs.
#[derive(Debug, Subcommand)]
#[command(
    long_about = "Start background tasks and read their state and logs.\n\n\
        A task is a shell command running in the background in a sandbox. It keeps running \
        after this command, the MCP client or the server that started it has gone; its \
        handle is the pair SANDBOX TASK, which every other `task` command takes. Each log \
        saves the first 1 MiB of the task's stdout and stderr."
)]
pub enum TaskCommand {
    Start(StartArgs),
    Get(GetArgs),
    Cancel(CancelArgs),
    List(ListArgs),
    Logs(LogsArgs),
    Wait(WaitArgs),
}

impl TaskCommand {
    pub fn json(&self) -> bool {
        match self {
            Self::Start(a) => a.output.json,
            Self::Get(a) => a.handle.output.json,
            Self::Cancel(a) => a.handle.output.json,
            Self::List(a) => a.output.json,
            Self::Logs(a) => a.handle.output.json,
            Self::Wait(a) => a.handle.output.json,
        }
    }
}

/// Start a command in the background and print its handle.
#[derive(Debug, Args)]
#[command(
    long_about = "Start a command in the background in a sandbox and print its handle, \
        `SANDBOX TASK`, on stdout.\n\n\
        The words after `--` are joined with spaces and run by bash -c in the sandbox. Starting \
        a task retains the sandbox: it then lives until its deadline or `sandkeep sandbox kill`, \
        whoever started it. The task's timeout does not extend the sandbox's deadline.\n\n\
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
    #[command(flatten)]
    pub output: OutputArgs,
    /// The command to run.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// A task's handle, as `task start` prints it.
#[derive(Debug, Args)]
pub struct HandleArgs {
    /// The sandbox of the task.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// The task's id (32 hex characters).
    #[arg(value_name = "TASK")]
    pub task_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Show a task's state, exit code, times and one page of each log.
#[derive(Debug, Args)]
#[command(
    long_about = "Show a task's state, exit code, times and one page of each log.\n\n\
        States: running, succeeded, failed (non-zero exit, or the command could not be \
        started), cancelled, timed_out, and unknown (the supervisor is gone without recording \
        a result: never assume success). Use --stdout-offset/--stderr-offset with the next \
        offsets printed to page on, or `sandkeep task logs` for the whole log."
)]
pub struct GetArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
    /// Byte offset into the saved stdout, 0-1048576 [default: 0].
    #[arg(long, value_name = "N")]
    pub stdout_offset: Option<u64>,
    /// Byte offset into the saved stderr, 0-1048576 [default: 0].
    #[arg(long, value_name = "N")]
    pub stderr_offset: Option<u64>,
    /// Bytes per log to show, 1-65536 [default: 16384].
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// List the tasks of a sandbox.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The sandbox whose tasks to list.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Wait until a task ends and exit with its status.
#[derive(Debug, Args)]
#[command(
    long_about = "Wait until a task ends and exit with its status.\n\n\
        On a terminal it shows the elapsed time on stderr while it waits. With --json it prints \
        the task (as `task get --json`) once it has ended.",
    after_long_help = exit::TABLE
)]
pub struct WaitArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
    /// Give up after this many seconds and exit with 76 if the task is
    /// still running [default: wait as long as it takes].
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
}

/// Cancel a task: TERM to its process group, KILL after a grace period.
#[derive(Debug, Args)]
#[command(
    long_about = "Cancel a task: TERM to its process group, KILL after a grace period, and wait \
        at most 3 s for the state `cancelled`.\n\n\
        A task that already ended is left alone and shown as it ended. If the task cannot be \
        confirmed stopped within 3 s, this exits with 1 and shows what it saw. Processes the \
        task moved to their own session or process group are out of its reach: only \
        `sandkeep sandbox kill` stops those."
)]
pub struct CancelArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
}

pub async fn run(cmd: TaskCommand) -> Outcome {
    match cmd {
        TaskCommand::Start(args) => start(args).await,
        TaskCommand::Get(args) => get(args).await,
        TaskCommand::Cancel(args) => cancel(args).await,
        TaskCommand::List(args) => list(args).await,
        TaskCommand::Logs(args) => logs::run(args).await,
        TaskCommand::Wait(args) => wait(args).await,
    }
}

async fn start(args: StartArgs) -> Outcome {
    let request = StartTaskArgs {
        command: args.command.join(" "),
        sandbox_id: Some(args.sandbox),
        cwd: args.cwd,
        timeout: args.timeout,
    };
    with_context(SessionKind::Ordinary, async |ctx| {
        let started = ctx.service.start_task(&ctx.session, request).await?;
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

fn query(handle: &HandleArgs) -> TaskQueryArgs {
    TaskQueryArgs {
        sandbox_id: handle.sandbox_id.clone(),
        task_id: handle.task_id.clone(),
        stdout_offset: None,
        stderr_offset: None,
        limit: None,
    }
}

async fn get(args: GetArgs) -> Outcome {
    let request = TaskQueryArgs {
        stdout_offset: args.stdout_offset,
        stderr_offset: args.stderr_offset,
        limit: args.limit,
        ..query(&args.handle)
    };
    with_context(SessionKind::Ordinary, async |ctx| {
        let task = ctx.service.get_task(request).await?;
        print_task(&task, args.handle.output.json, true);
        Ok(exit::OK)
    })
    .await
}

async fn cancel(args: CancelArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let task = ctx.service.cancel_task(query(&args.handle)).await?;
        print_task(&task, args.handle.output.json, false);
        Ok(exit::OK)
    })
    .await
}

async fn list(args: ListArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let listed = ctx
            .service
            .list_tasks(crate::service::ListTasksArgs {
                sandbox_id: args.sandbox_id.clone(),
            })
            .await?;
        if args.output.json {
            output::print_json(&listed);
            return Ok(exit::OK);
        }
        if listed.tasks.is_empty() {
            eprintln!(
                "no tasks in sandbox {}; start one with `sandkeep task start --sandbox {} -- COMMAND`",
                listed.sandbox_id, listed.sandbox_id
            );
            return Ok(exit::OK);
        }
        let now = output::now();
        let mut table = Table::new(&["TASK", "STATE", "EXIT", "STARTED", "FINISHED"]);
        for t in &listed.tasks {
            table.row(vec![
                t.task_id.clone(),
                t.state.to_string(),
                t.exit_code.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                output::relative_opt(t.started_at, now),
                output::relative_opt(t.finished_at, now),
            ]);
        }
        table.print();
        Ok(exit::OK)
    })
    .await
}

/// Prints a task as `get` and `cancel` show it; `pages` adds the log pages.
fn print_task(task: &TaskResult, json: bool, pages: bool) {
    if json {
        output::print_json(task);
        return;
    }
    let now = output::now();
    let log = |bytes: u64, truncated: bool| {
        let mut s = format!("{} saved", output::bytes(bytes));
        if truncated {
            s.push_str(" (truncated: only the first 1 MiB is kept)");
        }
        s
    };
    output::print_fields(&[
        ("sandbox", task.sandbox_id.clone()),
        ("task", task.task_id.clone()),
        ("state", task.state.to_string()),
        (
            "exit code",
            task.exit_code
                .map_or_else(|| "-".to_owned(), |c| c.to_string()),
        ),
        ("started", output::relative_opt(task.started_at, now)),
        ("finished", output::relative_opt(task.finished_at, now)),
        ("stdout", log(task.stdout_bytes, task.stdout_truncated)),
        ("stderr", log(task.stderr_bytes, task.stderr_truncated)),
    ]);
    if !pages {
        return;
    }
    for (name, text, next, saved) in [
        (
            "stdout",
            &task.stdout,
            task.stdout_next_offset,
            task.stdout_bytes,
        ),
        (
            "stderr",
            &task.stderr,
            task.stderr_next_offset,
            task.stderr_bytes,
        ),
    ] {
        if text.is_empty() {
            continue;
        }
        outln!("--- {name} (up to byte {next} of {saved}) ---");
        let _ = output::emit(text);
        if !text.ends_with('\n') {
            outln!();
        }
        if next < saved {
            outln!(
                "--- more: --{name}-offset {next}, or `sandkeep task logs{} {} {}` ---",
                if name == "stderr" { " --stderr" } else { "" },
                task.sandbox_id,
                task.task_id
            );
        }
    }
}

/// Asks for the task's state without transferring log bytes: both offsets
/// past any saved log give empty pages.
pub async fn peek(service: &Service, handle: &HandleArgs) -> Result<TaskResult, CliError> {
    let request = TaskQueryArgs {
        stdout_offset: Some(OFFSET_MAX),
        stderr_offset: Some(OFFSET_MAX),
        limit: Some(1),
        ..query(handle)
    };
    Ok(service.get_task(request).await?)
}

/// True once the task's state will not change: a terminal state, or
/// `unknown` (its supervisor is gone).
pub fn settled(state: TaskState) -> bool {
    state.is_terminal() || state == TaskState::Unknown
}

async fn wait(args: WaitArgs) -> Outcome {
    let deadline = args
        .timeout
        .map(|s| Instant::now() + Duration::from_secs(s));
    with_context(SessionKind::Ordinary, async |ctx| {
        let mut status = StatusLine::on_stderr();
        let task = loop {
            let seen = peek(&ctx.service, &args.handle).await?;
            if settled(seen.state) {
                break seen;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                status.clear();
                eprintln!(
                    "sandkeep: task {} is still running after {} s; wait again, or stop it with \
                     `sandkeep task cancel {} {}`",
                    seen.task_id,
                    args.timeout.unwrap_or_default(),
                    seen.sandbox_id,
                    seen.task_id
                );
                return Ok(exit::STILL_RUNNING);
            }
            status.show(&status_line::describe(
                seen.state,
                seen.started_at,
                seen.finished_at,
                seen.stdout_bytes,
                seen.stderr_bytes,
            ));
            tokio::time::sleep(POLL_INTERVAL).await;
        };
        status.clear();
        if args.handle.output.json {
            output::print_json(&ctx.service.get_task(query(&args.handle)).await?);
        } else {
            eprintln!(
                "task {} {}",
                task.task_id,
                status_line::describe(
                    task.state,
                    task.started_at,
                    task.finished_at,
                    task.stdout_bytes,
                    task.stderr_bytes
                )
            );
        }
        Ok(exit::for_task(task.state, task.exit_code).unwrap_or(exit::OWN_FAILURE_FORWARDING))
    })
    .await
    .map_err(CliError::forwarding)
}
