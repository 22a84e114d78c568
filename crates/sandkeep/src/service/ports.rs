//! expose_port (SPEC.md §14): makes a port a server listens on inside a
//! sandbox reachable from the host, through the provider (the local
//! provider's keeper keeps the forward; e2b answers E2B's own host name).
//! Also the `ports` entry of create_sandbox's and list_sandboxes' results.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Service, Session, ToolError, validate};
use crate::provider::{PortForward, ProviderError};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExposePortArgs {
    /// Sandbox whose port to expose. Default: this session's sandbox from
    /// the last create_sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// The TCP port a server listens on inside the sandbox (on 127.0.0.1
    /// or every address).
    #[schemars(range(min = 1, max = 65535))]
    pub port: u64,
}

/// A port of a sandbox and where it is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PortEntry {
    /// The port inside the sandbox.
    pub port: u16,
    /// Where to connect from outside the sandbox (any TCP protocol; an
    /// HTTP server opens in a browser).
    pub url: String,
}

impl From<PortForward> for PortEntry {
    fn from(f: PortForward) -> Self {
        Self {
            port: f.port.get(),
            url: f.url,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExposePortResult {
    /// The sandbox.
    pub sandbox_id: String,
    /// The port inside the sandbox.
    pub port: u16,
    /// Where to connect from outside the sandbox: the same for the same
    /// port as long as the sandbox lives.
    pub url: String,
}

impl Service {
    pub async fn expose_port(
        &self,
        session: &Session,
        args: ExposePortArgs,
    ) -> Result<ExposePortResult, ToolError> {
        let port = validate::port(args.port)?;
        let id = match args.sandbox_id.as_deref() {
            Some(s) => validate::sandbox_id(s)?,
            None => session
                .default_sandbox()
                .ok_or(ToolError::NoDefaultSandbox)?,
        };
        let forward = match self.provider.expose_port(&id, port).await {
            Ok(f) => f,
            Err(e @ ProviderError::NoSuchSandbox(_)) => {
                session.forget(&id);
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        Ok(ExposePortResult {
            sandbox_id: id.to_string(),
            port: forward.port.get(),
            url: forward.url,
        })
    }
}
