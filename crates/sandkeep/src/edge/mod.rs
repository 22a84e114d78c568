//! The HTTP accept loop every listener serves through (`serve --http`,
//! `serve --e2b`): what one client can hold, shutdown on SIGTERM/SIGINT,
//! and the bounded wait for open connections at the end. Owns no routes
//! and no auth.
//!
//! A connection with no request in flight holds nothing worth keeping: it
//! is closed after [`IDLE_TIMEOUT`] (one that never sends a whole request,
//! HTTP/2 with no stream, a keep-alive between requests), and gives its
//! place up at once to a new connection that finds the server full
//! ([`admission`]). Only when every place has a request in flight is a new
//! connection told 503 with `Retry-After`. So connections opened without a
//! credential, which are answered at once and never hold a request, cannot
//! keep a client that has one out.

mod admission;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use admission::Caps;
use admission::{Admission, Load};

/// A client that has not sent a whole request head by then is cut off.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight for this long is closed: from
/// its opening, so it also bounds the wait for a first request.
pub const IDLE_TIMEOUT: Duration = HEADER_READ_TIMEOUT;
/// How long a connection told to close (idle, evicted, shutdown) may take
/// once it has no request in flight: an HTTP/2 client gets its GOAWAY and
/// a request that was already on its way its answer.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
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
/// ones. Each connection gets a place under `caps` or, when every place has
/// a request in flight, only a 503.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    caps: Caps,
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
    let admission = Admission::new(caps);
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
        let Some(place) = admission.admit(peer.ip()) else {
            let answer = busy.serve_connection(
                io,
                hyper::service::service_fn(|_| async {
                    Ok::<_, Infallible>(busy_response("connections"))
                }),
            );
            tokio::spawn(answer);
            continue;
        };
        let service = tracked(app.clone(), place.load.clone());
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            tokio::pin!(connection);
            let idle = place.load.subscribe();
            tokio::select! {
                _ = connection.as_mut() => return,
                () = idle_for(idle.clone(), IDLE_TIMEOUT) => {}
                () = place.evicted.cancelled() => {}
                () = shutdown.cancelled() => {}
            }
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                _ = connection.as_mut() => {}
                () = idle_for(idle, CLOSE_GRACE) => {}
            }
        });
    }
    connections.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("open connections did not close within the grace period");
    }
}

/// Returns once the connection has had no request in flight for `period`.
async fn idle_for(mut load: watch::Receiver<Load>, period: Duration) {
    loop {
        let idle = load.borrow_and_update().in_flight == 0;
        let changed = if idle {
            match tokio::time::timeout(period, load.changed()).await {
                Err(_) => return,
                Ok(changed) => changed,
            }
        } else {
            load.changed().await
        };
        // The place is gone: the connection task ends on its own.
        if changed.is_err() {
            return std::future::pending().await;
        }
    }
}

/// `app` as one connection's service, counting its requests in flight
/// from the call until the response body is done with.
fn tracked(
    app: axum::Router,
    load: watch::Sender<Load>,
) -> impl hyper::service::Service<
    axum::http::Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send + 'static,
> + Clone {
    let app = TowerToHyperService::new(app);
    let load = Arc::new(load);
    hyper::service::service_fn(move |request| {
        let in_flight = InFlight::begin(Arc::clone(&load));
        let answer = hyper::service::Service::call(&app, request);
        async move {
            let response = answer.await?;
            if response.status().is_success() {
                in_flight.load.send_modify(|l| l.answered = true);
            }
            Ok(response.map(|inner| {
                Body::new(Tracked {
                    inner,
                    _in_flight: in_flight,
                })
            }))
        }
    })
}

/// One request in flight on a connection, ended on drop.
struct InFlight {
    load: Arc<watch::Sender<Load>>,
}

impl InFlight {
    fn begin(load: Arc<watch::Sender<Load>>) -> Self {
        load.send_modify(|l| l.in_flight += 1);
        Self { load }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.load.send_modify(|l| {
            l.in_flight -= 1;
            l.idle_since = Instant::now();
        });
    }
}

/// A response body that holds its request's [`InFlight`] until hyper is
/// done with it (sent whole, or the client went away).
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
