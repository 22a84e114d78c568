//! `sandkeep serve`. (Being written.)

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
}

pub fn run(_args: ServeArgs) -> i32 {
    2
}
