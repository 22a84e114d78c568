//! `sandkeep task start|get|cancel|list|wait|logs|send|attach`: the task tools from a
//! shell, one module per subcommand, each owning its arguments, the service
//! call and how the result is printed. [`handle`] holds what the commands
//! that take a task's handle share.

mod attach;
mod cancel;
mod get;
mod handle;
mod list;
mod logs;
mod send;
mod start;
mod wait;

use clap::Subcommand;

use super::Outcome;

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
    Start(start::StartArgs),
    Get(get::GetArgs),
    Cancel(cancel::CancelArgs),
    List(list::ListArgs),
    Logs(logs::LogsArgs),
    Wait(wait::WaitArgs),
    Send(send::SendArgs),
    Attach(attach::AttachArgs),
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
            Self::Send(a) => a.handle.output.json,
            Self::Attach(a) => a.handle.output.json,
        }
    }
}

pub async fn run(cmd: TaskCommand) -> Outcome {
    match cmd {
        TaskCommand::Start(args) => start::run(args).await,
        TaskCommand::Get(args) => get::run(args).await,
        TaskCommand::Cancel(args) => cancel::run(args).await,
        TaskCommand::List(args) => list::run(args).await,
        TaskCommand::Logs(args) => logs::run(args).await,
        TaskCommand::Wait(args) => wait::run(args).await,
        TaskCommand::Send(args) => send::run(args).await,
        TaskCommand::Attach(args) => attach::run(args).await,
    }
}
