//! Support of the `sandkeep` crate's integration tests: the real
//! `sandkeep` binary and a private SANDKEEP_HOME cleaned up on drop, over
//! what every crate's tests share (`sandkeep-testkit`, re-exported). The
//! submodules add what one surface needs: `cli` (commands, JSON and schema
//! checks, a pty), `mcp` (served children, rmcp clients, a recording
//! provider), `http` (raw HTTP/1.1 for the listeners' edges), `e2b` (an
//! E2B endpoint for the e2b provider) and `local` (the local provider
//! in-process, running this build of `sandkeep`). Nothing here asserts
//! product behaviour; the tests do.
#![allow(dead_code)] // each test binary uses a different subset

pub mod cli;
pub mod e2b;
pub mod http;
pub mod mcp;

pub use sandkeep_testkit::*;

/// The local provider running this build of `sandkeep` as keeper and task
/// helper.
pub mod local {
    pub use sandkeep_testkit::local::*;

    use sandkeep::provider::SandboxInfo;
    use sandkeep::provider::local::LocalProvider;

    pub const EXE: &str = env!("CARGO_BIN_EXE_sandkeep");

    /// [`provider_of`] this build of `sandkeep`.
    pub fn provider(home: &std::path::Path) -> LocalProvider {
        provider_of(EXE, home)
    }

    /// [`fresh_sandbox_of`] this build of `sandkeep`.
    pub async fn fresh_sandbox(timeout: u64) -> (tempfile::TempDir, LocalProvider, SandboxInfo) {
        fresh_sandbox_of(EXE, timeout).await
    }
}

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sandkeep")
}

/// A private SANDKEEP_HOME; whatever a test left running is killed on drop.
/// Under `SANDKEEP_TEST_PROVIDER=e2b` it also has its own E2B endpoint,
/// and every `sandkeep` started through it uses the e2b provider.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub e2b: Option<e2b::Endpoint>,
}

impl Home {
    pub fn new() -> Self {
        let mut home = Self::local();
        home.e2b = e2b::enabled().then(e2b::Endpoint::start);
        home
    }

    /// A home on the local provider whatever `SANDKEEP_TEST_PROVIDER` says.
    pub fn local() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("sandkeep-test")
                .tempdir()
                .expect("tempdir"),
            e2b: None,
        }
    }

    /// A home whose `sandkeep` processes use the e2b provider on an
    /// endpoint of its own, whatever `SANDKEEP_TEST_PROVIDER` says.
    pub fn with_e2b() -> Self {
        let mut home = Self::new();
        if home.e2b.is_none() {
            home.e2b = Some(e2b::Endpoint::start());
        }
        home
    }

    /// A home whose `sandkeep` processes use the e2b provider on an
    /// endpoint of its own started with `vars` added to its environment
    /// (the endpoint's settings), whatever `SANDKEEP_TEST_PROVIDER` says.
    pub fn with_e2b_endpoint_env(vars: &[(&str, &str)]) -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("sandkeep-test")
                .tempdir()
                .expect("tempdir"),
            e2b: Some(e2b::Endpoint::start_with(vars)),
        }
    }

    /// The provider configuration of the `sandkeep` processes this home
    /// starts (empty: the local provider on this home).
    pub fn provider_vars(&self) -> Vec<(&'static str, String)> {
        self.e2b
            .as_ref()
            .map(e2b::Endpoint::vars)
            .unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `sandkeep ARGS` with this home, not yet run.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(bin());
        c.env("SANDKEEP_HOME", self.path())
            .envs(self.provider_vars())
            .args(args);
        c
    }

    /// An async `sandkeep` command with this home and debug logging of
    /// sandkeep on stderr, killed when dropped.
    pub fn async_command(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(bin());
        c.env("SANDKEEP_HOME", self.path())
            .envs(self.provider_vars())
            .env("SANDKEEP_LOG", "sandkeep=debug,rmcp=warn")
            .kill_on_drop(true);
        c
    }

    /// A `sandkeep serve` child speaking MCP on piped stdin and stdout, for
    /// tests that write the protocol themselves.
    pub fn spawn_serve(&self, stderr: Stdio) -> tokio::process::Child {
        self.spawn_serve_with(stderr, &[])
    }

    /// [`Home::spawn_serve`] with more arguments to `serve`.
    pub fn spawn_serve_with(&self, stderr: Stdio, args: &[&str]) -> tokio::process::Child {
        self.async_command()
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn sandkeep serve")
    }
}

impl Default for Home {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // Whatever a failed test left running is destroyed through the CLI
        // (not on a real E2B account: there the list holds other runs'
        // sandboxes too, and leftovers expire at their deadline).
        if self.e2b.as_ref().is_some_and(e2b::Endpoint::shared) {
            return;
        }
        let Ok(out) = self
            .command(&["sandbox", "list", "--json"])
            .stderr(Stdio::null())
            .output()
        else {
            return;
        };
        let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
            return;
        };
        for s in list["sandboxes"].as_array().into_iter().flatten() {
            if let Some(id) = s["sandbox_id"].as_str() {
                let _ = self
                    .command(&["sandbox", "kill", id])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}
