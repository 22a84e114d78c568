//! A sandbox's egress proxy: HTTP CONNECT and plain `http://` forwarding.
//!
//! It runs in a process of its own, forked by the keeper before any
//! namespace is entered, so it stays in the host's network, pid and user
//! namespaces. Its listening socket was made by the init inside the
//! sandbox's network namespace (127.0.0.1 there) and handed over, so
//! sandbox processes reach it while everything else of the host stays out
//! of their reach. Each destination is resolved here, on the host, and
//! every resolved address is checked by [`netpolicy`] before connecting.
//! SPEC.md §10 bounds where a sandbox may connect by address, not by port:
//! any port (1–65535) of a public address is reachable, through CONNECT as
//! through SOCKS5 and plain `http://`; port 0 is no destination.
//! One thread per connection: this process never forks.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::netpolicy::{self, HostNetwork, Refusal, Subnet};
use super::{sys, wire};

/// The longest request head accepted.
const MAX_HEAD: usize = 32 * 1024;
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 256;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// What a sandbox's proxy lets through.
#[derive(Debug)]
pub struct Policy {
    /// The names of `allow_hosts`; empty for every public address.
    allow_hosts: Vec<String>,
    /// Test builds only (the `test-hooks` feature): names answered from
    /// the state directory's [`TEST_HOSTS`] file, as public hosts whatever
    /// their address, so that a test can stand a loopback listener in for
    /// a host of the Internet. A build without the feature has no such
    /// names, and nothing a sandbox does can add one: the file is the
    /// host's.
    #[cfg(feature = "test-hooks")]
    test_hosts: Vec<(String, IpAddr)>,
}

/// The state directory's file of test names (`NAME ADDRESS` a line) read
/// by builds with the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
pub const TEST_HOSTS: &str = "test-hosts";

impl Policy {
    /// The policy of a sandbox of the state directory at `state_root`.
    pub fn new(allow_hosts: Vec<String>, state_root: &Path) -> Policy {
        #[cfg(not(feature = "test-hooks"))]
        let _ = state_root;
        Policy {
            allow_hosts,
            #[cfg(feature = "test-hooks")]
            test_hosts: std::fs::read_to_string(state_root.join(TEST_HOSTS))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| {
                    let (name, ip) = l.split_once(' ')?;
                    Some((netpolicy::normalize_host(name), ip.trim().parse().ok()?))
                })
                .collect(),
        }
    }

    /// The address a test build answers for `name`, as a public host's.
    fn test_host(&self, name: &str) -> Option<IpAddr> {
        #[cfg(feature = "test-hooks")]
        return self
            .test_hosts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, ip)| *ip);
        #[cfg(not(feature = "test-hooks"))]
        {
            let _ = name;
            None
        }
    }
}

/// Serves `listener` until the process is killed.
pub fn serve(listener: OwnedFd, policy: Policy) -> ! {
    let listener = TcpListener::from(listener);
    let policy = Arc::new(policy);
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept() else {
            continue;
        };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (policy, done) = (policy.clone(), live.clone());
        let spawned = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || {
                let _ = handle(client, &policy);
                done.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The host uid the proxy runs as when the keeper is root: nobody, whom
/// no sandbox uid maps to, so no sandbox process can signal or trace it.
const NOBODY: u32 = 65534;

/// The keeper's handle on its proxy process. Dropping it kills the proxy.
pub struct Proxy {
    pid: i32,
    pidfd: OwnedFd,
    channel: Option<OwnedFd>,
}

impl Proxy {
    /// Forks the proxy process. Called by the keeper before it enters any
    /// namespace, so the proxy stays in the host's; it waits for its
    /// listening socket ([`Proxy::start`]). As root it runs as nobody.
    pub fn fork(policy: Policy) -> Result<Proxy, String> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| format!("socketpair: {e}"))?;
        let keeper = rustix::process::getpid();
        match sys::fork().map_err(|e| format!("fork the egress proxy: {e}"))? {
            sys::Forked::Child => {
                drop(ours);
                sys::exit_now(match proxy_main(keeper, theirs, policy) {
                    Ok(never) => match never {},
                    Err(e) => {
                        eprintln!("sandkeep proxy: {e}");
                        1
                    }
                })
            }
            sys::Forked::Parent(pid) => {
                drop(theirs);
                let pidfd = rustix::process::pidfd_open(
                    rustix::process::Pid::from_raw(pid).expect("fork returns a positive pid"),
                    rustix::process::PidfdFlags::empty(),
                )
                .map_err(|e| format!("pidfd_open: {e}"));
                let pidfd = match pidfd {
                    Ok(fd) => fd,
                    Err(e) => {
                        drop(ours);
                        let _ = sys::wait_for(pid);
                        return Err(e);
                    }
                };
                Ok(Proxy {
                    pid,
                    pidfd,
                    channel: Some(ours),
                })
            }
        }
    }

    /// Hands the proxy its listening socket; it serves from now on.
    pub fn start(&mut self, listener: OwnedFd) -> Result<(), String> {
        let channel = self
            .channel
            .take()
            .ok_or("the egress proxy was already started")?;
        wire::send(&channel, b"listen", &[listener.as_fd()])
            .map_err(|e| format!("hand the listening socket to the egress proxy: {e}"))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
        let _ = sys::wait_for(self.pid);
    }
}

/// The forked proxy process: drops what it does not need, waits for its
/// listening socket and serves it.
fn proxy_main(
    keeper: rustix::process::Pid,
    channel: OwnedFd,
    policy: Policy,
) -> Result<std::convert::Infallible, String> {
    sys::set_signal_mask(&[]).map_err(|e| format!("signal mask: {e}"))?;
    // Nothing of the keeper's: not its readiness pipe, not its sockets.
    sys::close_fds_except(&[channel.as_raw_fd()]).map_err(|e| format!("close fds: {e}"))?;
    if rustix::process::geteuid().is_root() {
        sys::drop_bounding_set(rustix::thread::CapabilitySet::empty())
            .map_err(|e| format!("drop capabilities: {e}"))?;
        sys::become_id(NOBODY, NOBODY, true).map_err(|e| format!("become nobody: {e}"))?;
    }
    // Set after the identity change, which clears it.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if rustix::process::getppid() != Some(keeper) {
        return Err("the keeper is gone".into());
    }
    rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("non-dumpable: {e}"))?;
    let mut buf = [0u8; 64];
    let (_, mut fds) = wire::recv(&channel, &mut buf).map_err(|e| format!("recv: {e}"))?;
    drop(channel);
    match fds.pop() {
        Some(listener) => serve(listener, policy),
        // The keeper decided against a proxy (or died): nothing to do.
        None => sys::exit_now(0),
    }
}

/// What a request asks the proxy to do.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `CONNECT host:port`: a tunnel.
    Tunnel { host: String, port: u16 },
    /// `METHOD http://host[:port]/path`: forward one request; `head` is
    /// the request head rewritten for the origin server.
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

/// An answer to the client instead of a connection.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    reason: &'static str,
    body: String,
}

impl Answer {
    fn new(status: u16, reason: &'static str, body: impl Into<String>) -> Self {
        Answer {
            status,
            reason,
            body: body.into(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let body = format!("{}\n", self.body);
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            self.reason,
            body.len()
        )
        .into_bytes()
    }
}

impl From<Refusal> for Answer {
    fn from(r: Refusal) -> Self {
        Answer::new(403, "Forbidden", r.to_string())
    }
}

fn handle(mut client: TcpStream, policy: &Policy) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    // The same port speaks SOCKS5, whose greeting starts with 5 (no HTTP
    // method does).
    let mut first = [0u8; 1];
    if client.peek(&mut first)? == 1 && first[0] == SOCKS_VERSION {
        return socks5(client, policy);
    }
    let mut buf = Vec::with_capacity(4096);
    let parsed = loop {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse(&buf) {
            Ok(Some(p)) => break Ok(p),
            Ok(None) if buf.len() < MAX_HEAD => continue,
            Ok(None) => {
                break Err(Answer::new(
                    431,
                    "Request Header Fields Too Large",
                    "sandkeep: the request head is too large",
                ));
            }
            Err(answer) => break Err(answer),
        }
    };
    let (target, head_len) = match parsed {
        Ok(p) => p,
        Err(answer) => return client.write_all(&answer.bytes()),
    };
    let (host, port) = match &target {
        Target::Tunnel { host, port } | Target::Forward { host, port, .. } => (host, *port),
    };
    let mut upstream = match connect(host, port, policy) {
        Ok(s) => s,
        Err(answer) => return client.write_all(&answer.bytes()),
    };
    let rest = &buf[head_len..];
    match &target {
        Target::Tunnel { .. } => {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        }
        Target::Forward { head, .. } => upstream.write_all(head)?,
    }
    upstream.write_all(rest)?;
    client.set_read_timeout(None)?;
    relay(client, upstream)
}

/// The request's target and the length of its head; `None` while the
/// head is incomplete.
fn parse(buf: &[u8]) -> Result<Option<(Target, usize)>, Answer> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(Answer::new(
                400,
                "Bad Request",
                format!("sandkeep: malformed request: {e}"),
            ));
        }
    };
    let method = req.method.unwrap_or_default();
    let path = req.path.unwrap_or_default();
    let bad = |why: String| Answer::new(400, "Bad Request", format!("sandkeep: {why}"));
    if method.eq_ignore_ascii_case("CONNECT") {
        let authority = http::uri::Authority::from_str(path)
            .map_err(|_| bad(format!("CONNECT needs host:port, not {path:?}")))?;
        let port = authority
            .port_u16()
            .ok_or_else(|| bad(format!("CONNECT needs host:port, not {path:?}")))?;
        return Ok(Some((
            Target::Tunnel {
                host: authority.host().to_owned(),
                port,
            },
            len,
        )));
    }
    let uri = http::Uri::from_str(path).map_err(|_| bad(format!("bad request target {path:?}")))?;
    match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => {}
        Some(s) => {
            return Err(bad(format!(
                "only http:// is forwarded, not {s}://; use CONNECT (HTTPS_PROXY) for TLS"
            )));
        }
        None => {
            return Err(bad(
                "this is an HTTP proxy: requests need an absolute http:// target".into(),
            ));
        }
    }
    let authority = uri
        .authority()
        .ok_or_else(|| bad(format!("no host in {path:?}")))?;
    let host = authority.host().to_owned();
    let port = authority.port_u16().unwrap_or(80);
    let origin = uri.path_and_query().map_or("/", |p| p.as_str());
    // The origin server hears the host the request-URI names, whatever
    // Host the client sent (RFC 9112 §3.2.2: a proxy must replace it):
    // the name allow_hosts was checked against is the one served, so a
    // shared front cannot be asked for another of its hosts.
    let host_header = match authority.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    let mut head = format!(
        "{method} {origin} HTTP/1.{}\r\nHost: {host_header}\r\n",
        req.version.unwrap_or(1)
    );
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            continue;
        }
        head.push_str(h.name);
        head.push_str(": ");
        head.push_str(&String::from_utf8_lossy(h.value));
        head.push_str("\r\n");
    }
    // One request per connection keeps the forwarding a plain relay.
    head.push_str("Connection: close\r\n\r\n");
    Ok(Some((
        Target::Forward {
            host,
            port,
            head: head.into_bytes(),
        },
        len,
    )))
}

/// The host's own network as it is now: its interfaces' addresses and
/// subnets, and the gateways of its routing tables. Read for every
/// connection, so that a change (a new interface, DHCP) holds at once.
fn host_network() -> io::Result<HostNetwork> {
    let routes = |path: &str| match std::fs::read_to_string(path) {
        // No IPv6 on this host: no IPv6 routes.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        other => other,
    };
    let addresses = sys::interface_addresses()?
        .into_iter()
        .map(|(addr, prefix)| Subnet { addr, prefix })
        .collect();
    let gateways = netpolicy::route_gateways(
        &routes("/proc/net/route")?,
        &routes("/proc/net/ipv6_route")?,
    );
    Ok(HostNetwork {
        addresses,
        gateways,
    })
}

/// Resolves on the host, checks every address, and connects to the first
/// permitted one that answers.
fn connect(host: &str, port: u16, policy: &Policy) -> Result<TcpStream, Answer> {
    if port == 0 {
        return Err(Answer::new(
            400,
            "Bad Request",
            "sandkeep: port 0 is not a destination",
        ));
    }
    netpolicy::check_host(host, &policy.allow_hosts)?;
    let name = netpolicy::normalize_host(host);
    if let Some(ip) = policy.test_host(&name) {
        let addr = SocketAddr::new(ip, port);
        return TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| {
            Answer::new(
                502,
                "Bad Gateway",
                format!("sandkeep: cannot connect to {addr}: {e}"),
            )
        });
    }
    let addrs: Vec<SocketAddr> = match name.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (name.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| {
                Answer::new(
                    502,
                    "Bad Gateway",
                    format!("sandkeep: cannot resolve {name}: {e}"),
                )
            })?
            .collect(),
    };
    // Without the host's network no address can be judged: refuse.
    let own = host_network().map_err(|e| {
        Answer::new(
            502,
            "Bad Gateway",
            format!("sandkeep: cannot read the host's network ({e}); try again"),
        )
    })?;
    let mut refusal = None;
    let mut failure = None;
    for addr in addrs {
        if let Err(r) = netpolicy::check_address(addr.ip(), &own) {
            refusal.get_or_insert(r);
            continue;
        }
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => failure = Some(format!("sandkeep: cannot connect to {addr}: {e}")),
        }
    }
    Err(match (failure, refusal) {
        (Some(f), _) => Answer::new(502, "Bad Gateway", f),
        (None, Some(r)) => r.into(),
        (None, None) => Answer::new(
            502,
            "Bad Gateway",
            format!("sandkeep: {name} has no address"),
        ),
    })
}

const SOCKS_VERSION: u8 = 5;

/// A SOCKS5 (RFC 1928) CONNECT without authentication, under the same
/// policy. SOCKS has no room for a message: a refusal answers "connection
/// not allowed by ruleset".
fn socks5(mut client: TcpStream, policy: &Policy) -> io::Result<()> {
    let mut head = [0u8; 2];
    client.read_exact(&mut head)?;
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods)?;
    if !methods.contains(&0) {
        return client.write_all(&[SOCKS_VERSION, 0xff]);
    }
    client.write_all(&[SOCKS_VERSION, 0])?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req)?;
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a)?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len)?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name)?;
            String::from_utf8_lossy(&name).into_owned()
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a)?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        // Address type not supported.
        _ => return socks_reply(&mut client, 8),
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port)?;
    if req[0] != SOCKS_VERSION || req[1] != 1 {
        // Only CONNECT: command not supported.
        return socks_reply(&mut client, 7);
    }
    match connect(&host, u16::from_be_bytes(port), policy) {
        Ok(upstream) => {
            socks_reply(&mut client, 0)?;
            client.set_read_timeout(None)?;
            relay(client, upstream)
        }
        // Not allowed by ruleset, or host unreachable.
        Err(answer) => socks_reply(&mut client, if answer.status == 403 { 2 } else { 4 }),
    }
}

fn socks_reply(client: &mut TcpStream, code: u8) -> io::Result<()> {
    client.write_all(&[SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
}

/// Copies both ways until each side has finished sending.
fn relay(client: TcpStream, upstream: TcpStream) -> io::Result<()> {
    let (mut c_read, mut u_write) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = io::copy(&mut c_read, &mut u_write);
            let _ = u_write.shutdown(Shutdown::Write);
        })?;
    let (mut u_read, mut c_write) = (upstream, client);
    let _ = io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy of `allow_hosts` in a state directory without test names.
    fn policy(allow_hosts: &[&str]) -> Policy {
        Policy::new(
            allow_hosts.iter().map(|h| h.to_string()).collect(),
            Path::new("/nonexistent"),
        )
    }

    #[test]
    fn connect_requests_name_a_tunnel() {
        let req = b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\nxy";
        let (t, len) = parse(req).unwrap().unwrap();
        assert_eq!(
            t,
            Target::Tunnel {
                host: "pypi.org".into(),
                port: 443
            }
        );
        assert_eq!(len, req.len() - 2);
        let (t, _) = parse(b"CONNECT [::1]:22 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            t,
            Target::Tunnel {
                host: "[::1]".into(),
                port: 22
            }
        );
        assert_eq!(parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHo").unwrap(), None);
        assert_eq!(
            parse(b"CONNECT pypi.org HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(parse(b"\x01\x02 garbage\r\n\r\n").unwrap_err().status, 400);
    }

    #[test]
    fn plain_requests_are_rewritten_for_the_origin() {
        let (t, _) = parse(
            b"GET http://example.com:8080/a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        let Target::Forward { host, port, head } = t else {
            panic!("not forwarded")
        };
        assert_eq!((host.as_str(), port), ("example.com", 8080));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let (t, _) = parse(b"GET http://example.com HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        let Target::Forward { port, head, .. } = t else {
            panic!("not forwarded")
        };
        assert_eq!(port, 80);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            parse(b"GET /index.html HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            parse(b"GET https://x.org/ HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    /// The origin server hears the request-URI's host, never the Host
    /// the client sent (domain fronting past allow_hosts).
    #[test]
    fn the_host_header_is_the_request_uris_authority() {
        for (request, host) in [
            (
                "GET http://pypi.org/simple/ HTTP/1.1\r\nHost: files.pythonhosted.org\r\nAccept: */*\r\n\r\n",
                "pypi.org",
            ),
            (
                "GET http://pypi.org:8080/ HTTP/1.1\r\nAccept: */*\r\nhost: evil.example\r\nHOST: other.example\r\n\r\n",
                "pypi.org:8080",
            ),
            (
                "GET http://user:secret@pypi.org/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                "pypi.org",
            ),
            (
                "GET http://[2606:4700::1111]:81/ HTTP/1.1\r\n\r\n",
                "[2606:4700::1111]:81",
            ),
        ] {
            let (t, _) = parse(request.as_bytes()).unwrap().unwrap();
            let Target::Forward { head, .. } = t else {
                panic!("not forwarded")
            };
            let head = String::from_utf8(head).unwrap();
            let hosts: Vec<&str> = head
                .lines()
                .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
                .collect();
            assert_eq!(
                hosts,
                [format!("Host: {host}")],
                "{request:?} became {head:?}"
            );
            assert!(
                head.contains("Accept: */*\r\n") || !request.contains("Accept"),
                "{head:?}"
            );
        }
    }

    #[test]
    fn connect_may_name_any_port_and_only_addresses_are_refused() {
        // SPEC.md §10 limits destinations by address: every port of a
        // public name is a tunnel like 443.
        for port in [1, 22, 25, 80, 443, 5432, 8443, 65535] {
            let req = format!("CONNECT example.com:{port} HTTP/1.1\r\n\r\n");
            let (t, _) = parse(req.as_bytes()).unwrap().unwrap();
            assert_eq!(
                t,
                Target::Tunnel {
                    host: "example.com".into(),
                    port
                }
            );
            // A refused address is refused for the address, whatever the
            // port: the 403 names the rule, never a port.
            let a = connect("10.0.0.1", port, &policy(&[])).unwrap_err();
            assert_eq!(a.status, 403, "{}", a.body);
            assert!(a.body.contains("private"), "{}", a.body);
        }
        let a = connect("example.com", 0, &policy(&[])).unwrap_err();
        assert_eq!((a.status, a.body.contains("port 0")), (400, true));
    }

    #[test]
    fn refusals_answer_403_with_the_rule() {
        let a = connect("127.0.0.1", 80, &policy(&[])).unwrap_err();
        assert_eq!(a.status, 403);
        assert!(a.body.contains("loopback"), "{}", a.body);
        let a = connect("localhost", 80, &policy(&[])).unwrap_err();
        assert_eq!(a.status, 403, "{}", a.body);
        let a = connect("example.com", 443, &policy(&["pypi.org"])).unwrap_err();
        assert_eq!(a.status, 403);
        assert!(a.body.contains("not in allow_hosts"));
        let text = String::from_utf8(a.bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
    }
}
