//! What the Streamable HTTP transport says a server answers, where rmcp's
//! server answers otherwise: a DELETE of a legacy session gets 204 when
//! the session was ended and 404 when there is no such session (rmcp says
//! 202 to both, and the Python SDK warns at every disconnect); a body that
//! is not JSON gets 400 with a JSON-RPC parse error (-32700), and JSON that
//! is no JSON-RPC message 400 with an invalid-request error (-32600) (rmcp
//! says 415 with a plain-text serde message).
//!
//! A layer in front of rmcp that corrects answers only; it decides nothing
//! about who may call (the token and Origin checks run before it) and
//! changes no request.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The header a legacy session's requests carry its id in.
const SESSION_HEADER: &str = "mcp-session-id";

/// The layer: corrects DELETE and malformed-body answers, passes the rest.
pub(super) async fn answer(
    State(sessions): State<Arc<LocalSessionManager>>,
    request: Request,
    next: Next,
) -> Response {
    match *request.method() {
        Method::DELETE => delete(&sessions, request, next).await,
        Method::POST if json_body(request.headers()) => post(request, next).await,
        _ => next.run(request).await,
    }
}

async fn delete(sessions: &LocalSessionManager, request: Request, next: Next) -> Response {
    let Some(id) = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        // rmcp's own answer: the header is required.
        return next.run(request).await;
    };
    if let Ok(false) = sessions.has_session(&id.into()).await {
        return (
            StatusCode::NOT_FOUND,
            "Not Found: no such session (it ended, expired, or this server never made it); \
             start a new one with initialize",
        )
            .into_response();
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::ACCEPTED {
        StatusCode::NO_CONTENT.into_response()
    } else {
        response
    }
}

/// A JSON body: checked for JSON syntax here (rmcp would answer 415), then
/// handed on unchanged.
async fn post(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, super::http::MAX_BODY_BYTES).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: a request body may have at most {} bytes",
                super::http::MAX_BODY_BYTES
            ),
        )
            .into_response();
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return json_rpc_error(
            ErrorCode::PARSE_ERROR,
            format!("Parse error: the request body is not JSON ({e})"),
        );
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    // The content type was JSON and so was the body: rmcp's 415 means the
    // JSON is no JSON-RPC message it could read.
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return json_rpc_error(
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: the body is JSON but no JSON-RPC 2.0 request, notification or \
             response (jsonrpc, method, id)"
                .into(),
        );
    }
    response
}

/// `Content-Type: application/json` (parameters allowed).
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A JSON-RPC error with no request id (none could be read), as 400.
fn json_rpc_error(code: ErrorCode, message: String) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code.0, "message": message},
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
