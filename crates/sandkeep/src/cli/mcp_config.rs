//! `sandkeep mcp-config CLIENT`: prints the configuration that registers
//! this very binary as a stdio MCP server in CLIENT, with `SANDKEEP_HOME`
//! set explicitly.
//!
//! The `env` entry is the point: several clients (the Inspector, the
//! TypeScript SDK's defaults, Codex) pass a server only a short allow-list
//! of environment variables, so a server started without it silently uses
//! another state directory than the CLI, and the agent sees none of the
//! CLI's sandboxes.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::exit;
use crate::provider;

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
    match home {
        Ok(home) => {
            println!("{}", render(args.client, &binary, &home));
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "sandkeep mcp-config: cannot resolve the state directory: {e}; set SANDKEEP_HOME \
                 or pass --home DIR"
            );
            exit::OWN_FAILURE
        }
    }
}

/// The configuration text for `client`.
pub fn render(client: Client, binary: &Path, home: &Path) -> String {
    let bin = binary.display().to_string();
    let home = home.display().to_string();
    match client {
        Client::ClaudeCode => format!(
            "claude mcp add --scope user sandkeep --env SANDKEEP_HOME={} -- {} serve",
            shell_quote(&home),
            shell_quote(&bin)
        ),
        Client::Inspector => format!(
            "npx @modelcontextprotocol/inspector -e SANDKEEP_HOME={} {} serve",
            shell_quote(&home),
            shell_quote(&bin)
        ),
        Client::Codex => format!(
            "[mcp_servers.sandkeep]\ncommand = {}\nargs = [\"serve\"]\nenv = {{ SANDKEEP_HOME = {} }}\n\
             # run_command may take up to its timeout (default 30 s, at most 3600)\ntool_timeout_sec = 3600",
            toml_string(&bin),
            toml_string(&home)
        ),
        Client::ClaudeDesktop | Client::Cursor | Client::Json => {
            let config = json!({
                "mcpServers": {
                    "sandkeep": {
                        "command": bin,
                        "args": ["serve"],
                        "env": { "SANDKEEP_HOME": home }
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
    fn every_client_gets_the_binary_and_the_state_directory() {
        let bin = Path::new("/opt/my tools/sandkeep");
        let home = Path::new("/srv/sandkeep");
        for client in [
            Client::ClaudeCode,
            Client::ClaudeDesktop,
            Client::Cursor,
            Client::Codex,
            Client::Inspector,
            Client::Json,
        ] {
            let text = render(client, bin, home);
            assert!(
                text.contains("/opt/my tools/sandkeep"),
                "{client:?}: {text}"
            );
            assert!(text.contains("SANDKEEP_HOME"), "{client:?}: {text}");
            assert!(text.contains("/srv/sandkeep"), "{client:?}: {text}");
            assert!(text.contains("serve"), "{client:?}: {text}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&render(Client::Json, bin, home)).unwrap();
        assert_eq!(
            json["mcpServers"]["sandkeep"]["env"]["SANDKEEP_HOME"],
            "/srv/sandkeep"
        );
        assert!(render(Client::ClaudeCode, bin, home).contains("'/opt/my tools/sandkeep' serve"));
    }
}
