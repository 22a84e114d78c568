//! Where a sandbox's egress proxy may connect: pure decisions, no I/O.
//!
//! A sandbox reaches globally reachable addresses only. The proxy resolves
//! names on the host and checks every resolved address here, so a name
//! that points at loopback or a private range is refused like the address
//! itself. Refused are the blocks of IANA's IPv4 and IPv6 special-purpose
//! address registries (RFC 6890 and its updates) that are not globally
//! reachable, multicast, and IPv6 outside the global unicast space; an
//! IPv6 address that carries an IPv4 one (mapped, compatible, translated,
//! NAT64, 6to4, Teredo, ISATAP) is judged by that IPv4 address as well.
//! On top of the ranges, the host's own network whatever its range
//! ([`HostNetwork`]): its addresses, the subnets they are on, its gateways.
//! With `allow_hosts`, only matching names pass, and IP literals never do.
//!
//! An operator whose host reaches the Internet through special-purpose
//! addresses (an intercepting egress answering every name with one
//! documentation address, a fake-IP DNS answering from 198.18.0.0/15)
//! names those ranges in an [`EgressTrust`]: they then pass the registries
//! and the host-subnet rule, and nothing else changes. No trust reaches
//! what SPEC.md §10 closes whatever the configuration ([`NEVER_TRUSTED`]:
//! loopback, unspecified, private, CGNAT, link-local and metadata), the
//! host's own addresses or its gateways.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The variable naming the ranges the egress proxy takes as public
/// despite the special-purpose registries: the configuration of a host
/// whose egress is intercepted or whose DNS answers with fake IPs.
pub const EGRESS_TRUST_VAR: &str = "SANDKEEP_EGRESS_TRUST";

/// Why a destination is refused; its `Display` is the body of the 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A range that is not globally reachable (`rule` names it);
    /// `carried` is the IPv4 address of an IPv6 one when that decided.
    Address {
        ip: IpAddr,
        carried: Option<Ipv4Addr>,
        rule: &'static str,
    },
    /// One of the host's own addresses.
    HostAddress { ip: IpAddr },
    /// A gateway of the host's routing table.
    Gateway { ip: IpAddr },
    /// An address on one of the host's subnets.
    HostSubnet { ip: IpAddr, subnet: Subnet },
    /// A name outside `allow_hosts`.
    NotAllowed { host: String },
    /// An IP literal while `allow_hosts` is set.
    IpLiteral { host: String },
}

const PUBLIC_ONLY: &str = "sandboxes reach public addresses only";

/// What the host's operator can do about a refused address that may lead
/// to the Internet on their host; nothing for what no trust reaches.
struct TrustHint(IpAddr);

impl fmt::Display for TrustHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if never_trusted(self.0).is_some() {
            return Ok(());
        }
        write!(
            f,
            " (if this range leads to the Internet on this host, as behind an intercepting \
             egress or a fake-IP DNS, the host's operator can name it in {EGRESS_TRUST_VAR}; \
             `sandkeep doctor` says which)"
        )
    }
}

impl Refusal {
    /// What the destination is, without the prefix and the advice of the
    /// 403: "203.0.113.80 is a documentation (203.0.113.0/24) address".
    pub fn what(&self) -> String {
        match self {
            Refusal::Address {
                ip,
                carried: None,
                rule,
            } => format!("{ip} is {rule} address"),
            Refusal::Address {
                ip,
                carried: Some(v4),
                rule,
            } => format!("{ip} carries the IPv4 address {v4}, which is {rule} address"),
            Refusal::HostAddress { ip } => format!("{ip} is an address of the host"),
            Refusal::Gateway { ip } => format!("{ip} is a gateway of the host"),
            Refusal::HostSubnet { ip, subnet } => format!("{ip} is on the host's network {subnet}"),
            Refusal::NotAllowed { host } => format!("{host} is not in allow_hosts"),
            Refusal::IpLiteral { host } => format!(
                "{host} is an IP address, and with allow_hosts only the listed host names are reachable (not in allow_hosts)"
            ),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.what();
        match self {
            Refusal::Address {
                carried: Some(v4), ..
            } => write!(
                f,
                "sandkeep: {what}; {PUBLIC_ONLY}{}",
                TrustHint(IpAddr::V4(*v4))
            ),
            Refusal::Address { ip, .. } | Refusal::HostSubnet { ip, .. } => {
                write!(f, "sandkeep: {what}; {PUBLIC_ONLY}{}", TrustHint(*ip))
            }
            Refusal::HostAddress { .. } | Refusal::Gateway { .. } => {
                write!(f, "sandkeep: {what}; {PUBLIC_ONLY}")
            }
            Refusal::NotAllowed { .. } => write!(
                f,
                "sandkeep: {what}; this sandbox reaches only the hosts it was created with"
            ),
            Refusal::IpLiteral { .. } => write!(f, "sandkeep: {what}"),
        }
    }
}

/// An address with a prefix length: a block of the registries, or an
/// interface address and the subnet it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Subnet {
    /// The one address `ip`, as a range.
    pub fn single(ip: IpAddr) -> Subnet {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        Subnet { addr: ip, prefix }
    }

    /// The range's first address.
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from_bits(
                a.to_bits() & (mask(self.prefix) >> 96) as u32,
            )),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & mask(self.prefix))),
        }
    }

    /// Whether the two ranges share an address (one holds the other).
    pub fn overlaps(&self, other: &Subnet) -> bool {
        self.contains(other.network()) || other.contains(self.network())
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => same_prefix(
                u128::from(net.to_bits()) << 96,
                u128::from(ip.to_bits()) << 96,
                self.prefix,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                same_prefix(net.to_bits(), ip.to_bits(), self.prefix)
            }
            _ => false,
        }
    }
}

/// The network's first address and the prefix length, as `a.b.c.0/24`.
impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

/// The top `prefix` bits set.
fn mask(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p => u128::MAX << (128 - u32::from(p.min(128))),
    }
}

fn same_prefix(a: u128, b: u128, prefix: u8) -> bool {
    (a ^ b) & mask(prefix) == 0
}

/// The host's own network, read by the proxy for every connection: a
/// service bound to one of its addresses, a neighbour on one of its
/// subnets and its routers are the host's surroundings, not the Internet,
/// whatever range they are in (a VM's "public" subnet, a documentation
/// range used as a LAN).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostNetwork {
    /// Each address of its interfaces, with its prefix length.
    pub addresses: Vec<Subnet>,
    /// Every gateway of its routing tables.
    pub gateways: Vec<IpAddr>,
}

/// Address ranges the host's operator names as leading to the Internet on
/// this host despite the registries (`SANDKEEP_EGRESS_TRUST`): what a
/// fake-IP DNS answers from, the address of an intercepting egress. An
/// address in one passes the registries and the host-subnet rule (a
/// fake-IP range is usually the subnet of a TUN interface of the host);
/// the host's own addresses and gateways stay refused. Made only by
/// parsing, which refuses a range that overlaps [`NEVER_TRUSTED`], so no
/// value reaches what SPEC.md §10 closes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EgressTrust(Vec<Subnet>);

/// Why a trust setting is refused; each names the entry and what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error(
        "{0:?} is not an address range: write ADDRESS/PREFIX, e.g. 203.0.113.0/24 or 2001:db8::/32, comma-separated"
    )]
    Malformed(String),
    #[error(
        "{entry} has address bits set past its prefix: write {range} for the range, or the address alone"
    )]
    HostBits { entry: String, range: Subnet },
    #[error("{entry} is IPv4-mapped: name the IPv4 range itself")]
    Mapped { entry: String },
    #[error(
        "{entry} reaches into {range} ({what}), which sandboxes never reach whatever is trusted: name only ranges that lead to the Internet on this host"
    )]
    NeverTrusted {
        entry: String,
        range: Subnet,
        what: &'static str,
    },
}

/// What no trust setting may name (SPEC.md §10 closes it to every
/// sandbox): the host itself by loopback or the unspecified address (a
/// connection to 0.0.0.0 or :: reaches the host's loopback), private and
/// CGNAT networks, link-local and with it the cloud metadata address.
pub const NEVER_TRUSTED: &[(IpAddr, u8, &str)] = &[
    (
        IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)),
        8,
        "the unspecified range (0.0.0.0 is the host itself)",
    ),
    (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8, "a private range"),
    (
        IpAddr::V4(Ipv4Addr::new(100, 64, 0, 0)),
        10,
        "the carrier-grade NAT range",
    ),
    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8, "loopback"),
    (
        IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)),
        16,
        "link-local (with the cloud metadata address)",
    ),
    (
        IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)),
        12,
        "a private range",
    ),
    (
        IpAddr::V4(Ipv4Addr::new(192, 168, 0, 0)),
        16,
        "a private range",
    ),
    (
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        128,
        "the unspecified address (the host itself)",
    ),
    (IpAddr::V6(Ipv6Addr::LOCALHOST), 128, "loopback"),
    (
        IpAddr::V6(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0])),
        7,
        "the unique-local (private) range",
    ),
    (
        IpAddr::V6(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0])),
        10,
        "link-local",
    ),
    (
        IpAddr::V6(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0])),
        10,
        "the site-local (private) range",
    ),
];

/// The never-trusted range `range` overlaps, and what it is.
fn never_trusted_overlap(range: &Subnet) -> Option<(Subnet, &'static str)> {
    NEVER_TRUSTED
        .iter()
        .map(|&(addr, prefix, what)| (Subnet { addr, prefix }, what))
        .find(|(never, _)| never.overlaps(range))
}

/// The never-trusted range that holds `ip`, if one does.
fn never_trusted(ip: IpAddr) -> Option<(Subnet, &'static str)> {
    never_trusted_overlap(&Subnet::single(ip.to_canonical()))
}

impl EgressTrust {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|r| r.contains(ip))
    }

    pub fn ranges(&self) -> &[Subnet] {
        &self.0
    }

    /// These ranges and those of `more` that are not already among them.
    pub fn merged(mut self, more: &EgressTrust) -> EgressTrust {
        for range in &more.0 {
            if !self.0.contains(range) {
                self.0.push(*range);
            }
        }
        self
    }
}

/// Whether `range` (written `entry`) may be trusted.
fn validate(entry: &str, range: Subnet) -> Result<Subnet, TrustError> {
    if range.network() != range.addr {
        return Err(TrustError::HostBits {
            entry: entry.to_owned(),
            range: Subnet {
                addr: range.network(),
                prefix: range.prefix,
            },
        });
    }
    // Addresses are judged in their IPv4 form: a mapped range would
    // never match, so it can only be a mistake.
    let mapped = Subnet {
        addr: IpAddr::V6(v6([0, 0, 0, 0, 0, 0xffff, 0, 0])),
        prefix: 96,
    };
    if let Some((never, what)) = never_trusted_overlap(&range) {
        return Err(TrustError::NeverTrusted {
            entry: entry.to_owned(),
            range: never,
            what,
        });
    }
    if range.overlaps(&mapped) {
        return Err(TrustError::Mapped {
            entry: entry.to_owned(),
        });
    }
    Ok(range)
}

/// `ADDRESS/PREFIX` or an address alone, comma-separated; blanks ignored.
impl FromStr for EgressTrust {
    type Err = TrustError;

    fn from_str(text: &str) -> Result<EgressTrust, TrustError> {
        let ranges = text
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let malformed = || TrustError::Malformed(entry.to_owned());
                let (addr, prefix) = match entry.split_once('/') {
                    Some((addr, prefix)) => (addr, Some(prefix)),
                    None => (entry, None),
                };
                let addr: IpAddr = addr.parse().map_err(|_| malformed())?;
                let longest = if addr.is_ipv4() { 32 } else { 128 };
                let prefix = match prefix {
                    None => longest,
                    Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => p
                        .parse::<u8>()
                        .ok()
                        .filter(|p| *p <= longest)
                        .ok_or_else(malformed)?,
                    Some(_) => return Err(malformed()),
                };
                validate(entry, Subnet { addr, prefix })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EgressTrust(ranges))
    }
}

/// The ranges, comma-separated: what parses back to the same.
impl fmt::Display for EgressTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl TryFrom<String> for EgressTrust {
    type Error = TrustError;
    fn try_from(text: String) -> Result<EgressTrust, TrustError> {
        text.parse()
    }
}

impl From<EgressTrust> for String {
    fn from(trust: EgressTrust) -> String {
        trust.to_string()
    }
}

/// A block that is not globally reachable, or `None` for one that is: the
/// first block of a table that holds the address decides.
type Block<A> = (A, u8, Option<&'static str>);

/// IANA's IPv4 special-purpose registry, with multicast and broadcast.
/// 192.0.0.0/24 is refused whole: its globally reachable addresses (PCP
/// and TURN anycast, .9 and .10) reach the nearest such server, which is
/// the host's own network's.
const V4_BLOCKS: &[Block<Ipv4Addr>] = &[
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        Some("an unspecified (0.0.0.0/8)"),
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Some("a private")),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        Some("a carrier-grade NAT (100.64.0.0/10)"),
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, Some("a loopback")),
    (
        Ipv4Addr::new(169, 254, 169, 254),
        32,
        Some("a link-local (cloud metadata)"),
    ),
    (Ipv4Addr::new(169, 254, 0, 0), 16, Some("a link-local")),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Some("a private")),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        Some("a reserved (IETF protocol assignments, 192.0.0.0/24)"),
    ),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        Some("a documentation (192.0.2.0/24)"),
    ),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        Some("a deprecated 6to4 relay anycast (192.88.99.0/24)"),
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Some("a private")),
    (
        Ipv4Addr::new(198, 18, 0, 0),
        15,
        Some("a benchmarking (198.18.0.0/15)"),
    ),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        Some("a documentation (198.51.100.0/24)"),
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        Some("a documentation (203.0.113.0/24)"),
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Some("a multicast")),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Some("a broadcast")),
    (
        Ipv4Addr::new(240, 0, 0, 0),
        4,
        Some("a reserved (240.0.0.0/4)"),
    ),
];

const fn v6(s: [u16; 8]) -> Ipv6Addr {
    Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
}

/// IANA's IPv6 special-purpose registry, with the scopes of RFC 4291; only
/// the global unicast space 2000::/3 is routed on the Internet, and of
/// what lies outside it only the forms that deliver to an IPv4 address
/// (then judged by that address). 2001::/23 is refused but for its
/// globally reachable blocks; its anycast addresses (PCP, TURN, DNS-SD
/// SRP) reach the nearest server, the host's network's.
const V6_BLOCKS: &[Block<Ipv6Addr>] = &[
    (v6([0, 0, 0, 0, 0, 0xffff, 0, 0]), 96, None),
    (v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]), 96, None),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        Some("a local-use NAT64 (64:ff9b:1::/48)"),
    ),
    (v6([0; 8]), 96, Some("a deprecated IPv4-compatible (::/96)")),
    (
        v6([0, 0, 0, 0, 0xffff, 0, 0, 0]),
        96,
        Some("an IPv4-translated (::ffff:0:0:0/96)"),
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0]),
        64,
        Some("a discard-only (100::/64)"),
    ),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        32,
        Some("a Teredo (2001::/32)"),
    ),
    (v6([0x2001, 3, 0, 0, 0, 0, 0, 0]), 32, None),
    (v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0]), 48, None),
    (v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0]), 28, None),
    (v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0]), 28, None),
    (
        v6([0x2001, 2, 0, 0, 0, 0, 0, 0]),
        48,
        Some("a benchmarking (2001:2::/48)"),
    ),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        23,
        Some("a reserved (IETF protocol assignments, 2001::/23)"),
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]),
        32,
        Some("a documentation (2001:db8::/32)"),
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]),
        20,
        Some("a documentation (3fff::/20)"),
    ),
    (
        v6([0x5f00, 0, 0, 0, 0, 0, 0, 0]),
        16,
        Some("an SRv6 segment identifier (5f00::/16)"),
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]),
        7,
        Some("a unique-local (private, fc00::/7)"),
    ),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10, Some("a link-local")),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
        10,
        Some("a site-local (private)"),
    ),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0]), 8, Some("a multicast")),
    (v6([0x2000, 0, 0, 0, 0, 0, 0, 0]), 3, None),
    (
        v6([0; 8]),
        0,
        Some("a reserved (outside 2000::/3, the global unicast space)"),
    ),
];

/// The block of `blocks` that holds `ip` and its rule (`None`: globally
/// reachable).
fn block_of<A: Copy + Into<IpAddr>>(
    blocks: &[Block<A>],
    ip: IpAddr,
) -> Option<(Subnet, Option<&'static str>)> {
    blocks
        .iter()
        .map(|&(net, prefix, rule)| {
            let block = Subnet {
                addr: net.into(),
                prefix,
            };
            (block, rule)
        })
        .find(|(block, _)| block.contains(ip))
}

/// The rule that refuses `ip`, unless it is trusted.
fn untrusted_rule<A: Copy + Into<IpAddr>>(
    blocks: &[Block<A>],
    ip: IpAddr,
    trust: &EgressTrust,
) -> Option<&'static str> {
    block_of(blocks, ip)
        .and_then(|(_, rule)| rule)
        .filter(|_| !trust.contains(ip))
}

/// The IPv4 addresses an IPv6 address carries: where a translator, a
/// tunnel or the kernel itself may deliver it.
fn carried_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from_bits((u32::from(hi) << 16) | u32::from(lo));
    match ip.segments() {
        // IPv4-mapped and -compatible (RFC 4291), IPv4-translated (RFC
        // 2765), the well-known NAT64 prefix (RFC 6052).
        [0, 0, 0, 0, 0, 0xffff | 0, hi, lo]
        | [0, 0, 0, 0, 0xffff, 0, hi, lo]
        | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => vec![v4(hi, lo)],
        // 6to4 (RFC 3056): bits 16-47.
        [0x2002, hi, lo, ..] => vec![v4(hi, lo)],
        // Teredo (RFC 4380): the server, and the client inverted.
        [0x2001, 0, shi, slo, _, _, chi, clo] => vec![v4(shi, slo), v4(!chi, !clo)],
        // An ISATAP interface identifier (RFC 5214), u and g bits either way.
        [_, _, _, _, iid, 0x5efe, hi, lo] if iid & 0xfcff == 0 => vec![v4(hi, lo)],
        _ => Vec::new(),
    }
}

/// Why `ip` is not globally reachable, if it is not and `trust` does not
/// name it: the rule, and the carried IPv4 address when that decided.
/// Trust is judged on the address a rule is about: a trusted IPv6 range
/// does not make the IPv4 address it carries any more reachable.
fn classify(ip: IpAddr, trust: &EgressTrust) -> Option<(Option<Ipv4Addr>, &'static str)> {
    match ip {
        IpAddr::V4(_) => untrusted_rule(V4_BLOCKS, ip, trust).map(|rule| (None, rule)),
        IpAddr::V6(v6) if v6.is_unspecified() => Some((None, "an unspecified")),
        IpAddr::V6(v6) if v6.is_loopback() => Some((None, "a loopback")),
        IpAddr::V6(v6) => carried_v4(v6)
            .into_iter()
            .find_map(|v4| untrusted_rule(V4_BLOCKS, v4.into(), trust).map(|rule| (Some(v4), rule)))
            .or_else(|| untrusted_rule(V6_BLOCKS, ip, trust).map(|rule| (None, rule))),
    }
}

/// Whether a connection to `ip` may be made: globally reachable or
/// trusted, and nothing of `host`'s own network (also by the IPv4 address
/// it carries) but its subnets within a trusted range.
pub fn check_address(ip: IpAddr, host: &HostNetwork, trust: &EgressTrust) -> Result<(), Refusal> {
    let ip = ip.to_canonical();
    if let Some((carried, rule)) = classify(ip, trust) {
        return Err(Refusal::Address { ip, carried, rule });
    }
    let carried = match ip {
        IpAddr::V6(v6) => carried_v4(v6),
        IpAddr::V4(_) => Vec::new(),
    };
    for ip in std::iter::once(ip).chain(carried.into_iter().map(IpAddr::V4)) {
        let own = |a: &Subnet| a.addr.to_canonical() == ip;
        if host.addresses.iter().any(own) {
            return Err(Refusal::HostAddress { ip });
        }
        if host.gateways.iter().any(|g| g.to_canonical() == ip) {
            return Err(Refusal::Gateway { ip });
        }
        if trust.contains(ip) {
            continue;
        }
        if let Some(subnet) = host.addresses.iter().find(|s| s.contains(ip)) {
            return Err(Refusal::HostSubnet {
                ip,
                subnet: *subnet,
            });
        }
    }
    Ok(())
}

/// The ranges `trust` would need besides to let a connection to `ip`
/// through, or `None` when no trust can (the host's own addresses and
/// gateways, what is never trusted). A refused block of the registries is
/// named whole, as a fake-IP DNS answers from all of it (unless it
/// overlaps a never-trusted range: then the address alone); an address
/// refused only for being on the host's subnet, alone.
pub fn trust_to_reach(ip: IpAddr, host: &HostNetwork, trust: &EgressTrust) -> Option<EgressTrust> {
    let mut wider = trust.clone();
    let mut needed = Vec::new();
    // Each round lifts one rule; an address meets a few at most (the
    // IPv4 addresses it carries, its IPv6 block, a host subnet).
    for _ in 0..8 {
        let (subject, block) = match check_address(ip, host, &wider) {
            Ok(()) => return Some(EgressTrust(needed)),
            Err(Refusal::Address { ip, carried, .. }) => {
                let subject = carried.map_or(ip, IpAddr::V4);
                let block = match subject {
                    IpAddr::V4(_) => block_of(V4_BLOCKS, subject),
                    IpAddr::V6(_) => block_of(V6_BLOCKS, subject),
                };
                (subject, block.map(|(block, _)| block))
            }
            Err(Refusal::HostSubnet { ip, .. }) => (ip, None),
            Err(_) => return None,
        };
        let range = block
            .filter(|b| never_trusted_overlap(b).is_none())
            .unwrap_or(Subnet::single(subject));
        let range = validate(&range.to_string(), range).ok()?;
        wider.0.push(range);
        needed.push(range);
    }
    None
}

/// The gateways of the host's routing tables, from the text of
/// `/proc/net/route` (IPv4, addresses as the kernel's in-memory words in
/// hex) and `/proc/net/ipv6_route` (IPv6, in network order).
pub fn route_gateways(v4_routes: &str, v6_routes: &str) -> Vec<IpAddr> {
    // RTF_GATEWAY of <linux/route.h>.
    const GATEWAY: u32 = 0x2;
    let flagged = |flags: &str| u32::from_str_radix(flags, 16).is_ok_and(|f| f & GATEWAY != 0);
    let v4 = v4_routes.lines().skip(1).filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let gateway = u32::from_str_radix(f.get(2)?, 16).ok()?;
        (flagged(f.get(3)?) && gateway != 0)
            .then(|| IpAddr::V4(Ipv4Addr::from(gateway.to_ne_bytes())))
    });
    let v6 = v6_routes.lines().filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let next_hop = u128::from_str_radix(f.get(4)?, 16).ok()?;
        (flagged(f.get(8)?) && next_hop != 0).then(|| IpAddr::V6(Ipv6Addr::from_bits(next_hop)))
    });
    let mut all: Vec<IpAddr> = v4.chain(v6).collect();
    all.sort();
    all.dedup();
    all
}

/// Lower case, without brackets around an IPv6 literal or a final dot.
pub fn normalize_host(host: &str) -> String {
    let h = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (normalised) matches an `allow_hosts` entry: an exact
/// name, or `*.suffix` for any name below `suffix` (not `suffix` itself).
pub fn host_matches(host: &str, pattern: &str) -> bool {
    let pattern = normalize_host(pattern);
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        None => host == pattern,
    }
}

/// Whether the name may be asked for at all, before resolving it. An
/// empty `allow_hosts` allows every name.
pub fn check_host(host: &str, allow_hosts: &[String]) -> Result<(), Refusal> {
    if allow_hosts.is_empty() {
        return Ok(());
    }
    let host = normalize_host(host);
    if host.parse::<IpAddr>().is_ok() {
        return Err(Refusal::IpLiteral { host });
    }
    if allow_hosts.iter().any(|p| host_matches(&host, p)) {
        Ok(())
    } else {
        Err(Refusal::NotAllowed { host })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> Option<String> {
        check_address(
            ip.parse().unwrap(),
            &HostNetwork::default(),
            &EgressTrust::default(),
        )
        .err()
        .map(|r| r.to_string())
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "151.101.0.223",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "2002:0101:0101::1",
        ] {
            assert_eq!(refused(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn non_public_ranges_are_refused_naming_the_rule() {
        for (ip, rule) in [
            ("127.0.0.1", "loopback"),
            ("127.5.6.7", "loopback"),
            ("10.0.0.5", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.1.1", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "unique-local"),
            ("fd12:3456::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "private"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::10.0.0.1", "private"),
            ("2002:7f00:0001::1", "loopback"),
        ] {
            let msg = refused(ip).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(msg.contains(rule), "{ip}: {msg}");
            assert!(msg.contains("public addresses only"), "{ip}: {msg}");
        }
        assert_eq!(
            refused("10.0.0.5").unwrap(),
            "sandkeep: 10.0.0.5 is a private address; sandboxes reach public addresses only"
        );
        // Mapped forms are reported as the IPv4 address they reach.
        assert!(refused("::ffff:127.0.0.1").unwrap().contains(" 127.0.0.1 "));
    }

    /// Every IPv6 form that carries an IPv4 address is judged by the
    /// IPv4 address it carries, and the refusal names it.
    #[test]
    fn every_ipv6_form_embedding_ipv4_is_judged_by_the_embedded_address() {
        for (ip, embedded, rule) in [
            // IPv4-mapped (RFC 4291): the kernel connects to the IPv4 address.
            ("::ffff:127.0.0.1", "127.0.0.1", "loopback"),
            // IPv4-compatible, deprecated (RFC 4291).
            ("::10.1.2.3", "10.1.2.3", "private"),
            // IPv4-translated (RFC 2765, SIIT): ::ffff:0:a.b.c.d.
            ("::ffff:0:7f00:1", "127.0.0.1", "loopback"),
            ("::ffff:0:a9fe:a9fe", "169.254.169.254", "cloud metadata"),
            // The well-known NAT64 prefix (RFC 6052).
            ("64:ff9b::7f00:1", "127.0.0.1", "loopback"),
            ("64:ff9b::c0a8:1", "192.168.0.1", "private"),
            // 6to4 (RFC 3056): the address in bits 16-47.
            ("2002:a00:1::1", "10.0.0.1", "private"),
            ("2002:a9fe:a9fe::", "169.254.169.254", "cloud metadata"),
            // Teredo (RFC 4380): the server in bits 32-63, the client
            // inverted in the last 32 bits.
            ("2001:0:7f00:1::", "127.0.0.1", "loopback"),
            (
                "2001:0:4136:e378:8000:63bf:f5ff:fffe",
                "10.0.0.1",
                "private",
            ),
            // An ISATAP interface identifier (RFC 5214) on a global prefix.
            ("2606:4700:1:2:0:5efe:a00:1", "10.0.0.1", "private"),
            ("2606:4700:1:2:200:5efe:7f00:1", "127.0.0.1", "loopback"),
        ] {
            let msg = refused(ip).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(msg.contains(rule), "{ip}: {msg}");
            assert!(msg.contains(embedded), "{ip} names {embedded}: {msg}");
        }
        // A public IPv4 address through a form the network routes to it
        // (mapped, NAT64's well-known prefix, 6to4) stays reachable, as do
        // global addresses whose low bits merely look like an embedding.
        for ip in [
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "2002:101:101::1",
            "2606:4700:1:2:0:5efe:101:101",
        ] {
            assert_eq!(refused(ip), None, "{ip} reaches a public address");
        }
        // Forms nothing on the Internet routes are refused whatever they
        // carry.
        for (ip, rule) in [
            ("::1.1.1.1", "IPv4-compatible"),
            ("::ffff:0:101:101", "IPv4-translated"),
            ("2001:0:4136:e378:8000:63bf:fefe:fefe", "Teredo"),
        ] {
            let msg = refused(ip).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(msg.contains(rule), "{ip}: {msg}");
        }
    }

    /// Every block of the IANA special-purpose registries (RFC 6890 and
    /// its updates) that is not globally reachable, IPv4 and IPv6.
    #[test]
    fn every_non_global_special_purpose_range_is_refused() {
        for (ip, rule) in [
            ("0.0.0.0", "unspecified"),
            ("10.255.255.255", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("127.0.0.1", "loopback"),
            ("169.254.0.1", "link-local"),
            ("172.16.0.1", "private"),
            ("192.0.0.1", "192.0.0.0/24"),
            ("192.0.0.170", "192.0.0.0/24"),
            ("192.0.2.1", "documentation"),
            ("192.88.99.1", "6to4 relay"),
            ("192.168.0.1", "private"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("224.0.0.251", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("64:ff9b:1:ffff::1", "local-use NAT64"),
            ("100::1", "discard"),
            ("2001:1::1", "2001::/23"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "2001::/23"),
            ("2001:db8::1", "documentation"),
            ("2001:db8:ffff::1", "documentation"),
            ("3fff::1", "documentation"),
            ("5f00::1", "SRv6"),
            ("fc00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            // Nothing outside the global unicast space 2000::/3 is routed.
            ("4000::1", "2000::/3"),
            ("8000::1", "2000::/3"),
        ] {
            let msg = refused(ip).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(msg.contains(rule), "{ip}: {msg}");
            assert!(msg.contains("public addresses only"), "{ip}: {msg}");
        }
        // Blocks the registries call globally reachable.
        for ip in [
            "192.31.196.1",
            "192.52.193.1",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:30::1",
            "2620:4f:8000::1",
            "198.17.255.255",
            "198.20.0.1",
            "2001:200::1",
        ] {
            assert_eq!(refused(ip), None, "{ip} is globally reachable");
        }
    }

    /// A host whose network is in "public" ranges (a VM on a provider's
    /// subnet): its addresses, the neighbours on its subnets and its
    /// gateways are refused all the same, also through an IPv6 form that
    /// carries them.
    #[test]
    fn the_hosts_own_network_is_refused_whatever_its_range() {
        let subnet = |a: &str, prefix| Subnet {
            addr: a.parse().unwrap(),
            prefix,
        };
        let host = HostNetwork {
            addresses: vec![subnet("93.184.1.7", 24), subnet("2a00:1450:4001:7::2", 64)],
            gateways: vec!["81.2.3.4".parse().unwrap()],
        };
        let check = |ip: &str| check_address(ip.parse().unwrap(), &host, &EgressTrust::default());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            check("93.184.1.7"),
            Err(Refusal::HostAddress {
                ip: ip("93.184.1.7")
            })
        );
        assert_eq!(
            check("::ffff:93.184.1.7"),
            Err(Refusal::HostAddress {
                ip: ip("93.184.1.7")
            })
        );
        let neighbour = check("93.184.1.200").unwrap_err();
        assert!(
            neighbour.to_string().starts_with(
                "sandkeep: 93.184.1.200 is on the host's network 93.184.1.0/24; sandboxes reach public addresses only"
            ),
            "{neighbour}"
        );
        assert!(matches!(
            check("2a00:1450:4001:7:abcd::1"),
            Err(Refusal::HostSubnet { subnet, .. }) if subnet.to_string() == "2a00:1450:4001:7::/64"
        ));
        let gateway = check("81.2.3.4").unwrap_err();
        assert_eq!(
            gateway.to_string(),
            "sandkeep: 81.2.3.4 is a gateway of the host; sandboxes reach public addresses only"
        );
        // Carried by NAT64 or 6to4, the IPv4 address is the host's all the same.
        assert_eq!(
            check("64:ff9b::5102:304"),
            Err(Refusal::Gateway { ip: ip("81.2.3.4") })
        );
        assert!(matches!(
            check("2002:5db8:1c8::1"),
            Err(Refusal::HostSubnet { .. })
        ));
        for ip in ["93.184.2.1", "81.2.3.5", "2a00:1450:4001:8::1"] {
            assert_eq!(check(ip), Ok(()), "{ip} is not the host's");
        }
    }

    /// The IPv4 table as a little-endian kernel prints it.
    #[cfg(target_endian = "little")]
    #[test]
    fn gateways_are_read_from_both_routing_tables() {
        // This machine's tables: a default route by 192.0.2.1 and by
        // fd00::1, on-link routes without a gateway.
        let v4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                  eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let v6 = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n";
        let expected: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "fd00::1".parse().unwrap()];
        assert_eq!(route_gateways(v4, v6), expected);
        assert!(route_gateways("", "").is_empty());
        assert!(route_gateways("header only\n", "garbage line\n").is_empty());
    }

    fn trust(text: &str) -> EgressTrust {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} must parse: {e}"))
    }

    fn ranges(trust: &EgressTrust) -> Vec<String> {
        trust.ranges().iter().map(Subnet::to_string).collect()
    }

    #[test]
    fn trust_settings_parse_and_print_back() {
        let t = trust(" 203.0.113.0/24, 198.18.0.0/15,,2001:db8::/32 , 192.0.2.80,64:ff9b:1::/48");
        assert_eq!(
            ranges(&t),
            [
                "203.0.113.0/24",
                "198.18.0.0/15",
                "2001:db8::/32",
                "192.0.2.80/32",
                "64:ff9b:1::/48"
            ]
        );
        let printed = t.to_string();
        assert_eq!(
            printed,
            "203.0.113.0/24,198.18.0.0/15,2001:db8::/32,192.0.2.80/32,64:ff9b:1::/48"
        );
        assert_eq!(trust(&printed), t);
        assert!(trust("").is_empty() && trust(" , ").is_empty());
        // As a record stores it, and a record that says otherwise is refused.
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("{printed:?}"));
        assert_eq!(serde_json::from_str::<EgressTrust>(&json).unwrap(), t);
        assert!(serde_json::from_str::<EgressTrust>("\"127.0.0.0/8\"").is_err());
        // Merging keeps the order and adds only what is missing.
        let merged = trust("203.0.113.0/24").merged(&trust("198.18.0.0/15,203.0.113.0/24"));
        assert_eq!(ranges(&merged), ["203.0.113.0/24", "198.18.0.0/15"]);
    }

    #[test]
    fn malformed_trust_settings_are_refused_naming_the_entry() {
        for entry in [
            "pypi.org",
            "203.0.113/24",
            "203.0.113.0/33",
            "203.0.113.0/",
            "203.0.113.0/+4",
            "203.0.113.0/24/1",
            "203.0.113.0 /24",
            "2001:db8::/129",
            "[2001:db8::]/32",
        ] {
            let err = format!("198.18.0.0/15,{entry}")
                .parse::<EgressTrust>()
                .unwrap_err();
            assert_eq!(err, TrustError::Malformed(entry.to_owned()), "{entry}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("{entry:?}")) && msg.contains("ADDRESS/PREFIX"),
                "{msg}"
            );
        }
        let err = "203.0.113.80/24".parse::<EgressTrust>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "203.0.113.80/24 has address bits set past its prefix: write 203.0.113.0/24 for the range, or the address alone"
        );
        let err = "::ffff:203.0.113.0/120".parse::<EgressTrust>().unwrap_err();
        assert!(
            matches!(err, TrustError::Mapped { .. }),
            "{err}: IPv4-mapped ranges never match"
        );
    }

    /// SPEC.md §10 closes loopback, the host itself, private, CGNAT and
    /// link-local ranges (the metadata address with them) to every
    /// sandbox: a setting that names any part of one, or a range that
    /// holds one, is refused whole.
    #[test]
    fn no_trust_setting_may_name_what_sandboxes_never_reach() {
        for (entry, what) in [
            ("127.0.0.0/8", "loopback"),
            ("127.0.0.1", "loopback"),
            ("127.1.0.0/16", "loopback"),
            ("0.0.0.0/0", "unspecified"),
            ("0.0.0.0", "unspecified"),
            ("96.0.0.0/3", "carrier-grade NAT"),
            ("128.0.0.0/1", "link-local"),
            ("169.254.169.254", "metadata"),
            ("169.254.0.0/16", "link-local"),
            ("10.1.0.0/16", "private"),
            ("172.20.0.0/16", "private"),
            ("192.168.1.0/24", "private"),
            ("100.100.0.0/16", "carrier-grade NAT"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("::/0", "unspecified"),
            ("::/96", "unspecified"),
            ("fe80::/10", "link-local"),
            ("fe80::1", "link-local"),
            ("fd00::/8", "unique-local"),
            ("fc00::/6", "unique-local"),
            ("fec0::/10", "site-local"),
        ] {
            let err = format!("203.0.113.0/24,{entry}")
                .parse::<EgressTrust>()
                .unwrap_err();
            assert!(
                matches!(&err, TrustError::NeverTrusted { entry: e, .. } if e == entry),
                "{entry}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(what) && msg.contains("never reach") && msg.starts_with(entry),
                "{entry}: {msg}"
            );
        }
    }

    /// A host behind a fake-IP DNS: a TUN interface 198.18.0.1/15 with a
    /// gateway on it, its operator trusting half of the benchmarking block
    /// and a part of the documentation ones.
    #[test]
    fn a_trusted_range_passes_the_registries_and_the_host_subnet_and_nothing_else() {
        let host = HostNetwork {
            addresses: vec![Subnet {
                addr: "198.18.0.1".parse().unwrap(),
                prefix: 15,
            }],
            gateways: vec!["198.18.0.2".parse().unwrap()],
        };
        let t = trust("198.18.0.0/16,203.0.113.0/25,2001:db8:1::/48,64:ff9b::/96,2002::/16");
        let check = |ip: &str| check_address(ip.parse().unwrap(), &host, &t);
        for ip in [
            "198.18.7.7",
            "198.18.255.254",
            "203.0.113.80",
            "2001:db8:1::5",
            // Through the forms that deliver to a trusted IPv4 address.
            "::ffff:198.18.7.7",
            "64:ff9b::cb00:7150",
            "2002:cb00:7150::1",
        ] {
            assert_eq!(check(ip), Ok(()), "{ip} is trusted");
        }
        // The rest of the same blocks keeps its rule.
        for (ip, rule) in [
            ("198.19.7.7", "benchmarking (198.18.0.0/15)"),
            ("203.0.113.200", "documentation (203.0.113.0/24)"),
            ("2001:db8:2::5", "documentation (2001:db8::/32)"),
            ("64:ff9b::cb00:71c8", "documentation (203.0.113.0/24)"),
        ] {
            let msg = check(ip).unwrap_err().to_string();
            assert!(msg.contains(rule), "{ip}: {msg}");
            assert!(
                msg.contains(EGRESS_TRUST_VAR),
                "{ip} names the setting: {msg}"
            );
        }
        // The host's own addresses and gateways stay refused inside a
        // trusted range, and so does what a trusted IPv6 range carries.
        assert_eq!(
            check("198.18.0.1"),
            Err(Refusal::HostAddress {
                ip: "198.18.0.1".parse().unwrap()
            })
        );
        assert_eq!(
            check("198.18.0.2"),
            Err(Refusal::Gateway {
                ip: "198.18.0.2".parse().unwrap()
            })
        );
        for (ip, rule) in [
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:a9fe:a9fe::1", "cloud metadata"),
            ("2002:c612:2::1", "gateway of the host"),
            ("127.0.0.1", "loopback"),
            ("10.0.0.1", "private"),
        ] {
            let msg = check(ip).unwrap_err().to_string();
            assert!(msg.contains(rule), "{ip}: {msg}");
        }
    }

    /// The 403 names the setting where it can help, and only there.
    #[test]
    fn refusals_name_the_trust_setting_only_where_it_can_help() {
        let host = HostNetwork {
            addresses: vec![Subnet {
                addr: "93.184.1.7".parse().unwrap(),
                prefix: 24,
            }],
            gateways: vec!["81.2.3.4".parse().unwrap()],
        };
        let msg = |ip: &str| {
            check_address(ip.parse().unwrap(), &host, &EgressTrust::default())
                .unwrap_err()
                .to_string()
        };
        for ip in [
            "203.0.113.80",
            "198.18.0.5",
            "2001:db8::1",
            "93.184.1.200",
            "64:ff9b::cb00:7150",
        ] {
            assert!(msg(ip).contains(EGRESS_TRUST_VAR), "{ip}: {}", msg(ip));
        }
        for ip in [
            "127.0.0.1",
            "10.0.0.5",
            "169.254.169.254",
            "::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "93.184.1.7",
            "81.2.3.4",
        ] {
            assert!(!msg(ip).contains(EGRESS_TRUST_VAR), "{ip}: {}", msg(ip));
        }
    }

    #[test]
    fn the_trust_to_reach_an_address_is_its_refused_block_or_nothing() {
        let host = HostNetwork {
            addresses: vec![
                Subnet {
                    addr: "198.18.0.1".parse().unwrap(),
                    prefix: 16,
                },
                Subnet {
                    addr: "93.184.1.7".parse().unwrap(),
                    prefix: 24,
                },
            ],
            gateways: vec!["93.184.1.1".parse().unwrap()],
        };
        let none = EgressTrust::default();
        let needed = |ip: &str, t: &EgressTrust| {
            trust_to_reach(ip.parse().unwrap(), &host, t).map(|t| t.to_string())
        };
        for (ip, range) in [
            ("203.0.113.80", "203.0.113.0/24"),
            // A fake-IP answer: its whole block, the TUN's subnet in it.
            ("198.18.3.4", "198.18.0.0/15"),
            ("64:ff9b::cb00:7150", "203.0.113.0/24"),
            ("2001:db8::80", "2001:db8::/32"),
            // Refused only for being on the host's subnet: the address alone.
            ("93.184.1.200", "93.184.1.200/32"),
            // A block that holds never-trusted ranges: the address alone.
            ("4000::1", "4000::1/128"),
            ("1.1.1.1", ""),
        ] {
            assert_eq!(needed(ip, &none).as_deref(), Some(range), "{ip}");
        }
        assert_eq!(
            needed("203.0.113.80", &trust("203.0.113.0/24")).as_deref(),
            Some("")
        );
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "fe80::1",
            "198.18.0.1",
            "93.184.1.1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(needed(ip, &none), None, "no trust reaches {ip}");
        }
    }

    #[test]
    fn allow_hosts_matches_names_and_suffixes() {
        let allow = vec!["pypi.org".to_owned(), "*.pythonhosted.org".to_owned()];
        assert!(check_host("pypi.org", &allow).is_ok());
        assert!(check_host("PyPI.org.", &allow).is_ok());
        assert!(check_host("files.pythonhosted.org", &allow).is_ok());
        assert!(check_host("a.b.pythonhosted.org", &allow).is_ok());
        for host in [
            "pythonhosted.org",
            "evilpythonhosted.org",
            "www.pypi.org",
            "pypi.org.evil.com",
            "example.com",
        ] {
            let r = check_host(host, &allow).unwrap_err();
            assert!(r.to_string().contains("not in allow_hosts"), "{host}: {r}");
        }
        for host in ["1.1.1.1", "[2606:4700::1111]", "127.0.0.1"] {
            assert!(
                matches!(check_host(host, &allow), Err(Refusal::IpLiteral { .. })),
                "{host}"
            );
        }
        assert!(check_host("anything.example", &[]).is_ok());
        assert!(check_host("1.1.1.1", &[]).is_ok());
    }
}
