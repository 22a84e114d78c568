//! E2B's REST API (the control plane) over the provider: create (v1 and
//! v2), connect (v1 and v2), list (v1, and v2 with metadata filter and
//! paging), info, timeout and kill. Errors are E2B's `{code, message}`
//! JSON with the HTTP status the SDKs map to their exceptions.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::network::NetworkConfig;
use super::{E2b, ENVD_VERSION, Record, SmallBody, users};
use sandkeep_provider::{
    CreateSpec, ExecRequest, Network, OnTimeout, ProviderError, SandboxId, SandboxInfo,
    SandboxState, rfc3339,
};

/// The longest timeout a sandbox may ask for (E2B's Pro plan's 24 h).
pub(crate) const MAX_TIMEOUT: u64 = 86_400;
/// The default timeout of a v2 create without one.
const DEFAULT_TIMEOUT_V2: u64 = 300;
/// The default timeout of a v1 create without one (E2B's API: 15 s).
const DEFAULT_TIMEOUT_V1: u64 = 15;
/// The page size of a list without `limit`.
const DEFAULT_LIMIT: usize = 100;

/// E2B's error answer.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({ "code": status.as_u16(), "message": message.into() })),
    )
        .into_response()
}

pub(super) fn provider_error(e: &ProviderError) -> Response {
    if let ProviderError::LimitReached(message) = e {
        // E2B's answer to a create past the account's concurrency limit;
        // marked so the Python SDK raises at once instead of retrying a
        // bound that a retry does not free (the JS SDK retries a 429
        // only with a Retry-After).
        let mut answer = error(StatusCode::TOO_MANY_REQUESTS, message.clone());
        answer.headers_mut().insert(
            "should-retry",
            axum::http::HeaderValue::from_static("false"),
        );
        return answer;
    }
    let status = match e {
        ProviderError::NoSuchSandbox(_) => StatusCode::NOT_FOUND,
        ProviderError::UnknownTemplate { .. } => StatusCode::BAD_REQUEST,
        ProviderError::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
        ProviderError::AlreadyInState { .. } | ProviderError::SnapshotExists(_) => {
            StatusCode::CONFLICT
        }
        ProviderError::Unavailable(_)
        | ProviderError::Unconfirmed { .. }
        | ProviderError::NotAnswering { .. }
        | ProviderError::Refused { .. }
        | ProviderError::Keeper(_)
        | ProviderError::ProcessLost(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

/// An error answer not yet rendered (small, unlike a `Response`).
pub struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

pub(super) fn sandbox_id(text: &str) -> Result<SandboxId, ApiError> {
    SandboxId::parse(text)
        .map_err(|_| ApiError(StatusCode::NOT_FOUND, format!("sandbox {text:?} not found")))
}

/// The `Sandbox` object of create and connect.
pub(crate) fn sandbox_json(info: &SandboxInfo, record: &Record) -> Value {
    json!({
        "templateID": info.template,
        "sandboxID": info.sandbox_id.as_str(),
        "clientID": "sandkeep",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": record.access_token,
    })
}

/// Unix milliseconds now: the start time of a sandbox created here.
pub(super) fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// When a sandbox started, in Unix milliseconds: the endpoint's own
/// record of a create, within the provider's start second (the record is
/// taken once the create is done, maybe a second later, and `endAt` is
/// that second plus the timeout: a client computes the timeout from both),
/// else the provider's start second.
pub(super) fn started_ms(info: &SandboxInfo, record: &Record) -> u64 {
    within_second(info.created_at, record.started_ms)
}

fn within_second(created_at: u64, started_ms: Option<u64>) -> u64 {
    let second = created_at.saturating_mul(1000);
    started_ms.map_or(second, |ms| ms.clamp(second, second + 999))
}

/// Unix milliseconds as RFC 3339 in UTC, to the millisecond: a list's
/// `startedAfter` of a sandbox's own `startedAt` includes it.
fn rfc3339_ms(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `ListedSandbox`; `SandboxDetail` adds the access token and whether the
/// sandbox reaches the internet.
fn listed_json(info: &SandboxInfo, record: &Record) -> Value {
    let cpus = info.limits.milli_cpus.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        |m| m.div_ceil(1000),
    );
    json!({
        "templateID": info.template,
        "sandboxID": info.sandbox_id.as_str(),
        "clientID": "sandkeep",
        "startedAt": rfc3339_ms(started_ms(info, record)),
        "endAt": rfc3339(info.expires_at),
        "cpuCount": cpus,
        "memoryMB": info.limits.memory_mib.unwrap_or(0),
        "diskSizeMB": info.limits.disk_mib.unwrap_or(0),
        "state": info.state.to_string(),
        "envdVersion": ENVD_VERSION,
        "metadata": record.metadata,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    /// `false`: the sandbox gets loopback only (`network: "none"`); `true`
    /// or absent: the provider's default. The SDKs spell it snake_case.
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    /// Egress rules, mapped onto the sandbox's network or refused.
    #[serde(default)]
    network: Option<NetworkConfig>,
    /// `true`: the deadline pauses the sandbox instead of killing it (the
    /// SDKs' `lifecycle: {onTimeout: "pause"}`).
    #[serde(default)]
    auto_pause: Option<bool>,
    /// `false`: that pause keeps the files only, its processes end (the
    /// SDKs' `on_timeout: {mode: "filesystem"}` / `keep_memory: False`).
    #[serde(default)]
    auto_pause_memory: Option<bool>,
    /// `{"enabled": true}`: traffic resumes the sandbox while paused (the
    /// SDKs' `lifecycle: {autoResume: true}`, which needs `onTimeout:
    /// "pause"`).
    #[serde(default)]
    auto_resume: Option<AutoResume>,
}

#[derive(Debug, Deserialize)]
pub struct AutoResume {
    enabled: bool,
}

async fn create(e2b: &E2b, body: &[u8], default_timeout: u64) -> Response {
    let request: NewSandbox = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
    };
    let timeout = request.timeout.unwrap_or(default_timeout);
    if timeout == 0 || timeout > MAX_TIMEOUT {
        return error(
            StatusCode::BAD_REQUEST,
            format!("timeout must be 1-{MAX_TIMEOUT} seconds, got {timeout}"),
        );
    }
    let mut rules = request.network.unwrap_or_default();
    if request.allow_internet_access == Some(false) {
        rules.deny_all();
    }
    let policy = match rules.policy() {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let on_timeout = match (request.auto_pause, request.auto_pause_memory) {
        (Some(true), Some(false)) => OnTimeout::PauseFiles,
        (Some(true), _) => OnTimeout::Pause,
        _ => OnTimeout::Kill,
    };
    let auto_resume = request.auto_resume.is_some_and(|a| a.enabled);
    if auto_resume && on_timeout != OnTimeout::Pause {
        return error(
            StatusCode::BAD_REQUEST,
            "autoResume needs autoPause (lifecycle onTimeout \"pause\") keeping the memory: a \
             sandbox killed at its deadline is never paused, and one paused keeping its files \
             only is resumed by connect",
        );
    }
    let spec = CreateSpec {
        template: request.template_id,
        timeout,
        envs: request.env_vars.unwrap_or_default(),
        network: policy.network,
        allow_hosts: policy.allow_hosts,
        limits: Default::default(),
        shares: e2b.shares.clone(),
        on_timeout,
    };
    let info = match e2b.provider.create(spec).await {
        Ok(info) => info,
        Err(e) => return provider_error(&e),
    };
    let record = Record {
        auto_resume,
        ..Record::new(request.metadata.unwrap_or_default(), Some(unix_now_ms()))
    };
    match created(e2b, &info, record).await {
        Ok(sandbox) => (StatusCode::CREATED, Json(sandbox)).into_response(),
        Err(r) => r.into_response(),
    }
}

/// A new sandbox's `record` (its metadata, lifecycle, access token) saved
/// with E2B's user account; its `Sandbox` object. Killed when the record
/// cannot be saved.
pub(crate) async fn created(
    e2b: &E2b,
    info: &SandboxInfo,
    mut record: Record,
) -> Result<Value, ApiError> {
    record.account = add_default_user(e2b, &info.sandbox_id).await;
    if let Err(e) = e2b.records.save(&info.sandbox_id, &record) {
        let _ = e2b.provider.kill(&info.sandbox_id).await;
        return Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    }
    Ok(sandbox_json(info, &record))
}

/// E2B's `user` account in a new sandbox, where it can have one (see
/// `users`); `None` leaves the sandbox its single user.
async fn add_default_user(e2b: &E2b, id: &SandboxId) -> Option<users::Account> {
    let out = e2b
        .provider
        .exec(
            id,
            ExecRequest {
                command: users::setup_script(),
                cwd: None,
                timeout: std::time::Duration::from_secs(30),
                stdin: None,
                output_limit: 4096,
            },
        )
        .await;
    match out {
        Ok(out) if out.exit_code == Some(0) => users::account(&out.stdout),
        Ok(out) => {
            tracing::info!(
                sandbox = %id,
                "no E2B user account in this sandbox (its single user serves every request): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
        Err(e) => {
            tracing::info!(sandbox = %id, "no E2B user account in this sandbox: {e}");
            None
        }
    }
}

pub async fn create_v1(State(e2b): State<Arc<E2b>>, body: SmallBody) -> Response {
    create(&e2b, body.bytes(), DEFAULT_TIMEOUT_V1).await
}

pub async fn create_v2(State(e2b): State<Arc<E2b>>, body: SmallBody) -> Response {
    create(&e2b, body.bytes(), DEFAULT_TIMEOUT_V2).await
}

#[derive(Debug, Default, Deserialize)]
pub struct ConnectBody {
    #[serde(default)]
    timeout: Option<u64>,
}

/// Connect to a running sandbox: its `Sandbox` object; a timeout given
/// only ever extends the deadline.
async fn connect(e2b: &E2b, id: &str, body: &[u8], require_timeout: bool) -> Response {
    let id = match sandbox_id(id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: ConnectBody = if body.is_empty() {
        ConnectBody::default()
    } else {
        match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
        }
    };
    if require_timeout && request.timeout.is_none() {
        return error(StatusCode::BAD_REQUEST, "timeout is required");
    }
    let mut info = match e2b.provider.info(&id).await {
        Ok(info) => info,
        Err(e) => return provider_error(&e),
    };
    // A paused sandbox is resumed (201), as E2B's connect does.
    if info.state == SandboxState::Paused {
        return crate::lifecycle::resume(e2b, &id, request.timeout).await;
    }
    if let Some(timeout) = request.timeout
        && sandkeep_provider::unix_now() + timeout > info.expires_at
    {
        info = match e2b
            .provider
            .set_timeout(&id, timeout.min(MAX_TIMEOUT))
            .await
        {
            Ok(info) => info,
            Err(e) => return provider_error(&e),
        };
    }
    match e2b.records.load_or_create(&id) {
        Ok(record) => (StatusCode::OK, Json(sandbox_json(&info, &record))).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

pub async fn connect_v1(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    body: SmallBody,
) -> Response {
    connect(&e2b, &id, body.bytes(), true).await
}

pub async fn connect_v2(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    body: SmallBody,
) -> Response {
    connect(&e2b, &id, body.bytes(), false).await
}

pub async fn info(State(e2b): State<Arc<E2b>>, Path(id): Path<String>) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let info = match e2b.provider.info(&id).await {
        Ok(info) => info,
        Err(e) => return provider_error(&e),
    };
    match e2b.records.load_or_create(&id) {
        Ok(record) => {
            let mut v = listed_json(&info, &record);
            v["envdAccessToken"] = json!(record.access_token);
            v["allowInternetAccess"] = json!(info.network != Some(Network::None));
            // E2B names a filesystem-only auto-pause "pause" too.
            let on_timeout = if info.on_timeout.pauses() {
                "pause"
            } else {
                "kill"
            };
            v["lifecycle"] = json!({
                "onTimeout": on_timeout,
                "autoResume": record.auto_resume,
            });
            Json(v).into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(Debug, Deserialize)]
pub struct TimeoutBody {
    timeout: u64,
}

pub async fn set_timeout(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    body: SmallBody,
) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: TimeoutBody = match serde_json::from_slice(body.bytes()) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
    };
    if request.timeout > MAX_TIMEOUT {
        return error(
            StatusCode::BAD_REQUEST,
            format!("timeout must be at most {MAX_TIMEOUT} seconds"),
        );
    }
    match e2b.provider.set_timeout(&id, request.timeout).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => provider_error(&e),
    }
}

pub async fn kill(State(e2b): State<Arc<E2b>>, Path(id): Path<String>) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let killed = e2b.provider.kill(&id).await;
    e2b.processes.forget(&id);
    e2b.watchers.forget(&id);
    e2b.samples.forget(&id);
    e2b.records.remove(&id);
    match killed {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(StatusCode::NOT_FOUND, format!("sandbox {id} not found")),
        Err(e) => provider_error(&e),
    }
}

/// The list order by start time; E2B's default is newest first.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Asc,
    #[default]
    Desc,
}

/// The list filters. Any other parameter is refused (400), as E2B's API
/// validates its query: a filter silently ignored would list sandboxes
/// the caller excluded.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    metadata: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    next_token: Option<String>,
    #[serde(default)]
    order: Option<Order>,
    #[serde(default)]
    started_after: Option<String>,
    #[serde(default)]
    started_before: Option<String>,
    #[serde(default)]
    template: Option<String>,
}

/// An RFC 3339 time of a filter, in Unix milliseconds.
fn time_filter(name: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    text.filter(|t| !t.is_empty())
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|d| d.timestamp_millis())
                .map_err(|e| {
                    ApiError(
                        StatusCode::BAD_REQUEST,
                        format!("{name} {t:?} is not an RFC 3339 time: {e}"),
                    )
                })
        })
        .transpose()
}

/// A listed sandbox with its place in the order: start time, then id.
struct Listed {
    key: (u64, String),
    json: Value,
}

/// The sandboxes passing `query`'s filters, in its order.
async fn listed(e2b: &E2b, query: &ListQuery) -> Result<Vec<Listed>, ApiError> {
    let filter: Vec<(String, String)> = query
        .metadata
        .as_deref()
        .map(|m| form_urlencoded::parse(m.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let after = time_filter("startedAfter", query.started_after.as_deref())?;
    let before = time_filter("startedBefore", query.started_before.as_deref())?;
    let wants = |state: SandboxState| {
        query
            .state
            .as_deref()
            .is_none_or(|s| s.split(',').any(|s| s.trim() == state.to_string()))
    };
    let all = e2b
        .provider
        .list()
        .await
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let mut out = Vec::new();
    for info in all {
        let record = e2b
            .records
            .load_or_create(&info.sandbox_id)
            .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e))?;
        let started = started_ms(&info, &record);
        let at = i64::try_from(started).unwrap_or(i64::MAX);
        let kept = filter
            .iter()
            .all(|(k, v)| record.metadata.get(k) == Some(v))
            && wants(info.state)
            && query.template.as_ref().is_none_or(|t| *t == info.template)
            && after.is_none_or(|a| at >= a)
            && before.is_none_or(|b| at <= b);
        if kept {
            out.push(Listed {
                key: (started, info.sandbox_id.as_str().to_owned()),
                json: listed_json(&info, &record),
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    if query.order.unwrap_or_default() == Order::Desc {
        out.reverse();
    }
    Ok(out)
}

pub async fn list_v1(
    State(e2b): State<Arc<E2b>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match listed(&e2b, &query).await {
        Ok(all) => Json(all.into_iter().map(|l| l.json).collect::<Vec<_>>()).into_response(),
        Err(r) => r.into_response(),
    }
}

/// A page's token: the place of its last sandbox (`MS.ID`), so the next
/// page starts right after it however sandboxes come and go meanwhile.
fn token(key: &(u64, String)) -> String {
    format!("{}.{}", key.0, key.1)
}

fn parse_token(text: &str) -> Option<(u64, String)> {
    let (ms, id) = text.split_once('.')?;
    Some((ms.parse().ok()?, id.to_owned()))
}

/// One page; the next page's token in `X-Next-Token`.
pub async fn list_v2(
    State(e2b): State<Arc<E2b>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let all = match listed(&e2b, &query).await {
        Ok(all) => all,
        Err(r) => return r.into_response(),
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 1000);
    let desc = query.order.unwrap_or_default() == Order::Desc;
    let start = match query.next_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match parse_token(t) {
            Some(last) => all
                .iter()
                .position(|l| if desc { l.key < last } else { l.key > last })
                .unwrap_or(all.len()),
            None => return error(StatusCode::BAD_REQUEST, format!("invalid nextToken {t:?}")),
        },
    };
    let end = (start + limit).min(all.len());
    let mut headers = HeaderMap::new();
    if end < all.len() {
        headers.insert(
            "x-next-token",
            token(&all[end - 1].key)
                .parse()
                .expect("digits, a dot and an id are a valid header"),
        );
    }
    let page: Vec<Value> = all
        .into_iter()
        .skip(start)
        .take(end - start)
        .map(|l| l.json)
        .collect();
    (headers, Json(page)).into_response()
}

pub async fn unsupported() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "not implemented by sandkeep's E2B endpoint (network updates, template builds and logs are not supported)",
    )
}

/// A call on one sandbox that is not implemented (`fork`, `PUT network`):
/// a sandbox that is gone is 404, as E2B answers (the SDKs raise "sandbox
/// not found"); a running one gets E2B's answer to an unsupported call,
/// not a 404 the SDKs would read as gone.
pub async fn unsupported_on_sandbox(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    match e2b.provider.info(&id).await {
        Ok(_) => unsupported().await,
        Err(e) => provider_error(&e),
    }
}

pub async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such route")
}

#[cfg(test)]
mod tests {
    use super::within_second;

    #[test]
    fn the_start_stays_in_the_providers_start_second() {
        assert_eq!(within_second(100, Some(100_250)), 100_250);
        // Recorded once a create that crossed a second was done.
        assert_eq!(within_second(100, Some(101_020)), 100_999);
        assert_eq!(within_second(100, Some(99_900)), 100_000);
        assert_eq!(within_second(100, None), 100_000);
    }
}
