//! E2B's `network` rules of a create (`denyOut`, `allowOut` and the rest
//! of `SandboxNetworkConfig`) mapped onto the provider's network policy,
//! or refused: a sandbox is never created believing a rule is in force
//! that is not.
//!
//! What fits: `denyOut` of all traffic (`0.0.0.0/0`) alone is
//! `network: "none"`; with an `allowOut` of host names (`example.com`,
//! `*.example.com`) it is `allow_hosts`. An `allowOut` without a deny of
//! everything narrows nothing (public addresses are reachable anyway) and
//! is kept as the default network when it names hosts only. Everything
//! else (denying single addresses, allowing IP ranges, egress proxies,
//! request transforms, DNS servers, HTTPS ports, masked hosts) has no
//! enforcement here and is refused with E2B's 400.

use serde::Deserialize;

use sandkeep_provider::Network;

/// E2B's "all traffic" selector (the SDKs' `ALL_TRAFFIC`).
const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// `SandboxNetworkConfig` as the SDKs send it on create.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkConfig {
    #[serde(default)]
    allow_out: Vec<String>,
    #[serde(default)]
    deny_out: Vec<String>,
    /// Whether the sandbox's public URLs need its traffic token. Nothing
    /// here serves a sandbox's ports to anyone, so either answer holds:
    /// read only to be accepted.
    #[serde(default, rename = "allowPublicTraffic")]
    _allow_public_traffic: Option<bool>,
    #[serde(default)]
    dns_servers: Option<Vec<String>>,
    #[serde(default)]
    egress_proxy: Option<serde_json::Value>,
    #[serde(default)]
    mask_request_host: Option<String>,
    #[serde(default)]
    https_ports: Vec<u16>,
    #[serde(default)]
    rules: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The policy a [`NetworkConfig`] maps to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub network: Option<Network>,
    pub allow_hosts: Vec<String>,
}

/// Whether `entry` is an address or a CIDR block rather than a host name.
fn is_address(entry: &str) -> bool {
    let bare = entry.split_once('/').map_or(entry, |(ip, _)| ip);
    bare.parse::<std::net::IpAddr>().is_ok()
}

impl NetworkConfig {
    /// Adds a deny of all egress: the create's `allow_internet_access:
    /// false`, which E2B defines as exactly that.
    pub fn deny_all(&mut self) {
        self.deny_out.push(ALL_TRAFFIC.to_owned());
    }

    /// The policy these rules ask for, or why they cannot be enforced.
    pub fn policy(&self) -> Result<Policy, String> {
        let unsupported = [
            (self.egress_proxy.is_some(), "egressProxy"),
            (self.mask_request_host.is_some(), "maskRequestHost"),
            (!self.https_ports.is_empty(), "httpsPorts"),
            (self.rules.as_ref().is_some_and(|r| !r.is_empty()), "rules"),
        ];
        if let Some((_, name)) = unsupported.iter().find(|(set, _)| *set) {
            return Err(format!(
                "network.{name} is not supported by sandkeep's E2B endpoint; create the sandbox \
                 without it"
            ));
        }
        let mut hosts = Vec::with_capacity(self.allow_out.len());
        for entry in &self.allow_out {
            match sandkeep_provider::host_pattern(entry) {
                Some(host) if !is_address(entry) => hosts.push(host),
                _ => {
                    return Err(format!(
                        "network.allowOut {entry:?}: sandkeep narrows egress to host names only \
                         (\"example.com\" or \"*.example.com\"), not to addresses"
                    ));
                }
            }
        }
        if let Some(entry) = self.deny_out.iter().find(|e| e.as_str() != ALL_TRAFFIC) {
            return Err(format!(
                "network.denyOut {entry:?}: sandkeep can deny all egress ({ALL_TRAFFIC:?}) but not \
                 single addresses or ranges"
            ));
        }
        let deny_all = !self.deny_out.is_empty();
        if self.dns_servers.as_ref().is_some_and(|d| !d.is_empty()) {
            return Err(
                "network.dnsServers: sandkeep resolves allowed names through its egress proxy \
                 and cannot open other DNS servers; omit it or pass []"
                    .to_owned(),
            );
        }
        Ok(match (deny_all, self.allow_out.is_empty()) {
            (true, true) => Policy {
                network: Some(Network::None),
                allow_hosts: Vec::new(),
            },
            (true, false) => Policy {
                network: Some(Network::Internet),
                allow_hosts: hosts,
            },
            (false, _) => Policy::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> Result<Policy, String> {
        serde_json::from_value::<NetworkConfig>(json)
            .map_err(|e| e.to_string())?
            .policy()
    }

    #[test]
    fn deny_all_is_no_network_and_with_names_is_allow_hosts() {
        let none = config(serde_json::json!({"denyOut": ["0.0.0.0/0"]})).unwrap();
        assert_eq!(none.network, Some(Network::None));
        let narrowed = config(serde_json::json!({
            "denyOut": ["0.0.0.0/0"], "allowOut": ["pypi.org", "*.pythonhosted.org"]
        }))
        .unwrap();
        assert_eq!(narrowed.network, Some(Network::Internet));
        assert_eq!(narrowed.allow_hosts, ["pypi.org", "*.pythonhosted.org"]);
        assert_eq!(config(serde_json::json!({})).unwrap(), Policy::default());
    }

    #[test]
    fn what_cannot_be_enforced_is_refused() {
        for refused in [
            serde_json::json!({"denyOut": ["8.8.8.8"]}),
            serde_json::json!({"denyOut": ["0.0.0.0/0"], "allowOut": ["1.1.1.1"]}),
            serde_json::json!({"allowOut": ["10.0.0.0/8"]}),
            serde_json::json!({"maskRequestHost": "x.${PORT}"}),
            serde_json::json!({"rules": {"api.example.com": {}}}),
            serde_json::json!({"egressProxy": {"address": "socks5://h:1"}}),
            serde_json::json!({"dnsServers": ["1.1.1.1"]}),
            serde_json::json!({"somethingNew": true}),
        ] {
            assert!(config(refused.clone()).is_err(), "{refused} was accepted");
        }
    }
}
