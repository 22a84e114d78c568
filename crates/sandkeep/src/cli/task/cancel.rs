//! `sandkeep task cancel`: stops a task through the service and shows it
//! as it ended.

use clap::Args;

use crate::cli::Outcome;
use crate::cli::context::{SessionKind, with_context};
use crate::cli::exit;

use super::get::print_task;
use super::handle::HandleArgs;

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

pub async fn run(args: CancelArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let task = ctx.service.cancel_task(args.handle.query()).await?;
        print_task(&task, args.handle.output.json, false);
        Ok(exit::OK)
    })
    .await
}
