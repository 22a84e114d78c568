//! `sandkeep task list`: the tasks of one sandbox as a table.

use clap::Args;

use crate::cli::Outcome;
use crate::cli::context::{SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output::{self, OutputArgs, Table};
use crate::service::ListTasksArgs;

/// List the tasks of a sandbox.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The sandbox whose tasks to list.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: ListArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let listed = ctx
            .service
            .list_tasks(ListTasksArgs {
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
        let now = crate::provider::unix_now();
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
