//! `sandkeep serve --http ADDR`: MCP Streamable HTTP at `/mcp`.
//!
//! Owns the HTTP edge: the token rule (every request carries the bearer
//! token, loopback included; only `--insecure-no-auth` on a loopback
//! address goes without), bearer-token checks (401), same-origin checks
//! (403), the cap on legacy sessions (503 and `Retry-After`; the header
//! read timeout and the connection cap are [`crate::edge`]'s), and
//! session-end cleanup; [`super::http_answers`] corrects what rmcp answers
//! to a DELETE and to a malformed body. A legacy (initialize) session ends on DELETE or
//! after the idle timeout; its handler's drop then ends the service session
//! in the background. On SIGTERM/SIGINT every live session is ended before
//! the process exits.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{SandkeepMcp, Whereabouts};
use crate::service::{Service, Session};

/// Largest accepted request body: the same bound as a stdio line, so
/// write_file accepts the same content on both transports.
pub(super) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Who may call the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// Every request carries `Authorization: Bearer TOKEN`.
    Token { value: String },
    /// No token (`--insecure-no-auth`): accepted on a loopback address only.
    InsecureNoAuth,
}

/// Settings of the HTTP server.
pub struct HttpOptions {
    /// Where to listen; port 0 picks a free port (printed on stderr).
    pub addr: SocketAddr,
    pub auth: Auth,
    /// What to print on stderr once the server listens, given its URL: how
    /// clients authenticate and register it (empty: nothing).
    pub banner: Box<dyn Fn(&str) -> String + Send>,
    /// A legacy session idle this long is ended (and cleaned up).
    pub session_idle: Duration,
    /// Open connections at once, in all and per peer.
    pub connections: crate::edge::Caps,
    /// Live legacy sessions at once; one more initialize is answered 503
    /// while the existing sessions keep working.
    pub max_sessions: usize,
    /// Origins a browser-based client may call from besides the server's
    /// own (e.g. `http://localhost:6274`, the Inspector's web UI), exactly
    /// as the browser sends them.
    pub allowed_origins: Vec<String>,
    /// Named in "no such sandbox" errors.
    pub whereabouts: Whereabouts,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "refusing to serve MCP on {0} without a token: --insecure-no-auth is accepted only on a \
         loopback address (127.0.0.1, ::1); drop it and clients use the token the server prints"
    )]
    TokenRequired(SocketAddr),
    #[error("the auth token must not be empty or contain whitespace: choose a long random string")]
    BadToken,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Ends sessions whose handler was dropped, and remembers the live ones so
/// shutdown can end them too.
#[derive(Clone)]
pub(super) struct SessionEnder {
    service: Arc<Service>,
    tracker: TaskTracker,
    live: Arc<Mutex<Vec<Weak<Session>>>>,
}

impl SessionEnder {
    /// Counts a legacy session from its handshake on (the handler's
    /// `initialize`). rmcp also makes a handler for every sessionless
    /// request, which shakes no hands and is no session.
    pub(super) fn register(&self, session: &Arc<Session>) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(session));
    }

    /// Called from the handler's drop: cleanup runs on the runtime, tracked
    /// so shutdown can wait for it.
    pub(super) fn end(self, session: Arc<Session>) {
        if session.destruction_set().is_empty() {
            return;
        }
        // Drops normally happen on the runtime; one outside it (process
        // teardown) has nowhere to run, and shutdown already ended every
        // live session.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "a session ended outside the runtime; its sandboxes expire at their deadline"
            );
            return;
        };
        let service = self.service.clone();
        self.tracker.spawn_on(
            async move {
                let end = service.end_session(&session).await;
                tracing::info!(
                    destroyed = %super::id_list(&end.destroyed),
                    kept = %super::id_list(&end.kept),
                    retained = %super::id_list(&session.retained()),
                    "HTTP session ended"
                );
            },
            &runtime,
        );
    }

    fn live_count(&self) -> usize {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|w| w.strong_count() > 0);
        live.len()
    }

    async fn end_all_live(&self) {
        let live: Vec<Arc<Session>> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for session in live {
            self.service.end_session(&session).await;
        }
    }
}

/// Checks the bind rule, then serves until SIGTERM/SIGINT; returns the exit
/// code.
pub fn run(service: Arc<Service>, options: HttpOptions) -> i32 {
    let Some(runtime) = crate::runtime::serve_runtime() else {
        return 1;
    };
    let result = runtime.block_on(async {
        let shutdown = crate::edge::shutdown_on_signal().map_err(HttpError::Serve)?;
        serve(service, options, shutdown).await
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandkeep serve: {e}");
            1
        }
    }
}

/// Serves MCP at `http://ADDR/mcp` until `shutdown` is cancelled, then ends
/// every live session.
pub async fn serve(
    service: Arc<Service>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), HttpError> {
    let loopback = options.addr.ip().is_loopback();
    let token = match &options.auth {
        Auth::Token { value, .. } if value.is_empty() || value.chars().any(char::is_whitespace) => {
            return Err(HttpError::BadToken);
        }
        Auth::Token { value, .. } => Some(value.clone()),
        Auth::InsecureNoAuth if !loopback => return Err(HttpError::TokenRequired(options.addr)),
        Auth::InsecureNoAuth => {
            tracing::warn!(
                "serving without a token (--insecure-no-auth): every local user and process can \
                 run commands in this server's sandboxes"
            );
            None
        }
    };
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|source| HttpError::Bind {
            addr: options.addr,
            source,
        })?;
    let local = listener.local_addr().map_err(HttpError::Serve)?;

    let ender = SessionEnder {
        service: service.clone(),
        tracker: TaskTracker::new(),
        live: Arc::default(),
    };
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    if !loopback {
        // Clients reach a public address by names we cannot know; the
        // bearer token is what keeps DNS-rebinding pages out.
        config = config.disable_allowed_hosts();
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.session_idle);
    let sessions = Arc::new(sessions);
    let factory_ender = ender.clone();
    let allowed_origins = options.allowed_origins.clone();
    let whereabouts = options.whereabouts.clone();
    let mcp = StreamableHttpService::new(
        move || {
            Ok(SandkeepMcp::http(
                factory_ender.service.clone(),
                factory_ender.clone(),
                whereabouts.clone(),
            ))
        },
        sessions.clone(),
        config,
    );
    let guard = Arc::new(Guard {
        token,
        allowed_origins,
        sessions: ender.clone(),
        max_sessions: options.max_sessions,
    });
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            sessions,
            super::http_answers::answer,
        ))
        .layer(middleware::from_fn_with_state(guard, check_request));

    let url = format!("http://{local}/mcp");
    tracing::info!("listening on {url}");
    eprintln!("sandkeep: serving MCP at {url}");
    let banner = (options.banner)(&url);
    if !banner.is_empty() {
        eprintln!("{banner}");
    }
    crate::edge::serve(listener, app, options.connections, shutdown.clone()).await;
    ender.end_all_live().await;
    ender.tracker.close();
    if tokio::time::timeout(crate::edge::SHUTDOWN_GRACE, ender.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("session cleanups did not finish within the grace period");
    }
    Ok(())
}

struct Guard {
    token: Option<String>,
    allowed_origins: Vec<String>,
    sessions: SessionEnder,
    max_sessions: usize,
}

/// Origin first (a browser page of another site gets 403 whatever it
/// sends, unless `--allow-origin` names it), then the bearer token (401), then the session cap (503).
async fn check_request(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin_allowed(
            origin.to_str().unwrap_or(""),
            request.headers(),
            &guard.allowed_origins,
        )
    {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden: the Origin {origin:?} is not allowed; sandkeep accepts same-origin and \
                 non-browser requests, and origins named with `sandkeep serve --http ADDR \
                 --allow-origin ORIGIN`"
            ),
        )
            .into_response();
    }
    if let Some(token) = &guard.token
        && !bearer_matches(request.headers(), token)
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: send the server's token as `Authorization: Bearer TOKEN`",
        )
            .into_response();
    }
    if request.method() == Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && guard.sessions.live_count() >= guard.max_sessions
    {
        // Only an initialize opens a session; other session-less requests
        // (2026-07-28) hold nothing and pass.
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large").into_response();
        };
        if opens_session(&bytes) {
            return crate::edge::busy_response("sessions");
        }
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    next.run(request).await
}

/// True for a JSON-RPC `initialize` request (alone or in a batch).
fn opens_session(body: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let is_init = |v: &serde_json::Value| v["method"] == "initialize";
    match &value {
        serde_json::Value::Array(items) => items.iter().any(is_init),
        other => is_init(other),
    }
}

/// An Origin passes when it is ours or one the operator trusts.
fn origin_allowed(origin: &str, headers: &HeaderMap, trusted: &[String]) -> bool {
    same_origin(origin, headers)
        || trusted
            .iter()
            .any(|t| t.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// An Origin is ours when it is `http://` plus the Host the request was
/// sent to.
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .is_some_and(|authority| authority.eq_ignore_ascii_case(host))
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    constant_time_eq(given.trim().as_bytes(), token.as_bytes())
}

/// Compares without an early exit, so response timing does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn origin_must_match_host() {
        let h = headers(&[(header::HOST, "127.0.0.1:8080")]);
        assert!(same_origin("http://127.0.0.1:8080", &h));
        assert!(!same_origin("http://evil.example", &h));
        assert!(!same_origin("http://127.0.0.1:9090", &h));
        assert!(!same_origin("null", &h));
        assert!(!same_origin("https://127.0.0.1:8080", &h));
    }

    #[test]
    fn trusted_origins_pass_exactly() {
        let h = headers(&[(header::HOST, "127.0.0.1:8080")]);
        let trusted = vec!["http://localhost:6274".to_owned()];
        assert!(origin_allowed("http://localhost:6274", &h, &trusted));
        assert!(origin_allowed("http://127.0.0.1:8080", &h, &trusted));
        assert!(!origin_allowed("http://localhost:6275", &h, &trusted));
        assert!(!origin_allowed("http://localhost:6274", &h, &[]));
    }

    #[test]
    fn bearer_token_is_compared_exactly() {
        let h = headers(&[(header::AUTHORIZATION, "Bearer s3cret-token")]);
        assert!(bearer_matches(&h, "s3cret-token"));
        assert!(!bearer_matches(&h, "s3cret-tokem"));
        assert!(!bearer_matches(&h, "s3cret"));
        assert!(!bearer_matches(&HeaderMap::new(), "s3cret-token"));
        let basic = headers(&[(header::AUTHORIZATION, "Basic s3cret-token")]);
        assert!(!bearer_matches(&basic, "s3cret-token"));
    }
}
