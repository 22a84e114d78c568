//! Host shares from a shell: `--share` on the commands that create a
//! sandbox (the person at the shell is the operator), and `sandkeep
//! sandbox changes|apply`, the list_changes and apply_changes tools.

use std::io::IsTerminal;

use clap::Args;

use crate::service::{ApplyChangesArgs, ListChangesArgs, ListChangesResult};
use sandkeep_shares::ShareConfig;

use super::Outcome;
use super::context::{CliError, SessionKind, with_context};
use super::exit;
use super::output::{self, OutputArgs, Table, outln};

/// `--share PATH[:MODE]`, repeatable.
#[derive(Debug, Clone, Default, Args)]
pub struct ShareArgs {
    /// Host directory to mount at the same path inside the sandbox
    /// (repeatable). MODE: `ro` (read-only, the default), `cow` (writes
    /// stay in the sandbox; see `sandbox changes` and `sandbox apply`) or
    /// `rw` (writes reach the host). The first share is where commands
    /// run by default.
    #[arg(long = "share", value_name = "PATH[:MODE]")]
    pub shares: Vec<String>,
}

impl ShareArgs {
    /// The shares, checked against this configuration's state directory.
    pub fn configured(&self) -> Result<Vec<ShareConfig>, CliError> {
        resolve(&self.shares).map_err(|e| {
            CliError::new(e).hint("pass an existing project directory, e.g. --share \"$PWD:cow\"")
        })
    }
}

/// Checks `--share` settings the way `serve` and the CLI both do.
pub fn resolve(args: &[String]) -> Result<Vec<ShareConfig>, String> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    // The local provider's state directory must never be shared; on e2b
    // there is none on this host to protect.
    let state = crate::provider::home_from_env().unwrap_or_default();
    sandkeep_shares::parse_all(args, &state).map_err(|e| e.to_string())
}

/// List what a sandbox changed in its copy-on-write shares.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  sandkeep sandbox changes \"$SB\"\n  \
    sandkeep sandbox changes \"$SB\" --diff | less -R")]
pub struct ChangesArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// Also print a unified diff of the changed text files.
    #[arg(long)]
    pub diff: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Write a sandbox's copy-on-write changes into the host directories.
#[derive(Debug, Args)]
#[command(
    long_about = "Write a sandbox's copy-on-write changes into the shared host \
    directories: all of them, or those at or below the given paths. A host path that changed \
    since the sandbox was created is a conflict: left alone and reported (exit status 1)."
)]
pub struct ApplyArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// Apply only the changes at or below these absolute paths.
    #[arg(value_name = "PATH")]
    pub paths: Vec<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn changes(args: ChangesArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let listed = ctx
            .service
            .list_changes(ListChangesArgs {
                sandbox_id: args.sandbox_id.clone(),
                diff: Some(args.diff),
            })
            .await?;
        if args.output.json {
            output::print_json(&listed);
        } else {
            print_changes(&listed, std::io::stdout().is_terminal());
        }
        Ok(exit::OK)
    })
    .await
}

fn print_changes(listed: &ListChangesResult, colour: bool) {
    if listed.changes.is_empty() {
        eprintln!("no changes in sandbox {}", listed.sandbox_id);
        return;
    }
    let paint = |kind: &str| {
        let code = match kind {
            "added" => "32",
            "deleted" => "31",
            _ => "33",
        };
        if colour {
            format!("\x1b[{code}m{kind}\x1b[0m")
        } else {
            kind.to_owned()
        }
    };
    let mut table = Table::new(&["CHANGE", "TYPE", "SIZE", "PATH"]);
    for c in &listed.changes {
        table.row(vec![
            paint(&c.kind),
            c.entry_type.clone(),
            c.size.to_string(),
            output::printable(&c.path, false).into_owned(),
        ]);
    }
    table.print();
    if listed.truncated {
        eprintln!(
            "sandkeep: more changes than listed; `--json` shows the same first {}",
            listed.changes.len()
        );
    }
    if let Some(diff) = &listed.diff {
        outln!();
        let _ = output::emit(&output::printable(diff, true));
        if listed.diff_truncated {
            eprintln!("sandkeep: the diff was cut; apply or inspect the rest in the sandbox");
        }
    }
}

pub async fn apply(args: ApplyArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let done = ctx
            .service
            .apply_changes(ApplyChangesArgs {
                sandbox_id: args.sandbox_id.clone(),
                paths: (!args.paths.is_empty()).then_some(args.paths.clone()),
            })
            .await?;
        if args.output.json {
            output::print_json(&done);
        } else {
            for path in &done.applied {
                outln!("applied {}", output::printable(path, false));
            }
            for c in &done.conflicts {
                eprintln!(
                    "sandkeep: conflict, left alone: {}: {}",
                    output::printable(&c.path, false),
                    c.reason
                );
            }
            if done.applied.is_empty() && done.conflicts.is_empty() {
                eprintln!("no changes to apply in sandbox {}", done.sandbox_id);
            }
        }
        Ok(if done.conflicts.is_empty() {
            exit::OK
        } else {
            exit::OWN_FAILURE
        })
    })
    .await
}
