//! `sandkeep task get`: one task's state, exit code, times and a page of
//! each log; also how a task is shown, which `cancel` shares.

use clap::Args;

use crate::cli::Outcome;
use crate::cli::context::{SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output::{self, outln};
use crate::service::{TaskQueryArgs, TaskResult};

use super::handle::HandleArgs;

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

pub async fn run(args: GetArgs) -> Outcome {
    let request = TaskQueryArgs {
        stdout_offset: args.stdout_offset,
        stderr_offset: args.stderr_offset,
        limit: args.limit,
        ..args.handle.query()
    };
    with_context(SessionKind::Ordinary, async |ctx| {
        let task = ctx.service.get_task(request).await?;
        print_task(&task, args.handle.output.json, true);
        Ok(exit::OK)
    })
    .await
}

/// Prints a task as `get` and `cancel` show it; `pages` adds the log pages.
pub fn print_task(task: &TaskResult, json: bool, pages: bool) {
    if json {
        output::print_json(task);
        return;
    }
    let now = crate::provider::unix_now();
    let log = |bytes: u64, truncated: bool| {
        let mut s = format!("{} saved", output::bytes(bytes));
        if truncated {
            s.push_str(" (truncated: only the first 1 MiB is kept)");
        }
        s
    };
    let mut fields = vec![
        ("sandbox", task.sandbox_id.clone()),
        ("task", task.task_id.clone()),
        ("state", task.state.to_string()),
        (
            "exit code",
            task.exit_code
                .map_or_else(|| "-".to_owned(), |c| c.to_string()),
        ),
    ];
    if let Some(error) = &task.error {
        fields.push(("error", error.clone()));
    }
    fields.extend([
        ("started", output::relative_opt(task.started_at, now)),
        ("finished", output::relative_opt(task.finished_at, now)),
        ("stdout", log(task.stdout_bytes, task.stdout_truncated)),
        ("stderr", log(task.stderr_bytes, task.stderr_truncated)),
    ]);
    output::print_fields(&fields);
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
        // A page for a person: escape sequences shown, not obeyed.
        let _ = output::emit(&output::printable(text, true));
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
