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

/// A connection to `addr` from the loopback address `from` (any of
/// 127.0.0.0/8: each is another peer to the server), that has sent
/// `bytes`.
pub async fn send_from(from: &str, addr: &str, bytes: &[u8]) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(format!("{from}:0").parse().expect("an address"))
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    let mut stream = socket
        .connect(addr.parse().expect("host:port"))
        .await
        .unwrap_or_else(|e| panic!("connect to {addr} from {from}: {e}"));
    stream
        .write_all(bytes)
        .await
        .unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    stream
}

/// The client preface of HTTP/2 with prior knowledge and an empty
/// SETTINGS frame: a connection the server speaks HTTP/2 on, with no
/// stream.
pub const H2_PREFACE: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// What an attacker without a credential holds: `each` connections from
/// each of three peers (127.0.0.2 saying nothing, 127.0.0.3 speaking
/// HTTP/2 with no stream, and 127.0.0.1, the clients' own address, half
/// sent headers), with when each was opened.
pub async fn hold_idle(addr: &str, each: usize) -> Vec<(TcpStream, Instant)> {
    let mut held = Vec::new();
    for _ in 0..each {
        held.push((send_from("127.0.0.2", addr, b"").await, Instant::now()));
        held.push((
            send_from("127.0.0.3", addr, H2_PREFACE).await,
            Instant::now(),
        ));
        let partial = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
        held.push((send_from("127.0.0.1", addr, partial).await, Instant::now()));
    }
    held
}

/// Whether the server has closed `stream` (EOF or reset), waiting at most
/// `within`; what it sent before is read and dropped.
pub async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Every held connection is closed by the server within 20 s of its
/// opening (the idle cut is 10 s; some go sooner, to make room).
pub async fn assert_all_cut(held: Vec<(TcpStream, Instant)>) {
    for (n, (mut stream, opened)) in held.into_iter().enumerate() {
        let left = Duration::from_secs(20).saturating_sub(opened.elapsed());
        assert!(
            closed_within(&mut stream, left).await,
            "held connection #{n} was still open 20 s after it was opened"
        );
    }
}

/// Reads one answer from `stream`: its head and a `Content-Length` body,
/// or what comes before the server closes; at most 10 s.
pub async fn read_answer(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + ANSWER_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => break,
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n")
            && !head.starts_with("HTTP/1.1 100")
            && let Some(len) = head.lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            })
            && body.len() >= len
        {
            break;
        }
        if text == "HTTP/1.1 100 Continue\r\n\r\n" {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends a request head with `Expect: 100-continue` and waits for the
/// server's `100 Continue`: from then on its handler is reading the body,
/// so the request is in flight for as long as the body is not finished.
pub async fn request_in_flight(addr: &str, head: &str) -> TcpStream {
    let mut stream = send(
        addr,
        format!("{head}expect: 100-continue\r\n\r\n").as_bytes(),
    )
    .await;
    let answer = read_answer(&mut stream).await;
    assert_eq!(answer, "HTTP/1.1 100 Continue\r\n\r\n", "{head}");
    stream
}
