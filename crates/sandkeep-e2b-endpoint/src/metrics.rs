//! E2B's sandbox metrics (`GET /sandboxes/{id}/metrics` and the list form
//! `GET /sandboxes/metrics?sandbox_ids=`), from the provider's
//! [`Usage`](sandkeep_provider::Usage): memory and disk as measured now,
//! in E2B's field names and units (bytes).
//!
//! E2B keeps a series sampled every few seconds; this endpoint keeps no
//! series and answers one sample, taken when asked, for a window that
//! includes the present (none for a window wholly in the past). Its CPU
//! use is the share of the sandbox's CPUs used since the previous sample
//! of that sandbox (or since it started, for the first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::E2b;
use super::rest::{error, provider_error, sandbox_id};
use sandkeep_provider::{SandboxId, Usage, rfc3339};

/// The previous sample of each sandbox: when (Unix ms) and its CPU time.
#[derive(Default)]
pub struct Samples(Mutex<HashMap<SandboxId, (u64, u64)>>);

impl Samples {
    /// The CPU share (percent of the sandbox's CPUs) between the previous
    /// sample (or `started_ms`, CPU time 0) and this one.
    fn cpu_pct(&self, id: &SandboxId, started_ms: u64, now_ms: u64, usage: &Usage) -> f64 {
        let mut table = self.0.lock().expect("metrics samples lock");
        let (then_ms, then_cpu) = table
            .insert(id.clone(), (now_ms, usage.cpu_usec))
            .unwrap_or((started_ms, 0));
        let wall_us = now_ms.saturating_sub(then_ms).max(1) as f64 * 1000.0;
        let used = usage.cpu_usec.saturating_sub(then_cpu) as f64;
        (used / (wall_us * f64::from(usage.cpu_count.max(1))) * 100.0).clamp(0.0, 100.0)
    }

    pub fn forget(&self, id: &SandboxId) {
        self.0.lock().expect("metrics samples lock").remove(id);
    }
}

/// `SandboxMetric`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Metric {
    timestamp: String,
    timestamp_unix: u64,
    cpu_count: u32,
    cpu_used_pct: f64,
    mem_used: u64,
    mem_total: u64,
    mem_cache: u64,
    disk_used: u64,
    disk_total: u64,
}

/// A window of Unix seconds; a bound left out is open.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    #[serde(default)]
    start: Option<u64>,
    #[serde(default)]
    end: Option<u64>,
}

impl Window {
    /// Whether a sample taken at `now` (seconds) falls in it; the bounds
    /// are whole seconds, so the end's second is included whole.
    fn holds(&self, now: u64) -> bool {
        self.start.is_none_or(|s| now >= s) && self.end.is_none_or(|e| now <= e + 1)
    }
}

/// One sample of sandbox `id` now.
async fn sample(e2b: &E2b, id: &SandboxId) -> Result<Metric, Response> {
    let info = e2b
        .provider
        .info(id)
        .await
        .map_err(|e| provider_error(&e))?;
    let usage = e2b
        .provider
        .usage(id)
        .await
        .map_err(|e| provider_error(&e))?;
    let record = e2b
        .records
        .load_or_create(id)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let now_ms = super::rest::unix_now_ms();
    let started_ms = super::rest::started_ms(&info, &record);
    let cpu_used_pct = e2b.samples.cpu_pct(id, started_ms, now_ms, &usage);
    let now = now_ms / 1000;
    Ok(Metric {
        timestamp: rfc3339(now),
        timestamp_unix: now,
        cpu_count: usage.cpu_count,
        cpu_used_pct,
        mem_used: usage.mem_used,
        mem_total: usage.mem_total,
        mem_cache: usage.mem_cache,
        disk_used: usage.disk_used,
        disk_total: usage.disk_total,
    })
}

/// `GET /sandboxes/{id}/metrics?start=&end=`.
pub async fn one(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    window: Result<Query<Window>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let window = match window {
        Ok(Query(w)) => w,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    if !window.holds(sandkeep_provider::unix_now()) {
        // Still a 404 for a sandbox that is not there.
        if let Err(e) = e2b.provider.info(&id).await {
            return provider_error(&e);
        }
        return Json(Vec::<Metric>::new()).into_response();
    }
    match sample(&e2b, &id).await {
        Ok(m) => Json(vec![m]).into_response(),
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ids {
    sandbox_ids: String,
}

/// `GET /sandboxes/metrics?sandbox_ids=A,B`: the latest sample of each
/// running one, `{"sandboxes": {ID: metric}}`.
pub async fn many(
    State(e2b): State<Arc<E2b>>,
    ids: Result<Query<Ids>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let ids = match ids {
        Ok(Query(ids)) => ids,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let mut out = serde_json::Map::new();
    for text in ids.sandbox_ids.split(',').filter(|t| !t.is_empty()) {
        let Ok(id) = sandbox_id(text) else { continue };
        // A sandbox that is gone is left out, as E2B leaves it out.
        if let Ok(m) = sample(&e2b, &id).await {
            out.insert(text.to_owned(), serde_json::to_value(m).unwrap_or_default());
        }
    }
    Json(serde_json::json!({ "sandboxes": out })).into_response()
}
