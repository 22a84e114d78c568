//! A private "sandbox user" for tests: a temporary HOME, the real helper
//! binary run as a separate process with a clean environment, and clean-up
//! of every process a test's tasks left behind.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sandkeep_proto::StateRecord;
use sandkeep_proto::TaskId;
use sandkeep_proto::TaskState;
use sandkeep_proto::wire::{CancelReply, ErrorKind, ErrorReply, TaskStatus, TaskSummary};
use sandkeep_task::procfs;
use serde_json::json;

pub const HELPER: &str = env!("CARGO_BIN_EXE_sandkeep-task");

pub fn new_id() -> TaskId {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    TaskId::from_bytes(bytes)
}

pub struct User {
    home: tempfile::TempDir,
    marker: String,
    extra_env: Vec<(String, String)>,
}

impl User {
    pub fn new() -> Self {
        Self::with_env(&[])
    }

    /// A user whose environment (and so every task's) has `env` added.
    pub fn with_env(env: &[(&str, &str)]) -> Self {
        let home = tempfile::tempdir().expect("creating a temporary HOME");
        let marker = new_id().to_string();
        Self {
            home,
            marker,
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    pub fn tasks_dir(&self) -> PathBuf {
        self.home().join(".local/state/sandkeep/tasks")
    }

    /// The helper as a command with this user's environment only.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(HELPER);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env("SANDKEEP_TEST_MARKER", &self.marker)
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// `sh -c SCRIPT` with this user's environment.
    pub fn shell(&self, script: &str) -> Command {
        let helper = self.command();
        let mut sh = Command::new("sh");
        sh.env_clear()
            .envs(helper.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .arg("-c")
            .arg(script);
        sh
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .expect("running the helper")
    }

    /// Runs a verb that must succeed; checks the one-JSON-object rule.
    pub fn ok<T: serde::de::DeserializeOwned>(&self, args: &[&str]) -> T {
        let out = self.run(args);
        let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
        assert!(
            out.status.success(),
            "helper {args:?} failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.lines().count(),
            1,
            "exactly one JSON line: {stdout:?}"
        );
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("reply {stdout:?}: {e}"))
    }

    /// Runs a verb that must fail with `kind` and exit code 1.
    pub fn refused(&self, args: &[&str], kind: ErrorKind) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
        assert_eq!(
            out.status.code(),
            Some(1),
            "helper {args:?} should fail: {stdout}"
        );
        let reply: ErrorReply =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("reply {stdout:?}: {e}"));
        assert_eq!(reply.error.kind, kind, "{}", reply.error.message);
        reply.error.message
    }

    pub fn start_json(id: &TaskId, command: &str, timeout: u64) -> String {
        json!({"task_id": id, "command": command, "timeout": timeout}).to_string()
    }

    pub fn start(&self, id: &TaskId, command: &str, timeout: u64) -> TaskSummary {
        self.ok(&["start", &Self::start_json(id, command, timeout)])
    }

    pub fn status_page(
        &self,
        id: &TaskId,
        stdout_offset: u64,
        stderr_offset: u64,
        limit: u64,
    ) -> TaskStatus {
        let req = json!({"task_id": id, "stdout_offset": stdout_offset,
                         "stderr_offset": stderr_offset, "limit": limit});
        self.ok(&["status", &req.to_string()])
    }

    pub fn status(&self, id: &TaskId) -> TaskStatus {
        self.status_page(id, 0, 0, 65_536)
    }

    pub fn cancel(&self, id: &TaskId) -> CancelReply {
        self.ok(&["cancel", &json!({"task_id": id}).to_string()])
    }

    /// Polls status until `done` holds, failing with the last status after
    /// `within`.
    pub fn wait_for(
        &self,
        id: &TaskId,
        within: Duration,
        what: &str,
        done: impl Fn(&TaskStatus) -> bool,
    ) -> TaskStatus {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status(id);
            if done(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} not {what} within {within:?}; last status: {s:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn wait_terminal(&self, id: &TaskId, within: Duration) -> TaskStatus {
        self.wait_for(id, within, "terminal", |s| s.summary.state.is_terminal())
    }

    pub fn record(&self, id: &TaskId) -> StateRecord {
        let path = self.tasks_dir().join(id.as_str()).join("state.json");
        let bytes = fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        serde_json::from_slice(&bytes).expect("a well-formed record")
    }

    /// Live (non-zombie) processes started with this user's environment.
    pub fn live_processes(&self) -> Vec<u32> {
        let needle = format!("SANDKEEP_TEST_MARKER={}", self.marker);
        live_pids(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
    }
}

impl Drop for User {
    fn drop(&mut self) {
        for pid in self.live_processes() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Pids of processes that are not zombies and satisfy `pick`.
pub fn live_pids(pick: impl Fn(u32) -> bool) -> Vec<u32> {
    procfs::pids()
        .expect("listing /proc")
        .filter(|&pid| sandkeep_proto::procfs::stat(pid).is_ok_and(|s| s.is_running()) && pick(pid))
        .collect()
}

/// Live processes whose command line is exactly `argv`.
pub fn live_with_cmdline(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    live_pids(|pid| fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
}

pub fn assert_state(s: &TaskStatus, state: TaskState, exit_code: Option<i32>) {
    assert_eq!(s.summary.state, state, "{s:?}");
    assert_eq!(s.summary.exit_code, exit_code, "{s:?}");
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub use sandkeep_testkit::require;
