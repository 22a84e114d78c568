//! `sandkeep exec`: the run_command tool from a shell, exiting with the
//! command's own status.

use std::io::Write;

use clap::Args;
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::RUN_TIMEOUT_MAX;

use crate::service::{CreateSandboxArgs, ListChangesArgs, RunCommandArgs, RunCommandResult};

use super::Outcome;
use super::context::{CliError, SessionKind, with_shares};
use super::exit;
use super::output::{self, OutputArgs};

/// Run a command in a sandbox, wait for it, and exit with its status.
#[derive(Debug, Args)]
#[command(
    long_about = "Run a command in a sandbox, wait for it, and exit with its status.\n\n\
        The words after `--` are joined with spaces and run by the sandbox's shell (bash -c), \
        as ssh does: quote what the sandbox's shell should see, e.g. `sandkeep exec -- 'ls | wc \
        -l'`. Its stdout and stderr are printed when it ends (at most the last 64 KiB of each).\n\n\
        Without --sandbox the command runs in a fresh sandbox that is destroyed when this \
        command ends. For work longer than the timeout, use `sandkeep task start`.",
    after_help = "Examples:\n  sandkeep exec -- uname -a\n  \
        sandkeep exec --sandbox \"$SB\" --cwd /tmp --timeout 600 -- 'make -j2 && make test'",
    after_long_help = exit::TABLE
)]
pub struct ExecArgs {
    /// Sandbox to run in [default: a fresh sandbox, destroyed afterwards].
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Working directory in the sandbox [default: the sandbox user's home].
    #[arg(long, value_name = "D")]
    pub cwd: Option<String>,
    /// Seconds to wait, 1-3600 [default: 60]; then the command is killed
    /// and exec exits with 124 (or the command's signal status).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// For a fresh sandbox: host directories to mount (see `sandbox create
    /// --share`); its cow changes are discarded with it.
    #[command(flatten)]
    pub shares: super::shares::ShareArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The command to run.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub async fn run(args: ExecArgs) -> Outcome {
    let fresh = args.sandbox.is_none();
    if !fresh && !args.shares.shares.is_empty() {
        return Err(CliError::new(
            "--share mounts directories in a fresh sandbox; an existing one keeps the shares it was \
             created with",
        )
        .hint("drop --share, or drop --sandbox to run in a fresh sandbox"));
    }
    let shares = args.shares.configured()?;
    let cow = shares
        .iter()
        .any(|s| s.mode == sandkeep_proto::shares::ShareMode::Cow);
    let request = RunCommandArgs {
        command: args.command.join(" "),
        sandbox_id: args.sandbox,
        cwd: args.cwd,
        timeout: args.timeout,
    };
    // An ordinary session: a sandbox created here is in its destruction set
    // and goes when the session ends.
    with_shares(SessionKind::Ordinary, shares, async |ctx| {
        let created = if fresh {
            Some(
                ctx.service
                    .create_sandbox(&ctx.session, CreateSandboxArgs::default())
                    .await?,
            )
        } else {
            None
        };
        let result = ctx.service.run_command(&ctx.session, request).await?;
        if let (Some(created), true) = (created, cow) {
            say_discarded(ctx, created.sandbox_id).await;
        }
        if args.output.json {
            output::print_json(&result);
        } else {
            print_human(&result);
        }
        Ok(exit_code(&result))
    })
    .await
    .map_err(CliError::forwarding)
}

/// A fresh sandbox goes with this command: whatever it changed in its cow
/// shares goes with it, and the person is told so.
async fn say_discarded(ctx: &super::context::Context, sandbox_id: String) {
    let listed = ctx
        .service
        .list_changes(ListChangesArgs {
            sandbox_id,
            diff: None,
        })
        .await;
    match listed {
        Ok(l) if l.changes.is_empty() => {}
        Ok(l) => eprintln!(
            "sandkeep: {}{} change(s) to the cow share(s) are discarded with this sandbox; to keep \
             them, create one with `sandkeep sandbox create --share …`, then `sandkeep sandbox \
             apply`",
            l.changes.len(),
            if l.truncated { "+" } else { "" }
        ),
        Err(e) => eprintln!("sandkeep: could not list the cow shares' changes: {e}"),
    }
}

fn print_human(result: &RunCommandResult) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(result.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(result.stderr.as_bytes());
    for (stream, truncated) in [
        ("stdout", result.stdout_truncated),
        ("stderr", result.stderr_truncated),
    ] {
        if truncated {
            let _ = writeln!(
                stderr,
                "sandkeep: only the last 64 KiB of {stream} are shown; for complete logs run it with \
                 `sandkeep task start` and read `sandkeep task logs`"
            );
        }
    }
    if result.timed_out {
        let _ = writeln!(
            stderr,
            "sandkeep: the command was killed at its timeout; raise --timeout (at most {RUN_TIMEOUT_MAX}) or use \
             `sandkeep task start`"
        );
    }
}

/// A foreground command ends like a task: the same codes apply.
fn exit_code(result: &RunCommandResult) -> u8 {
    let state = match (result.timed_out, result.exit_code) {
        (true, _) => TaskState::TimedOut,
        (false, Some(0)) => TaskState::Succeeded,
        (false, _) => TaskState::Failed,
    };
    exit::for_task(state, result.exit_code).unwrap_or(exit::OWN_FAILURE_FORWARDING)
}
