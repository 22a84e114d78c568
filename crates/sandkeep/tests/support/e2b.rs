//! The e2b provider under test: with `SANDKEEP_TEST_PROVIDER=e2b`, every
//! [`Home`](super::Home) gets its own `sandkeep serve --e2b` on a free
//! loopback port (its own SANDKEEP_HOME and API key, local sandboxes), and
//! every `sandkeep` the test starts through that home talks to it as an
//! E2B-compatible cloud (`SANDKEEP_PROVIDER=e2b E2B_API_URL=…
//! E2B_SANDBOX_URL=… E2B_API_KEY=…`). With `SANDKEEP_TEST_E2B_REAL=1` the
//! E2B_* variables of the environment are used instead (a real account).

use std::process::{Child, Command, Stdio};

use super::bin;

/// Whether this run tests the e2b provider.
pub fn enabled() -> bool {
    std::env::var("SANDKEEP_TEST_PROVIDER").as_deref() == Ok("e2b")
}

/// Whether it runs against a real E2B account (the E2B_* variables set by
/// the person running it), not a local endpoint.
fn real() -> bool {
    std::env::var("SANDKEEP_TEST_E2B_REAL").as_deref() == Ok("1")
}

/// A local E2B-compatible endpoint, or the real account's settings.
pub struct Endpoint {
    child: Option<Child>,
    home: Option<tempfile::TempDir>,
    pub api_url: String,
    pub sandbox_url: Option<String>,
    pub key: String,
}

impl Endpoint {
    /// Starts `sandkeep serve --e2b 127.0.0.1:0` on a home of its own.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`Endpoint::start`], the endpoint's environment adding `vars`
    /// (its settings, such as `SANDKEEP_E2B_END_RETENTION_MS`); a real
    /// account has none of them.
    pub fn start_with(vars: &[(&str, &str)]) -> Self {
        if real() {
            let key =
                std::env::var("E2B_API_KEY").expect("SANDKEEP_TEST_E2B_REAL=1 needs E2B_API_KEY");
            return Self {
                child: None,
                home: None,
                api_url: std::env::var("E2B_API_URL").unwrap_or_default(),
                sandbox_url: std::env::var("E2B_SANDBOX_URL").ok(),
                key,
            };
        }
        let home = tempfile::Builder::new()
            .prefix("sandkeep-e2b-endpoint")
            .tempdir()
            .expect("tempdir");
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("random");
        let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let (child, url) = sandkeep_testkit::e2b::start_endpoint(
            std::path::Path::new(bin()),
            home.path(),
            &key,
            vars,
        );
        Self {
            child: Some(child),
            home: Some(home),
            api_url: url.clone(),
            sandbox_url: Some(url),
            key,
        }
    }

    /// The environment that points a `sandkeep` at this endpoint through
    /// the e2b provider.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            ("SANDKEEP_PROVIDER", "e2b".to_owned()),
            ("E2B_API_KEY", self.key.clone()),
        ];
        if !self.api_url.is_empty() {
            vars.push(("E2B_API_URL", self.api_url.clone()));
        }
        if let Some(url) = &self.sandbox_url {
            vars.push(("E2B_SANDBOX_URL", url.clone()));
        }
        vars
    }

    /// A real account shared with whatever else uses the key: a test
    /// cleans up only what it made itself.
    pub fn shared(&self) -> bool {
        self.child.is_none()
    }

    /// The endpoint's own log (its sandboxes' provider is local).
    pub fn log(&self) -> String {
        self.home
            .as_ref()
            .map(|h| std::fs::read_to_string(h.path().join("endpoint.log")).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The endpoint's SANDKEEP_HOME (its local sandboxes live there).
    pub fn home(&self) -> Option<&std::path::Path> {
        self.home.as_ref().map(|h| h.path())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Whatever is left in its local sandboxes is destroyed, then the
        // endpoint stops.
        if let Some(home) = &self.home {
            let list = Command::new(bin())
                .args(["sandbox", "list", "--json"])
                .env("SANDKEEP_HOME", home.path())
                .env_remove("SANDKEEP_PROVIDER")
                .stderr(Stdio::null())
                .output();
            if let Ok(out) = list
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            {
                for s in v["sandboxes"].as_array().into_iter().flatten() {
                    if let Some(id) = s["sandbox_id"].as_str() {
                        let _ = Command::new(bin())
                            .args(["sandbox", "kill", id])
                            .env("SANDKEEP_HOME", home.path())
                            .env_remove("SANDKEEP_PROVIDER")
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status();
                    }
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
