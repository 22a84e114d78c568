//! Shared support of every sandkeep integration test: the real `sandkeep`
//! binary, a private SANDKEEP_HOME cleaned up on drop, bounded polling, and
//! host-side inspection of processes and mounts through /proc. The
//! submodules add what one surface needs: `cli` (commands, JSON and schema
//! checks, a pty), `mcp` (served children, rmcp clients, a recording
//! provider), `http` (raw HTTP/1.1 for the listeners' edges), `local`
//! (the local provider in-process) and `fake_kernel` (a kernel without
//! namespaces, simulated). Nothing here asserts product behaviour; the
//! tests do.
#![allow(dead_code)] // each test binary uses a different subset

pub mod cli;
pub mod e2b;
pub mod fake_kernel;
pub mod http;
pub mod local;
pub mod mcp;
pub mod ports;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

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

/// Skips the running test: says why on stderr, loudly, so a skip is never
/// mistaken for a pass; under `CI=true` it fails instead, so a CI machine
/// that lacks root or a tool cannot go green by testing nothing. The
/// caller returns right after.
pub fn skip(why: &str) {
    let test = std::thread::current().name().unwrap_or("test").to_owned();
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} cannot run, and CI=true does not allow skipping: {why}"
    );
    eprintln!("SKIPPED {test}: {why} (under CI=true this fails)");
}

/// `cond`, or [`skip`] with `why` and false: `if !require(..) { return; }`.
pub fn require(cond: bool, why: &str) -> bool {
    if !cond {
        skip(why);
    }
    cond
}

/// Test-harness arguments that run only the ignored test `name` of this
/// test binary, printing its output: how a test runs part of itself as a
/// separate process (another user, environment or lifetime). `name` is the
/// test's full name in the binary, its module's path included
/// (`net::no_clone3_inner` in tests/local/): it is matched exactly.
pub fn ignored_test_args(name: &str) -> [&str; 5] {
    [
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// This test binary as a command running only the ignored test `name`.
pub fn ignored_test(name: &str) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    c.args(ignored_test_args(name));
    c
}

/// Runs the ignored test `name` with the environment variable `switch`
/// set (which arms it), fails unless it ran and passed, and returns its
/// output for the caller's own checks.
pub fn run_ignored_test(name: &str, switch: &str) -> String {
    let out = ignored_test(name).env(switch, "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Polls `probe` until it returns `Some`, failing with `what` after
/// `within`.
pub fn poll<T>(within: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "{what} did not happen within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` until it is true or `limit` passes; panics with `what`.
pub async fn until<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `child` to exit, failing after `within`.
pub async fn wait_exit(
    child: &mut tokio::process::Child,
    within: Duration,
) -> std::process::ExitStatus {
    match tokio::time::timeout(within, child.wait()).await {
        Ok(status) => status.expect("wait"),
        Err(_) => panic!("the server did not exit within {within:?}"),
    }
}

/// Host pids whose command line (arguments joined by spaces) satisfies
/// `matches`.
pub fn host_pids_where(matches: impl Fn(&str) -> bool) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if matches(&cmd) {
                out.push(pid);
            }
        }
    }
    out
}

/// Host pids whose command line contains `marker` (sandkeep's own
/// processes excluded).
pub fn host_pids_with(marker: &str) -> Vec<i32> {
    host_pids_where(|cmd| cmd.contains(marker) && !cmd.contains("sandkeep"))
}

/// PPid, state and pid-namespace path of each pid, for failure messages.
pub fn describe_pids(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let pick = |key: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(key))
                    .unwrap_or("")
                    .replace('\t', " ")
            };
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap_or_default();
            format!(
                "{pid}: {} {} {} {}",
                pick("State"),
                pick("PPid"),
                pick("NSpid"),
                ns.display()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Asserts that no host process carries `marker` any more.
pub fn assert_no_survivors(marker: &str, when: &str) {
    let left = host_pids_with(marker);
    assert!(
        left.is_empty(),
        "processes survived {when}: {}",
        describe_pids(&left)
    );
}

/// Sends `signal` to host process `pid`, which must exist.
pub fn send_signal(pid: i32, signal: rustix::process::Signal) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("a valid pid"),
        signal,
    )
    .unwrap_or_else(|e| panic!("signal {signal:?} to {pid}: {e}"));
}

/// True while the process exists (not yet reaped counts as existing).
pub fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Lines of the host's mount table that mention `text`.
pub fn host_mounts_with(text: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(text))
        .map(str::to_owned)
        .collect()
}
