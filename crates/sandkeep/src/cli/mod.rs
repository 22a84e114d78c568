//! The command line for people, and the `serve` entry point. Every command
//! calls the same service as the MCP server.

mod serve;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "sandkeep", version, about = "Linux sandboxes and durable background tasks for AI agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP over stdio (default) or Streamable HTTP.
    Serve(serve::ServeArgs),
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
    }
}
