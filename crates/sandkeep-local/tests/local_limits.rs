//! Per-sandbox resource limits (SPEC.md §10 "Resources") against real
//! sandboxes, as root: memory (OOM kill inside, the host and a neighbour
//! unharmed), pids (fork fails with EAGAIN), cpu (two spinners get about
//! one core), disk (ENOSPC, the host's disk untouched; `/tmp` and
//! `/dev/shm` sized), what a sandbox reports as enforced, and that no
//! cgroup of a sandbox outlives it. Every probe is bounded.

mod support;

#[path = "local_limits/pause.rs"]
mod pause;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandkeep_provider::{CreateSpec, Limits, Provider, SandboxId};
use support::local::*;
use support::*;

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

fn with_limits(limits: Limits) -> CreateSpec {
    CreateSpec {
        limits,
        ..spec(120 * u64::from(patience()))
    }
}

/// How many times longer than on a real CPU the bounded waits here may
/// last: scripts/cgroup-v2-vm sets `SANDKEEP_TEST_PATIENCE` when QEMU
/// emulates the CPU, where moving 64 MiB through a pipe takes ~20 s. It
/// stretches the sandboxes' lifetimes too.
fn patience() -> u32 {
    std::env::var("SANDKEEP_TEST_PATIENCE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// A request with a longer timeout than the default 20 s.
async fn run(
    p: &sandkeep_local::LocalProvider,
    id: &SandboxId,
    command: &str,
) -> sandkeep_provider::ExecOutput {
    let mut r = request(command);
    r.timeout = Duration::from_secs(60) * patience();
    p.exec(id, r).await.expect("exec")
}

/// Every cgroup directory named after `id` below a `sandkeep` directory
/// of any cgroup hierarchy mounted on this host (v1 and v2).
fn cgroup_dirs_of(id: &SandboxId) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let mut found = Vec::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
            let d = Path::new(f[1]).join("sandkeep").join(id.as_str());
            if d.exists() {
                found.push(d);
            }
        }
    }
    found
}

/// Free bytes of the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let s = rustix::fs::statvfs(path).unwrap();
    s.f_bavail * s.f_frsize
}

/// Starts `command` as task `task` with the in-sandbox helper and returns
/// its status once it is no longer running (bounded: 30 s).
async fn run_task(
    p: &sandkeep_local::LocalProvider,
    id: &SandboxId,
    helper: &str,
    task: &str,
    command: &str,
) -> serde_json::Value {
    let order =
        serde_json::json!({"task_id": task, "command": command, "timeout": 60 * patience()});
    let out = run(p, id, &format!("{helper} start '{order}'")).await;
    assert_eq!(out.exit_code, Some(0), "start: {}", text(&out.stderr));
    let status_cmd = format!("{helper} status '{}'", serde_json::json!({"task_id": task}));
    let start = std::time::Instant::now();
    loop {
        let out = run(p, id, &status_cmd).await;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status: {e}: {}", text(&out.stderr)));
        if v["state"] != "running" {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30) * patience(),
            "still running: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_past_the_limit_is_oom_killed_and_the_neighbour_lives() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let small = p
        .create(with_limits(Limits {
            memory_mib: Some(64),
            ..Limits::default()
        }))
        .await
        .expect("create with memory_mib 64");
    assert_eq!(small.limits.memory_mib, Some(64));
    let neighbour = create(&p, 120 * u64::from(patience())).await;

    // `tail` keeps the whole newline-free input: 200 MiB against 64.
    let out = run(
        &p,
        &small.sandbox_id,
        "head -c 200M /dev/zero | tail >/dev/null",
    )
    .await;
    assert_eq!(
        out.exit_code,
        Some(137),
        "not OOM-killed: {}",
        text(&out.stderr)
    );
    // A foreground command says so too, as a task's error does.
    assert!(
        text(&out.stderr).ends_with("sandkeep: out of memory (limit 64 MiB): the sandbox's memory limit killed the command\n"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&p, &small.sandbox_id, "kill -9 $$").await;
    assert_eq!(out.exit_code, Some(137));
    assert!(
        !text(&out.stderr).contains("out of memory"),
        "a KILL from elsewhere is no OOM: {}",
        text(&out.stderr)
    );
    // A background task killed by the limit ends `failed` with 137, and
    // its error says why (SPEC.md §10).
    let helper = p.task_helper(&small.sandbox_id).await.unwrap();
    let status = run_task(
        &p,
        &small.sandbox_id,
        &helper,
        "0123456789abcdef0123456789abcdef",
        "head -c 200M /dev/zero | tail >/dev/null",
    )
    .await;
    assert_eq!(
        (
            status["state"].as_str(),
            status["exit_code"].as_i64(),
            status["error"].as_str()
        ),
        (
            Some("failed"),
            Some(137),
            Some("out of memory (limit 64 MiB)")
        ),
        "{status}"
    );
    // A KILL from elsewhere gives the same exit code, but is no OOM.
    let status = run_task(
        &p,
        &small.sandbox_id,
        &helper,
        "1123456789abcdef0123456789abcdef",
        "kill -9 $$",
    )
    .await;
    assert_eq!(
        (status["state"].as_str(), status["exit_code"].as_i64()),
        (Some("failed"), Some(137)),
        "{status}"
    );
    assert!(status.get("error").is_none(), "not an OOM kill: {status}");

    // The kills hit only the allocators: the sandbox, its neighbour and the
    // host go on, and the neighbour may still use more than 64 MiB.
    let out = sh(&p, &small.sandbox_id, "echo alive").await;
    assert_eq!(text(&out.stdout), "alive\n");
    let out = run(
        &p,
        &neighbour.sandbox_id,
        "head -c 100M /dev/zero | tail | wc -c",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "104857600");
    let host = std::process::Command::new("true").status().unwrap();
    assert!(host.success());
    p.kill(&small.sandbox_id).await.unwrap();
    p.kill(&neighbour.sandbox_id).await.unwrap();
}

/// Under v1 the kernel may kill a second time before the first victim's
/// memory is uncharged; once it took the task's supervisor then, and the
/// task read `unknown`. The helper's processes now stand behind every user
/// process in the OOM killer's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oom_killer_takes_user_processes_before_a_supervisor() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let sb = create(&p, 120 * u64::from(patience())).await;
    let score = "cat /proc/self/oom_score_adj; cat /proc/1/oom_score_adj";
    let out = run(&p, &sb.sandbox_id, score).await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "1000\n1000\n",
        "a command, then the init (which the fork server's children share)"
    );
    // Sandbox root cannot put itself behind the helper's processes, nor
    // move the init: it has no CAP_SYS_RESOURCE in the host's namespace,
    // and the init is not dumpable.
    let out = run(
        &p,
        &sb.sandbox_id,
        "echo -1 > /proc/self/oom_score_adj || echo refused; \
         echo 0 > /proc/1/oom_score_adj || echo refused; \
         cat /proc/self/oom_score_adj /proc/1/oom_score_adj",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "refused\nrefused\n1000\n1000\n",
        "{}",
        text(&out.stderr)
    );
    // The shell's parent is the supervisor; `cat` is the shell's child.
    let helper = p.task_helper(&sb.sandbox_id).await.unwrap();
    let status = run_task(
        &p,
        &sb.sandbox_id,
        &helper,
        "2123456789abcdef0123456789abcdef",
        "cat /proc/self/oom_score_adj; cat /proc/$PPID/oom_score_adj",
    )
    .await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(
        status["stdout"], "1000\n0\n",
        "a task's process, then its supervisor"
    );
    p.kill(&sb.sandbox_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forking_past_pids_fails_with_eagain_inside() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let info = p
        .create(with_limits(Limits {
            pids: Some(16),
            ..Limits::default()
        }))
        .await
        .expect("create with pids 16");
    assert_eq!(info.limits.pids, Some(16));
    // Python reports the errno of the failed fork; every child it made
    // waits on a pipe that closes when the parent exits.
    let probe = r#"python3 - <<'EOF'
import errno, os
r, w = os.pipe()
made = 0
try:
    for _ in range(64):
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        made += 1
    print("forked", made)
except OSError as e:
    print("failed after", made, errno.errorcode[e.errno])
EOF"#;
    let out = run(&p, &info.sandbox_id, probe).await;
    let s = text(&out.stdout);
    assert!(
        s.starts_with("failed after") && s.trim_end().ends_with("EAGAIN"),
        "fork past pids 16 did not fail with EAGAIN: {s}{}",
        text(&out.stderr)
    );
    let made: usize = s.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(made < 16, "{made} processes made under pids 16");
    // Once they are gone the sandbox forks again.
    let out = sh(&p, &info.sandbox_id, "echo again").await;
    assert_eq!(text(&out.stdout), "again\n");
    p.kill(&info.sandbox_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_spinners_under_cpus_1_get_about_one_core() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let info = p
        .create(with_limits(Limits {
            milli_cpus: Some(1000),
            ..Limits::default()
        }))
        .await
        .expect("create with cpus 1");
    assert_eq!(info.limits.milli_cpus, Some(1000));
    // Two spinners for 3 s of wall time; `times` then prints the CPU time
    // of every waited-for descendant (user, then system).
    let probe = "start=$(date +%s%N); \
                 for i in 1 2; do timeout 3 sh -c 'while :; do :; done' & done; wait; \
                 end=$(date +%s%N); echo wall $(( (end - start) / 1000000 )); times";
    let out = run(&p, &info.sandbox_id, probe).await;
    let s = text(&out.stdout);
    let wall_ms: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("wall "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no wall time: {s}"));
    // `times`: second line "XmY.YYYs XmY.YYYs" for the children.
    let secs = |t: &str| -> f64 {
        let (m, rest) = t.split_once('m').unwrap();
        m.parse::<f64>().unwrap() * 60.0 + rest.trim_end_matches('s').parse::<f64>().unwrap()
    };
    let children = s.lines().last().unwrap();
    let cpu: f64 = children.split_whitespace().map(secs).sum();
    let cores = cpu * 1000.0 / wall_ms;
    eprintln!("two spinners under cpus 1: {cpu:.2} s of CPU in {wall_ms} ms = {cores:.2} cores");
    assert!(cores <= 1.3, "cpus 1 gave {cores:.2} cores: {s}");
    // A shared, busy host may give them less; they must have run at all.
    assert!(
        cores >= 0.1,
        "the spinners barely ran ({cores:.2} cores): {s}"
    );
    p.kill(&info.sandbox_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_disk_mib_get_enospc_and_the_host_disk_does_not_move() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let info = p
        .create(with_limits(Limits {
            disk_mib: Some(64),
            memory_mib: Some(512),
            ..Limits::default()
        }))
        .await
        .expect("create with disk_mib 64");
    assert_eq!(info.limits.disk_mib, Some(64));
    let id = &info.sandbox_id;

    // Every writable place is sized to the one disk.
    let out = sh(&p, id, "df -k / /tmp /dev/shm /root /run | tail -n +2").await;
    let df = text(&out.stdout);
    assert_eq!(df.lines().count(), 5, "{df}{}", text(&out.stderr));
    for line in df.lines() {
        let size: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(size, 64 * 1024, "not sized to disk_mib: {line}");
    }

    let before = free_bytes(home.path());
    // Writes spread over /tmp, /dev/shm, /root and a copy-on-write /etc
    // share the 64 MiB: together they stop with ENOSPC.
    let probe = "for d in /tmp /dev/shm /root /etc; do \
                   head -c 30M /dev/zero 2>&1 >$d/fill || { echo full at $d; break; }; \
                 done";
    let out = run(&p, id, probe).await;
    let s = text(&out.stdout);
    assert!(
        s.contains("full at") && s.contains("No space left on device"),
        "no ENOSPC past disk_mib 64: {s}{}",
        text(&out.stderr)
    );
    let after = free_bytes(home.path());
    let moved = before.saturating_sub(after);
    assert!(
        moved <= 64 << 20,
        "the host's free space moved by {moved} bytes (> disk_mib)"
    );
    // Precisely: nothing of it is in the sandbox's directory on the host.
    let du = std::process::Command::new("du")
        .args(["-sk", "-x"])
        .arg(sandbox_dir(home.path(), id))
        .output()
        .unwrap();
    let kib: u64 = text(&du.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        kib < 1024,
        "{kib} KiB of the sandbox's writes on the host disk"
    );
    // Freeing space makes the disk usable again.
    let out = sh(&p, id, "rm -f /tmp/fill && echo ok > /tmp/x && cat /tmp/x").await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    p.kill(id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_are_enforced_and_reported() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(60).await;
    assert_eq!(
        info.limits,
        Limits {
            memory_mib: Some(2048),
            milli_cpus: Some(2000),
            pids: Some(1024),
            disk_mib: Some(4096),
        }
    );
    let listed = p.list().await.unwrap();
    assert_eq!(listed[0].limits, info.limits);
    let out = sh(&p, &info.sandbox_id, "df -k /tmp /dev/shm | tail -n +2").await;
    for line in text(&out.stdout).lines() {
        let size: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(size, 4096 * 1024, "{line}");
    }
    p.kill(&info.sandbox_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cgroup_outlives_its_sandbox() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    // Killed through its keeper.
    let a = create(&p, 60).await;
    let dirs = cgroup_dirs_of(&a.sandbox_id);
    assert!(!dirs.is_empty(), "the sandbox has no cgroup");
    // A process that left its session is in them too.
    let out = sh(
        &p,
        &a.sandbox_id,
        "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo ok",
    )
    .await;
    assert_eq!(text(&out.stdout), "ok\n");
    p.kill(&a.sandbox_id).await.unwrap();
    let left: Vec<PathBuf> = dirs.into_iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "cgroups left after kill: {left:?}");

    // A keeper SIGKILLed: whoever finds the dead sandbox cleans them.
    let b = create(&p, 60).await;
    let dirs = cgroup_dirs_of(&b.sandbox_id);
    assert!(!dirs.is_empty());
    let keeper = recorded_pid(home.path(), &b.sandbox_id, "keeper");
    send_signal(keeper, rustix::process::Signal::KILL);
    until(Duration::from_secs(10), "the keeper is gone", || async {
        !process_exists(keeper)
            || std::fs::read_to_string(format!("/proc/{keeper}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    })
    .await;
    until(
        Duration::from_secs(10),
        "the dead sandbox is cleaned",
        || async {
            !p.list()
                .await
                .unwrap()
                .iter()
                .any(|s| s.sandbox_id == b.sandbox_id)
                && !sandbox_dir(home.path(), &b.sandbox_id).exists()
        },
    )
    .await;
    let left: Vec<PathBuf> = dirs.into_iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "cgroups left after cleanup: {left:?}");
}

/// Checks that the init (pid 1) and a command of sandbox `id` are in
/// every cgroup the sandbox has, on each hierarchy. Looked at from the
/// host: inside, a cgroup namespace shows the sandbox's cgroups as `/`.
async fn assert_confined_from_the_start(
    p: &sandkeep_local::LocalProvider,
    home: &Path,
    id: &SandboxId,
) {
    let leaves = cgroup_dirs_of(id).len();
    assert!(leaves > 0, "the sandbox has no cgroup");
    // Digits only: `sleep` must read it as a number of seconds.
    let marker = tag("4242");
    let out = sh(
        p,
        id,
        &format!("setsid sleep 1000.{marker} </dev/null >/dev/null 2>&1 & echo started"),
    )
    .await;
    assert_eq!(text(&out.stdout), "started\n", "{}", text(&out.stderr));
    // The `sleep` itself: the shell and `setsid` that start it carry the
    // marker too, for a moment.
    let sleep = format!("sleep 1000.{marker}");
    let sleeping = || host_pids_where(|cmd| cmd.starts_with(&sleep));
    until(
        Duration::from_secs(5),
        "the sandbox's command visible on the host",
        || async { !sleeping().is_empty() },
    )
    .await;
    let command = sleeping()[0];
    let init = recorded_pid(home, id, "init");
    let leaf = format!("/sandkeep/{}", id.as_str());
    // Commands run in the freezing leaf's child `w` (pause, SPEC §17).
    let work = format!("{leaf}/w");
    for (who, pid) in [("the init", init), ("a command", command)] {
        let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let inside = lines
            .lines()
            .filter(|l| l.ends_with(&leaf) || (pid == command && l.ends_with(&work)))
            .count();
        assert_eq!(
            inside, leaves,
            "{who} is in {inside} of the sandbox's {leaves} cgroups:\n{lines}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_init_and_its_commands_are_in_every_cgroup() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let (home, p, info) = fresh_sandbox(60).await;
    assert_confined_from_the_start(&p, home.path(), &info.sandbox_id).await;
    p.kill(&info.sandbox_id).await.unwrap();
}

/// Run by `without_clone3_the_init_still_enters_every_cgroup` in a child
/// process.
#[test]
#[ignore = "helper process of without_clone3_the_init_still_enters_every_cgroup"]
fn no_clone3_inner() {
    if std::env::var_os("SK_NO_CLONE3").is_none() {
        return;
    }
    // clone3 refused (ENOSYS), as before Linux 5.3 or under a container
    // runtime's seccomp profile: a v2 host cannot fork the init into its
    // cgroup, and the init moves itself in.
    support::fake_kernel::refuse(&[], 0);
    support::fake_kernel::block_on(async {
        let (home, p, info) = fresh_sandbox(60).await;
        assert_confined_from_the_start(&p, home.path(), &info.sandbox_id).await;
        p.kill(&info.sandbox_id).await.unwrap();
    });
    println!("NO-CLONE3 CHECKED");
}

#[test]
fn without_clone3_the_init_still_enters_every_cgroup() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let stdout = run_ignored_test("no_clone3_inner", "SK_NO_CLONE3");
    assert!(stdout.contains("NO-CLONE3 CHECKED"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_root_cannot_leave_its_cgroups() {
    if !require(root(), "cgroup limits are set up as root") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    // As the sandbox's root: write itself into every cgroup file it can
    // find, in the hierarchies shown and in freshly mounted ones, and
    // look for a cgroup descriptor the init might have left open.
    let attack = "mkdir -p /tmp/cg1 /tmp/cg2; \
        mount -t cgroup -o memory none /tmp/cg1 2>/dev/null; \
        mount -t cgroup2 none /tmp/cg2 2>/dev/null; \
        for f in $(find /sys/fs/cgroup /tmp/cg1 /tmp/cg2 -name tasks -o -name cgroup.procs 2>/dev/null); do \
          echo TRIED; echo 0 2>/dev/null > $f && echo MOVED $f; done; \
        for fd in /proc/1/fd/* /proc/self/fd/*; do \
          readlink $fd 2>/dev/null | grep -q cgroup && echo OPEN $fd; done; \
        echo --; cat /proc/self/cgroup";
    let out = sh(&p, id, attack).await;
    let listing = text(&out.stdout);
    let (attempts, after) = listing
        .split_once("--\n")
        .unwrap_or_else(|| panic!("no listing: {listing} {}", text(&out.stderr)));
    assert!(
        attempts.contains("TRIED") && !attempts.contains("MOVED") && !attempts.contains("OPEN"),
        "{attempts}"
    );
    // The sandbox's cgroup namespace is rooted at its cgroups: still `/`
    // in every hierarchy (`/w` in the one that freezes its commands, see
    // pause) means still in them.
    assert!(
        !after.is_empty()
            && after
                .lines()
                .all(|l| l.ends_with(":/") || l.ends_with(":/w")),
        "after the attempts:\n{after}"
    );
    p.kill(id).await.unwrap();
}

/// Runs in the background of sandbox `id` a python3 loop that calls
/// `open_one` (an expression; `setup` may define it) at most `attempts`
/// times and holds everything it opened until the sandbox is killed;
/// returns, once the loop ended, `opened N` or `failed after N ERRNO`.
async fn hold_until_refused(
    p: &sandkeep_local::LocalProvider,
    id: &SandboxId,
    setup: &str,
    open_one: &str,
    attempts: u32,
) -> String {
    let probe = format!(
        r#"cat > /tmp/hog.py <<'EOF'
import ctypes, errno, os, resource, signal
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
{setup}
held = []
try:
    for _ in range({attempts}):
        held.append({open_one})
    result = "opened %d" % len(held)
except OSError as e:
    result = "failed after %d %s" % (len(held), errno.errorcode[e.errno])
with open("/tmp/held.part", "w") as f:
    f.write(result + "\n")
os.rename("/tmp/held.part", "/tmp/held")
signal.pause()
EOF
python3 /tmp/hog.py >/dev/null 2>/tmp/hog.err </dev/null &
echo started"#
    );
    let out = run(p, id, &probe).await;
    assert_eq!(text(&out.stdout), "started\n", "{}", text(&out.stderr));
    let started = std::time::Instant::now();
    loop {
        let out = sh(p, id, "cat /tmp/held /tmp/hog.err 2>/dev/null").await;
        if !out.stdout.is_empty() {
            return text(&out.stdout);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30) * patience(),
            "the hog in {id} wrote no result in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The host's pty pool (`kernel.pty.max` less `kernel.pty.reserve`, 3,072
/// by default) is shared by every devpts instance: a sandbox opening ptys
/// in a loop stops at its own bound (rootfs.rs `PTYS_MAX`, 256) with
/// ENOSPC while it holds them, and a neighbour still opens one. Bounded:
/// the hog tries at most 600, so a build without the bound shows here
/// without draining the host's pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_holds_at_most_its_ptys_and_the_neighbour_opens_one() {
    let home = state_dir();
    let p = provider(home.path());
    let timeout = 120 * u64::from(patience());
    let hog = create(&p, timeout).await;
    let neighbour = create(&p, timeout).await;
    let result = hold_until_refused(&p, &hog.sandbox_id, "", "os.openpty()", 600).await;
    assert_eq!(
        result, "failed after 256 ENOSPC\n",
        "a sandbox must stop at its own 256 ptys"
    );
    let out = sh(
        &p,
        &neighbour.sandbox_id,
        "python3 -c 'import os; os.openpty(); print(\"opened\")'",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "opened\n",
        "the neighbour cannot open a pty: {}",
        text(&out.stderr)
    );
    p.kill(&hog.sandbox_id).await.unwrap();
    p.kill(&neighbour.sandbox_id).await.unwrap();
}

/// `inotify_init1` through ctypes, raising OSError as os functions do.
const INOTIFY_INIT: &str = r#"libc = ctypes.CDLL(None, use_errno=True)
def inotify_init():
    fd = libc.inotify_init1(0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    return fd"#;

/// inotify instances are counted per user up the user-namespace chain, to
/// the owner of each namespace (`fs.inotify.max_user_instances`, 128 by
/// default): a sandbox that takes every instance it can gets EMFILE at
/// its own bound and leaves host root's and a neighbour's alone; the
/// task waiters keep working in both (the hog's own fall back to
/// looking). Bounded: at most 300 instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_cannot_take_host_roots_inotify_instances() {
    if !require(
        root(),
        "root's sandboxes share host root's inotify instances",
    ) {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let timeout = 120 * u64::from(patience());
    let hog = create(&p, timeout).await;
    let neighbour = create(&p, timeout).await;
    let result = hold_until_refused(&p, &hog.sandbox_id, INOTIFY_INIT, "inotify_init()", 300).await;
    // Everything is looked at while the hog holds its instances, and
    // asserted only once both sandboxes are gone: a failure here must not
    // leave host root without inotify until the hog's deadline.
    let host = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC);
    let probe = format!(
        "python3 - <<'EOF'\nimport ctypes, os\n{INOTIFY_INIT}\ninotify_init()\nprint(\"created\")\nEOF"
    );
    let neighbours = sh(&p, &neighbour.sandbox_id, &probe).await;
    let mut waits = Vec::new();
    for (n, id, task) in [
        (1, &neighbour.sandbox_id, "neighbour"),
        (2, &hog.sandbox_id, "hog"),
    ] {
        let helper = p.task_helper(id).await.unwrap();
        let task_id = format!("{n:032x}");
        let order = serde_json::json!({"task_id": task_id, "command": "echo done", "timeout": 60});
        let started = run(&p, id, &format!("{helper} start '{order}'")).await;
        // Past the output it will write ("done\n"): a wait that sees the
        // output grow before the end is recorded answers `running`.
        let wait = serde_json::json!({"task_id": task_id, "timeout": 30, "stdout_offset": 5});
        let waited = run(&p, id, &format!("{helper} wait '{wait}'")).await;
        waits.push((task, started, waited));
    }
    p.kill(&hog.sandbox_id).await.unwrap();
    p.kill(&neighbour.sandbox_id).await.unwrap();
    assert!(
        result.starts_with("failed after") && result.ends_with(" EMFILE\n"),
        "300 inotify instances in one sandbox: {result}"
    );
    assert!(
        host.is_ok(),
        "host root cannot create an inotify instance while a sandbox holds {result}: {host:?}"
    );
    assert_eq!(
        text(&neighbours.stdout),
        "created\n",
        "the neighbour cannot create an inotify instance: {}",
        text(&neighbours.stderr)
    );
    for (task, started, waited) in waits {
        assert_eq!(
            started.exit_code,
            Some(0),
            "start in the {task}: {}{}",
            text(&started.stdout),
            text(&started.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&waited.stdout)
            .unwrap_or_else(|e| panic!("wait in the {task}: {e}: {}", text(&waited.stderr)));
        assert_eq!(v["state"], "succeeded", "wait in the {task}: {v}");
    }
}
