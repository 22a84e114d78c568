//! `sandkeep serve [--http ADDR] [--auth-token T]`: the MCP server entry
//! point. It sets up logging (stderr only), the local provider and the
//! service, then hands over to the chosen transport in [`crate::mcp`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use super::secret_file;
use crate::mcp;
use crate::provider;
use crate::service::{Ceilings, Service};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where sandboxes live: `local` (namespaced sandboxes on this host,
    /// configured by SANDKEEP_HOME and SANDKEEP_EGRESS_TRUST) or `e2b`
    /// (E2B-compatible clouds, configured by E2B_API_KEY, E2B_DOMAIN,
    /// E2B_API_URL and E2B_SANDBOX_URL).
    #[arg(long, value_enum, env = "SANDKEEP_PROVIDER", default_value = "local")]
    pub provider: provider::Kind,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g.
    /// 127.0.0.1:8765). Every request needs the bearer token, loopback
    /// included.
    #[arg(long, value_name = "ADDR", conflicts_with = "e2b")]
    pub http: Option<String>,
    /// Serve the E2B-compatible API and envd at http://ADDR instead of MCP
    /// (e.g. 127.0.0.1:3000): set E2B_API_URL and E2B_SANDBOX_URL to it.
    #[arg(long, value_name = "ADDR")]
    pub e2b: Option<String>,
    /// Host directory that sandboxes may mount at the same path (repeatable):
    /// `PATH[:ro|cow|rw]`, default ro. create_sandbox mounts all of them
    /// unless its `shares` picks some; an agent never names another host
    /// path. `cow` keeps writes in the sandbox until apply_changes.
    #[command(flatten)]
    pub shares: super::shares::ShareArgs,
    /// The API key E2B clients must send (E2B_API_KEY). Without it the
    /// server generates one, writes it to $SANDKEEP_HOME/e2b-api-key (mode
    /// 0600) and prints it on stderr; a non-loopback --e2b address needs it.
    #[arg(
        long,
        value_name = "KEY",
        env = "SANDKEEP_E2B_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Bearer token HTTP clients must send (`Authorization: Bearer T`).
    /// Without it the server uses the one kept in $SANDKEEP_HOME/http-token
    /// (mode 0600), generating it at the first start, and prints it on
    /// stderr: the same across restarts and for every server on this state
    /// directory.
    #[arg(
        long,
        value_name = "T",
        env = "SANDKEEP_AUTH_TOKEN",
        hide_env_values = true
    )]
    pub auth_token: Option<String>,
    /// Serve HTTP without a token: only on a loopback address, and every
    /// local user and process can then use the server.
    #[arg(long, conflicts_with = "auth_token")]
    pub insecure_no_auth: bool,
    /// With --http: replace the token in $SANDKEEP_HOME/http-token with a
    /// new one before serving. Clients registered with the old one get 401
    /// from now on (servers already running keep the token they read).
    #[arg(long, requires = "http", conflicts_with_all = ["auth_token", "insecure_no_auth"])]
    pub rotate_token: bool,
    /// Open HTTP connections at once. A connection with no request in
    /// flight for 10 s is closed, and gives its place up at once to a new
    /// one when the server is full; only when every place has a request in
    /// flight is one more answered 503.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
    /// Open HTTP connections from one peer (an IPv4 address, an IPv6 /64);
    /// past it the peer's own idle connections make room [default: half of
    /// --max-connections]. Behind a reverse proxy every client is the
    /// proxy: set it to --max-connections.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections_per_peer: Option<u32>,
    /// Live HTTP (legacy) sessions at once; one more is answered 503 while
    /// the existing ones keep working.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_sessions: u32,
    /// Sandboxes of this state directory alive at once, whoever made them
    /// (servers, the CLI); one more create_sandbox is a tool error, and the
    /// E2B endpoint answers 429 [env: SANDKEEP_MAX_SANDBOXES; default: 16
    /// per CPU of this host]. Local provider only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sandboxes: Option<u32>,
    /// The memory_mib all live sandboxes of this state directory may
    /// commit together (2048 for one that asked for none) [env:
    /// SANDKEEP_MAX_TOTAL_MEMORY_MIB; default: 80% of this host's RAM].
    /// Local provider only.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(64..))]
    pub max_total_memory_mib: Option<u64>,
    /// The most memory_mib a create_sandbox may ask for [default: 16384].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(64..))]
    pub max_memory_mib: Option<u64>,
    /// The most cpus a create_sandbox may ask for [default: this host's CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_cpus: Option<u32>,
    /// The most pids a create_sandbox may ask for [default: 32768].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(16..))]
    pub max_pids: Option<u64>,
    /// The most disk_mib a create_sandbox may ask for [default: 65536].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(64..))]
    pub max_disk_mib: Option<u64>,
    /// With --http: also accept browser requests from this origin (e.g.
    /// http://localhost:6274 for the MCP Inspector's web UI), exactly as the
    /// browser sends it. Repeatable. The bearer token is still required.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<String>,
    /// Seconds of inactivity after which an HTTP session ends (and its
    /// unretained sandboxes are destroyed).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub session_idle_timeout: u64,
    /// The address port forwards (expose_port) listen on [default:
    /// 127.0.0.1]. Anything but loopback makes exposed sandbox servers
    /// reachable from other machines. Local provider only.
    #[arg(long, value_name = "ADDR")]
    pub expose_addr: Option<std::net::IpAddr>,
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

    if args.provider == provider::Kind::E2b && args.expose_addr.is_some() {
        eprintln!(
            "sandkeep serve: --expose-addr is where the local provider's port forwards listen; \
             e2b sandboxes' ports are reached at E2B's own host names: drop it"
        );
        return 2;
    }
    if let Some(addr) = args.expose_addr.filter(|a| !a.is_loopback()) {
        tracing::warn!(
            "--expose-addr {addr}: exposed sandbox ports are reachable from other machines"
        );
    }
    if args.provider == provider::Kind::E2b && bounds(&args) != provider::Bounds::default() {
        eprintln!(
            "sandkeep serve: --max-sandboxes and --max-total-memory-mib bound the local \
             provider's sandboxes; the e2b provider's are bounded by the E2B account: drop them"
        );
        return 2;
    }
    let shares = match super::shares::resolve(&args.shares.shares) {
        Ok(shares) => shares,
        Err(e) => {
            eprintln!("sandkeep serve: {e}");
            return 2;
        }
    };
    if let Some(e2b) = &args.e2b {
        return serve_e2b(
            e2b,
            args.api_key.clone(),
            args.provider,
            bounds(&args),
            crate::e2b::E2bOptions {
                addr: "127.0.0.1:0".parse().expect("an address"),
                api_key: String::new(),
                connections: connection_caps(&args),
                shares,
            },
        );
    }
    let addr = match args.http.as_deref().map(resolve).transpose() {
        Ok(a) => a,
        Err(message) => {
            eprintln!("sandkeep serve: {message}");
            return 2;
        }
    };
    let provider = match provider::open_bounded(args.provider, bounds(&args)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "sandkeep serve: cannot open the {} provider: {e}; run `sandkeep doctor` to see what is missing",
                args.provider
            );
            return 1;
        }
    };
    let (auth, token_file) = match addr.map(|_| http_auth(&args)).transpose() {
        Ok(Some((auth, file))) => (Some(auth), file),
        Ok(None) => (None, None),
        Err(message) => {
            eprintln!("sandkeep serve: {message}");
            return 1;
        }
    };
    let token = match &auth {
        Some(mcp::http::Auth::Token { value, .. }) => Some(value.as_str()),
        _ => None,
    };
    let defaults = Ceilings::default();
    let ceilings = Ceilings {
        memory_mib: args.max_memory_mib.unwrap_or(defaults.memory_mib),
        milli_cpus: args.max_cpus.map_or(defaults.milli_cpus, |c| c * 1000),
        pids: args.max_pids.unwrap_or(defaults.pids),
        disk_mib: args.max_disk_mib.unwrap_or(defaults.disk_mib),
    };
    let whereabouts = provider::whereabouts(args.provider);
    tracing::info!("{whereabouts}");
    let whereabouts = mcp::Whereabouts::new(whereabouts);
    let service = Arc::new(
        Service::new(provider, secrets(token))
            .with_ceilings(ceilings)
            .with_shares(shares),
    );
    let (Some(addr), Some(auth)) = (addr, auth) else {
        return mcp::stdio::run(service, whereabouts);
    };
    let banner_auth = auth.clone();
    mcp::http::run(
        service,
        mcp::http::HttpOptions {
            addr,
            banner: Box::new(move |url| banner(&banner_auth, token_file.as_deref(), url)),
            auth,
            session_idle: Duration::from_secs(args.session_idle_timeout),
            connections: connection_caps(&args),
            max_sessions: args.max_sessions as usize,
            allowed_origins: args.allow_origin.clone(),
            whereabouts,
        },
    )
}

/// `serve --e2b ADDR`: the key (configured, or generated on loopback
/// only), then the endpoint.
/// `options` carries everything but the address and the key, which are
/// resolved here.
fn serve_e2b(
    text: &str,
    configured: Option<String>,
    kind: provider::Kind,
    bounds: provider::Bounds,
    options: crate::e2b::E2bOptions,
) -> i32 {
    let addr = match resolve(text) {
        Ok(a) => a,
        Err(message) => {
            eprintln!("sandkeep serve: {}", message.replace("--http", "--e2b"));
            return 2;
        }
    };
    let provider = match provider::open_bounded(kind, bounds) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "sandkeep serve: cannot open the {kind} provider: {e}; run `sandkeep doctor` to see what is missing"
            );
            return 1;
        }
    };
    let api_key = match configured {
        Some(key) if !key.is_empty() => key,
        _ if !addr.ip().is_loopback() => {
            eprintln!(
                "sandkeep serve: --e2b {addr} is not a loopback address; set --api-key or \
                 SANDKEEP_E2B_API_KEY so only your clients can use it"
            );
            return 2;
        }
        _ => match secret_file::replace(secret_file::E2B_API_KEY) {
            Ok(secret_file::Secret { value, file }) => {
                eprintln!(
                    "sandkeep serve: E2B API key written to {} (E2B_API_KEY={value})",
                    file.display()
                );
                value
            }
            Err(message) => {
                eprintln!("sandkeep serve: {message}");
                return 1;
            }
        },
    };
    crate::e2b::run(
        provider,
        crate::e2b::E2bOptions {
            addr,
            api_key,
            ..options
        },
    )
}

fn bounds(args: &ServeArgs) -> provider::Bounds {
    provider::Bounds {
        sandboxes: args.max_sandboxes,
        memory_mib: args.max_total_memory_mib,
        expose_addr: args.expose_addr,
    }
}

fn connection_caps(args: &ServeArgs) -> crate::edge::Caps {
    crate::edge::Caps::new(
        args.max_connections as usize,
        args.max_connections_per_peer.map(|n| n as usize),
    )
}

/// The configured token, none with `--insecure-no-auth`, else the one kept
/// in `$SANDKEEP_HOME/http-token` (new with `--rotate-token`, or when there
/// is none yet).
fn http_auth(args: &ServeArgs) -> Result<(mcp::http::Auth, Option<std::path::PathBuf>), String> {
    if args.insecure_no_auth {
        return Ok((mcp::http::Auth::InsecureNoAuth, None));
    }
    if let Some(value) = &args.auth_token {
        let value = value.clone();
        return Ok((mcp::http::Auth::Token { value }, None));
    }
    let secret = if args.rotate_token {
        secret_file::replace(secret_file::HTTP_TOKEN)?
    } else {
        secret_file::reuse_or_create(secret_file::HTTP_TOKEN)?
    };
    Ok((
        mcp::http::Auth::Token {
            value: secret.value,
        },
        Some(secret.file),
    ))
}

/// What the server prints once it listens at `url`: the header every
/// request needs and how to register the server in a client.
fn banner(auth: &mcp::http::Auth, file: Option<&std::path::Path>, url: &str) -> String {
    let mcp::http::Auth::Token { value } = auth else {
        return String::new();
    };
    let Some(file) = file else {
        return "sandkeep: every request needs the header `Authorization: Bearer TOKEN` with the \
                configured token (--auth-token / SANDKEEP_AUTH_TOKEN)"
            .to_owned();
    };
    let claude = super::mcp_config::render_http(super::mcp_config::Client::ClaudeCode, url, value)
        .unwrap_or_default();
    format!(
        "sandkeep: every request needs the header `Authorization: Bearer {value}` (token kept in \
         {}: the same after a restart and for every server on this state directory; \
         --rotate-token replaces it).\n\
         sandkeep: Claude Code: {claude}\n\
         sandkeep: other clients: sandkeep mcp-config CLIENT --http {url}",
        file.display()
    )
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
