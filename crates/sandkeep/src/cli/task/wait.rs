//! `sandkeep task wait`: sleeps in wait_task until the task settles,
//! showing a status line on a terminal, and exits with the task's status.

use std::time::{Duration, Instant};

use clap::Args;

use crate::cli::Outcome;
use crate::cli::context::{CliError, SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output;
use crate::cli::status_line::{self, StatusLine};

use super::handle::{HandleArgs, long_poll_limit};

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

pub async fn run(args: WaitArgs) -> Outcome {
    let deadline = args
        .timeout
        .map(|s| Instant::now() + Duration::from_secs(s));
    with_context(SessionKind::Ordinary, async |ctx| {
        let mut status = StatusLine::on_stderr();
        let mut seen = args.handle.peek(&ctx.service).await?;
        let task = loop {
            if seen.state.is_settled() {
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
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let at_most = remaining.map_or(long_poll_limit(), |r| r.min(long_poll_limit()));
            // Offsets at the cap: no log ever has bytes past them, so only
            // the end of the task or the timeout answers.
            seen = args
                .handle
                .wait_past(&ctx.service, &args.handle.peek_query(), at_most)
                .await?;
        };
        status.clear();
        if args.handle.output.json {
            output::print_json(&ctx.service.get_task(args.handle.query()).await?);
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
