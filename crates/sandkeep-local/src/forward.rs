//! A sandbox's port forwards (SPEC.md §14), kept by its keeper: once the
//! sandbox is ready the keeper joins the sandbox's network namespace, and
//! its wait loop relays every connection accepted on a forward's host
//! listener to `127.0.0.1:PORT` there (`[::1]:PORT` where nothing listens
//! on the first).
//!
//! Why the keeper: the forwards must outlive the server that asked for
//! them and end with the sandbox, which is exactly the keeper's life. Its
//! sockets are made inside the sandbox; the listeners, made by servers on
//! the host and handed over (see `ports`), stay in the host's namespace.
//! Nothing of the host becomes reachable from inside through it: it only
//! connects to its namespace's loopback, and the sandbox cannot reach the
//! listeners. (Not a thread: the keeper has entered the sandbox's pid
//! namespace for its children by then, where no thread can be made, and
//! no other process of the keeper's lives outside the sandbox's reach.)
//!
//! The relay never blocks: edge-triggered epoll; an exchange's small
//! messages copied with one `recv` and one `send`, anything larger moved
//! through a pipe per direction with `splice`; and a budget per connection
//! and round, so that a busy forward delays the keeper's own duties (the
//! deadline, a kill) by one round at most. A connection while nothing
//! listens inside is reset at once. A connection to a paused sandbox
//! resumes it first (`pause::wake`). (Not a sockmap redirect in the
//! kernel: its egress redirect has no flow control, see docs/design.md.)

use std::collections::BTreeMap;
use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, Shutdown, SocketFlags, SocketType};
use rustix::pipe::{PipeFlags, SpliceFlags};

use super::pause;
use super::ports::{Reply, Request};
use super::state::{self, SandboxDir};
use super::wire;
use sandkeep_proto::limits::PORTS_MAX;
use sandkeep_provider::{Port, PortForward};

/// The epoll key of the requests' listener; a slot's are above it.
const CONTROL: u64 = 0;
const FIRST_SLOT: u64 = 1;
/// Each slot has up to two descriptors in the epoll set: a key is the slot
/// and which one.
const SIDES: u64 = 2;
/// The pipe of each direction of a connection: what one `splice` moves.
/// A 1 MiB pipe took fewer splices but no less CPU per MiB in all (the
/// server's rose as the keeper's fell; so did `SPLICE_F_MORE` and 4 MiB
/// socket buffers): what a bulk transfer costs here is the kernel's work
/// for the second loopback connection (docs/benchmarks-log.md, 20:30).
const PIPE_BYTES: usize = 256 * 1024;
/// Splices per connection and direction in one round: 4 MiB, a few
/// milliseconds.
const BUDGET: u32 = 16;
/// What a direction first reads itself, before any splice: a request or
/// an answer of an exchange is smaller, and then one `recv` and one `send`
/// move it, where two splices through the pipe and a third to find the
/// socket empty did (a keep-alive HTTP request through the forward: 1.26×
/// the same request inside with it, 1.33× without, release build,
/// docs/benchmarks-log.md). A read shorter than this emptied the socket:
/// what comes after it is a new edge.
const SMALL: usize = 16 * 1024;

/// The listening socket servers ask on (`ports.sock`), its owner's alone.
/// Made before the sandbox is reported ready, so that an expose right
/// after create finds it (requests wait in its queue until the relay
/// starts).
pub fn listen(dir: &SandboxDir) -> io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.ports_socket();
    let _ = std::fs::remove_file(&path);
    let listener = wire::listen(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    rustix::io::ioctl_fionbio(&listener, true)?;
    Ok(listener)
}

/// Each relayed connection holds six descriptors (two sockets, two
/// pipes): the soft limit of 1024 would end at 170 connections, so the
/// keeper takes the hard limit. Only the keeper: the sandbox's processes
/// descend from the init, forked before.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum {
        limit.current = Some(hard.min(1 << 20));
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// One direction of a relayed connection: bytes read from one side and
/// not yet written to the other wait in its pipe.
struct Flow {
    pipe_r: OwnedFd,
    pipe_w: OwnedFd,
    buffered: usize,
    /// The source said end of file.
    eof: bool,
    /// The end of file was passed on (the destination's write side shut).
    done: bool,
}

impl Flow {
    fn new() -> io::Result<Self> {
        let (pipe_r, pipe_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A larger pipe moves more per call; the kernel may refuse the
        // size (pipe-user-pages-soft), and the default still works.
        let _ = rustix::pipe::fcntl_setpipe_size(&pipe_w, PIPE_BYTES);
        Ok(Self {
            pipe_r,
            pipe_w,
            buffered: 0,
            eof: false,
            done: false,
        })
    }

    /// Moves what can move now from `src` to `dst`, within the budget. An
    /// error is a broken connection.
    fn pump(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, go: Go) -> Result<Pumped, Errno> {
        if self.buffered == 0 && !self.eof && self.copy(src, dst, go)? {
            return Ok(Pumped::Stalled);
        }
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        for _ in 0..BUDGET {
            let mut moved = false;
            if !self.eof {
                match rustix::pipe::splice(src, None, &self.pipe_w, None, PIPE_BYTES, flags) {
                    Ok(0) => {
                        self.eof = true;
                        moved = true;
                    }
                    Ok(n) => {
                        self.buffered += n;
                        moved = true;
                    }
                    // No data, or a full pipe: the destination's writability
                    // or the source's next data wakes the loop again.
                    Err(Errno::AGAIN) => {}
                    Err(Errno::INTR) => moved = true,
                    Err(e) => return Err(e),
                }
            }
            if self.buffered > 0 {
                match rustix::pipe::splice(&self.pipe_r, None, dst, None, self.buffered, flags) {
                    Ok(n) => {
                        self.buffered -= n;
                        moved = moved || n > 0;
                    }
                    Err(Errno::AGAIN) => {}
                    Err(Errno::INTR) => moved = true,
                    Err(e) => return Err(e),
                }
            }
            if self.eof && self.buffered == 0 && !self.done {
                // A half-close is passed on as one: the other direction
                // may still be sending (an HTTP/1.0 client, `nc -N`).
                let _ = rustix::net::shutdown(dst, Shutdown::Write);
                self.done = true;
            }
            if !moved {
                return Ok(Pumped::Stalled);
            }
        }
        Ok(Pumped::Budget)
    }

    /// Moves up to `SMALL` bytes through this process's memory, and
    /// whether that left nothing to do until the next event. What `dst`
    /// does not take now waits in the (empty) pipe, ahead of anything
    /// spliced after it.
    fn copy(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, go: Go) -> Result<bool, Errno> {
        // Not zeroed: only what is read is used.
        let mut buf = [MaybeUninit::<u8>::uninit(); SMALL];
        let read: &[u8] = match rustix::net::recv(src, &mut buf, RecvFlags::DONTWAIT) {
            Ok((([], _), _)) => {
                // The splice loop passes the end of file on.
                self.eof = true;
                return Ok(false);
            }
            Ok(((read, _), _)) => read,
            Err(Errno::AGAIN) => return Ok(true),
            Err(Errno::INTR) => return Ok(false),
            Err(e) => return Err(e),
        };
        let sent = match rustix::net::send(dst, read, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Ok(sent) => sent,
            Err(Errno::AGAIN) => 0,
            Err(e) => return Err(e),
        };
        // An empty pipe holds at least 16 pages: all of it fits.
        let mut rest = &read[sent..];
        while !rest.is_empty() {
            let w = rustix::io::write(&self.pipe_w, rest)?;
            self.buffered += w;
            rest = &rest[w..];
        }
        Ok(read.len() < SMALL && self.buffered == 0 && go != Go::ToEnd)
    }
}

/// How a pump ended.
enum Pumped {
    /// Nothing more can move until an event says so.
    Stalled,
    /// The budget ran out.
    Budget,
}

/// A connection accepted on the host (`outer`) and its counterpart inside
/// the sandbox (`inner`).
struct Pair {
    outer: OwnedFd,
    inner: OwnedFd,
    connected: bool,
    /// Host client → sandbox server.
    up: Flow,
    /// Sandbox server → host client.
    down: Flow,
}

/// What a relayed connection needs next.
enum Step {
    /// Events: data, room, or the end of the connect.
    Wait,
    /// The budget ran out with more to move: the next round goes on.
    More,
    /// Nothing more to relay: both directions ended.
    Done,
    /// Refused inside, or broken on either side.
    Broken,
}

/// What an event lets one direction of a connection do.
#[derive(Clone, Copy, PartialEq)]
enum Go {
    /// Nothing new for it.
    No,
    /// Data to read or room to write: a short read empties the source.
    Yes,
    /// The same, but the source may have ended: a short read does not show
    /// an end of file that came with the data, so it reads on until the
    /// socket says so.
    ToEnd,
}

/// What an event lets each direction of a connection do.
#[derive(Clone, Copy)]
struct Ready {
    up: Go,
    down: Go,
}

const BOTH: Ready = Ready {
    up: Go::ToEnd,
    down: Go::ToEnd,
};

impl Ready {
    /// What `flags` on the host's side (`side` 0) or the sandbox's say:
    /// data to read there, or room to write there. Only those directions
    /// are pumped, so that an exchange costs no call on the idle one.
    fn of(side: u64, flags: EventFlags) -> Self {
        if flags.intersects(EventFlags::ERR | EventFlags::HUP) {
            return BOTH;
        }
        let read = if flags.contains(EventFlags::RDHUP) {
            Go::ToEnd
        } else if flags.contains(EventFlags::IN) {
            Go::Yes
        } else {
            Go::No
        };
        let write = match flags.contains(EventFlags::OUT) {
            true => Go::Yes,
            false => Go::No,
        };
        if side == 0 {
            Self {
                up: read,
                down: write,
            }
        } else {
            Self {
                up: write,
                down: read,
            }
        }
    }
}

impl Pair {
    /// Moves what can move in the `ready` directions.
    fn step(&mut self, mut ready: Ready) -> Step {
        if !self.connected {
            match connection_state(&self.inner) {
                Connection::Pending => return Step::Wait,
                Connection::Refused => return Step::Broken,
                Connection::Open => self.connected = true,
            }
            // What the host's client sent meanwhile, too.
            ready = BOTH;
        }
        let up = match ready.up {
            Go::No => Ok(Pumped::Stalled),
            go => self.up.pump(self.outer.as_fd(), self.inner.as_fd(), go),
        };
        let down = match ready.down {
            Go::No => Ok(Pumped::Stalled),
            go => self.down.pump(self.inner.as_fd(), self.outer.as_fd(), go),
        };
        match (up, down) {
            (Err(_), _) | (_, Err(_)) => Step::Broken,
            _ if self.up.done && self.down.done => Step::Done,
            (Ok(Pumped::Stalled), Ok(Pumped::Stalled)) => Step::Wait,
            _ => Step::More,
        }
    }
}

enum Slot {
    /// A forward's host listener.
    Listener(Port),
    /// A server's request, not yet read.
    Request(OwnedFd),
    Pair(Box<Pair>),
}

/// The forwards and their connections. Dropping it closes them all.
pub struct Relay {
    epoll: OwnedFd,
    control: OwnedFd,
    /// Where the forwards are recorded for every server (`ports.json`).
    record: PathBuf,
    /// The sandbox, resumed by a connection while paused.
    sandbox: SandboxDir,
    /// Why no forward can be made (the namespace could not be joined).
    refusal: Option<String>,
    forwards: BTreeMap<Port, (OwnedFd, PortForward)>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Connections that used their budget with more to move: they get no
    /// new edge, so the next round moves them.
    again: Vec<usize>,
    /// Held for the moment the descriptors run out (see
    /// `accept_connections`).
    spare: Option<OwnedFd>,
}

fn spare_descriptor() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

fn key(slot: usize, side: u64) -> EventData {
    EventData::new_u64(FIRST_SLOT + slot as u64 * SIDES + side)
}

const EDGE: EventFlags = EventFlags::IN
    .union(EventFlags::OUT)
    .union(EventFlags::RDHUP)
    .union(EventFlags::ET);

impl Relay {
    /// Serves requests on `control`, recorded in the sandbox's
    /// `ports.json`. `netns` is the sandbox's network namespace when it has
    /// one of its own, which this process joins (without one it shares the
    /// host's); should that fail, every request is refused with the reason.
    pub fn new(
        dir: &SandboxDir,
        control: OwnedFd,
        netns: Option<BorrowedFd<'_>>,
    ) -> io::Result<Self> {
        let refusal = netns.and_then(|fd| {
            rustix::thread::move_into_link_name_space(
                fd,
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .err()
            .map(|e| format!("cannot enter the sandbox's network namespace: {e}"))
        });
        if let Some(why) = &refusal {
            eprintln!("sandkeep keeper: {why}");
        }
        raise_descriptor_limit();
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &epoll,
            &control,
            EventData::new_u64(CONTROL),
            EventFlags::IN,
        )?;
        Ok(Self {
            epoll,
            control,
            record: dir.ports(),
            sandbox: dir.clone(),
            refusal,
            forwards: BTreeMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            spare: spare_descriptor(),
        })
    }

    /// Readable when the relay has events: what the keeper polls.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Whether connections wait for the next round regardless of events:
    /// the keeper then polls without waiting.
    pub fn busy(&self) -> bool {
        !self.again.is_empty()
    }

    /// One round: what the events say, and what the last round left.
    /// Never blocks.
    pub fn round(&mut self) {
        let mut events = Vec::with_capacity(64);
        let waiting = std::mem::take(&mut self.again);
        for i in waiting {
            self.relay(i, BOTH);
        }
        match epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut events),
            Some(&rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        ) {
            Ok(_) => {}
            Err(Errno::INTR) => return,
            Err(e) => {
                eprintln!("sandkeep keeper: the port forwards' epoll: {e}");
                return;
            }
        }
        for event in &events {
            match event.data.u64() {
                CONTROL => self.accept_requests(),
                k => {
                    let (slot, side) = ((k - FIRST_SLOT) / SIDES, (k - FIRST_SLOT) % SIDES);
                    self.on_slot(slot as usize, Ready::of(side, event.flags));
                }
            }
        }
    }

    fn insert(&mut self, slot: Slot) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Frees a slot; its descriptors close with it (and so leave the
    /// epoll set).
    fn remove(&mut self, i: usize) {
        self.slots[i] = None;
        self.free.push(i);
    }

    fn accept_requests(&mut self) {
        while let Ok(conn) =
            rustix::net::accept_with(&self.control, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK)
        {
            let i = self.insert(Slot::Request(conn));
            let Some(Slot::Request(conn)) = &self.slots[i] else {
                unreachable!("just inserted")
            };
            if epoll::add(&self.epoll, conn, key(i, 0), EventFlags::IN).is_err() {
                self.remove(i);
            }
        }
    }

    fn on_slot(&mut self, i: usize, ready: Ready) {
        match &self.slots.get(i) {
            Some(Some(Slot::Listener(port))) => {
                let port = *port;
                self.accept_connections(port);
            }
            Some(Some(Slot::Request(_))) => self.answer(i),
            Some(Some(Slot::Pair(_))) => self.relay(i, ready),
            // Closed earlier in this batch of events.
            _ => {}
        }
    }

    /// Reads a server's request and answers it.
    fn answer(&mut self, i: usize) {
        let Some(Slot::Request(conn)) = &self.slots[i] else {
            return;
        };
        let mut buf = [0u8; 1024];
        let reply = match wire::recv(conn, &mut buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) | Ok((0, _)) => None,
            Ok((n, mut fds)) => match serde_json::from_slice::<Request>(&buf[..n]) {
                Ok(request) => Some(self.expose(request.port, fds.pop())),
                Err(e) => Some(Reply::Failed(format!("unreadable request: {e}"))),
            },
        };
        if let (Some(reply), Some(Slot::Request(conn))) = (reply, &self.slots[i]) {
            let _ = wire::send(conn, &serde_json::to_vec(&reply).unwrap_or_default(), &[]);
        }
        self.remove(i);
    }

    /// The forward of `port`: the one it has, or one on `listener`.
    fn expose(&mut self, port: Port, listener: Option<OwnedFd>) -> Reply {
        if let Some((_, known)) = self.forwards.get(&port) {
            return Reply::Exposed(known.clone());
        }
        if let Some(why) = &self.refusal {
            return Reply::Failed(why.clone());
        }
        if self.forwards.len() >= PORTS_MAX {
            return Reply::Full;
        }
        let Some(listener) = listener else {
            return Reply::Failed("the request carried no listener".into());
        };
        let url = match rustix::net::getsockname(&listener)
            .ok()
            .and_then(|a| SocketAddr::try_from(a).ok())
        {
            Some(addr) => format!("http://{addr}"),
            None => return Reply::Failed("the attached socket is not a TCP listener".into()),
        };
        if let Err(e) = rustix::io::ioctl_fionbio(&listener, true) {
            return Reply::Failed(format!("the listener: {e}"));
        }
        let i = self.insert(Slot::Listener(port));
        if let Err(e) = epoll::add(&self.epoll, &listener, key(i, 0), EventFlags::IN) {
            self.remove(i);
            return Reply::Failed(format!("watch the listener: {e}"));
        }
        let forward = PortForward { port, url };
        self.forwards.insert(port, (listener, forward.clone()));
        let all: Vec<&PortForward> = self.forwards.values().map(|(_, f)| f).collect();
        if let Err(e) = state::write_json(&self.record, &all) {
            // Still served; other servers do not list it.
            eprintln!("sandkeep keeper: record the port forwards: {e}");
        }
        Reply::Exposed(forward)
    }

    fn accept_connections(&mut self, port: Port) {
        loop {
            let Some((listener, _)) = self.forwards.get(&port) else {
                return;
            };
            let outer = match rustix::net::accept_with(
                listener,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(fd) => fd,
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                // Out of descriptors: the pending connection would keep
                // the listener readable, and the keeper would spin on it.
                // The spare descriptor makes room to refuse it.
                Err(Errno::MFILE | Errno::NFILE) => match self.spare.take() {
                    Some(spare) => {
                        drop(spare);
                        if let Ok(fd) = rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
                            reset(fd);
                        }
                        self.spare = spare_descriptor();
                        continue;
                    }
                    None => return,
                },
                // Drained.
                Err(_) => return,
            };
            pause::wake(&self.sandbox);
            match connect_inside(port) {
                Ok((inner, connected)) => self.pair(outer, inner, connected),
                Err(_) => reset(outer),
            }
        }
    }

    fn pair(&mut self, outer: OwnedFd, inner: OwnedFd, connected: bool) {
        let (Ok(up), Ok(down)) = (Flow::new(), Flow::new()) else {
            return reset(outer);
        };
        let _ = rustix::net::sockopt::set_tcp_nodelay(&outer, true);
        let _ = rustix::net::sockopt::set_tcp_nodelay(&inner, true);
        let i = self.insert(Slot::Pair(Box::new(Pair {
            outer,
            inner,
            connected,
            up,
            down,
        })));
        let Some(Slot::Pair(p)) = &self.slots[i] else {
            unreachable!("just inserted")
        };
        if epoll::add(&self.epoll, &p.outer, key(i, 0), EDGE).is_err()
            || epoll::add(&self.epoll, &p.inner, key(i, 1), EDGE).is_err()
        {
            return self.abort(i);
        }
        // Edge-triggered: what arrived before registration is moved now.
        self.relay(i, BOTH);
    }

    fn relay(&mut self, i: usize, ready: Ready) {
        let Some(Slot::Pair(p)) = &mut self.slots[i] else {
            return;
        };
        match p.step(ready) {
            Step::Wait => {}
            Step::More => {
                if !self.again.contains(&i) {
                    self.again.push(i);
                }
            }
            Step::Broken => self.abort(i),
            Step::Done => self.remove(i),
        }
    }

    /// Ends a connection that broke: the host client sees a reset, as it
    /// would have from the server itself.
    fn abort(&mut self, i: usize) {
        if let Some(Slot::Pair(p)) = self.slots[i].take() {
            let Pair { outer, .. } = *p;
            reset(outer);
        }
        self.free.push(i);
    }
}

enum Connection {
    Pending,
    Open,
    Refused,
}

/// Where a non-blocking connect stands.
fn connection_state(fd: &OwnedFd) -> Connection {
    match rustix::net::sockopt::socket_error(fd) {
        Ok(Ok(())) => match rustix::net::getpeername(fd) {
            Ok(Some(_)) => Connection::Open,
            Err(Errno::NOTCONN) | Ok(None) => Connection::Pending,
            Err(_) => Connection::Refused,
        },
        _ => Connection::Refused,
    }
}

/// A socket of this thread's namespace connecting to its loopback's
/// `port`, and whether it is connected already: `127.0.0.1`, else `::1`
/// (a server that listens on IPv6 loopback only, as some dev servers do
/// for `localhost`). On loopback the answer (SYN-ACK or RST) is usually in
/// before `connect` returns, so a port where nothing listens fails here.
fn connect_inside(port: Port) -> io::Result<(OwnedFd, bool)> {
    match connect_to(SocketAddr::from((Ipv4Addr::LOCALHOST, port.get()))) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            connect_to(SocketAddr::from((Ipv6Addr::LOCALHOST, port.get()))).map_err(|_| e)
        }
        connected => connected,
    }
}

fn connect_to(addr: SocketAddr) -> io::Result<(OwnedFd, bool)> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) => Ok((fd, true)),
        Err(Errno::INPROGRESS) => match connection_state(&fd) {
            Connection::Open => Ok((fd, true)),
            Connection::Pending => Ok((fd, false)),
            Connection::Refused => Err(io::Error::from(Errno::CONNREFUSED)),
        },
        Err(e) => Err(e.into()),
    }
}

/// Closes a host connection with a reset, not an orderly end: a client
/// must not take a refused forward for an empty answer.
fn reset(fd: OwnedFd) {
    let _ = rustix::net::sockopt::set_socket_linger(&fd, Some(Duration::ZERO));
}
