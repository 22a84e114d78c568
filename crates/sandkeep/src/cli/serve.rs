//! `sandkeep serve [--http ADDR] [--auth-token T]`: the MCP server entry
//! point. It sets up logging (stderr only), the local provider and the
//! service, then hands over to the chosen transport in [`crate::mcp`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use crate::mcp;
use crate::provider;
use crate::service::Service;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g.
    /// 127.0.0.1:8765). A non-loopback address requires --auth-token.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Bearer token HTTP clients must send (`Authorization: Bearer T`).
    #[arg(
        long,
        value_name = "T",
        env = "SANDKEEP_AUTH_TOKEN",
        hide_env_values = true
    )]
    pub auth_token: Option<String>,
    /// Seconds of inactivity after which an HTTP session ends (and its
    /// unretained sandboxes are destroyed).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub session_idle_timeout: u64,
}

pub fn run(args: ServeArgs) -> i32 {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SANDKEEP_LOG")
                .unwrap_or_else(|_| "sandkeep=info,rmcp=warn".into()),
        )
        .init();

    let addr = match args.http.as_deref().map(resolve).transpose() {
        Ok(a) => a,
        Err(message) => {
            eprintln!("sandkeep serve: {message}");
            return 2;
        }
    };
    let provider = match provider::from_env() {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "sandkeep serve: cannot open the local provider: {e}; run `sandkeep doctor` to see what is missing"
            );
            return 1;
        }
    };
    let service = Arc::new(Service::new(provider, secrets(args.auth_token.as_deref())));
    match addr {
        None => mcp::stdio::run(service),
        Some(addr) => mcp::http::run(
            service,
            mcp::http::HttpOptions {
                addr,
                auth_token: args.auth_token,
                session_idle: Duration::from_secs(args.session_idle_timeout),
            },
        ),
    }
}

fn resolve(text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .map_err(|e| format!("--http {text:?}: {e}; give HOST:PORT, e.g. 127.0.0.1:8765"))?
        .next()
        .ok_or_else(|| {
            format!("--http {text:?} resolves to no address; give HOST:PORT, e.g. 127.0.0.1:8765")
        })
}

/// The server's own secrets, masked in every output page: the configured
/// ones and the HTTP auth token. The CLI masks the same.
pub(super) fn secrets(auth_token: Option<&str>) -> Vec<String> {
    let mut all = crate::service::configured_secrets();
    all.extend(auth_token.map(str::to_owned));
    all
}
