//! Where a sandbox's egress proxy may connect: pure decisions, no I/O.
//!
//! A sandbox reaches public addresses only. The proxy resolves names on
//! the host and checks every resolved address here, so a name that points
//! at loopback or a private range is refused like the address itself.
//! With `allow_hosts`, only matching names pass, and IP literals never do.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a destination is refused; its `Display` is the body of the 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A non-public address (`rule` names the range).
    Address { ip: IpAddr, rule: &'static str },
    /// One of the host's own addresses.
    HostAddress { ip: IpAddr },
    /// A name outside `allow_hosts`.
    NotAllowed { host: String },
    /// An IP literal while `allow_hosts` is set.
    IpLiteral { host: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Address { ip, rule } => write!(
                f,
                "sandkeep: {ip} is {rule} address; sandboxes reach public addresses only"
            ),
            Refusal::HostAddress { ip } => write!(
                f,
                "sandkeep: {ip} is an address of the host; sandboxes reach public addresses only"
            ),
            Refusal::NotAllowed { host } => write!(
                f,
                "sandkeep: {host} is not in allow_hosts; this sandbox reaches only the hosts it was created with"
            ),
            Refusal::IpLiteral { host } => write!(
                f,
                "sandkeep: {host} is an IP address, and with allow_hosts only the listed host names are reachable (not in allow_hosts)"
            ),
        }
    }
}

/// The non-public range `ip` belongs to, as "a/an RULE" for the message.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b) {
        (0, _) => "an unspecified (0.0.0.0/8)",
        (127, _) => "a loopback",
        (10, _) => "a private",
        (172, 16..=31) => "a private",
        (192, 168) => "a private",
        (169, 254) if (c, d) == (169, 254) => "a link-local (cloud metadata)",
        (169, 254) => "a link-local",
        (100, 64..=127) => "a carrier-grade NAT (100.64.0.0/10)",
        (224..=239, _) => "a multicast",
        (255, 255) if (c, d) == (255, 255) => "a broadcast",
        (240..=255, _) => "a reserved (240.0.0.0/4)",
        (192, 0) if c == 0 => "a reserved (192.0.0.0/24)",
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip.is_unspecified() {
        return Some("an unspecified");
    }
    if ip.is_loopback() {
        return Some("a loopback");
    }
    // IPv4-mapped (::ffff:a.b.c.d) and the deprecated IPv4-compatible
    // (::a.b.c.d) forms reach the IPv4 address.
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return non_public_v4(embedded(s[6], s[7]));
    }
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address too.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return non_public_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return non_public_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => "a unique-local (private, fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "a link-local",
        x if x & 0xffc0 == 0xfec0 => "a site-local (private)",
        x if x & 0xff00 == 0xff00 => "a multicast",
        _ => return None,
    })
}

/// Whether a connection to `ip` may be made. `host_addrs` are the host's
/// own addresses (a service bound to one of them is the host's).
pub fn check_address(ip: IpAddr, host_addrs: &[IpAddr]) -> Result<(), Refusal> {
    let ip = ip.to_canonical();
    if let Some(rule) = non_public(ip) {
        return Err(Refusal::Address { ip, rule });
    }
    if host_addrs.iter().any(|h| h.to_canonical() == ip) {
        return Err(Refusal::HostAddress { ip });
    }
    Ok(())
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
        check_address(ip.parse().unwrap(), &[])
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

    #[test]
    fn the_hosts_own_addresses_are_refused() {
        let own: Vec<IpAddr> = vec!["203.0.113.7".parse().unwrap()];
        let r = check_address("203.0.113.7".parse().unwrap(), &own).unwrap_err();
        assert_eq!(
            r,
            Refusal::HostAddress {
                ip: "203.0.113.7".parse().unwrap()
            }
        );
        assert!(r.to_string().contains("address of the host"));
        assert!(check_address("::ffff:203.0.113.7".parse().unwrap(), &own).is_err());
        assert!(check_address("203.0.113.8".parse().unwrap(), &own).is_ok());
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
