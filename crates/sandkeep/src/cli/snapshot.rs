//! `sandkeep sandbox snapshot|fork` and `sandkeep snapshot list|delete`:
//! the snapshot_sandbox, fork_sandbox, list_snapshots and delete_snapshot
//! tools from a shell.

use clap::{Args, Subcommand};

use crate::service::{DeleteSnapshotArgs, ForkSandboxArgs, ListSnapshotsArgs, SnapshotSandboxArgs};

use super::Outcome;
use super::context::{SessionKind, with_context};
use super::exit;
use super::output::outln;
use super::output::{self, OutputArgs, Table};

/// Save a sandbox's files as a snapshot (a template) and print its id.
#[derive(Debug, Args)]
#[command(
    long_about = "Save the files a sandbox wrote (its home, /etc, /tmp, /var/tmp and its own \
        top-level directories) as a snapshot under the state directory, and print its id: \
        `sandkeep sandbox create --template ID` starts a sandbox with those files. Processes and \
        shares are not part of a snapshot."
)]
pub struct TakeArgs {
    /// The sandbox.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// The snapshot's id (A-Z, a-z, 0-9, '_', '.', '-') [default: a new
    /// snap-… id].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Create a sandbox from a snapshot of another and print its id.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The sandbox to copy.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// Seconds until the new sandbox's deadline [default: the copied one's
    /// timeout].
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// List and delete snapshots.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    List(ListArgs),
    Delete(DeleteArgs),
}

impl SnapshotCommand {
    pub fn json(&self) -> bool {
        match self {
            Self::List(a) => a.output.json,
            Self::Delete(a) => a.output.json,
        }
    }
}

/// List the snapshots of this state directory.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Delete a snapshot (sandboxes made from it keep their files).
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The snapshot.
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(cmd: SnapshotCommand) -> Outcome {
    match cmd {
        SnapshotCommand::List(args) => list(args).await,
        SnapshotCommand::Delete(args) => delete(args).await,
    }
}

pub async fn take(args: TakeArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = SnapshotSandboxArgs {
            sandbox_id: args.sandbox_id.clone(),
            name: args.name.clone(),
        };
        let snapshot = ctx.service.snapshot_sandbox(request).await?;
        if args.output.json {
            output::print_json(&snapshot);
        } else {
            outln!("{}", snapshot.snapshot_id);
            eprintln!(
                "saved {} bytes of sandbox {}'s files (not its processes); \
                 `sandkeep sandbox create --template {}` starts from them",
                snapshot.size_bytes, snapshot.sandbox_id, snapshot.template
            );
        }
        Ok(exit::OK)
    })
    .await
}

pub async fn fork(args: ForkArgs) -> Outcome {
    // Stateless: the new sandbox must not be destroyed when this process ends.
    with_context(SessionKind::Stateless, async |ctx| {
        let request = ForkSandboxArgs {
            sandbox_id: args.sandbox_id.clone(),
            timeout: args.timeout,
        };
        let created = ctx.service.fork_sandbox(&ctx.session, request).await?;
        if args.output.json {
            output::print_json(&created);
        } else {
            outln!("{}", created.sandbox_id);
            eprintln!(
                "created sandbox {} with the files of {} (not its processes)",
                created.sandbox_id, args.sandbox_id
            );
        }
        Ok(exit::OK)
    })
    .await
}

async fn list(args: ListArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let listed = ctx.service.list_snapshots(ListSnapshotsArgs {}).await?;
        if args.output.json {
            output::print_json(&listed);
            return Ok(exit::OK);
        }
        if listed.snapshots.is_empty() {
            eprintln!("no snapshots; take one with `sandkeep sandbox snapshot SANDBOX`");
            return Ok(exit::OK);
        }
        let now = crate::provider::unix_now();
        let mut table = Table::new(&["SNAPSHOT", "FROM SANDBOX", "BYTES", "CREATED"]);
        for s in &listed.snapshots {
            table.row(vec![
                s.snapshot_id.clone(),
                s.sandbox_id.clone(),
                s.size_bytes.to_string(),
                output::relative(s.created_at, now),
            ]);
        }
        table.print();
        Ok(exit::OK)
    })
    .await
}

async fn delete(args: DeleteArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = DeleteSnapshotArgs {
            snapshot_id: args.snapshot_id.clone(),
        };
        let deleted = ctx.service.delete_snapshot(request).await?;
        if args.output.json {
            output::print_json(&deleted);
        } else if deleted.deleted {
            outln!("deleted snapshot {}", deleted.snapshot_id);
        } else {
            outln!("there was no snapshot {}", deleted.snapshot_id);
        }
        Ok(exit::OK)
    })
    .await
}
