//! What a local provider is configured with: its state directory
//! (`SANDKEEP_HOME`), the executable it runs as keeper and task helper, the
//! process-only switch, the host-wide bounds of its sandboxes, and the
//! address ranges its sandboxes' egress proxies trust
//! (`SANDKEEP_EGRESS_TRUST`), and where its port forwards listen. Owns reading them from the environment; it
//! must not touch the disk or start anything (the provider does, on `new`).

use crate::bounds::HostBounds;
use sandkeep_proto::shell::state_base;
use std::path::PathBuf;

use crate::netpolicy::{EGRESS_TRUST_VAR, EgressTrust};

/// Where the provider keeps state and which executable it runs.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// `SANDKEEP_HOME`.
    pub home: PathBuf,
    /// The `sandkeep` executable: spawned as keeper and bound into every
    /// sandbox as the task helper.
    pub exe: PathBuf,
    /// Skip namespaces even where the kernel offers them: the weaker
    /// `landlock` / `process-only` level, reported as such. Hosts that
    /// refuse namespaces get it automatically, with a warning.
    pub process_only: bool,
    /// How many sandboxes, and how much memory, the state directory's
    /// sandboxes may hold together.
    pub bounds: HostBounds,
    /// Ranges that lead to the Internet on this host although the
    /// registries refuse them; each sandbox's proxy gets them at create.
    pub egress_trust: EgressTrust,
    /// Where port forwards listen (`serve --expose-addr`): loopback unless
    /// the operator says otherwise.
    pub expose_addr: std::net::IpAddr,
}

impl LocalConfig {
    pub fn new(home: impl Into<PathBuf>, exe: impl Into<PathBuf>) -> Self {
        Self {
            home: home.into(),
            exe: exe.into(),
            process_only: false,
            bounds: HostBounds::of_this_host(),
            egress_trust: EgressTrust::default(),
            expose_addr: std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }

    pub fn with_expose_addr(self, expose_addr: std::net::IpAddr) -> Self {
        Self {
            expose_addr,
            ..self
        }
    }

    pub fn with_egress_trust(self, egress_trust: EgressTrust) -> Self {
        Self {
            egress_trust,
            ..self
        }
    }

    pub fn with_bounds(self, bounds: HostBounds) -> Self {
        Self { bounds, ..self }
    }

    pub fn with_process_only(self, process_only: bool) -> Self {
        Self {
            process_only,
            ..self
        }
    }

    /// `SANDKEEP_HOME` (see [`LocalConfig::home_from_env`]), the running
    /// executable, the bounds of [`HostBounds::from_env`], and
    /// `SANDKEEP_EGRESS_TRUST` (empty when unset).
    pub fn from_env() -> std::io::Result<Self> {
        let config = Self::new(Self::home_from_env()?, std::env::current_exe()?);
        Ok(config
            .with_bounds(HostBounds::from_env()?)
            .with_egress_trust(Self::egress_trust_from_env()?))
    }

    /// `SANDKEEP_HOME`, else `${XDG_STATE_HOME:-$HOME/.local/state}/sandkeep`.
    pub fn home_from_env() -> std::io::Result<PathBuf> {
        if let Some(h) = std::env::var_os("SANDKEEP_HOME").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(h));
        }
        let state = state_base(
            std::env::var_os("XDG_STATE_HOME").as_deref(),
            std::env::var_os("HOME").as_deref(),
        )
        .ok_or_else(|| {
            std::io::Error::other(
                "neither SANDKEEP_HOME, an absolute XDG_STATE_HOME nor HOME is set; set SANDKEEP_HOME",
            )
        })?;
        Ok(state.join("sandkeep"))
    }

    /// `SANDKEEP_EGRESS_TRUST`, refused whole (naming the variable and
    /// the entry; kind `InvalidInput`) when any entry is malformed or
    /// names what is never trusted.
    pub fn egress_trust_from_env() -> std::io::Result<EgressTrust> {
        let invalid = |why: String| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{why}; fix or unset {EGRESS_TRUST_VAR}"),
            )
        };
        match std::env::var(EGRESS_TRUST_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(EgressTrust::default()),
            Err(std::env::VarError::NotUnicode(v)) => {
                Err(invalid(format!("{EGRESS_TRUST_VAR}={v:?} is not UTF-8")))
            }
            Ok(text) => text
                .parse()
                .map_err(|e| invalid(format!("{EGRESS_TRUST_VAR}={text:?}: {e}"))),
        }
    }
}
