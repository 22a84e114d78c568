//! E2B's file metadata: `X-Metadata-KEY: VALUE` headers of an upload set
//! it on each file written, and Stat, ListDir, MakeDir and Move answer it
//! in their entries. envd keeps it in extended attributes `user.e2b.KEY`;
//! so does this endpoint, through the sandbox's own helper
//! (`sandkeep-task metadata`, from [`Provider::task_helper`]) run as the
//! request's user, so the kernel decides who may set what and what a
//! program in the sandbox sets there is what the SDKs read.
//!
//! [`Provider::task_helper`]: sandkeep_provider::Provider::task_helper

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use sandkeep_envd_wire::filesystem::EntryInfo;
use sandkeep_proto::wire::{ErrorReply, MetadataReply, MetadataRequest, shell_quote, verb};
use sandkeep_provider::{ExecRequest, SandboxId};

use super::E2b;
use super::users::RunAs;

/// The upload headers naming metadata.
const HEADER_PREFIX: &str = "x-metadata-";

/// The metadata an upload's headers ask for: keys lowercased (as HTTP
/// header names are), values as sent.
pub fn from_headers(headers: &HeaderMap) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(HEADER_PREFIX) else {
            continue;
        };
        let value = value
            .to_str()
            .map_err(|_| format!("metadata {key:?} is not text"))?;
        out.insert(key.to_owned(), value.to_owned());
    }
    Ok(out)
}

/// Runs the helper's `metadata` verb in sandbox `id` as `user`.
pub async fn call(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    request: &MetadataRequest,
) -> Result<MetadataReply, String> {
    let helper = e2b
        .provider
        .task_helper(id)
        .await
        .map_err(|e| e.to_string())?;
    let json = serde_json::to_string(request).map_err(|e| e.to_string())?;
    let out = e2b
        .provider
        .exec(
            id,
            ExecRequest {
                command: user.shell(format!(
                    "exec {} {} {}",
                    shell_quote(&helper),
                    verb::METADATA,
                    shell_quote(&json)
                )),
                cwd: None,
                timeout: std::time::Duration::from_secs(60),
                stdin: None,
                output_limit: 16 << 20,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    if out.exit_code != Some(0) {
        let why = serde_json::from_slice::<ErrorReply>(&out.stdout)
            .map(|e| e.error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&out.stderr).trim().to_owned());
        return Err(why);
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the sandbox's helper answered what is not metadata: {e}"))
}

/// `entries` with their metadata; without it (the helper failed) when it
/// cannot be read, as a file whose attributes cannot be read has none.
pub async fn attach(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    mut entries: Vec<EntryInfo>,
) -> Vec<EntryInfo> {
    if entries.is_empty() {
        return entries;
    }
    let request = MetadataRequest {
        set: BTreeMap::new(),
        get: entries.iter().map(|e| e.path.clone()).collect(),
    };
    match call(e2b, id, user, &request).await {
        Ok(reply) => {
            for (entry, metadata) in entries.iter_mut().zip(reply.metadata) {
                entry.metadata = metadata;
            }
        }
        Err(e) => tracing::debug!(sandbox = %id, "file metadata not read: {e}"),
    }
    entries
}
