//! Host shares (SPEC §13): which of the operator's shares a new sandbox
//! mounts, and the `list_changes` / `apply_changes` tools over its
//! copy-on-write ones. The operator names host paths (`--share`); an agent
//! only picks among them. What changed is the in-sandbox helper's answer
//! (`sandkeep-task changes` / `export`); writing it to the host is
//! `sandkeep_shares::apply`'s.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use sandkeep_proto::limits::SHARES_MAX;
use sandkeep_proto::shares::{
    Change, ChangeKind, ChangesReply, ChangesRequest, EntryType, ExportRequest, Share, ShareMode,
};
use sandkeep_proto::wire;
use sandkeep_shares::ShareConfig;

use super::{Service, ToolError, helper, validate};
use crate::provider::{Program, ProviderError, SandboxId, SandboxInfo, SpawnRequest};

/// A share as results show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShareResult {
    /// The host directory, at the same path inside the sandbox.
    pub path: String,
    /// "ro" (read-only), "cow" (writes stay in the sandbox until
    /// apply_changes) or "rw" (writes reach the host at once).
    pub mode: String,
}

impl From<&Share> for ShareResult {
    fn from(s: &Share) -> Self {
        Self {
            path: s.path.clone(),
            mode: s.mode.to_string(),
        }
    }
}

pub(super) fn share_results(info: &SandboxInfo) -> Vec<ShareResult> {
    info.shares.iter().map(ShareResult::from).collect()
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListChangesArgs {
    /// The sandbox whose copy-on-write shares to compare with the host.
    pub sandbox_id: String,
    /// Also return a unified diff of the changed text files.
    #[serde(default)]
    pub diff: Option<bool>,
}

/// One changed path of a copy-on-write share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangeEntry {
    /// Absolute path, the same inside the sandbox and on the host.
    pub path: String,
    /// "added", "modified" or "deleted".
    pub kind: String,
    /// "file", "dir", "symlink" or "other".
    #[serde(rename = "type")]
    pub entry_type: String,
    /// Bytes (of the sandbox's file; the host's for a deletion).
    pub size: u64,
}

impl From<Change> for ChangeEntry {
    fn from(c: Change) -> Self {
        let kind = match c.kind {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        };
        let entry_type = match c.entry {
            EntryType::File => "file",
            EntryType::Dir => "dir",
            EntryType::Symlink => "symlink",
            EntryType::Other => "other",
        };
        Self {
            path: c.path,
            kind: kind.into(),
            entry_type: entry_type.into(),
            size: c.size,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListChangesResult {
    /// The sandbox compared.
    pub sandbox_id: String,
    /// Sorted by path. A path whose type, mode and content equal the
    /// host's is not listed.
    pub changes: Vec<ChangeEntry>,
    /// More changes exist than were listed.
    pub truncated: bool,
    /// With diff: true, the text files' changes as `git diff` prints them
    /// (paths relative to `/`); null otherwise.
    pub diff: Option<String>,
    /// The diff was cut (whole files left out).
    pub diff_truncated: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyChangesArgs {
    /// The sandbox whose copy-on-write changes to write to the host.
    pub sandbox_id: String,
    /// Apply only the changes at or below these absolute paths (each
    /// inside a cow share). Default: every change.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
}

/// A change left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConflictEntry {
    /// The path left alone.
    pub path: String,
    /// Why: what happened to it on the host.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApplyChangesResult {
    /// The sandbox whose changes were applied.
    pub sandbox_id: String,
    /// The paths written to (or removed from) the host.
    pub applied: Vec<String>,
    /// Changes not applied: the host path changed after the sandbox was
    /// created, or cannot be written without following a symlink.
    pub conflicts: Vec<ConflictEntry>,
}

impl Service {
    /// The same service with the operator's shares: what `create_sandbox`
    /// mounts by default and the only host paths it may name.
    pub fn with_shares(self, shares: Vec<ShareConfig>) -> Self {
        Self { shares, ..self }
    }

    /// The shares a `create_sandbox` asked for, among the configured ones.
    pub(super) fn chosen_shares(
        &self,
        asked: Option<Vec<String>>,
    ) -> Result<Vec<Share>, ToolError> {
        let Some(asked) = asked else {
            return Ok(self.shares.iter().map(ShareConfig::share).collect());
        };
        let configured = || {
            if self.shares.is_empty() {
                "this server has no shares configured (the operator adds them with \
                 `sandkeep serve --share PATH[:ro|cow|rw]`)"
                    .to_owned()
            } else {
                let list: Vec<String> = self
                    .shares
                    .iter()
                    .map(|s| format!("{} ({})", s.path.display(), s.mode))
                    .collect();
                format!("the configured shares are {}", list.join(", "))
            }
        };
        if asked.len() > SHARES_MAX {
            return Err(ToolError::invalid(
                "shares",
                &validate::rule("create_sandbox", "shares"),
                format_args!("got {}; nothing was created", asked.len()),
            ));
        }
        let mut chosen: Vec<Share> = Vec::new();
        for name in &asked {
            let Some(config) = self.shares.iter().find(|s| s.is_named(name)) else {
                return Err(ToolError::invalid(
                    "shares",
                    &validate::rule("create_sandbox", "shares"),
                    format_args!(
                        "{name:?} is not one of them: {}; nothing was created",
                        configured()
                    ),
                ));
            };
            let share = config.share();
            if chosen.contains(&share) {
                return Err(ToolError::invalid(
                    "shares",
                    &validate::rule("create_sandbox", "shares"),
                    format_args!("{name:?} is named twice; nothing was created"),
                ));
            }
            chosen.push(share);
        }
        Ok(chosen)
    }

    /// The first share of a sandbox is where commands run by default.
    pub(super) fn default_cwd(info: &SandboxInfo) -> Option<String> {
        info.shares.first().map(|s| s.path.clone())
    }

    pub async fn list_changes(
        &self,
        args: ListChangesArgs,
    ) -> Result<ListChangesResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let (_, shares) = self.cow_shares(&id).await?;
        let request = ChangesRequest {
            shares,
            diff: args.diff.unwrap_or(false),
        };
        // The list alone is a read for the resident reader; a diff (up to
        // 256 KiB of text in one answer) is the one-shot helper's.
        let reply: ChangesReply = if request.diff {
            helper::call(
                self.provider.as_ref(),
                &self.helpers,
                &id,
                wire::verb::CHANGES,
                &request,
            )
            .await
        } else {
            self.readers
                .read(
                    self.provider.as_ref(),
                    &self.helpers,
                    &id,
                    wire::verb::CHANGES,
                    &request,
                )
                .await
        }
        .map_err(|e| e.into_tool_error(&id))?;
        Ok(ListChangesResult {
            sandbox_id: id.to_string(),
            changes: reply.changes.into_iter().map(ChangeEntry::from).collect(),
            truncated: reply.truncated,
            diff: reply.diff,
            diff_truncated: reply.diff_truncated,
        })
    }

    pub async fn apply_changes(
        &self,
        args: ApplyChangesArgs,
    ) -> Result<ApplyChangesResult, ToolError> {
        let id = validate::sandbox_id(&args.sandbox_id)?;
        let (info, layers) = self.cow_shares(&id).await?;
        let paths = args.paths.unwrap_or_default();
        for p in &paths {
            validate::path("paths", p)?;
            let clean = p.starts_with('/') && !p.split('/').any(|part| part == ".." || part == ".");
            if !clean
                || !layers
                    .iter()
                    .any(|l| sandkeep_proto::shares::is_under(p, &l.path))
            {
                let cows: Vec<&str> = layers.iter().map(|l| l.path.as_str()).collect();
                return Err(ToolError::invalid(
                    "paths",
                    &validate::rule("apply_changes", "paths"),
                    format_args!(
                        "{p:?} is not an absolute path inside a cow share ({}); nothing was applied",
                        cows.join(", ")
                    ),
                ));
            }
        }
        let helper_path = self.helpers.get(self.provider.as_ref(), &id).await?;
        let request = ExportRequest {
            shares: layers,
            paths,
        };
        let json = serde_json::to_string(&request).expect("requests always encode");
        let spawned = self
            .provider
            .spawn(
                &id,
                SpawnRequest {
                    program: Program::Argv {
                        argv: vec![helper_path, wire::verb::EXPORT.into(), json],
                        env: Vec::new(),
                    },
                    cwd: None,
                    stdin: false,
                },
            )
            .await?;
        let mut stderr = spawned.stderr;
        let errors = tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
            text
        });
        let cows: Vec<Share> = info
            .shares
            .iter()
            .filter(|s| s.mode == ShareMode::Cow)
            .cloned()
            .collect();
        let applied = sandkeep_shares::apply(cows, info.shares_since_ns, spawned.stdout).await;
        let status = spawned.process.wait().await;
        let errors = errors.await.unwrap_or_default();
        let applied = applied.map_err(|e| {
            ProviderError::Unavailable(format!(
                "applying the changes of sandbox {id} stopped: {e}; what is listed as applied \
                 before it is on the host"
            ))
        })?;
        if !status.as_ref().is_ok_and(|s| s.success()) {
            return Err(ProviderError::Unavailable(format!(
                "the sandbox's change export failed ({}); {} change(s) were applied before it: {}",
                errors.trim(),
                applied.applied.len(),
                applied.applied.join(", ")
            ))
            .into());
        }
        Ok(ApplyChangesResult {
            sandbox_id: id.to_string(),
            applied: applied.applied,
            conflicts: applied
                .conflicts
                .into_iter()
                .map(|c| ConflictEntry {
                    path: c.path,
                    reason: c.reason,
                })
                .collect(),
        })
    }

    /// The sandbox's record and where the helper finds its cow shares'
    /// layers; a tool error when it has none.
    async fn cow_shares(
        &self,
        id: &SandboxId,
    ) -> Result<(SandboxInfo, Vec<sandkeep_proto::shares::Layers>), ToolError> {
        let info = self.provider.info(id).await?;
        if !info.shares.iter().any(|s| s.mode == ShareMode::Cow) {
            let has = if info.shares.is_empty() {
                "no shares".to_owned()
            } else {
                let list: Vec<String> = info
                    .shares
                    .iter()
                    .map(|s| format!("{} ({})", s.path, s.mode))
                    .collect();
                list.join(", ")
            };
            return Err(ToolError::InvalidArgument(format!(
                "sandbox {id} has no copy-on-write share ({has}), so it has no changes to list or \
                 apply: create the sandbox with a share the operator configured as PATH:cow"
            )));
        }
        let layers = self.provider.share_layers(&info)?;
        Ok((info, layers))
    }
}
