//! A sandbox's egress proxy: HTTP CONNECT, plain `http://` forwarding and
//! SOCKS5 on one port.
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
//!
//! The proxy works for its sandbox, and is charged to it: it is born in
//! (or enters, first thing) the sandbox's cgroups, so its memory, threads
//! and CPU count against the sandbox's limits. One thread serves every
//! connection (a current-thread tokio runtime), and at most `RESOLVERS`
//! threads do the blocking `getaddrinfo`: whatever the sandbox does, the
//! proxy has at most `1 + RESOLVERS` threads. As root it runs as a uid of
//! its own, one per sandbox, that no sandbox maps. This process never
//! forks.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cgroup;
use super::netpolicy::{self, EgressTrust, HostNetwork, Refusal, Subnet};
use super::step::{Step, StepError};
use super::{sys, wire};

/// The longest request head accepted.
const MAX_HEAD: usize = 32 * 1024;
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 256;
/// How long a client has to send its whole request head (or SOCKS5
/// request) once connected.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The most threads that resolve names (`getaddrinfo` blocks); lookups
/// beyond them wait their turn.
const RESOLVERS: usize = 2;
/// The pause after a failed `accept` (out of descriptors, say), so that
/// the failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a sandbox's proxy lets through.
#[derive(Debug)]
pub struct Policy {
    /// The names of `allow_hosts`; empty for every public address.
    allow_hosts: Vec<String>,
    /// The ranges the operator trusts (`SANDKEEP_EGRESS_TRUST`).
    egress_trust: EgressTrust,
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
    pub fn new(allow_hosts: Vec<String>, egress_trust: EgressTrust, state_root: &Path) -> Policy {
        #[cfg(not(feature = "test-hooks"))]
        let _ = state_root;
        Policy {
            allow_hosts,
            egress_trust,
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

/// What every connection of one proxy shares.
struct Context {
    policy: Policy,
    resolver: Resolver,
}

/// Serves `listener` until the process is killed.
fn serve(listener: OwnedFd, policy: Policy) -> Result<Infallible, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("start the runtime: {e}"))?;
    let listener = std::net::TcpListener::from(listener);
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listener: {e}"))?;
    let context = Arc::new(Context {
        policy,
        resolver: Resolver::new(),
    });
    runtime.block_on(accept_loop(listener, context))
}

async fn accept_loop(
    listener: std::net::TcpListener,
    context: Arc<Context>,
) -> Result<Infallible, String> {
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            continue;
        };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (context, done) = (context.clone(), live.clone());
        tokio::spawn(async move {
            let _ = handle(client, &context).await;
            done.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Resolves names on at most [`RESOLVERS`] threads, each started by a
/// lookup that found fewer (a sandbox that resolves nothing costs none:
/// starting them with the proxy made every create a quarter of a
/// millisecond slower). Never more: a thread per lookup would be threads
/// the sandbox could make the proxy start.
struct Resolver {
    lookups: mpsc::Sender<Lookup>,
    queue: Arc<Mutex<mpsc::Receiver<Lookup>>>,
    threads: AtomicUsize,
}

struct Lookup {
    name: String,
    port: u16,
    answer: tokio::sync::oneshot::Sender<io::Result<Vec<SocketAddr>>>,
}

impl Resolver {
    fn new() -> Resolver {
        let (lookups, queue) = mpsc::channel();
        Resolver {
            lookups,
            queue: Arc::new(Mutex::new(queue)),
            threads: AtomicUsize::new(0),
        }
    }

    /// One more thread, unless there are [`RESOLVERS`]. Without any (the
    /// sandbox's `pids` spent before its first lookup), why.
    fn grow(&self) -> io::Result<()> {
        if self.threads.load(Ordering::SeqCst) >= RESOLVERS {
            return Ok(());
        }
        let queue = self.queue.clone();
        let started = std::thread::Builder::new()
            .name("sandkeep-resolve".into())
            .spawn(move || {
                loop {
                    let next = match queue.lock() {
                        Ok(q) => q.recv(),
                        Err(_) => return,
                    };
                    let Ok(lookup) = next else { return };
                    let found = (lookup.name.as_str(), lookup.port)
                        .to_socket_addrs()
                        .map(Iterator::collect);
                    let _ = lookup.answer.send(found);
                }
            });
        match started {
            Ok(_) => {
                self.threads.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Err(_) if self.threads.load(Ordering::SeqCst) > 0 => Ok(()),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("no thread to resolve it ({e}; are the sandbox's pids used up?)"),
            )),
        }
    }

    async fn resolve(&self, name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.grow()?;
        let gone = || io::Error::other("the resolver threads are gone");
        let (answer, found) = tokio::sync::oneshot::channel();
        self.lookups
            .send(Lookup {
                name: name.to_owned(),
                port,
                answer,
            })
            .map_err(|_| gone())?;
        found.await.map_err(|_| gone())?
    }
}

/// The keeper's handle on its proxy process. Dropping it kills the proxy.
pub struct Proxy {
    pid: i32,
    pidfd: OwnedFd,
    channel: Option<OwnedFd>,
}

impl Proxy {
    /// Forks the proxy process into the sandbox's `cgroups`. Called by the
    /// keeper before it enters any namespace, so the proxy stays in the
    /// host's; it waits for its listening socket ([`Proxy::start`]). As
    /// root it runs as `uid` (and the group of that number), which the
    /// keeper must name.
    pub fn fork(
        policy: Policy,
        uid: Option<u32>,
        cgroups: &cgroup::Doors,
    ) -> Result<Proxy, StepError> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .step(|| "make the egress proxy's socket pair".into())?;
        let keeper = rustix::process::getpid();
        // Born in the v2 cgroup where the kernel can; else it moves itself
        // there too. The v1 ones it enters by their `tasks`, as the init.
        let (forked, v2_door): (_, &[OwnedFd]) = match &cgroups.v2 {
            Some(v2) => match sys::fork_into(v2.dir.as_fd()) {
                Ok(forked) => (Ok(forked), &[]),
                Err(_) => (sys::fork(), std::slice::from_ref(&v2.procs)),
            },
            None => (sys::fork(), &[]),
        };
        match forked.step(|| "fork the egress proxy".into())? {
            sys::Forked::Child => {
                drop(ours);
                let entered = cgroup::enter(&cgroups.tasks).and_then(|()| cgroup::enter(v2_door));
                let outcome = entered
                    .map_err(|e| format!("enter the sandbox's cgroups: {e}"))
                    .and_then(|()| proxy_main(keeper, theirs, policy, uid));
                sys::exit_now(match outcome {
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
                .step(|| "open the egress proxy's pidfd".into());
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
    pub fn start(&mut self, listener: OwnedFd) -> Result<(), StepError> {
        let step = || "hand the listening socket to the egress proxy".into();
        let channel = self
            .channel
            .take()
            .ok_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "it was already started"));
        wire::send(&channel.step(step)?, b"listen", &[listener.as_fd()]).step(step)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
        let _ = sys::wait_for(self.pid);
    }
}

/// The forked proxy process, in the sandbox's cgroups: drops what it does
/// not need, waits for its listening socket and serves it.
fn proxy_main(
    keeper: rustix::process::Pid,
    channel: OwnedFd,
    policy: Policy,
    uid: Option<u32>,
) -> Result<Infallible, String> {
    // Its name in `ps` (the command line stays the keeper's, which names
    // the sandbox).
    let _ = rustix::thread::set_name(c"sandkeep-proxy");
    sys::set_signal_mask(&[]).map_err(|e| format!("signal mask: {e}"))?;
    // Nothing of the keeper's: not its readiness pipe, not its sockets.
    sys::close_fds_except(&[channel.as_raw_fd()]).map_err(|e| format!("close fds: {e}"))?;
    if rustix::process::geteuid().is_root() {
        let uid = uid.ok_or("the keeper named no uid for the egress proxy")?;
        sys::drop_bounding_set(rustix::thread::CapabilitySet::empty())
            .map_err(|e| format!("drop capabilities: {e}"))?;
        sys::become_id(uid, uid, true).map_err(|e| format!("become uid {uid}: {e}"))?;
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

/// What a client's first bytes ask for.
enum Opening {
    /// Nothing (closed, or no whole request in time).
    Nothing,
    /// An HTTP answer instead of a connection.
    Refused(Answer),
    /// A SOCKS5 reply code instead of a connection.
    SocksRefused(u8),
    /// An HTTP request, and what followed its head.
    Http {
        target: Target,
        rest: Vec<u8>,
    },
    Socks {
        host: String,
        port: u16,
    },
}

async fn handle(mut client: TcpStream, context: &Context) -> io::Result<()> {
    let opening = tokio::time::timeout(HEAD_TIMEOUT, open(&mut client))
        .await
        .unwrap_or(Ok(Opening::Nothing))?;
    match opening {
        Opening::Nothing => Ok(()),
        Opening::Refused(answer) => client.write_all(&answer.bytes()).await,
        Opening::SocksRefused(code) => socks_reply(&mut client, code).await,
        Opening::Socks { host, port } => match connect(&host, port, context).await {
            Ok(mut upstream) => {
                socks_reply(&mut client, 0).await?;
                relay(&mut client, &mut upstream).await
            }
            // Not allowed by ruleset, or host unreachable.
            Err(answer) => {
                let code = if answer.status == 403 { 2 } else { 4 };
                socks_reply(&mut client, code).await
            }
        },
        Opening::Http { target, rest } => {
            let (host, port) = match &target {
                Target::Tunnel { host, port } | Target::Forward { host, port, .. } => (host, *port),
            };
            let mut upstream = match connect(host, port, context).await {
                Ok(s) => s,
                Err(answer) => return client.write_all(&answer.bytes()).await,
            };
            match &target {
                Target::Tunnel { .. } => {
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await?
                }
                Target::Forward { head, .. } => upstream.write_all(head).await?,
            }
            upstream.write_all(&rest).await?;
            relay(&mut client, &mut upstream).await
        }
    }
}

/// Reads the request: an HTTP head, or a SOCKS5 greeting and request.
async fn open(client: &mut TcpStream) -> io::Result<Opening> {
    // The same port speaks SOCKS5, whose greeting starts with 5 (no HTTP
    // method does).
    let mut first = [0u8; 1];
    if client.peek(&mut first).await? == 0 {
        return Ok(Opening::Nothing);
    }
    if first[0] == SOCKS_VERSION {
        return socks_request(client).await;
    }
    let mut buf = Vec::with_capacity(4096);
    loop {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Opening::Nothing);
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse(&buf) {
            Ok(Some((target, len))) => {
                let rest = buf.split_off(len);
                return Ok(Opening::Http { target, rest });
            }
            Ok(None) if buf.len() < MAX_HEAD => continue,
            Ok(None) => {
                return Ok(Opening::Refused(Answer::new(
                    431,
                    "Request Header Fields Too Large",
                    "sandkeep: the request head is too large",
                )));
            }
            Err(answer) => return Ok(Opening::Refused(answer)),
        }
    }
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
pub(crate) fn host_network() -> io::Result<HostNetwork> {
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
async fn connect(host: &str, port: u16, context: &Context) -> Result<TcpStream, Answer> {
    if port == 0 {
        return Err(Answer::new(
            400,
            "Bad Request",
            "sandkeep: port 0 is not a destination",
        ));
    }
    netpolicy::check_host(host, &context.policy.allow_hosts)?;
    let name = netpolicy::normalize_host(host);
    let bad_gateway = |why: String| Answer::new(502, "Bad Gateway", format!("sandkeep: {why}"));
    if let Some(ip) = context.policy.test_host(&name) {
        let addr = SocketAddr::new(ip, port);
        return dial(addr)
            .await
            .map_err(|e| bad_gateway(format!("cannot connect to {addr}: {e}")));
    }
    let addrs: Vec<SocketAddr> = match name.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => context
            .resolver
            .resolve(&name, port)
            .await
            .map_err(|e| bad_gateway(format!("cannot resolve {name}: {e}")))?,
    };
    // Without the host's network no address can be judged: refuse.
    let own = host_network()
        .map_err(|e| bad_gateway(format!("cannot read the host's network ({e}); try again")))?;
    let mut refusal = None;
    let mut failure = None;
    for addr in addrs {
        if let Err(r) = netpolicy::check_address(addr.ip(), &own, &context.policy.egress_trust) {
            refusal.get_or_insert(r);
            continue;
        }
        match dial(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => failure = Some(format!("cannot connect to {addr}: {e}")),
        }
    }
    Err(match (failure, refusal) {
        (Some(f), _) => bad_gateway(f),
        (None, Some(r)) => r.into(),
        (None, None) => bad_gateway(format!("{name} has no address")),
    })
}

async fn dial(addr: SocketAddr) -> io::Result<TcpStream> {
    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

const SOCKS_VERSION: u8 = 5;

/// A SOCKS5 (RFC 1928) greeting without authentication and its request:
/// CONNECT to a host and port, under the same policy as HTTP. SOCKS has no
/// room for a message: a refusal answers "connection not allowed by
/// ruleset".
async fn socks_request(client: &mut TcpStream) -> io::Result<Opening> {
    let mut head = [0u8; 2];
    client.read_exact(&mut head).await?;
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        client.write_all(&[SOCKS_VERSION, 0xff]).await?;
        return Ok(Opening::Nothing);
    }
    client.write_all(&[SOCKS_VERSION, 0]).await?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await?;
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        // Address type not supported.
        _ => return Ok(Opening::SocksRefused(8)),
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    if req[0] != SOCKS_VERSION || req[1] != 1 {
        // Only CONNECT: command not supported.
        return Ok(Opening::SocksRefused(7));
    }
    Ok(Opening::Socks {
        host,
        port: u16::from_be_bytes(port),
    })
}

async fn socks_reply(client: &mut TcpStream, code: u8) -> io::Result<()> {
    client
        .write_all(&[SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
        .await
}

/// Copies both ways until each side has finished sending.
async fn relay(client: &mut TcpStream, upstream: &mut TcpStream) -> io::Result<()> {
    tokio::io::copy_bidirectional(client, upstream)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`connect`] run to its end, with a policy of `allow_hosts`.
    fn connect_now(host: &str, port: u16, allow_hosts: &[&str]) -> Result<(), Answer> {
        let context = Context {
            // A state directory without test names.
            policy: Policy::new(
                allow_hosts.iter().map(|h| h.to_string()).collect(),
                EgressTrust::default(),
                Path::new("/nonexistent"),
            ),
            resolver: Resolver::new(),
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(connect(host, port, &context))
            .map(drop)
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
            let a = connect_now("10.0.0.1", port, &[]).unwrap_err();
            assert_eq!(a.status, 403, "{}", a.body);
            assert!(a.body.contains("private"), "{}", a.body);
        }
        let a = connect_now("example.com", 0, &[]).unwrap_err();
        assert_eq!((a.status, a.body.contains("port 0")), (400, true));
    }

    #[test]
    fn refusals_answer_403_with_the_rule() {
        let a = connect_now("127.0.0.1", 80, &[]).unwrap_err();
        assert_eq!(a.status, 403);
        assert!(a.body.contains("loopback"), "{}", a.body);
        let a = connect_now("localhost", 80, &[]).unwrap_err();
        assert_eq!(a.status, 403, "{}", a.body);
        let a = connect_now("example.com", 443, &["pypi.org"]).unwrap_err();
        assert_eq!(a.status, 403);
        assert!(a.body.contains("not in allow_hosts"));
        let text = String::from_utf8(a.bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
    }
}
