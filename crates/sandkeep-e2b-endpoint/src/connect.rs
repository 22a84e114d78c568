//! The Connect protocol as envd speaks it to the SDKs, JSON codec only:
//! unary calls (`application/json`, a bare JSON body, errors as JSON with a
//! string `code` and the matching HTTP status) and server streams
//! (`application/connect+json`, enveloped messages ending with an
//! end-stream envelope that may carry the error).
//!
//! Written by hand because the Rust Connect implementations serve protobuf
//! types generated from `.proto` files, while envd's JSON mapping is a
//! handful of fields. The bytes (framing, error shape, messages) are
//! `sandkeep-envd-wire`'s, shared with the e2b provider; this module adds
//! the server's side: reading requests, answering over axum.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use sandkeep_envd_wire::connect::{self as wire, COMPRESSED, END_STREAM, Frames, HEADER_LEN};
pub use sandkeep_envd_wire::connect::{Code, STREAM_JSON, UNARY_JSON};

/// The largest request message accepted (a 64 KiB command and its JSON).
pub const MAX_MESSAGE: usize = 4 << 20;

/// A Connect error: a code and a message for the caller.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: Code,
    pub message: String,
}

impl RpcError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn wire(&self) -> wire::Error {
        wire::Error::new(self.code, self.message.clone())
    }
}

impl IntoResponse for RpcError {
    /// The unary form.
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, UNARY_JSON)],
            wire::to_json(&self.wire()),
        )
            .into_response()
    }
}

impl From<sandkeep_provider::ProviderError> for RpcError {
    fn from(e: sandkeep_provider::ProviderError) -> Self {
        use sandkeep_provider::ProviderError as P;
        let code = match &e {
            P::NoSuchSandbox(_) | P::NoSuchPath { .. } => Code::NotFound,
            P::UnknownTemplate { .. } | P::FileTooLarge { .. } => Code::InvalidArgument,
            P::Unsupported(_) => Code::Unimplemented,
            P::LimitReached(_) => Code::ResourceExhausted,
            P::AlreadyInState { .. } | P::SnapshotExists(_) => Code::FailedPrecondition,
            P::Unavailable(_)
            | P::Unconfirmed { .. }
            | P::NotAnswering { .. }
            | P::Refused { .. }
            | P::Keeper(_)
            | P::ProcessLost(_) => Code::Unavailable,
            P::FileError { .. } | P::Io { .. } | P::Misconfigured(_) | P::Internal(_) => {
                Code::Internal
            }
        };
        Self::new(code, e.to_string())
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or("", |v| v.split(';').next().unwrap_or("").trim())
}

fn parse<T: DeserializeOwned>(json: &[u8]) -> Result<T, RpcError> {
    if json.len() > MAX_MESSAGE {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!(
                "the message is {} bytes, over the {MAX_MESSAGE}-byte limit",
                json.len()
            ),
        ));
    }
    serde_json::from_slice(json).map_err(|e| {
        RpcError::new(
            Code::InvalidArgument,
            format!("cannot parse the request message as JSON: {e}"),
        )
    })
}

/// A unary request body: `application/json` only (no SDK sends binary
/// protobuf).
pub fn unary_request<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, RpcError> {
    match content_type(headers) {
        UNARY_JSON => parse(if body.is_empty() { b"{}" } else { body }),
        "application/proto" => Err(RpcError::new(
            Code::Unimplemented,
            "this envd speaks the JSON codec only; send application/json",
        )),
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("content type {other:?} is not supported; send application/json"),
        )),
    }
}

/// A unary success.
pub fn unary_response(message: &impl Serialize) -> Response {
    ([(header::CONTENT_TYPE, UNARY_JSON)], wire::to_json(message)).into_response()
}

/// Refuses a stream request that is not Connect's JSON stream.
pub fn stream_content_type(headers: &HeaderMap) -> Result<(), RpcError> {
    match content_type(headers) {
        STREAM_JSON => Ok(()),
        ct => Err(RpcError::new(
            Code::Unimplemented,
            format!("content type {ct:?} is not supported on a stream; send {STREAM_JSON}"),
        )),
    }
}

/// The next message of a request stream once all of it came, `Ok(None)`
/// before. End-stream envelopes are passed over: a client ends its stream
/// by ending the body.
pub fn next_message<T: DeserializeOwned>(frames: &mut Frames) -> Result<Option<T>, RpcError> {
    loop {
        if let Some((_, len)) = frames.announced()
            && len > MAX_MESSAGE
        {
            return Err(RpcError::new(
                Code::InvalidArgument,
                format!("envelope of {len} bytes is over the {MAX_MESSAGE}-byte limit"),
            ));
        }
        let Some(frame) = frames.pop() else {
            return Ok(None);
        };
        if frame.flags & COMPRESSED != 0 {
            return Err(RpcError::new(
                Code::Unimplemented,
                "compressed envelopes are not supported; send them uncompressed",
            ));
        }
        if frame.flags & END_STREAM == 0 {
            return parse(&frame.message).map(Some);
        }
    }
}

/// At the end of a request body: no envelope may be left unfinished.
pub fn body_ended(frames: &Frames) -> Result<(), RpcError> {
    let rest = frames.partial();
    if rest.is_empty() {
        return Ok(());
    }
    let why = match frames.announced() {
        None => "fewer than 5 header bytes".to_owned(),
        Some((_, len)) => format!("announces {len} bytes, {} follow", rest.len() - HEADER_LEN),
    };
    Err(RpcError::new(
        Code::InvalidArgument,
        format!("malformed envelope: {why}"),
    ))
}

/// The messages of a server-stream request body, read whole.
fn stream_request<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<T>, RpcError> {
    stream_content_type(headers)?;
    let mut frames = Frames::default();
    frames.push(body);
    let mut out = Vec::new();
    while let Some(message) = next_message(&mut frames)? {
        out.push(message);
    }
    body_ended(&frames)?;
    Ok(out)
}

/// The one request message of a server stream (Start, Connect, WatchDir).
pub fn single_stream_request<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
    method: &str,
) -> Result<T, RpcError> {
    let mut messages = stream_request(headers, body)?;
    if messages.len() != 1 {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!(
                "{method} takes exactly one request message, got {}",
                messages.len()
            ),
        ));
    }
    Ok(messages.remove(0))
}

/// One enveloped stream message.
pub fn envelope(message: &impl Serialize) -> Bytes {
    Bytes::from(wire::envelope(message))
}

/// The end-stream envelope, with the error if the stream failed.
pub fn end_stream(error: Option<&RpcError>) -> Bytes {
    Bytes::from(wire::end_stream(error.map(RpcError::wire).as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, STREAM_JSON.parse().unwrap());
        h
    }

    #[test]
    fn envelopes_round_trip_and_bad_ones_name_the_problem() {
        let mut body = envelope(&serde_json::json!({"a": 1})).to_vec();
        body.extend_from_slice(&end_stream(None));
        let got: Vec<serde_json::Value> = stream_request(&stream_headers(), &body).unwrap();
        assert_eq!(got, vec![serde_json::json!({"a": 1})]);

        let err = stream_request::<serde_json::Value>(&stream_headers(), &body[..7]).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.contains("announces"), "{}", err.message);

        let huge = [0u8, 0xff, 0xff, 0xff, 0xff];
        let err = stream_request::<serde_json::Value>(&stream_headers(), &huge).unwrap_err();
        assert!(err.message.contains("limit"), "{}", err.message);

        let err = stream_request::<serde_json::Value>(&HeaderMap::new(), &body).unwrap_err();
        assert_eq!(err.code, Code::Unimplemented);
    }
}
