//! `sandkeep completions SHELL`: a completion script generated from the
//! very clap definition that parses the command line, so it cannot drift.

use clap::Args;
use clap_complete::Shell;

/// Print a shell completion script.
#[derive(Debug, Args)]
#[command(
    long_about = "Print a completion script for bash, zsh, fish, elvish or PowerShell on stdout.",
    after_help = "Install it, for example:\n  \
        bash: sandkeep completions bash > ~/.local/share/bash-completion/completions/sandkeep\n  \
        zsh:  sandkeep completions zsh > \"${fpath[1]}/_sandkeep\"\n  \
        fish: sandkeep completions fish > ~/.config/fish/completions/sandkeep.fish"
)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &CompletionsArgs, command: &mut clap::Command) {
    let name = command.get_name().to_owned();
    clap_complete::generate(args.shell, command, name, &mut std::io::stdout());
}
