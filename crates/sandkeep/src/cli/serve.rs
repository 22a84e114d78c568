//! `sandkeep serve [--http ADDR] [--auth-token T]`: the MCP server entry
//! point. It sets up logging (stderr only), the local provider and the
//! service, then hands over to the chosen transport in [`crate::mcp`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

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
    /// Without it the server generates one, writes it to
    /// $SANDKEEP_HOME/http-token (mode 0600) and prints it on stderr.
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
    /// Open HTTP connections at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
    /// Live HTTP (legacy) sessions at once; one more is answered 503 while
    /// the existing ones keep working.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_sessions: u32,
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

    if let Some(e2b) = &args.e2b {
        return serve_e2b(
            e2b,
            args.api_key.clone(),
            args.provider,
            args.max_connections as usize,
        );
    }
    let addr = match args.http.as_deref().map(resolve).transpose() {
        Ok(a) => a,
        Err(message) => {
            eprintln!("sandkeep serve: {message}");
            return 2;
        }
    };
    let provider = match provider::open(args.provider) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "sandkeep serve: cannot open the {} provider: {e}; run `sandkeep doctor` to see what is missing",
                args.provider
            );
            return 1;
        }
    };
    let auth = match addr.map(|_| http_auth(&args)).transpose() {
        Ok(auth) => auth,
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
    let service = Arc::new(Service::new(provider, secrets(token)).with_ceilings(ceilings));
    let (Some(addr), Some(auth)) = (addr, auth) else {
        return mcp::stdio::run(service, whereabouts);
    };
    mcp::http::run(
        service,
        mcp::http::HttpOptions {
            addr,
            auth,
            session_idle: Duration::from_secs(args.session_idle_timeout),
            max_connections: args.max_connections as usize,
            max_sessions: args.max_sessions as usize,
            allowed_origins: args.allow_origin.clone(),
            whereabouts,
        },
    )
}

/// `serve --e2b ADDR`: the key (configured, or generated on loopback
/// only), then the endpoint.
fn serve_e2b(
    text: &str,
    configured: Option<String>,
    kind: provider::Kind,
    max_connections: usize,
) -> i32 {
    let addr = match resolve(text) {
        Ok(a) => a,
        Err(message) => {
            eprintln!("sandkeep serve: {}", message.replace("--http", "--e2b"));
            return 2;
        }
    };
    let provider = match provider::open(kind) {
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
        _ => match generated_secret("e2b-api-key") {
            Ok((key, file)) => {
                eprintln!(
                    "sandkeep serve: E2B API key written to {} (E2B_API_KEY={key})",
                    file.display()
                );
                key
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
            max_connections,
        },
    )
}

/// A new secret (128 bits from the OS) written to `$SANDKEEP_HOME/NAME`.
fn generated_secret(name: &str) -> Result<(String, std::path::PathBuf), String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot generate a secret: {e}"))?;
    let value: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let file = provider::home_from_env()
        .map_err(|e| format!("cannot locate SANDKEEP_HOME for {name}: {e}"))?
        .join(name);
    write_private(&file, value.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok((value, file))
}

/// The configured token, none with `--insecure-no-auth`, else a new one
/// (128 bits from the OS) written to `$SANDKEEP_HOME/http-token`.
fn http_auth(args: &ServeArgs) -> Result<mcp::http::Auth, String> {
    if args.insecure_no_auth {
        return Ok(mcp::http::Auth::InsecureNoAuth);
    }
    if let Some(value) = &args.auth_token {
        return Ok(mcp::http::Auth::Token {
            value: value.clone(),
            file: None,
        });
    }
    let (value, file) = generated_secret("http-token")?;
    Ok(mcp::http::Auth::Token {
        value,
        file: Some(file),
    })
}

/// Replaces `path` atomically with a file of mode 0600: a reader sees the
/// old token or the new one, and never a moment of wider permissions.
pub(crate) fn write_private(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut f| f.write_all(content).and_then(|()| f.sync_all()));
    match written.and_then(|()| std::fs::rename(&temp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
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
