//! The E2B control plane: v1 routes (which self-hosted E2B serves) for
//! create, kill, info and timeout, and the metadata-filtered list. Calls
//! that may safely be repeated are retried with backoff on 429 and
//! 502–504; create is not (a repeated create makes a second sandbox).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Stats;

/// Retries of an idempotent call after the first attempt.
const RETRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The bound of every REST call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error("no such sandbox")]
    NotFound,
    #[error("the E2B API answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("cannot reach the E2B API at {url}: {message}")]
    Transport { url: String, message: String },
}

/// The create request (`NewSandbox`).
#[derive(Debug, Serialize)]
pub struct NewSandbox<'a> {
    #[serde(rename = "templateID")]
    pub template_id: &'a str,
    pub timeout: u64,
    pub metadata: &'a BTreeMap<String, String>,
    #[serde(rename = "envVars")]
    pub env_vars: &'a BTreeMap<String, String>,
    /// The envd of a secure sandbox wants its access token on every call.
    pub secure: bool,
    pub allow_internet_access: bool,
    /// The deadline pauses instead of killing (`on_timeout: pause`).
    #[serde(rename = "autoPause")]
    pub auto_pause: bool,
    /// `false`: that pause keeps the files only (`on_timeout:
    /// pause_files`); absent: E2B's default, a full pause.
    #[serde(rename = "autoPauseMemory", skip_serializing_if = "Option::is_none")]
    pub auto_pause_memory: Option<bool>,
    /// Traffic to the sandbox while paused resumes it (E2B's `autoResume`,
    /// which needs `autoPause`).
    #[serde(rename = "autoResume", skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<AutoResume>,
}

/// E2B's `SandboxAutoResumeConfig`.
#[derive(Debug, Serialize)]
pub struct AutoResume {
    pub enabled: bool,
}

/// The create answer (`Sandbox`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(default)]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
}

/// E2B's `SnapshotInfo`, of which only the id matters here (its `names`
/// are the id with the team's namespace).
#[derive(Debug, Deserialize)]
struct SnapshotId {
    #[serde(rename = "snapshotID")]
    snapshot_id: String,
}

/// `ListedSandbox` and `SandboxDetail` (the token and domain only in the
/// latter).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub end_at: String,
    #[serde(default)]
    pub cpu_count: Option<u32>,
    #[serde(rename = "memoryMB", default)]
    pub memory_mb: Option<u64>,
    #[serde(rename = "diskSizeMB", default)]
    pub disk_size_mb: Option<u64>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub allow_internet_access: Option<bool>,
    /// `running` or `paused`.
    #[serde(default)]
    pub state: Option<String>,
}

pub struct Rest {
    http: reqwest::Client,
    base: String,
    key: String,
    stats: std::sync::Arc<Stats>,
}

impl Rest {
    pub fn new(
        http: reqwest::Client,
        base: String,
        key: String,
        stats: std::sync::Arc<Stats>,
    ) -> Self {
        Self {
            http,
            base,
            key,
            stats,
        }
    }

    /// One call: its status and body. `idempotent` calls are retried on
    /// transient answers and on failures to connect.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotent: bool,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), RestError> {
        let url = format!("{}{path}", self.base);
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            self.stats.count_rest();
            tracing::debug!(target: "sandkeep_e2b::http", "e2b request: REST {method} {path}");
            let mut request = self
                .http
                .request(method.clone(), &url)
                .header("X-API-Key", &self.key)
                .timeout(REQUEST_TIMEOUT);
            if let Some(body) = body {
                request = request.json(body);
            }
            let result = match request.send().await {
                Ok(r) => {
                    let status = r.status();
                    let headers = r.headers().clone();
                    match r.bytes().await {
                        Ok(b) => Ok((status, headers, b.to_vec())),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            let transient = match &result {
                Ok((s, _, _)) => matches!(s.as_u16(), 429 | 502..=504),
                Err(e) => e.is_connect(),
            };
            if !(idempotent && transient && attempt < RETRIES) {
                return result.map_err(|e| RestError::Transport {
                    url: url.clone(),
                    message: crate::chain(&e),
                });
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }

    fn failed(status: StatusCode, body: &[u8]) -> RestError {
        if status == StatusCode::NOT_FOUND {
            return RestError::NotFound;
        }
        let message = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned());
        RestError::Status {
            status: status.as_u16(),
            message,
        }
    }

    pub async fn create(&self, request: &NewSandbox<'_>) -> Result<Created, RestError> {
        let body = serde_json::to_value(request).expect("a create request is JSON");
        let (status, _, bytes) = self
            .call(Method::POST, "/sandboxes", Some(&body), false)
            .await?;
        if status != StatusCode::CREATED && status != StatusCode::OK {
            return Err(Self::failed(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| RestError::Status {
            status: status.as_u16(),
            message: format!("unreadable create answer: {e}"),
        })
    }

    /// `Ok(false)` when it was already gone.
    pub async fn kill(&self, id: &str) -> Result<bool, RestError> {
        let (status, _, bytes) = self
            .call(Method::DELETE, &format!("/sandboxes/{id}"), None, true)
            .await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(Self::failed(s, &bytes)),
        }
    }

    pub async fn info(&self, id: &str) -> Result<Detail, RestError> {
        let (status, _, bytes) = self
            .call(Method::GET, &format!("/sandboxes/{id}"), None, true)
            .await?;
        if !status.is_success() {
            return Err(Self::failed(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| RestError::Status {
            status: status.as_u16(),
            message: format!("unreadable sandbox detail: {e}"),
        })
    }

    /// Sets the deadline to now + `timeout` seconds.
    pub async fn set_timeout(&self, id: &str, timeout: u64) -> Result<(), RestError> {
        let body = serde_json::json!({ "timeout": timeout });
        let (status, _, bytes) = self
            .call(
                Method::POST,
                &format!("/sandboxes/{id}/timeout"),
                Some(&body),
                true,
            )
            .await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(Self::failed(status, &bytes))
        }
    }

    /// Pauses the sandbox: `Ok(false)` when it was paused already (409).
    pub async fn pause(&self, id: &str) -> Result<bool, RestError> {
        let (status, _, bytes) = self
            .call(Method::POST, &format!("/sandboxes/{id}/pause"), None, false)
            .await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::CONFLICT => Ok(false),
            s => Err(Self::failed(s, &bytes)),
        }
    }

    /// Connects to the sandbox, resuming it when paused, with a deadline
    /// now + `timeout` seconds.
    pub async fn connect(&self, id: &str, timeout: u64) -> Result<(), RestError> {
        let body = serde_json::json!({ "timeout": timeout });
        let (status, _, bytes) = self
            .call(
                Method::POST,
                &format!("/v2/sandboxes/{id}/connect"),
                Some(&body),
                false,
            )
            .await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(Self::failed(status, &bytes))
        }
    }

    /// Snapshots the sandbox's files as a template (named `name`, else one
    /// E2B chooses): its id.
    pub async fn create_snapshot(&self, id: &str, name: Option<&str>) -> Result<String, RestError> {
        let body = match name {
            Some(name) => serde_json::json!({ "name": name }),
            None => serde_json::json!({}),
        };
        let (status, _, bytes) = self
            .call(
                Method::POST,
                &format!("/sandboxes/{id}/snapshots"),
                Some(&body),
                false,
            )
            .await?;
        if !status.is_success() {
            return Err(Self::failed(status, &bytes));
        }
        serde_json::from_slice::<SnapshotId>(&bytes)
            .map(|s| s.snapshot_id)
            .map_err(|e| RestError::Status {
                status: status.as_u16(),
                message: format!("unreadable snapshot answer: {e}"),
            })
    }

    /// The ids of the snapshots taken of sandbox `id`, all pages.
    pub async fn snapshots_of(&self, id: &str) -> Result<Vec<String>, RestError> {
        let page: Vec<SnapshotId> = self
            .all_pages("/snapshots", &[("sandboxID", id)], "snapshot list")
            .await?;
        Ok(page.into_iter().map(|s| s.snapshot_id).collect())
    }

    /// Deletes a snapshot (a template to E2B): `Ok(false)` when there was
    /// none. The id is one path segment however it is written (E2B's are
    /// `team-slug/name:tag`), encoded as E2B's SDKs encode it.
    pub async fn delete_template(&self, id: &str) -> Result<bool, RestError> {
        let segment: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
        let (status, _, bytes) = self
            .call(Method::DELETE, &format!("/templates/{segment}"), None, true)
            .await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(Self::failed(s, &bytes)),
        }
    }

    /// The running and paused sandboxes whose metadata has every pair of
    /// `filter`, all pages.
    pub async fn list(&self, filter: &BTreeMap<String, String>) -> Result<Vec<Detail>, RestError> {
        // E2B's filter is `k=v&k2=v2`, each part encoded, sent as one
        // (encoded again) parameter.
        let metadata: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(filter)
            .finish();
        self.all_pages(
            "/v2/sandboxes",
            &[("metadata", &metadata), ("state", "running,paused")],
            "sandbox list",
        )
        .await
    }

    /// Every item of a paged list at `path` with the query `pairs`: pages
    /// of 100, each asked with the `x-next-token` of the one before, until
    /// a page comes without one. `what` names the list in errors.
    async fn all_pages<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        pairs: &[(&str, &str)],
        what: &str,
    ) -> Result<Vec<T>, RestError> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            // Built in a block of its own: the serializer is not `Send`
            // and must not live across the await.
            let url = {
                let mut query = form_urlencoded::Serializer::new(String::new());
                query.extend_pairs(pairs).append_pair("limit", "100");
                if let Some(token) = &next {
                    query.append_pair("nextToken", token);
                }
                format!("{path}?{}", query.finish())
            };
            let (status, headers, bytes) = self.call(Method::GET, &url, None, true).await?;
            if !status.is_success() {
                return Err(Self::failed(status, &bytes));
            }
            let page: Vec<T> = serde_json::from_slice(&bytes).map_err(|e| RestError::Status {
                status: status.as_u16(),
                message: format!("unreadable {what}: {e}"),
            })?;
            out.extend(page);
            next = headers
                .get("x-next-token")
                .and_then(|v| v.to_str().ok())
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if next.is_none() {
                return Ok(out);
            }
        }
    }

    /// The API answers with these credentials (doctor's check).
    pub async fn ping(&self) -> Result<(), RestError> {
        let (status, _, bytes) = self
            .call(Method::GET, "/v2/sandboxes?limit=1", None, true)
            .await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(Self::failed(status, &bytes))
        }
    }
}
