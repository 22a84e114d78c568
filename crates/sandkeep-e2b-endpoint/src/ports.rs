//! Requests to a sandbox's own servers (SPEC.md §14): a request whose
//! `Host` (HTTP/2: `:authority`) is `PORT-SANDBOXID.DOMAIN` (any domain, as
//! E2B's edge routes it;
//! port 49983 stays envd's) goes to that port of that sandbox, websocket
//! upgrades included, so the URL an SDK's `get_host(port)` builds works
//! here once the request reaches this endpoint.
//!
//! It rides on the provider's forward of the port ([`Provider::expose_port`]:
//! the same port gets the same forward, which lasts as long as the
//! sandbox), relaying the request over HTTP/1.1; a paused sandbox's
//! requests go as envd's do (`lifecycle::admit`). Like E2B's public ports
//! (and the forward itself) it asks for no token: whoever reaches this
//! endpoint reaches the sandbox's servers (docs/e2b.md).
//!
//! [`Provider::expose_port`]: sandkeep_provider::Provider::expose_port

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use sandkeep_provider::{Port, ProviderError, SandboxId};

use super::{E2b, envd_wire, rest, sandbox_not_found};

/// Where a request goes, by its `Host`.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// This endpoint's own routes: the API, envd, or anything else.
    Endpoint,
    /// A port of a sandbox (the id as written, checked when used).
    Port { port: Port, sandbox: String },
    /// A `PORT-ID.` name whose port is no port.
    Malformed(String),
}

/// The host a request names: its `Host`, or HTTP/2's `:authority`
/// (which hyper keeps in the URI, with no `Host` header).
fn host(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
}

fn target(host: Option<&str>) -> Target {
    let Some(host) = host else {
        return Target::Endpoint;
    };
    // An IP literal (v6 in brackets) is never a port's name.
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let Some((first, _domain)) = name.split_once('.') else {
        return Target::Endpoint;
    };
    let Some((port, sandbox)) = first.split_once('-') else {
        return Target::Endpoint;
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || sandbox.is_empty() {
        return Target::Endpoint;
    }
    match port.parse::<u16>().ok().and_then(Port::new) {
        Some(p) if p.get() == envd_wire::ENVD_PORT => Target::Endpoint,
        Some(port) => Target::Port {
            port,
            sandbox: sandbox.to_owned(),
        },
        None => Target::Malformed(format!(
            "{port} is not a port (1 to 65535) in the host name {host:?}"
        )),
    }
}

/// The first layer of every request: a sandbox port's host name is
/// relayed, anything else goes on to the endpoint's routes.
pub async fn route(State(e2b): State<Arc<E2b>>, request: Request, next: Next) -> Response {
    let host = host(request.headers(), request.uri());
    match target(host.as_deref()) {
        Target::Endpoint => next.run(request).await,
        Target::Malformed(why) => rest::error(StatusCode::BAD_REQUEST, why),
        Target::Port { port, sandbox } => match SandboxId::parse(&sandbox) {
            Ok(id) => relay(&e2b, id, port, request).await,
            Err(_) => sandbox_not_found(&sandbox),
        },
    }
}

/// What E2B's proxy answers when nothing listens on the port.
fn port_not_open(id: &SandboxId, port: Port) -> Response {
    let body = serde_json::json!({
        "code": StatusCode::BAD_GATEWAY.as_u16(),
        "message": format!(
            "The sandbox {id} is running but port is not open: nothing listens on port {port} \
             inside it"
        ),
        "sandboxId": id.as_str(),
        "port": port.get(),
    });
    (StatusCode::BAD_GATEWAY, axum::Json(body)).into_response()
}

async fn relay(e2b: &E2b, id: SandboxId, port: Port, mut request: Request) -> Response {
    if let Err(refused) = crate::lifecycle::admit(e2b, &id).await {
        return refused;
    }
    let forward = match e2b.provider.expose_port(&id, port).await {
        Ok(f) => f,
        Err(ProviderError::NoSuchSandbox(_)) => return sandbox_not_found(id.as_str()),
        Err(e) => return rest::error(StatusCode::BAD_GATEWAY, e.to_string()),
    };
    let Some(addr) = forward.url.strip_prefix("http://") else {
        return rest::error(
            StatusCode::BAD_GATEWAY,
            format!(
                "the forward of port {port} is not on this host: {}",
                forward.url
            ),
        );
    };
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return port_not_open(&id, port);
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(_) => return port_not_open(&id, port),
        };
    tokio::spawn(connection.with_upgrades());
    let wants_upgrade = request.headers().contains_key(header::UPGRADE);
    // The inner hop is always HTTP/1.1, with a Host and an origin-form
    // target (an HTTP/2 request has neither); the answer is in the
    // client's version.
    let version = request.version();
    *request.version_mut() = axum::http::Version::HTTP_11;
    if !request.headers().contains_key(header::HOST)
        && let Some(authority) = request.uri().authority()
        && let Ok(value) = authority.as_str().parse()
    {
        request.headers_mut().insert(header::HOST, value);
    }
    if let Some(path) = request.uri().path_and_query()
        && let Ok(origin) = Uri::builder().path_and_query(path.clone()).build()
    {
        *request.uri_mut() = origin;
    }
    let client_side = hyper::upgrade::on(&mut request);
    // The forward resets the connection when nothing listens: the request
    // fails before any answer.
    let Ok(mut response) = sender.send_request(request).await else {
        return port_not_open(&id, port);
    };
    if wants_upgrade && response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            if let (Ok(client), Ok(server)) = (client_side.await, server_side.await) {
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(server),
                )
                .await;
            }
        });
    }
    *response.version_mut() = version;
    response.map(axum::body::Body::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(host: &str) -> Target {
        target(Some(host))
    }

    #[test]
    fn the_host_is_the_host_header_else_the_authority() {
        let uri: Uri = "http://3000-sb-0123456789abcdef.x:8/p".parse().unwrap();
        assert_eq!(
            host(&HeaderMap::new(), &uri).as_deref(),
            Some("3000-sb-0123456789abcdef.x:8")
        );
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "api.x".parse().unwrap());
        assert_eq!(host(&h, &uri).as_deref(), Some("api.x"));
        assert_eq!(host(&HeaderMap::new(), &"/p".parse().unwrap()), None);
    }

    #[test]
    fn a_port_name_routes_to_the_sandbox_and_anything_else_to_the_endpoint() {
        assert_eq!(
            of("3000-sb-0123456789abcdef.e2b.app"),
            Target::Port {
                port: Port::new(3000).unwrap(),
                sandbox: "sb-0123456789abcdef".into()
            }
        );
        assert_eq!(
            of("8080-abc.localhost:3000"),
            Target::Port {
                port: Port::new(8080).unwrap(),
                sandbox: "abc".into()
            }
        );
        for endpoint in [
            "127.0.0.1:3000",
            "localhost:3000",
            "[::1]:3000",
            "sandbox.e2b.app",
            "49983-sb-1.e2b.app",
            "my-host.example",
            "3000-sb-1",
        ] {
            assert_eq!(of(endpoint), Target::Endpoint, "{endpoint}");
        }
        assert!(matches!(of("0-sb-1.e2b.app"), Target::Malformed(_)));
        assert!(matches!(of("65536-sb-1.e2b.app"), Target::Malformed(_)));
    }
}
