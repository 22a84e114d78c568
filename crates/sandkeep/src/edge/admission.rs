//! Who holds a connection place: the cap in all and per peer, what each
//! open connection is doing (requests in flight, since when it is idle),
//! and which idle connection gives its place up when a new one finds the
//! server full. It never reads a request and knows nothing of credentials:
//! a connection that holds no request in flight holds nothing worth
//! keeping, whoever opened it, so a crowd of idle connections (say,
//! opened by someone without a token) can always be made room through.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How many connections may be open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// In all.
    pub total: usize,
    /// From one peer (an IPv4 address, an IPv6 /64).
    pub per_peer: usize,
}

impl Caps {
    /// `per_peer` defaults to half of `total`: one peer alone never holds
    /// every place with requests in flight.
    pub fn new(total: usize, per_peer: Option<usize>) -> Self {
        Self {
            total,
            per_peer: per_peer.unwrap_or(total / 2).clamp(1, total),
        }
    }
}

/// What one connection is doing.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub in_flight: usize,
    /// A request of it was answered with success: it is someone's working
    /// connection, kept over one that never was.
    pub answered: bool,
    /// When its last request ended (or it was opened).
    pub idle_since: Instant,
}

/// The places of one listener.
pub struct Admission {
    caps: Caps,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next: u64,
    places: HashMap<u64, Entry>,
}

struct Entry {
    /// Also the order of opening.
    id: u64,
    peer: IpAddr,
    load: watch::Receiver<Load>,
    /// Cancelled when the connection is asked to give its place up; it no
    /// longer counts from then on (it closes within a second).
    evicted: CancellationToken,
}

impl Entry {
    fn counts(&self) -> bool {
        !self.evicted.is_cancelled()
    }
}

/// One admitted connection's place, given back on drop.
pub struct Place {
    id: u64,
    admission: Arc<Admission>,
    /// Updated by the connection's requests.
    pub load: watch::Sender<Load>,
    /// Cancelled when the connection must make room for a new one.
    pub evicted: CancellationToken,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.admission.lock().places.remove(&self.id);
    }
}

/// The peer a connection counts for: its IPv4 address (IPv4-mapped IPv6
/// included), or the /64 of an IPv6 one, which one host usually holds
/// whole.
fn peer_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

impl Admission {
    pub fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Self {
            caps,
            open: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a connection from `addr`, made by evicting an idle
    /// connection where a cap is reached: the peer's own when its share is
    /// full, else one of the peer holding most. `None` when every
    /// connection that could give its place up has a request in flight.
    pub fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<Place> {
        let peer = peer_of(addr);
        let mut open = self.lock();
        let counted = || open.places.values().filter(|e| e.counts());
        let of_peer = counted().filter(|e| e.peer == peer).count();
        if of_peer >= self.caps.per_peer {
            evict(counted().filter(|e| e.peer == peer), |_| 0)?;
        } else if counted().count() >= self.caps.total {
            let mut per_peer: HashMap<IpAddr, usize> = HashMap::new();
            for e in counted() {
                *per_peer.entry(e.peer).or_default() += 1;
            }
            evict(counted(), |e| per_peer[&e.peer])?;
        }
        let (load, watched) = watch::channel(Load {
            in_flight: 0,
            answered: false,
            idle_since: Instant::now(),
        });
        let evicted = CancellationToken::new();
        let id = open.next;
        open.next += 1;
        open.places.insert(
            id,
            Entry {
                id,
                peer,
                load: watched,
                evicted: evicted.clone(),
            },
        );
        drop(open);
        Some(Place {
            id,
            admission: Arc::clone(self),
            load,
            evicted,
        })
    }
}

/// Asks the idle connection among `candidates` that matters least to
/// leave: of the most crowded peer (`crowd`), never answered with success,
/// idle the longest, opened first. `None` when none is idle.
fn evict<'a>(
    candidates: impl Iterator<Item = &'a Entry>,
    crowd: impl Fn(&Entry) -> usize,
) -> Option<()> {
    let victim = candidates
        .filter(|e| e.load.borrow().in_flight == 0)
        .min_by_key(|e| {
            let load = *e.load.borrow();
            (
                std::cmp::Reverse(crowd(e)),
                load.answered,
                load.idle_since,
                e.id,
            )
        })?;
    victim.evicted.cancel();
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn busy(place: &Place) {
        place.load.send_modify(|l| l.in_flight += 1);
    }

    #[test]
    fn a_full_server_makes_room_through_idle_connections_only() {
        let admission = Admission::new(Caps::new(2, Some(2)));
        let a = admission.admit(ip("10.0.0.1")).unwrap();
        let b = admission.admit(ip("10.0.0.2")).unwrap();
        busy(&b);
        let c = admission
            .admit(ip("10.0.0.3"))
            .expect("room made through a");
        assert!(a.evicted.is_cancelled() && !b.evicted.is_cancelled());
        busy(&c);
        assert!(admission.admit(ip("10.0.0.4")).is_none(), "both busy");
        drop(b);
        assert!(admission.admit(ip("10.0.0.4")).is_some(), "a place freed");
    }

    #[test]
    fn the_crowded_peer_and_the_never_answered_go_first() {
        let admission = Admission::new(Caps::new(4, Some(3)));
        let mine = admission.admit(ip("10.0.0.1")).unwrap();
        mine.load.send_modify(|l| l.answered = true);
        let crowd: Vec<_> = (0..3)
            .map(|_| admission.admit(ip("10.0.0.9")).unwrap())
            .collect();
        let _second = admission.admit(ip("10.0.0.1")).unwrap();
        assert!(crowd[0].evicted.is_cancelled(), "the oldest of the crowd");
        // Two peers of two: the one never answered goes, not `mine`.
        let _third = admission.admit(ip("10.0.0.5")).unwrap();
        assert!(crowd[1].evicted.is_cancelled() && !mine.evicted.is_cancelled());
    }

    #[test]
    fn a_peer_at_its_share_makes_room_among_its_own() {
        let admission = Admission::new(Caps::new(8, Some(2)));
        let other = admission.admit(ip("10.0.0.1")).unwrap();
        let first = admission.admit(ip("10.0.0.9")).unwrap();
        let second = admission.admit(ip("10.0.0.9")).unwrap();
        busy(&second);
        admission.admit(ip("10.0.0.9")).unwrap();
        assert!(first.evicted.is_cancelled() && !other.evicted.is_cancelled());
    }

    #[test]
    fn an_ipv6_peer_is_its_64() {
        assert_eq!(peer_of(ip("2001:db8::1")), peer_of(ip("2001:db8::ffff:1")));
        assert_ne!(peer_of(ip("2001:db8::1")), peer_of(ip("2001:db8:0:1::1")));
        assert_eq!(peer_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(Caps::new(256, None).per_peer, 128);
        assert_eq!(Caps::new(1, None).per_peer, 1);
    }
}
