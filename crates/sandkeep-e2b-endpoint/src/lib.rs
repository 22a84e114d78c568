//! The E2B-compatible endpoint behind `sandkeep serve --e2b ADDR`: E2B's
//! REST API and envd's Connect protocol as a server over any
//! [`Provider`] (SPEC.md §12), so a program written for E2B's SDKs runs
//! on local sandboxes with `E2B_API_URL=http://ADDR
//! E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=…`.
//!
//! This crate owns what E2B's protocol means over a provider: the routes,
//! the API key and access tokens, envd's process bookkeeping, `/files`,
//! and the E2B records. It is a [`Router`] and nothing more: it does not
//! pick a provider, build a runtime, bind a socket or handle signals; the
//! `sandkeep` binary does that and serves the router through its HTTP edge
//! (connection caps and timeouts shared with `serve --http`). So it
//! depends on the provider trait, never on the `sandkeep` crate (which
//! depends on it). envd's bytes come from `sandkeep-envd-wire`, which the
//! e2b provider (the client side) shares.
//!
//! One listener serves both planes:
//! - the REST API (`rest`, `network` rules, `metrics`): create, connect,
//!   list, info, timeout, kill, metrics, behind the API key (`X-API-Key`);
//! - every sandbox's envd (`envd`, `process`, over the Connect codec in
//!   `connect`), routed by the `E2b-Sandbox-Id` header (or a
//!   `{port}-{id}.` host name), behind the sandbox's access token
//!   (`X-Access-Token`, or a `signature` on `/files`) except `/health`;
//!   requests run as E2B's `user` or `root` (`users`), file metadata
//!   and directory watches through the sandbox's helper (`metadata`,
//!   `watch`);
//! - every sandbox's own servers (`ports`): a `{port}-{id}.` host name of
//!   any other port.
//!
//! Sandboxes made here are ordinary sandboxes of the provider (the CLI,
//! `list_sandboxes` and tasks see them); what E2B adds (metadata, the
//! access token) is kept in `$SANDKEEP_HOME/e2b/ID.json`. E2B's timeout is
//! the sandbox's timeout and deadline. docs/e2b.md records each decision
//! where the SDKs and envd leave room.

#![forbid(unsafe_code)]

mod connect;
mod envd;
mod files;
mod lifecycle;
mod metadata;
mod metrics;
mod network;
mod ports;
mod process;
mod rest;
mod signature;
mod snapshots;
mod users;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use sandkeep_envd_wire as envd_wire;
use serde::{Deserialize, Serialize};

use sandkeep_provider::{Provider, SandboxId, Share};

/// The envd version advertised: the SDKs gate features on it, and this
/// endpoint serves what envd 0.6.13 does (minus what docs/e2b.md lists).
pub const ENVD_VERSION: &str = "0.6.13";

/// The largest body read whole (every route but `/files`, whose uploads
/// stream into the sandbox): one Connect message with its envelopes, or a
/// REST request's JSON. SPEC.md §7: memory stays bounded under any request.
const MAX_BODY: usize = connect::MAX_MESSAGE + 64 * 1024;

/// A request body of at most [`MAX_BODY`] bytes, read whole. One announced
/// larger (`Content-Length`) is refused before a byte of it is read (a
/// client that sent `Expect: 100-continue` is never asked for it); one sent
/// without a length is cut off as soon as it passes the limit.
pub struct SmallBody(axum::body::Bytes);

impl SmallBody {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The body as JSON, or `T`'s default when there is none (the SDKs
    /// send no body for an optional one); malformed JSON is a 400.
    pub fn json_or_default<T: Default + serde::de::DeserializeOwned>(
        &self,
    ) -> Result<T, rest::ApiError> {
        if self.0.is_empty() {
            return Ok(T::default());
        }
        serde_json::from_slice(&self.0).map_err(|e| {
            rest::ApiError(
                axum::http::StatusCode::BAD_REQUEST,
                format!("invalid body: {e}"),
            )
        })
    }
}

/// Why a [`SmallBody`] was refused; as a response, E2B's REST error (413).
pub struct BodyTooLarge(String);

impl BodyTooLarge {
    fn new() -> Self {
        Self(format!(
            "the request body is over the {MAX_BODY}-byte limit of this endpoint (file contents \
             go through /files, which has none)"
        ))
    }
}

impl axum::response::IntoResponse for BodyTooLarge {
    fn into_response(self) -> Response {
        rest::error(StatusCode::PAYLOAD_TOO_LARGE, self.0)
    }
}

impl From<BodyTooLarge> for connect::RpcError {
    fn from(e: BodyTooLarge) -> Self {
        Self::new(connect::Code::InvalidArgument, e.0)
    }
}

impl<S: Send + Sync> axum::extract::FromRequest<S> for SmallBody {
    type Rejection = BodyTooLarge;

    async fn from_request(request: Request, _: &S) -> Result<Self, BodyTooLarge> {
        let announced = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(BodyTooLarge::new());
        }
        axum::body::to_bytes(request.into_body(), MAX_BODY)
            .await
            .map(Self)
            .map_err(|_| BodyTooLarge::new())
    }
}

/// The server's shared state.
pub struct E2b {
    provider: Arc<dyn Provider>,
    api_key: String,
    /// The operator's host shares (`serve --e2b --share`): every sandbox
    /// made here mounts them (E2B's API has no way to choose).
    shares: Vec<Share>,
    records: Records,
    processes: Arc<process::Processes>,
    watchers: watch::Watchers,
    samples: metrics::Samples,
}

/// What E2B adds to a sandbox, kept beside the provider's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    access_token: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// When the endpoint created it, in Unix milliseconds: lists are
    /// ordered by start, and two creates within one second must keep
    /// their order. `None` for a sandbox made elsewhere (its provider's
    /// start second stands in).
    #[serde(default)]
    started_ms: Option<u64>,
    /// E2B's `user` account, made at create where the sandbox can have
    /// one (`users`); `None`: the sandbox's single user serves all.
    #[serde(default)]
    account: Option<users::Account>,
    /// E2B's `autoResume`: traffic to the sandbox while paused (envd
    /// calls, requests for its ports) resumes it (see `lifecycle`).
    #[serde(default)]
    auto_resume: bool,
}

impl Record {
    fn new(metadata: BTreeMap<String, String>, started_ms: Option<u64>) -> Self {
        Self {
            access_token: random_hex(),
            metadata,
            started_ms,
            account: None,
            auto_resume: false,
        }
    }
}

/// `$SANDKEEP_HOME/e2b/ID.json`, one per sandbox, mode 0600.
struct Records {
    dir: PathBuf,
}

impl Records {
    fn path(&self, id: &SandboxId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn load(&self, id: &SandboxId) -> Option<Record> {
        let bytes = std::fs::read(self.path(id)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Written whole (a temporary file renamed over the record) and mode
    /// 0600, but not synced: a record is worth nothing without its
    /// sandbox, and a host crash ends the sandbox too. The sync cost every
    /// create a disk write it did not need.
    fn save(&self, id: &SandboxId, record: &Record) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let json = serde_json::to_vec(record).map_err(|e| e.to_string())?;
        let path = self.path(id);
        let temp = path.with_extension(format!("tmp.{}", random_hex()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut f| f.write_all(&json))
            .and_then(|()| std::fs::rename(&temp, &path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            format!("cannot write {}: {e}", path.display())
        })
    }

    /// The record, made for a sandbox created elsewhere (CLI, MCP).
    fn load_or_create(&self, id: &SandboxId) -> Result<Record, String> {
        if let Some(r) = self.load(id) {
            return Ok(r);
        }
        let record = Record::new(BTreeMap::new(), None);
        self.save(id, &record)?;
        Ok(record)
    }

    /// The sandbox whose access token made `signed` (a signed URL carries
    /// no sandbox id), with its record.
    fn signer(&self, signed: &signature::Signed<'_>) -> Option<(SandboxId, Record)> {
        std::fs::read_dir(&self.dir)
            .ok()?
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let id = SandboxId::parse(name.to_str()?.strip_suffix(".json")?).ok()?;
                let record = self.load(&id)?;
                Some((id, record))
            })
            .find(|(_, record)| signed.made_by(&record.access_token))
    }

    fn remove(&self, id: &SandboxId) {
        let _ = std::fs::remove_file(self.path(id));
    }
}

/// 128 bits from the OS as hex: access tokens and temporary names.
fn random_hex() -> String {
    sandkeep_provider::random_hex(16).expect("the OS random source works")
}

/// Constant-time comparison of secrets.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// An envd request's sandbox, its access token checked.
pub struct Envd {
    e2b: Arc<E2b>,
    id: SandboxId,
    record: Record,
}

/// What E2B's proxy answers for a sandbox that is not running.
fn sandbox_not_found(id: &str) -> Response {
    rest::error(
        StatusCode::BAD_GATEWAY,
        format!("The sandbox {id} was not found"),
    )
}

/// The sandbox an envd request is for: `E2b-Sandbox-Id`, else a host name
/// `49983-ID.…` (E2B's proxy rules).
fn target(headers: &HeaderMap) -> Option<String> {
    if let Some(id) = headers
        .get(envd_wire::header::SANDBOX_ID)
        .and_then(|v| v.to_str().ok())
    {
        return Some(id.to_owned());
    }
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let first = host.split('.').next()?;
    let (port, id) = first.split_once('-')?;
    (port == envd_wire::ENVD_PORT.to_string()).then(|| id.to_owned())
}

/// The query of a `/files` request as far as its authorization goes.
#[derive(Debug, Default, Deserialize)]
struct FilesAuth {
    #[serde(default)]
    path: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    signature_expiration: Option<String>,
}

impl FilesAuth {
    fn signed<'a>(&'a self, parts: &Parts) -> Option<signature::Signed<'a>> {
        Some(signature::Signed {
            path: &self.path,
            operation: if parts.method == axum::http::Method::POST {
                "write"
            } else {
                "read"
            },
            user: &self.username,
            signature: self.signature.as_deref()?,
            expiration: self
                .signature_expiration
                .as_deref()
                .filter(|e| !e.is_empty()),
        })
    }
}

impl FromRequestParts<Arc<E2b>> for Envd {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, e2b: &Arc<E2b>) -> Result<Self, Response> {
        let is_rpc = parts.uri.path() != "/files";
        let files: FilesAuth = if is_rpc {
            FilesAuth::default()
        } else {
            query_of(parts.uri.query().unwrap_or(""))
        };
        let signed = files.signed(parts);
        let (text, known) = match (target(&parts.headers), &signed) {
            (Some(text), _) => (text, None),
            // A signed URL names its sandbox by its signature.
            (None, Some(signed)) => match e2b.records.signer(signed) {
                Some((id, record)) => (id.as_str().to_owned(), Some(record)),
                None => {
                    return Err(rest::error(
                        StatusCode::UNAUTHORIZED,
                        signature::Refused::Invalid.message(),
                    ));
                }
            },
            (None, None) => {
                return Err(rest::error(
                    StatusCode::BAD_REQUEST,
                    "envd requests need the E2b-Sandbox-Id header or a 49983-ID host name",
                ));
            }
        };
        let not_found = || sandbox_not_found(&text);
        let id = SandboxId::parse(&text).map_err(|_| not_found())?;
        let record = match known.or_else(|| e2b.records.load(&id)) {
            Some(r) => r,
            None => {
                e2b.provider.info(&id).await.map_err(|_| not_found())?;
                e2b.records
                    .load_or_create(&id)
                    .map_err(|e| rest::error(StatusCode::INTERNAL_SERVER_ERROR, e))?
            }
        };
        if !envd::authorized(&record.access_token, &parts.headers) {
            let Some(signed) = signed else {
                return Err(envd::unauthorized(is_rpc));
            };
            signed
                .check(&record.access_token, sandkeep_provider::unix_now())
                .map_err(|refused| rest::error(StatusCode::UNAUTHORIZED, refused.message()))?;
        }
        Ok(Self {
            e2b: Arc::clone(e2b),
            id,
            record,
        })
    }
}

/// A query string as `T`; what does not parse reads as `T::default()`
/// (the handler's own extractor then answers the error).
fn query_of<T: Default + for<'de> Deserialize<'de>>(query: &str) -> T {
    axum::extract::Query::<T>::try_from_uri(&format!("/?{query}").parse().unwrap_or_default())
        .map(|q| q.0)
        .unwrap_or_default()
}

/// The API key check of every REST route.
async fn api_key(State(e2b): State<Arc<E2b>>, request: Request, next: Next) -> Response {
    let ok = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|k| same(k, &e2b.api_key));
    if !ok {
        return rest::error(
            StatusCode::UNAUTHORIZED,
            "Invalid API key: send the server's key in X-API-Key (E2B_API_KEY)",
        );
    }
    next.run(request).await
}

fn routes(e2b: Arc<E2b>) -> Router {
    let api = Router::new()
        .route("/sandboxes", post(rest::create_v1).get(rest::list_v1))
        .route("/v2/sandboxes", post(rest::create_v2).get(rest::list_v2))
        .route("/sandboxes/{id}", get(rest::info).delete(rest::kill))
        .route("/sandboxes/{id}/connect", post(rest::connect_v1))
        .route("/v2/sandboxes/{id}/connect", post(rest::connect_v2))
        .route("/sandboxes/{id}/timeout", post(rest::set_timeout))
        .route("/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/snapshots", get(snapshots::list))
        .route("/templates/{id}", axum::routing::delete(snapshots::delete))
        .route(
            "/sandboxes/{id}/network",
            axum::routing::put(rest::unsupported_on_sandbox),
        )
        .route("/sandboxes/{id}/pause", post(lifecycle::pause))
        .route("/sandboxes/{id}/resume", post(lifecycle::resume_v1))
        .route("/sandboxes/metrics", get(metrics::many))
        .route("/sandboxes/{id}/metrics", get(metrics::one))
        .route("/sandboxes/{id}/logs", get(rest::unsupported))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&e2b),
            api_key,
        ));
    let envd = Router::new()
        .route("/health", get(envd::health))
        .route(
            "/files",
            get(files::download)
                .post(files::upload)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/process.Process/StreamInput", post(envd::stream_input))
        .route("/process.Process/{method}", post(process_rpc))
        .route("/filesystem.Filesystem/{method}", post(filesystem_rpc))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&e2b),
            lifecycle::envd_gate,
        ));
    api.merge(envd)
        .fallback(rest::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&e2b),
            ports::route,
        ))
        .with_state(e2b)
}

async fn process_rpc(
    envd: Envd,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Result<SmallBody, BodyTooLarge>,
) -> Response {
    envd::rpc(envd, "process.Process", &method, headers, body).await
}

async fn filesystem_rpc(
    envd: Envd,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Result<SmallBody, BodyTooLarge>,
) -> Response {
    envd::rpc(envd, "filesystem.Filesystem", &method, headers, body).await
}

/// The endpoint over `provider`, behind `api_key`, keeping its records
/// (metadata, access tokens) in `records`, which is created mode 0700 if
/// missing. An ended process's end event is kept for Connect as long as
/// `SANDKEEP_E2B_END_RETENTION_MS` says (30 s, as envd, when unset).
/// Every sandbox made through it mounts `shares`.
pub fn router(
    provider: Arc<dyn Provider>,
    api_key: String,
    records: PathBuf,
    shares: Vec<Share>,
) -> Result<Router, String> {
    let end_retention = process::end_retention_from_env()?;
    std::fs::create_dir_all(&records)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&records, std::fs::Permissions::from_mode(0o700))
        })
        .map_err(|e| format!("cannot create {}: {e}", records.display()))?;
    Ok(routes(Arc::new(E2b {
        provider,
        api_key,
        shares,
        records: Records { dir: records },
        processes: Arc::new(process::Processes::new(end_retention)),
        watchers: watch::Watchers::default(),
        samples: metrics::Samples::default(),
    })))
}
