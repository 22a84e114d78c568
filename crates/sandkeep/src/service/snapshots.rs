//! snapshot_sandbox, list_snapshots, delete_snapshot and fork_sandbox
//! (SPEC §17): a sandbox's files saved as a template, and a new sandbox
//! made from a snapshot of a running one in one call. Processes are never
//! part of a snapshot.

use super::*;
use crate::provider::{CreateSpec, SnapshotInfo};

impl Service {
    pub async fn snapshot_sandbox(
        &self,
        args: SnapshotSandboxArgs,
    ) -> Result<SnapshotResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let name = args
            .name
            .as_deref()
            .map(validate::snapshot_name)
            .transpose()?;
        let snapshot = self.provider.snapshot(&id, name).await?;
        Ok(SnapshotResult::from(snapshot))
    }

    pub async fn list_snapshots(
        &self,
        _args: ListSnapshotsArgs,
    ) -> Result<ListSnapshotsResult, ToolError> {
        let snapshots = self.provider.list_snapshots().await?;
        Ok(ListSnapshotsResult {
            snapshots: snapshots.into_iter().map(SnapshotResult::from).collect(),
        })
    }

    pub async fn delete_snapshot(
        &self,
        args: DeleteSnapshotArgs,
    ) -> Result<DeleteSnapshotResult, ToolError> {
        let id = validate::snapshot_id(&args.snapshot_id)?;
        let deleted = self.provider.delete_snapshot(&id).await?;
        Ok(DeleteSnapshotResult {
            snapshot_id: id,
            deleted,
        })
    }

    /// A new sandbox with the files of the source (the provider's fork)
    /// and its network, limits (as the provider repeats them) and shares
    /// (its `envs` are not kept anywhere a provider can read back).
    pub async fn fork_sandbox(
        &self,
        session: &Session,
        args: ForkSandboxArgs,
    ) -> Result<CreateSandboxResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let timeout = match args.timeout {
            Some(t) => Some(validate::sandbox_timeout(Some(t))?),
            None => None,
        };
        let source = self.provider.info(&id).await?;
        let limits = self.provider.fork_limits(&source);
        let info = self
            .provider
            .fork(
                &id,
                CreateSpec {
                    template: source.template,
                    timeout: timeout.unwrap_or(source.timeout),
                    envs: Default::default(),
                    network: source.network,
                    allow_hosts: source.allow_hosts,
                    limits,
                    shares: source.shares,
                    on_timeout: source.on_timeout,
                },
            )
            .await?;
        self.adopt_created(session, info).await
    }
}

impl From<SnapshotInfo> for SnapshotResult {
    fn from(s: SnapshotInfo) -> Self {
        Self {
            template: s.snapshot_id.clone(),
            snapshot_id: s.snapshot_id,
            sandbox_id: s.sandbox_id.to_string(),
            size_bytes: s.size_bytes,
            created_at: s.created_at,
        }
    }
}
