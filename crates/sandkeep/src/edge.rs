//! The HTTP accept loop every listener serves through (`serve --http`,
//! `serve --e2b`): what one client can hold (a header read timeout, a cap
//! on open connections past which a connection is only told 503 with
//! `Retry-After` and closed), shutdown on SIGTERM/SIGINT, and the bounded
//! wait for open connections at the end. Owns no routes and no auth.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A client that has not sent a whole request head by then is cut off.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for open connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// What a client told "busy" (503) waits before it tries again.
const RETRY_AFTER_SECS: &str = "5";

/// 503 with `Retry-After`: the server is at one of its caps.
pub fn busy_response(what: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, RETRY_AFTER_SECS)],
        format!("Service Unavailable: the server holds as many {what} as it allows; retry later"),
    )
        .into_response()
}

/// A token cancelled at the first SIGTERM or SIGINT.
pub fn shutdown_on_signal() -> std::io::Result<CancellationToken> {
    let shutdown = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received: shutting down");
        trigger.cancel();
    });
    Ok(shutdown)
}

/// Serves connections until `shutdown`, then waits (bounded) for the open
/// ones. Each connection gets the header read timeout; past
/// `max_connections` a connection is only told 503 and closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    max_connections: usize,
    shutdown: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let mut busy = hyper::server::conn::http1::Builder::new();
    busy.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(false);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before
                    // accept: the listener itself is fine.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Small request/response exchanges (envd's unary calls) must not
        // wait for Nagle's timer.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let service = TowerToHyperService::new(app.clone());
                let connection = graceful.watch(
                    builder
                        .serve_connection_with_upgrades(io, service)
                        .into_owned(),
                );
                tokio::spawn(async move {
                    let _ = connection.await;
                    drop(permit);
                });
            }
            Err(_) => {
                let answer = busy.serve_connection(
                    io,
                    hyper::service::service_fn(|_| async {
                        Ok::<_, std::convert::Infallible>(busy_response("connections"))
                    }),
                );
                tokio::spawn(answer);
            }
        }
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open connections did not close within the grace period");
    }
}
