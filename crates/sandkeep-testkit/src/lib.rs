//! Support shared by sandkeep's integration tests, whichever crate they
//! test: skips that fail under `CI=true`, a test binary running one of its
//! own ignored tests as a helper process, bounded polling, host-side
//! inspection of processes and mounts through /proc, the local provider on
//! a throwaway state directory (`local`), servers and clients for port
//! forwards (`ports`), a local E2B-compatible endpoint (`e2b`) and a
//! kernel without namespaces, simulated (`fake_kernel`). Nothing here
//! asserts product behaviour; the tests do.
//! Each test crate names the executable its local providers run as keeper
//! and task helper (`local::provider_of`): only its tests know where cargo
//! built it.

#![forbid(unsafe_code)]

pub mod e2b;
pub mod fake_kernel;
pub mod local;
pub mod ports;

use std::path::Path;
use std::time::{Duration, Instant};

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
