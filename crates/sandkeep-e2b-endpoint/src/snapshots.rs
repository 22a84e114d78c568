//! Snapshots and fork as E2B's API has them (SPEC §17): `POST
//! /sandboxes/{id}/snapshots` (201 `{snapshotID, names}`), `GET
//! /snapshots` (`sandboxID`, `name` filters), `DELETE /templates/{id}`
//! (204; a snapshot is a template), a create whose `templateID` is a
//! snapshot's, and `POST /sandboxes/{id}/fork` (`{timeout, count}` → 201,
//! one `{sandbox}` per fork, made from one snapshot that is deleted
//! afterwards). Files only: processes are not part of a snapshot.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use sandkeep_provider::{CreateSpec, SnapshotInfo};

use super::rest::{self, ApiError, MAX_TIMEOUT, error, provider_error, sandbox_id};
use super::{E2b, Record, SmallBody};

/// The most forks one call may ask for.
const MAX_FORKS: u32 = 10;
/// A fork's timeout when none is given (E2B's default).
const FORK_TIMEOUT: u64 = 15;

fn snapshot_json(s: &SnapshotInfo) -> Value {
    json!({"snapshotID": s.snapshot_id, "names": [s.snapshot_id]})
}

#[derive(Debug, Default, Deserialize)]
pub struct SnapshotBody {
    #[serde(default)]
    name: Option<String>,
}

pub async fn create(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    raw: SmallBody,
) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: SnapshotBody = match raw.json_or_default() {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    if let Some(name) = &request.name
        && !sandkeep_provider::snapshot_id_ok(name)
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "snapshot name {name:?}: use 1-64 characters A-Z, a-z, 0-9, '_', '.' and '-', \
                 starting with a letter or digit"
            ),
        );
    }
    match e2b.provider.snapshot(&id, request.name).await {
        Ok(s) => (StatusCode::CREATED, Json(snapshot_json(&s))).into_response(),
        Err(e) => provider_error(&e),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default, rename = "sandboxID")]
    sandbox_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    next_token: Option<String>,
}

pub async fn list(State(e2b): State<Arc<E2b>>, Query(query): Query<ListQuery>) -> Response {
    let _ = (query.limit, query.next_token);
    match e2b.provider.list_snapshots().await {
        Ok(all) => Json(
            all.iter()
                .filter(|s| {
                    query
                        .sandbox_id
                        .as_deref()
                        .is_none_or(|id| s.sandbox_id.as_str() == id)
                        && query.name.as_deref().is_none_or(|n| s.snapshot_id == n)
                })
                .map(snapshot_json)
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => provider_error(&e),
    }
}

/// `DELETE /templates/{id}`: snapshots only (sandkeep builds no templates).
pub async fn delete(State(e2b): State<Arc<E2b>>, Path(id): Path<String>) -> Response {
    match e2b.provider.delete_snapshot(&id).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(StatusCode::NOT_FOUND, format!("snapshot {id:?} not found")),
        Err(e) => provider_error(&e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ForkBody {
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    count: Option<u32>,
}

pub async fn fork(State(e2b): State<Arc<E2b>>, Path(id): Path<String>, raw: SmallBody) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: ForkBody = match raw.json_or_default() {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    let count = request.count.unwrap_or(1);
    let timeout = request.timeout.unwrap_or(FORK_TIMEOUT);
    if !(1..=MAX_FORKS).contains(&count) || timeout == 0 || timeout > MAX_TIMEOUT {
        return error(
            StatusCode::BAD_REQUEST,
            format!("count must be 1-{MAX_FORKS} and timeout 1-{MAX_TIMEOUT} seconds"),
        );
    }
    let source = match e2b.provider.info(&id).await {
        Ok(info) => info,
        Err(e) => return provider_error(&e),
    };
    // A fork has its source's metadata and lifecycle.
    let (metadata, auto_resume) = match e2b.records.load_or_create(&id) {
        Ok(record) => (record.metadata, record.auto_resume),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let snapshot = match e2b.provider.snapshot(&id, None).await {
        Ok(s) => s,
        Err(e) => return provider_error(&e),
    };
    let mut forks = Vec::new();
    for _ in 0..count {
        let spec = CreateSpec {
            template: snapshot.snapshot_id.clone(),
            timeout,
            envs: Default::default(),
            network: source.network,
            allow_hosts: source.allow_hosts.clone(),
            limits: source.limits,
            shares: source.shares.clone(),
            on_timeout: source.on_timeout,
        };
        let made = match e2b.provider.create(spec).await {
            Ok(info) => rest::created(
                &e2b,
                &info,
                Record {
                    auto_resume,
                    ..Record::new(metadata.clone(), Some(rest::unix_now_ms()))
                },
            )
            .await
            .map_err(|ApiError(status, message)| (status, message)),
            Err(e) => Err((provider_error(&e).status(), e.to_string())),
        };
        forks.push(match made {
            Ok(sandbox) => json!({"sandbox": sandbox}),
            Err((status, message)) => {
                json!({"error": {"code": status.as_u16(), "message": format!("the fork failed to start: {message}")}})
            }
        });
    }
    if let Err(e) = e2b.provider.delete_snapshot(&snapshot.snapshot_id).await {
        tracing::warn!(snapshot = %snapshot.snapshot_id, "a fork's snapshot was not deleted: {e}");
    }
    (StatusCode::CREATED, Json(forks)).into_response()
}
