//! Raw HTTP/1.1 on a TCP stream, for what a client library would hide:
//! a request head never finished, a connection past the cap, a body cut
//! short. Shared by the MCP HTTP edge (`serve --http`) and the E2B
//! endpoint (`serve --e2b`), which hold clients the same way.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the server may take to answer or close a raw connection.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// A connection to `addr` that has sent `bytes` and stays open.
pub async fn send(addr: &str, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    stream
        .write_all(bytes)
        .await
        .unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    stream
}

/// A client that starts a request to `path` and never finishes its
/// headers; hand it to [`assert_cut_off`].
pub async fn slow_client(addr: &str, method: &str, path: &str) -> (TcpStream, Instant) {
    let head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    (send(addr, head.as_bytes()).await, Instant::now())
}

/// The server's header read timeout (10 s) cut the slow client off: its
/// connection ends (EOF or reset) between 9 and 20 s after it started.
pub async fn assert_cut_off((mut slow, started): (TcpStream, Instant)) {
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest)).await;
    assert!(
        ended.is_ok(),
        "the half-sent request was still open after 30 s"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited <= Duration::from_secs(20),
        "cut after {waited:?}"
    );
}

/// A `GET path` on a fresh connection is told 503 with a Retry-After
/// (every connection place is taken).
pub async fn assert_busy(addr: &str, path: &str) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let mut stream = send(addr, request.as_bytes()).await;
    let mut answer = Vec::new();
    tokio::time::timeout(ANSWER_DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("the busy answer within 10 s")
        .expect("read the busy answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after:"),
        "{answer}"
    );
}
