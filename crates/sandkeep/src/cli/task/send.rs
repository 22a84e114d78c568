//! `sandkeep task send`: types input into an interactive task, through the
//! same service call as the send_input tool.

use clap::Args;

use crate::cli::Outcome;
use crate::cli::context::{SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output::{self, outln};
use crate::service::SendInputArgs;

use super::handle::HandleArgs;

/// Send input to a task started with `task start --interactive`.
#[derive(Debug, Args)]
#[command(
    long_about = "Send input to a task started with `sandkeep task start --interactive`.\n\n\
        DATA is written to the task's stdin (or terminal) as given: end a line with a newline \
        ($'...\\n' in bash). It is kept in the sandbox until the task reads it, in order and \
        once, whatever happens to this command. At most 64 KiB a call and 1 MiB waiting \
        unread.",
    after_help = "Examples:\n  sandkeep task send \"$SB\" \"$TASK\" $'print(6*7)\\n'\n  \
        sandkeep task send \"$SB\" \"$TASK\" '' --close"
)]
pub struct SendArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
    /// What to send.
    #[arg(value_name = "DATA")]
    pub data: String,
    /// DATA is base64 (for bytes a shell argument cannot hold).
    #[arg(long)]
    pub base64: bool,
    /// Close the task's stdin after DATA (end-of-file; ^D on a terminal).
    #[arg(long)]
    pub close: bool,
}

pub async fn run(args: SendArgs) -> Outcome {
    let request = SendInputArgs {
        sandbox_id: args.handle.sandbox_id,
        task_id: args.handle.task_id,
        data: args.data,
        encoding: args.base64.then(|| "base64".to_owned()),
        close: Some(args.close),
    };
    let json = args.handle.output.json;
    with_context(SessionKind::Ordinary, async |ctx| {
        let sent = ctx.service.send_input(request).await?;
        if json {
            output::print_json(&sent);
        } else {
            outln!("{}", sent.bytes_accepted);
        }
        Ok(exit::OK)
    })
    .await
}
