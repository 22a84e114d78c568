//! The command line for people, and the `serve` entry point.
//!
//! Every command is a front end of the very same [`crate::service`] the MCP
//! server uses: it builds the service's argument structs from its flags,
//! calls the handler and prints the result object (as a table or text, or
//! with `--json` exactly as MCP returns it in `structuredContent`). No rule
//! of the service is re-implemented here; this module owns only parsing,
//! presentation, polling for `--follow`/`wait`, and exit codes.
//!
//! One CLI invocation is one service session (see [`context`]).

mod completions;
mod context;
mod doctor;
mod exec;
mod exit;
mod mcp_config;
mod output;
mod sandbox;
mod secret_file;
pub(crate) mod serve;
mod shares;
mod snapshot;
mod status_line;
mod task;

use clap::{CommandFactory, Parser, Subcommand};

use context::CliError;

const AFTER_HELP: &str = "\
Sandboxes and tasks live in the state directory $SANDKEEP_HOME (default
${XDG_STATE_HOME:-$HOME/.local/state}/sandkeep): the CLI and every
`sandkeep serve` with the same directory see the same sandboxes and tasks.

A typical session:
  SB=$(sandkeep sandbox create --timeout 3600)
  sandkeep task start --sandbox \"$SB\" -- 'make test'   # prints SANDBOX TASK
  sandkeep task logs \"$SB\" TASK --follow               # exits with the task's code
  sandkeep sandbox kill \"$SB\"

Run `sandkeep doctor` first on a new machine.";

#[derive(Debug, Parser)]
#[command(
    name = "sandkeep",
    version,
    about = "Linux sandboxes and durable background tasks for AI agents",
    long_about = "Linux sandboxes and durable background tasks for AI agents.\n\n\
        sandkeep is an MCP server (`sandkeep serve`) and this command line for the people \
        who run those agents: see and steer the same sandboxes and tasks from a terminal, \
        read what a task printed, stop it, clean up. A background task keeps running after \
        whoever started it has gone; any later sandkeep process can read its state, exit \
        code and logs by its handle (SANDBOX TASK).",
    after_help = AFTER_HELP,
    after_long_help = format!("{AFTER_HELP}\n\n{}", exit::TABLE)
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    Exec(exec::ExecArgs),
    #[command(subcommand)]
    Task(task::TaskCommand),
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    Doctor(doctor::DoctorArgs),
    /// Serve MCP over stdio (default) or Streamable HTTP.
    Serve(serve::ServeArgs),
    /// Print the configuration that registers this binary, with its state
    /// directory, in an MCP client.
    McpConfig(mcp_config::McpConfigArgs),
    Completions(completions::CompletionsArgs),
}

impl Command {
    /// Whether the command's first act is to create a sandbox.
    fn creates_a_sandbox(&self) -> bool {
        match self {
            Self::Exec(args) => args.sandbox.is_none(),
            Self::Sandbox(cmd) => matches!(cmd, sandbox::SandboxCommand::Create(_)),
            _ => false,
        }
    }
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    if cli.command.creates_a_sandbox() {
        crate::provider::about_to_create();
    }
    let code = match cli.command {
        Command::Serve(args) => return serve::run(args),
        Command::Completions(args) => {
            completions::run(&args, &mut Cli::command());
            exit::OK
        }
        Command::McpConfig(args) => mcp_config::run(&args),
        Command::Doctor(args) => context::block_on(args.output.json, doctor::run(args)),
        Command::Sandbox(cmd) => context::block_on(cmd.json(), sandbox::run(cmd)),
        Command::Exec(args) => context::block_on(args.output.json, exec::run(args)),
        Command::Task(cmd) => context::block_on(cmd.json(), task::run(cmd)),
        Command::Snapshot(cmd) => context::block_on(cmd.json(), snapshot::run(cmd)),
    };
    i32::from(code)
}

/// The result of one command: the exit code it chose, or an error that
/// [`context::block_on`] prints with its next step.
type Outcome = Result<u8, CliError>;
