//! Local provider test support: a provider on a throwaway state directory,
//! exec shorthands, and the escape-resistant process zoo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandkeep_local::{HostBounds, LocalConfig, LocalProvider};
use sandkeep_provider::{CreateSpec, ExecOutput, ExecRequest, Provider, SandboxId, SandboxInfo};

use super::{host_pids_with, until};

/// A state directory under /var/tmp, which sandboxes do not see (theirs
/// is their own); [`visible_state_dir`] makes one in a tree they see.
pub fn state_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/var/tmp").unwrap();
    tempfile::Builder::new()
        .prefix("sk-local-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A state directory in a host tree that sandboxes see (`/var/lib`, as
/// root: where a system-wide install keeps its state), for the tests that
/// check it is masked; elsewhere [`state_dir`].
pub fn visible_state_dir() -> tempfile::TempDir {
    if !rustix::process::geteuid().is_root() {
        return state_dir();
    }
    tempfile::Builder::new()
        .prefix("sk-local-")
        .tempdir_in("/var/lib")
        .unwrap()
}

/// A provider on `home`, running `exe` as keeper and task helper, whose
/// memory ceiling stays out of the tests' way (its default, 80% of RAM,
/// admits a single default sandbox in the small cgroup v2 VM); the tests
/// of the host-wide bounds set their own.
pub fn provider_of(exe: &str, home: &Path) -> LocalProvider {
    let bounds = HostBounds {
        memory_mib: 1 << 30,
        ..HostBounds::of_this_host()
    };
    LocalProvider::new(LocalConfig::new(home, exe).with_bounds(bounds)).expect("local provider")
}

pub fn spec(timeout: u64) -> CreateSpec {
    CreateSpec {
        template: "base".into(),
        timeout,
        envs: BTreeMap::new(),
        network: None,
        allow_hosts: Vec::new(),
        limits: Default::default(),
        shares: Vec::new(),
        on_timeout: Default::default(),
    }
}

pub async fn create(p: &LocalProvider, timeout: u64) -> SandboxInfo {
    p.create(spec(timeout)).await.expect("create sandbox")
}

/// A sandbox of a new provider (running `exe`) on a new state directory;
/// the directory must outlive the provider, so it is returned too.
pub async fn fresh_sandbox_of(
    exe: &str,
    timeout: u64,
) -> (tempfile::TempDir, LocalProvider, SandboxInfo) {
    let home = state_dir();
    let p = provider_of(exe, home.path());
    let info = create(&p, timeout).await;
    (home, p, info)
}

pub fn request(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        cwd: None,
        timeout: Duration::from_secs(20),
        stdin: None,
        output_limit: 65536,
    }
}

pub async fn sh(p: &LocalProvider, id: &SandboxId, command: &str) -> ExecOutput {
    p.exec(id, request(command)).await.expect("exec")
}

pub fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// A marker (digits, usable in `sleep 1000.MARKER`) unique to this test
/// process: other runs of the suite may be searching the same host.
pub fn tag(base: &str) -> String {
    format!("{base}{}", std::process::id())
}

/// Lines of the host's mount table that mention `path`.
pub fn host_mounts_under(path: &Path) -> Vec<String> {
    super::host_mounts_with(&path.to_string_lossy())
}

/// The executable a live process runs, as the kernel names it.
pub fn exe_of(pid: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("a live process")
}

pub fn sandbox_dir(home: &Path, id: &SandboxId) -> PathBuf {
    home.join("sb").join(id.as_str())
}

/// How many of root's uid slots (`/run/sandkeep/uid-slots`, one file per
/// claimed uid block, naming the sandbox's directory) name `dir`.
pub fn uid_slots_naming(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/run/sandkeep/uid-slots") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|o| Path::new(o.trim()) == dir))
        .count()
}

/// The pid the sandbox's record holds for `role` ("keeper" or "init").
pub fn recorded_pid(home: &Path, id: &SandboxId, role: &str) -> i32 {
    let path = sandbox_dir(home, id).join("meta.json");
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("meta.json is JSON");
    meta[role]["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no {role} pid in {meta}")) as i32
}

/// Starts the escape-resistant process zoo: a setsid'd sleeper, a
/// double-forked daemon and a TERM-ignoring loop, each tagged with
/// `marker` so the host can find them.
pub async fn start_zoo(p: &LocalProvider, id: &SandboxId, marker: &str) {
    let cmd = format!(
        "setsid sleep 1000.{marker}1 </dev/null >/dev/null 2>&1 & \
         (sh -c 'sleep 1000.{marker}2 </dev/null >/dev/null 2>&1 &' &) ; \
         (trap '' TERM; exec sh -c 'trap \"\" TERM; while :; do sleep 1000.{marker}3; done' </dev/null >/dev/null 2>&1) & \
         echo started"
    );
    let out = sh(p, id, &cmd).await;
    assert_eq!(out.exit_code, Some(0), "zoo: {}", text(&out.stderr));
    until(
        Duration::from_secs(5),
        "zoo processes visible on the host",
        || async { host_pids_with(&format!("1000.{marker}")).len() >= 3 },
    )
    .await;
}

/// A system account created for a test if missing and deleted again on
/// drop (also when the test fails), so the suite leaves no account behind.
/// Each suite uses its own name, so suites running at once do not delete
/// each other's.
pub struct ThrowawayUser {
    name: &'static str,
    created: bool,
}

impl ThrowawayUser {
    pub fn ensure(name: &'static str) -> Self {
        let exists = std::process::Command::new("id")
            .arg(name)
            .output()
            .is_ok_and(|o| o.status.success());
        if exists {
            return Self {
                name,
                created: false,
            };
        }
        let status = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status()
            .expect("run useradd");
        // 9: created meanwhile by a concurrent run, which will delete it.
        assert!(
            status.success() || status.code() == Some(9),
            "useradd {name} failed: {status}"
        );
        Self {
            name,
            created: status.success(),
        }
    }
}

impl Drop for ThrowawayUser {
    fn drop(&mut self) {
        if !self.created {
            return;
        }
        match std::process::Command::new("userdel")
            .arg(self.name)
            .status()
        {
            Ok(s) if s.success() => {}
            other => eprintln!(
                "warning: userdel {} failed ({other:?}); remove it by hand",
                self.name
            ),
        }
    }
}
