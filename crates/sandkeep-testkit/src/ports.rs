//! Port forward test support: servers to run inside a sandbox (python3
//! scripts: the `base` template shows the host's), and the host-side
//! clients that talk to them through a forward: HTTP, a websocket echo, a
//! raw TCP echo.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TCP echo server on 127.0.0.1:PORT (argv[1]), one thread per
/// connection; it echoes until the client's end of file, then closes.
pub const ECHO_PY: &str = include_str!("tcp_echo.py");

/// A websocket echo server on 127.0.0.1:PORT (argv[1]); tests/e2b/sdk.py
/// runs it too.
pub const WEBSOCKET_PY: &str = include_str!("ws_echo.py");

/// `host:port` of an `http://host:port` url.
pub fn authority(url: &str) -> &str {
    url.strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url} is not an http:// url"))
        .trim_end_matches('/')
}

/// Connects to `url` until what listens inside answers `probe` (the
/// server in the sandbox may still be starting: until then the forward
/// resets every connection), failing after `limit`.
pub async fn until_answering(url: &str, limit: Duration) {
    let start = std::time::Instant::now();
    loop {
        if echo_once(authority(url), b"ping")
            .await
            .is_ok_and(|b| b == b"ping")
        {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "nothing answered through {url} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One echo round trip on a fresh connection: sends `bytes`, half-closes,
/// reads to the end.
pub async fn echo_once(addr: &str, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(bytes).await?;
    s.shutdown().await?;
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut back))
        .await
        .map_err(|_| std::io::Error::other("no end of the echo within 20 s"))??;
    Ok(back)
}

/// A deterministic, non-repeating-looking byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u32::from(seed) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Sends `len` bytes to an echo server at `addr` while reading them back
/// (both ways at once, as a full-duplex stream must); returns what came
/// back.
pub async fn echo_bulk(addr: &str, data: &[u8]) -> Vec<u8> {
    let s = TcpStream::connect(addr)
        .await
        .expect("connect to the forward");
    let (mut r, mut w) = s.into_split();
    let len = data.len();
    let data = data.to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.expect("write through the forward");
        w.shutdown().await.expect("half-close");
    });
    let mut back = Vec::with_capacity(len);
    tokio::time::timeout(Duration::from_secs(120), r.read_to_end(&mut back))
        .await
        .expect("the echo ended within 120 s")
        .expect("read through the forward");
    writer.await.expect("writer");
    back
}

/// A websocket handshake on `addr` with `host` as the Host header, then one
/// masked text frame `text`; returns the echoed frame's payload.
pub async fn websocket_echo(addr: &str, host: &str, path: &str, text: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    // The response head, byte by byte: the frame may follow in the same read.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b))
            .await
            .expect("a handshake answer within 10 s")
            .expect("read the handshake");
        assert!(
            n == 1,
            "closed during the handshake: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "not switched: {head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "wrong accept key: {head}"
    );
    let mask = [0x12u8, 0x34, 0x56, 0x78];
    let payload: Vec<u8> = text
        .bytes()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    assert!(payload.len() < 126, "one short frame");
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend_from_slice(&payload);
    s.write_all(&frame).await.unwrap();
    let mut h = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut h))
        .await
        .expect("an echoed frame within 10 s")
        .expect("read the frame");
    assert_eq!(h[0], 0x81, "a final text frame");
    let mut body = vec![0u8; usize::from(h[1] & 127)];
    s.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).expect("text")
}
