//! The remote provider's configuration, read from the environment as the
//! official E2B SDKs read it (`E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL`,
//! `E2B_SANDBOX_URL`), and where each sandbox's envd is reached.

use sandkeep_envd_wire::ENVD_PORT;
use sha2::{Digest, Sha256};

/// The domains E2B itself runs, whose envd is one host routed by headers
/// (the SDKs' `SUPPORTED_SANDBOX_DOMAINS`).
const SHARED_HOST_DOMAINS: &[&str] = &["e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"];

#[derive(Clone)]
pub struct E2bConfig {
    pub api_key: String,
    pub domain: String,
    /// The REST API's base URL, without a trailing slash.
    pub api_url: String,
    /// One envd URL for every sandbox (`E2B_SANDBOX_URL`), routed by the
    /// `E2b-Sandbox-Id` header.
    pub sandbox_url: Option<String>,
}

impl std::fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bConfig")
            .field("domain", &self.domain)
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "E2B_API_KEY is not set: the e2b provider needs the API key of an E2B account (or of an E2B-compatible service)"
)]
pub struct MissingKey;

impl E2bConfig {
    pub fn from_env() -> Result<Self, MissingKey> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let api_key = var("E2B_API_KEY").ok_or(MissingKey)?;
        let domain = var("E2B_DOMAIN").unwrap_or_else(|| "e2b.app".to_owned());
        let api_url = var("E2B_API_URL").unwrap_or_else(|| format!("https://api.{domain}"));
        Ok(Self {
            api_key,
            api_url: api_url.trim_end_matches('/').to_owned(),
            sandbox_url: var("E2B_SANDBOX_URL").map(|u| u.trim_end_matches('/').to_owned()),
            domain,
        })
    }

    /// The envd base URL of sandbox `id`, whose API answer named `domain`
    /// (or none): `E2B_SANDBOX_URL`, else the shared host of E2B's own
    /// domains, else the per-sandbox host name of a self-hosted one.
    pub fn envd_url(&self, id: &str, domain: Option<&str>) -> String {
        if let Some(url) = &self.sandbox_url {
            return url.clone();
        }
        let domain = domain.unwrap_or(&self.domain);
        if SHARED_HOST_DOMAINS.contains(&domain) {
            format!("https://sandbox.{domain}")
        } else {
            format!("https://{ENVD_PORT}-{id}.{domain}")
        }
    }

    /// Where `port` of sandbox `id` is reached, as the SDKs' `get_host`
    /// names it (`PORT-ID.DOMAIN`, over TLS at E2B's edge). Also with
    /// `E2B_SANDBOX_URL`: one envd URL says nothing of ports, and a
    /// sandkeep endpoint routes this name once it reaches it.
    pub fn port_url(&self, id: &str, port: u16, domain: Option<&str>) -> String {
        let domain = domain.unwrap_or(&self.domain);
        format!("https://{port}-{id}.{domain}")
    }

    /// What marks a sandbox as made by sandkeep with these credentials:
    /// the first 16 hex digits of the key's SHA-256 (the key itself never
    /// leaves this process).
    pub fn owner_tag(&self) -> String {
        let digest = Sha256::digest(self.api_key.as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sandbox_url: Option<&str>) -> E2bConfig {
        E2bConfig {
            api_key: "k".into(),
            domain: "e2b.app".into(),
            api_url: "https://api.e2b.app".into(),
            sandbox_url: sandbox_url.map(str::to_owned),
        }
    }

    #[test]
    fn envd_urls_follow_the_sdks_rules() {
        assert_eq!(
            config(None).envd_url("abc", None),
            "https://sandbox.e2b.app"
        );
        assert_eq!(
            config(None).envd_url("abc", Some("my.cloud")),
            "https://49983-abc.my.cloud"
        );
        assert_eq!(
            config(Some("http://127.0.0.1:9")).envd_url("abc", Some("my.cloud")),
            "http://127.0.0.1:9"
        );
    }

    #[test]
    fn port_urls_are_the_sdks_host_names() {
        assert_eq!(
            config(None).port_url("abc", 3000, None),
            "https://3000-abc.e2b.app"
        );
        assert_eq!(
            config(Some("http://127.0.0.1:9")).port_url("abc", 8080, Some("my.cloud")),
            "https://8080-abc.my.cloud"
        );
    }

    #[test]
    fn the_owner_tag_depends_on_the_key_only() {
        let a = config(None).owner_tag();
        assert_eq!(a.len(), 16);
        let mut other = config(None);
        other.api_key = "other".into();
        assert_ne!(a, other.owner_tag());
    }
}
