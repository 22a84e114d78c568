//! `sandkeep mcp-config CLIENT [--http URL]`: prints the configuration
//! that registers this very binary as a stdio MCP server in CLIENT, with
//! `SANDKEEP_HOME` set explicitly (and `SANDKEEP_EGRESS_TRUST` when this
//! process has it); with `--http`, the registration of a running `sandkeep
//! serve --http` at URL, with the bearer token read from
//! `$SANDKEEP_HOME/http-token`.
//!
//! The `env` entry is the point: several clients (the Inspector, the
//! TypeScript SDK's defaults, Codex) pass a server only a short allow-list
//! of environment variables, so a server started without it silently uses
//! another state directory than the CLI, and the agent sees none of the
//! CLI's sandboxes (nor reaches, on a host that needs the trust setting,
//! what the CLI's sandboxes reach).

use std::path::{Path, PathBuf};

use serde_json::json;

use sandkeep_proto::limits::{RUN_TIMEOUT_DEFAULT, RUN_TIMEOUT_MAX};

use super::{exit, secret_file};
use crate::provider;
use crate::provider::local::{EGRESS_TRUST_VAR, LocalConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// A `claude mcp add` command line (Claude Code).
    ClaudeCode,
    /// The `mcpServers` entry of claude_desktop_config.json.
    ClaudeDesktop,
    /// The `mcpServers` entry of ~/.cursor/mcp.json (or .cursor/mcp.json).
    Cursor,
    /// The `[mcp_servers.sandkeep]` table of ~/.codex/config.toml.
    Codex,
    /// An MCP Inspector command line (web UI; add `--cli` for one-shot calls).
    Inspector,
    /// The common `mcpServers` JSON most other clients read.
    Json,
}

/// Print the MCP client configuration for this binary and state directory.
#[derive(Debug, clap::Args)]
pub struct McpConfigArgs {
    /// The client to configure.
    #[arg(value_enum)]
    pub client: Client,
    /// The state directory to configure [default: this process's
    /// SANDKEEP_HOME, resolved].
    #[arg(long, value_name = "DIR", conflicts_with = "http")]
    pub home: Option<PathBuf>,
    /// Register the running `sandkeep serve --http` at URL (e.g.
    /// http://127.0.0.1:8765/mcp) instead of a stdio server, with the token
    /// that server uses: SANDKEEP_AUTH_TOKEN if set, else the one kept in
    /// $SANDKEEP_HOME/http-token.
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
    /// Host directories the server shares with its sandboxes (see `serve
    /// --share`).
    #[command(flatten)]
    pub shares: super::shares::ShareArgs,
}

/// Prints the configuration; returns the exit code.
pub fn run(args: &McpConfigArgs) -> u8 {
    if let Some(url) = &args.http {
        return run_http(args.client, url);
    }
    let binary = match std::env::current_exe().and_then(std::fs::canonicalize) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("sandkeep mcp-config: cannot locate this sandkeep binary: {e}");
            return exit::OWN_FAILURE;
        }
    };
    let home = match &args.home {
        Some(h) => std::path::absolute(h),
        None => provider::home_from_env(),
    };
    let home = match home {
        Ok(home) => home,
        Err(e) => {
            eprintln!(
                "sandkeep mcp-config: cannot resolve the state directory: {e}; set SANDKEEP_HOME \
                 or pass --home DIR"
            );
            return exit::OWN_FAILURE;
        }
    };
    let mut env = vec![("SANDKEEP_HOME", home.display().to_string())];
    // Checked as the server will check it: a value it would refuse is
    // refused here, not handed to the client.
    match LocalConfig::egress_trust_from_env() {
        Ok(trust) if trust.is_empty() => {}
        Ok(trust) => env.push((EGRESS_TRUST_VAR, trust.to_string())),
        Err(e) => {
            eprintln!("sandkeep mcp-config: {e}");
            return exit::USAGE;
        }
    }
    // Checked now, as the server will check them at its start.
    if let Err(e) = super::shares::resolve(&args.shares.shares) {
        eprintln!("sandkeep mcp-config: {e}");
        return exit::USAGE;
    }
    let serve_args: Vec<String> = args
        .shares
        .shares
        .iter()
        .flat_map(|s| ["--share".to_owned(), s.clone()])
        .collect();
    println!("{}", render(args.client, &binary, &serve_args, &env));
    exit::OK
}

/// `--http URL`: the token the server uses, then the registration; where
/// the token lives goes to stderr, so stdout is the configuration only.
fn run_http(client: Client, url: &str) -> u8 {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        eprintln!(
            "sandkeep mcp-config: --http {url:?} is not a URL: give the one `sandkeep serve \
             --http ADDR` prints, e.g. http://127.0.0.1:8765/mcp"
        );
        return exit::USAGE;
    }
    let token = match http_token() {
        Ok(t) => t,
        Err(message) => {
            eprintln!("sandkeep mcp-config: {message}");
            return exit::OWN_FAILURE;
        }
    };
    match render_http(client, url, &token.value) {
        Ok(text) => {
            println!("{text}");
            eprintln!("sandkeep mcp-config: {}", token.source);
            exit::OK
        }
        Err(message) => {
            eprintln!("sandkeep mcp-config: {message}");
            exit::USAGE
        }
    }
}

/// The token an HTTP server of this configuration uses, and where it came
/// from.
struct Token {
    value: String,
    source: String,
}

fn http_token() -> Result<Token, String> {
    if let Some(value) = std::env::var("SANDKEEP_AUTH_TOKEN")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Ok(Token {
            value,
            source: "the token is SANDKEEP_AUTH_TOKEN's: a server started with another \
                     --auth-token refuses it"
                .into(),
        });
    }
    let file = secret_file::path(secret_file::HTTP_TOKEN)?;
    match secret_file::read(&file)? {
        Some(value) => Ok(Token {
            value,
            source: format!(
                "the token is read from {}, where `sandkeep serve --http` keeps it across \
                 restarts; after `sandkeep serve --rotate-token` run this again",
                file.display()
            ),
        }),
        None => Err(format!(
            "no HTTP token in {} yet: start `sandkeep serve --http ADDR` once with this \
             SANDKEEP_HOME (it writes one there), or set SANDKEEP_AUTH_TOKEN to the server's own",
            file.display()
        )),
    }
}

/// Codex asks before each call of a tool its annotations call destructive,
/// and `codex exec` has no one to ask: with `approval_policy` "on-request"
/// or "never" it refuses run_command, start_task and kill_sandbox
/// ("requires approval"), and "untrusted" keeps it from starting. sandkeep's
/// tools act inside sandboxes only, so approving them is the setting that
/// works.
const CODEX_APPROVAL: &str = "# sandkeep's tools act only inside its sandboxes; without this, Codex \
asks before each\n# run_command, start_task and kill_sandbox, and `codex exec` refuses them\n\
default_tools_approval_mode = \"approve\"";

/// Codex's per-call deadline: run_command waits up to its timeout.
fn codex_timeout() -> String {
    format!(
        "# run_command may take up to its timeout (default {RUN_TIMEOUT_DEFAULT} s, at most \
         {RUN_TIMEOUT_MAX})\ntool_timeout_sec = {RUN_TIMEOUT_MAX}"
    )
}

/// The registration of the HTTP server at `url` with bearer `token`, for
/// the clients whose configuration takes one.
pub fn render_http(client: Client, url: &str, token: &str) -> Result<String, String> {
    let header = format!("Authorization: Bearer {token}");
    let bearer = format!("Bearer {token}");
    Ok(match client {
        Client::ClaudeCode => format!(
            "claude mcp add --transport http --scope user sandkeep {} --header {}",
            shell_quote(url),
            shell_quote(&header)
        ),
        Client::Inspector => format!(
            "npx @modelcontextprotocol/inspector --transport http --server-url {} --header {}",
            shell_quote(url),
            shell_quote(&header)
        ),
        Client::Codex => format!(
            "[mcp_servers.sandkeep]\nurl = {}\nhttp_headers = {{ Authorization = {} }}\n{}\n{CODEX_APPROVAL}",
            toml_string(url),
            toml_string(&bearer),
            codex_timeout()
        ),
        Client::Cursor => pretty(json!({
            "mcpServers": {"sandkeep": {"url": url, "headers": {"Authorization": bearer}}}
        })),
        Client::Json => pretty(json!({
            "mcpServers": {
                "sandkeep": {"type": "http", "url": url, "headers": {"Authorization": bearer}}
            }
        })),
        Client::ClaudeDesktop => {
            return Err(
                "Claude Desktop's configuration file registers stdio servers only (remote ones \
                 are added as connectors in its settings, which send no bearer token): run \
                 `sandkeep mcp-config claude-desktop` without --http"
                    .into(),
            );
        }
    })
}

fn pretty(config: serde_json::Value) -> String {
    serde_json::to_string_pretty(&config).expect("a JSON literal encodes")
}

/// The configuration text for `client`: `binary serve SERVE_ARGS…` with
/// the server's environment.
pub fn render(
    client: Client,
    binary: &Path,
    serve_args: &[String],
    env: &[(&str, String)],
) -> String {
    let bin = binary.display().to_string();
    let argv: Vec<String> = std::iter::once("serve".to_owned())
        .chain(serve_args.iter().cloned())
        .collect();
    let shell_args = argv
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let words = |flag: &str| {
        env.iter()
            .map(|(k, v)| format!("{flag} {k}={}", shell_quote(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match client {
        Client::ClaudeCode => format!(
            "claude mcp add --scope user sandkeep {} -- {} {shell_args}",
            words("--env"),
            shell_quote(&bin)
        ),
        Client::Inspector => format!(
            "npx @modelcontextprotocol/inspector {} {} {shell_args}",
            words("-e"),
            shell_quote(&bin)
        ),
        Client::Codex => format!(
            "[mcp_servers.sandkeep]\ncommand = {}\nargs = [{}]\nenv = {{ {} }}\n{}\n{CODEX_APPROVAL}",
            toml_string(&bin),
            argv.iter()
                .map(|a| toml_string(a))
                .collect::<Vec<_>>()
                .join(", "),
            env.iter()
                .map(|(k, v)| format!("{k} = {}", toml_string(v)))
                .collect::<Vec<_>>()
                .join(", "),
            codex_timeout()
        ),
        Client::ClaudeDesktop | Client::Cursor | Client::Json => {
            let env: serde_json::Map<String, serde_json::Value> = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone().into()))
                .collect();
            let config = json!({
                "mcpServers": {
                    "sandkeep": {
                        "command": bin,
                        "args": argv,
                        "env": env
                    }
                }
            });
            pretty(config)
        }
    }
}

/// A word for a POSIX shell: as is when it is plainly safe, else in single
/// quotes.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A TOML basic string (JSON's escaping is a subset TOML accepts).
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string encodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_gets_the_binary_and_the_servers_environment() {
        let bin = Path::new("/opt/my tools/sandkeep");
        let env = [
            ("SANDKEEP_HOME", "/srv/sandkeep".to_owned()),
            (EGRESS_TRUST_VAR, "203.0.113.0/24,198.18.0.0/15".to_owned()),
        ];
        for client in [
            Client::ClaudeCode,
            Client::ClaudeDesktop,
            Client::Cursor,
            Client::Codex,
            Client::Inspector,
            Client::Json,
        ] {
            let text = render(client, bin, &[], &env);
            for part in [
                "/opt/my tools/sandkeep",
                "SANDKEEP_HOME",
                "/srv/sandkeep",
                "serve",
                EGRESS_TRUST_VAR,
                "203.0.113.0/24,198.18.0.0/15",
            ] {
                assert!(text.contains(part), "{client:?} lacks {part}: {text}");
            }
        }
        let json: serde_json::Value =
            serde_json::from_str(&render(Client::Json, bin, &[], &env)).unwrap();
        assert_eq!(
            json["mcpServers"]["sandkeep"]["env"]["SANDKEEP_HOME"],
            "/srv/sandkeep"
        );
        assert_eq!(
            json["mcpServers"]["sandkeep"]["env"][EGRESS_TRUST_VAR],
            "203.0.113.0/24,198.18.0.0/15"
        );
        assert!(render(Client::ClaudeCode, bin, &[], &env).contains(
            "--env SANDKEEP_HOME=/srv/sandkeep --env SANDKEEP_EGRESS_TRUST=203.0.113.0/24,198.18.0.0/15 -- '/opt/my tools/sandkeep' serve"
        ));
        let codex = render(Client::Codex, bin, &[], &env[..1]);
        assert!(
            codex.contains("env = { SANDKEEP_HOME = \"/srv/sandkeep\" }"),
            "{codex}"
        );
        assert!(
            render(Client::ClaudeCode, bin, &[], &env).contains("'/opt/my tools/sandkeep' serve")
        );
        assert!(
            render(Client::Codex, bin, &[], &env)
                .contains("\ndefault_tools_approval_mode = \"approve\"")
        );
    }

    #[test]
    fn http_registrations_carry_the_url_and_the_header() {
        let url = "http://127.0.0.1:8765/mcp";
        for client in [
            Client::ClaudeCode,
            Client::Cursor,
            Client::Codex,
            Client::Inspector,
            Client::Json,
        ] {
            let text = render_http(client, url, "t0ken").unwrap();
            assert!(text.contains(url), "{client:?}: {text}");
            assert!(text.contains("Bearer t0ken"), "{client:?}: {text}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&render_http(Client::Json, url, "t0ken").unwrap()).unwrap();
        assert_eq!(json["mcpServers"]["sandkeep"]["type"], "http");
        let e = render_http(Client::ClaudeDesktop, url, "t0ken").unwrap_err();
        assert!(e.contains("without --http"), "{e}");
    }
}
