//! Where sandboxes live: the [`Provider`] trait and its types (crate
//! `sandkeep-provider`), the embedded local provider (crate
//! `sandkeep-local`), the remote E2B provider (crate `sandkeep-e2b`), and
//! the choice between them from the environment.

pub use sandkeep_e2b as e2b;
pub use sandkeep_local as local;
pub use sandkeep_provider::*;

use std::sync::Arc;

/// The providers a configuration can name (`SANDKEEP_PROVIDER`,
/// `--provider`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Namespaced sandboxes on this host, state in `SANDKEEP_HOME`.
    #[default]
    Local,
    /// E2B-compatible clouds, configured by `E2B_API_KEY`, `E2B_DOMAIN`,
    /// `E2B_API_URL` and `E2B_SANDBOX_URL`.
    E2b,
}

impl Kind {
    /// `SANDKEEP_PROVIDER`, `local` when unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var("SANDKEEP_PROVIDER").as_deref().map(str::trim) {
            Err(_) | Ok("" | "local") => Ok(Self::Local),
            Ok("e2b") => Ok(Self::E2b),
            Ok(other) => Err(ProviderError::Misconfigured(format!(
                "SANDKEEP_PROVIDER={other:?} is not a provider: use \"local\" or \"e2b\""
            ))),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Local => "local",
            Self::E2b => e2b::KIND,
        })
    }
}

/// The provider this process's configuration names; the choice lives here
/// so the CLI and `serve` never name a provider themselves.
pub fn from_env() -> Result<Arc<dyn Provider>> {
    open(Kind::from_env()?)
}

/// The provider of `kind`, configured from the environment.
pub fn open(kind: Kind) -> Result<Arc<dyn Provider>> {
    open_bounded(kind, Bounds::default())
}

/// Host-wide bounds that replace what the environment sets (`serve`'s
/// flags); they bound the local provider's sandboxes only (the e2b
/// provider's are the E2B account's), and the e2b provider ignores them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    pub sandboxes: Option<u32>,
    pub memory_mib: Option<u64>,
    /// Where the local provider's port forwards listen (`--expose-addr`);
    /// loopback when unset.
    pub expose_addr: Option<std::net::IpAddr>,
}

/// The provider of `kind`, configured from the environment and `bounds`.
pub fn open_bounded(kind: Kind, bounds: Bounds) -> Result<Arc<dyn Provider>> {
    Ok(match kind {
        Kind::Local => {
            let config = local::LocalConfig::from_env().map_err(|source| match source.kind() {
                std::io::ErrorKind::InvalidInput => {
                    ProviderError::Misconfigured(source.to_string())
                }
                _ => ProviderError::Io {
                    context: "configure the local provider".into(),
                    source,
                },
            })?;
            let host = local::HostBounds {
                sandboxes: bounds.sandboxes.unwrap_or(config.bounds.sandboxes),
                memory_mib: bounds.memory_mib.unwrap_or(config.bounds.memory_mib),
            };
            let config = match bounds.expose_addr {
                Some(addr) => config.with_expose_addr(addr),
                None => config,
            };
            Arc::new(local::LocalProvider::new(config.with_bounds(host))?)
        }
        Kind::E2b => Arc::new(e2b::E2bProvider::from_env()?),
    })
}

/// Whether opening a provider failed on a refused setting (a malformed
/// `SANDKEEP_EGRESS_TRUST` or `SANDKEEP_MAX_*`), whose message says itself
/// what to change (a hint about the state directory would only mislead).
pub fn is_bad_setting(e: &ProviderError) -> bool {
    matches!(e, ProviderError::Misconfigured(_))
}

/// Tells the configured provider that this process is about to create a
/// sandbox, so it may start work ahead (the local provider starts the
/// keeper; see `sandkeep_local::prestart`). For one-shot processes only:
/// a server creates on demand.
pub fn about_to_create() {
    if matches!(Kind::from_env(), Ok(Kind::Local)) {
        local::prestart();
    }
}

/// `SANDKEEP_HOME` as this process's configuration resolves it (the real
/// absolute path, its parents checked): the server keeps its own files
/// there too (the generated HTTP token).
pub fn home_from_env() -> std::io::Result<std::path::PathBuf> {
    local::trusted_path(&local::LocalConfig::home_from_env()?)
}

/// Where the sandboxes of `kind` live, as "no such sandbox" errors and the
/// server's log name it: a client whose server runs with other settings
/// than the CLI's sees none of the CLI's sandboxes, and must be told why.
pub fn whereabouts(kind: Kind) -> String {
    match kind {
        Kind::Local => match home_from_env() {
            Ok(home) => format!(
                "provider local, state directory {}; a sandbox made with another SANDKEEP_HOME \
                 is not visible here",
                home.display()
            ),
            Err(e) => format!("provider local, state directory unknown: {e}"),
        },
        Kind::E2b => match e2b::E2bConfig::from_env() {
            Ok(config) => format!(
                "provider e2b, API {}; only sandboxes sandkeep made with the same E2B_API_KEY \
                 are visible here",
                config.api_url
            ),
            Err(e) => format!("provider e2b: {e}"),
        },
    }
}
