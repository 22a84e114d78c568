//! `sandkeep mcp-config CLIENT`: prints the configuration that registers
//! this very binary as a stdio MCP server in CLIENT, with `SANDKEEP_HOME`
//! set explicitly, and `SANDKEEP_EGRESS_TRUST` when this process has it.
//!
//! The `env` entry is the point: several clients (the Inspector, the
//! TypeScript SDK's defaults, Codex) pass a server only a short allow-list
//! of environment variables, so a server started without it silently uses
//! another state directory than the CLI, and the agent sees none of the
//! CLI's sandboxes (nor reaches, on a host that needs the trust setting,
//! what the CLI's sandboxes reach).

use std::path::{Path, PathBuf};

use serde_json::json;

use super::exit;
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
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

/// Prints the configuration; returns the exit code.
pub fn run(args: &McpConfigArgs) -> u8 {
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
    println!("{}", render(args.client, &binary, &env));
    exit::OK
}

/// The configuration text for `client`, with the server's environment.
pub fn render(client: Client, binary: &Path, env: &[(&str, String)]) -> String {
    let bin = binary.display().to_string();
    let words = |flag: &str| {
        env.iter()
            .map(|(k, v)| format!("{flag} {k}={}", shell_quote(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match client {
        Client::ClaudeCode => format!(
            "claude mcp add --scope user sandkeep {} -- {} serve",
            words("--env"),
            shell_quote(&bin)
        ),
        Client::Inspector => format!(
            "npx @modelcontextprotocol/inspector {} {} serve",
            words("-e"),
            shell_quote(&bin)
        ),
        Client::Codex => format!(
            "[mcp_servers.sandkeep]\ncommand = {}\nargs = [\"serve\"]\nenv = {{ {} }}\n\
             # run_command may take up to its timeout (default 30 s, at most 3600)\ntool_timeout_sec = 3600",
            toml_string(&bin),
            env.iter()
                .map(|(k, v)| format!("{k} = {}", toml_string(v)))
                .collect::<Vec<_>>()
                .join(", ")
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
                        "args": ["serve"],
                        "env": env
                    }
                }
            });
            serde_json::to_string_pretty(&config).expect("a JSON literal encodes")
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
            let text = render(client, bin, &env);
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
            serde_json::from_str(&render(Client::Json, bin, &env)).unwrap();
        assert_eq!(
            json["mcpServers"]["sandkeep"]["env"]["SANDKEEP_HOME"],
            "/srv/sandkeep"
        );
        assert_eq!(
            json["mcpServers"]["sandkeep"]["env"][EGRESS_TRUST_VAR],
            "203.0.113.0/24,198.18.0.0/15"
        );
        assert!(render(Client::ClaudeCode, bin, &env).contains(
            "--env SANDKEEP_HOME=/srv/sandkeep --env SANDKEEP_EGRESS_TRUST=203.0.113.0/24,198.18.0.0/15 -- '/opt/my tools/sandkeep' serve"
        ));
        let codex = render(Client::Codex, bin, &env[..1]);
        assert!(
            codex.contains("env = { SANDKEEP_HOME = \"/srv/sandkeep\" }"),
            "{codex}"
        );
    }
}
