//! `sandkeep serve --e2b ADDR`: the E2B-compatible endpoint (crate
//! `sandkeep-e2b-endpoint`, a router over the provider) hosted here, on
//! the runtime and HTTP edge `serve --http` uses, with its records in
//! `$SANDKEEP_HOME/e2b`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::provider::Provider;

/// What the endpoint needs to run.
#[derive(Debug)]
pub struct E2bOptions {
    pub addr: SocketAddr,
    pub api_key: String,
    /// Open connections at once, in all and per peer.
    pub connections: crate::edge::Caps,
    /// Host shares every sandbox made here mounts.
    pub shares: Vec<sandkeep_shares::ShareConfig>,
}

/// Serves until SIGTERM/SIGINT; returns the exit code.
pub fn run(provider: Arc<dyn Provider>, options: E2bOptions) -> i32 {
    let records = match crate::provider::home_from_env() {
        Ok(home) => home.join("e2b"),
        Err(e) => {
            eprintln!("sandkeep serve: cannot locate SANDKEEP_HOME: {e}");
            return 1;
        }
    };
    let shares = options.shares.iter().map(|s| s.share()).collect();
    let router = match sandkeep_e2b_endpoint::router(provider, options.api_key, records, shares) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sandkeep serve: {e}");
            return 1;
        }
    };
    let Some(runtime) = crate::runtime::serve_runtime() else {
        return 1;
    };
    let code = runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(options.addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sandkeep serve: cannot listen on {}: {e}", options.addr);
                return 1;
            }
        };
        let addr = listener.local_addr().unwrap_or(options.addr);
        eprintln!(
            "sandkeep serve: E2B-compatible endpoint at http://{addr}\n  \
             E2B_API_URL=http://{addr} E2B_SANDBOX_URL=http://{addr} E2B_API_KEY=<the key>"
        );
        let shutdown = match crate::edge::shutdown_on_signal() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sandkeep serve: cannot watch for SIGTERM/SIGINT: {e}");
                return 1;
            }
        };
        crate::edge::serve(listener, router, options.connections, shutdown).await;
        0
    });
    // As `serve --http`: the edge waited for its connections; what is
    // left (a process's retention timer) is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}
