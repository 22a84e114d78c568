//! What users of the helper feel: start and status latency, how soon an
//! exit is seen, the cost of capturing a 1 GiB flood, and supervisor
//! memory. Each figure is a median with its ratio to a baseline measured in
//! the same run. Run with `cargo bench -p sandkeep-task` (release build).
//! Besides its own lines it prints one `BENCH name=… value=… unit=…
//! baseline=… ratio=… target=…` line a figure, which `scripts/bench`
//! collects (the format of crates/sandkeep/benches/common).

use std::fs;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sandkeep_proto::TaskId;
use sandkeep_proto::wire::{TaskStatus, TaskSummary};
use serde_json::json;

const HELPER: &str = env!("CARGO_BIN_EXE_sandkeep-task");

fn new_id() -> TaskId {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    TaskId::from_bytes(bytes)
}

struct Bench {
    home: tempfile::TempDir,
    secrets: Vec<(String, String)>,
}

impl Bench {
    fn new() -> Self {
        // Eight secret values are active in every measurement.
        let secrets = (0..8)
            .map(|i| (format!("BENCH_SECRET_{i}"), format!("{}-{i}", new_id())))
            .collect();
        Self {
            home: tempfile::tempdir().expect("temporary HOME"),
            secrets,
        }
    }

    fn helper(&self, args: &[&str]) -> Output {
        Command::new(HELPER)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home.path())
            .envs(self.secrets.iter().map(|(k, v)| (k, v)))
            .args(args)
            .output()
            .expect("running the helper")
    }

    fn ok<T: serde::de::DeserializeOwned>(&self, args: &[&str]) -> T {
        let out = self.helper(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON reply")
    }

    fn start(&self, id: &TaskId, command: &str) -> TaskSummary {
        let req = json!({"task_id": id, "command": command, "timeout": 3600}).to_string();
        self.ok(&["start", &req])
    }

    fn status(&self, id: &TaskId) -> TaskStatus {
        self.ok(&["status", &json!({"task_id": id, "limit": 64}).to_string()])
    }

    fn cancel(&self, id: &TaskId) {
        let _: serde_json::Value = self.ok(&["cancel", &json!({"task_id": id}).to_string()]);
    }

    fn wait_terminal(&self, id: &TaskId, pause: Duration) -> TaskStatus {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.status(id);
            if s.summary.state.is_terminal() {
                return s;
            }
            assert!(Instant::now() < deadline, "task {id} never ended: {s:?}");
            std::thread::sleep(pause);
        }
    }

    /// Waits for the supervisor to exit, which it does right after writing
    /// the terminal record, through a pidfd: no polling process competes
    /// with the task for the two cores. Then confirms with one status.
    fn wait_supervisor_gone(&self, id: &TaskId) -> TaskStatus {
        let pid = rustix::process::Pid::from_raw(self.supervisor_pid(id) as i32)
            .expect("a supervisor pid");
        if let Ok(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            let mut fds = [rustix::event::PollFd::new(
                &pidfd,
                rustix::event::PollFlags::IN,
            )];
            let limit = rustix::event::Timespec {
                tv_sec: 120,
                tv_nsec: 0,
            };
            let ready = rustix::event::poll(&mut fds, Some(&limit)).expect("polling a pidfd");
            assert_eq!(ready, 1, "task {id}: supervisor still running after 120 s");
        }
        let s = self.status(id);
        assert!(s.summary.state.is_terminal(), "supervisor gone, but {s:?}");
        s
    }

    fn forget(&self, id: &TaskId) {
        let dir = self
            .home
            .path()
            .join(".local/state/sandkeep/tasks")
            .join(id.as_str());
        fs::remove_dir_all(dir).expect("removing a finished task directory");
    }

    fn supervisor_pid(&self, id: &TaskId) -> u32 {
        let path = self
            .home
            .path()
            .join(".local/state/sandkeep/tasks")
            .join(id.as_str())
            .join("state.json");
        let record: sandkeep_proto::StateRecord =
            serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        record.supervisor.pid
    }
}

/// The cheapest reader a pipe can have: the producer's stdout is a pipe
/// that is only spliced into `/dev/null` (no copy, no redaction, no
/// files). What any pipe capture costs at the least.
fn into_bare_pipe(producer: &str) -> Duration {
    let null = fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let t0 = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(producer)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = child.stdout.take().unwrap();
    let _ = rustix::pipe::fcntl_setpipe_size(&pipe, 1 << 20);
    while rustix::pipe::splice(
        &pipe,
        None,
        &null,
        None,
        1 << 20,
        rustix::pipe::SpliceFlags::empty(),
    )
    .expect("splicing into /dev/null")
        > 0
    {}
    assert!(child.wait().unwrap().success());
    t0.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The machine-readable line for `scripts/bench` (see the module's doc).
fn bench_line(name: &str, value: f64, unit: &str, baseline: Option<f64>, target: &str) {
    let (baseline, ratio) = match baseline {
        Some(b) if b != 0.0 => (format!("{b:.3}"), format!("{:.3}", value / b)),
        Some(b) => (format!("{b:.3}"), "-".to_owned()),
        None => ("-".to_owned(), "-".to_owned()),
    };
    println!(
        "BENCH name={name} value={value:.3} unit={unit} baseline={baseline} ratio={ratio} target={target}"
    );
}

/// Prints the human line and, under `key` with the machine-readable
/// `bench_target`, the `BENCH` line.
fn report(
    key: &str,
    what: &str,
    value: Duration,
    (target, bench_target): (&str, &str),
    baseline_name: &str,
    baseline: Duration,
) {
    println!(
        "{what}: median {:.2} ms (target {target}); baseline {baseline_name}: {:.2} ms; ratio {:.2}",
        ms(value),
        ms(baseline),
        value.as_secs_f64() / baseline.as_secs_f64()
    );
    bench_line(key, ms(value), "ms", Some(ms(baseline)), bench_target);
}

fn spawn_true() -> Duration {
    let t0 = Instant::now();
    let st = Command::new("/bin/true").status().unwrap();
    assert!(st.success());
    t0.elapsed()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Proportional set size: this process's share of the memory it maps,
/// so the static binary's pages shared by all supervisors count once.
fn pss_kib(pid: u32) -> u64 {
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let line = rollup.lines().find(|l| l.starts_with("Pss:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported.
    let b = Bench::new();
    let rounds = 100;

    let baseline = median((0..rounds).map(|_| spawn_true()).collect());

    let starts = (0..rounds)
        .map(|_| {
            let id = new_id();
            let t0 = Instant::now();
            b.start(&id, "exit 0");
            let took = t0.elapsed();
            b.wait_terminal(&id, Duration::from_millis(1));
            b.forget(&id);
            took
        })
        .collect();
    report(
        "helper.start",
        "start -> first record returned",
        median(starts),
        ("<= 5 ms", "<=5"),
        "spawn of /bin/true",
        baseline,
    );

    let running = new_id();
    b.start(&running, "sleep 1000");
    let statuses = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            b.status(&running);
            t0.elapsed()
        })
        .collect();
    report(
        "helper.status",
        "status of a running task",
        median(statuses),
        ("<= 2 ms", "<=2"),
        "spawn of /bin/true",
        baseline,
    );

    let idle_hwm = vm_hwm_kib(b.supervisor_pid(&running));
    b.cancel(&running);
    b.forget(&running);

    // The command prints its own exit time as its last act; the gap to the
    // first status that says terminal is what a poller sees. Baseline: the
    // same command as a direct child, seen by waitpid.
    let exit_stamp = "printf %s \"$EPOCHREALTIME\"";
    let seen = (0..30)
        .map(|_| {
            let id = new_id();
            b.start(&id, exit_stamp);
            let s = b.wait_terminal(&id, Duration::ZERO);
            let seen_at = unix_now();
            b.forget(&id);
            Duration::from_secs_f64((seen_at - s.stdout.parse::<f64>().unwrap()).max(0.0))
        })
        .collect();
    let direct = (0..30)
        .map(|_| {
            let out = Command::new("bash")
                .arg("-c")
                .arg(exit_stamp)
                .output()
                .unwrap();
            let seen_at = unix_now();
            let stamp: f64 = String::from_utf8(out.stdout).unwrap().parse().unwrap();
            Duration::from_secs_f64((seen_at - stamp).max(0.0))
        })
        .collect();
    report(
        "helper.exit_seen",
        "exit -> terminal seen by status",
        median(seen),
        ("<= 10 ms", "<=10"),
        "direct child seen by waitpid",
        median(direct),
    );

    for (key, label, producer) in [
        (
            "zeros",
            "1 GiB of zeros (head -c)",
            "head -c 1073741824 /dev/zero",
        ),
        (
            "lines",
            "1 GiB of lines (yes | head -c)",
            "yes 'a line of ordinary log output' | head -c 1073741824",
        ),
        ("seq", "1.07 GB of numbered lines (seq)", "seq 118500000"),
        // The producer of pueue's output benchmark (../shared/notes/pueue.md
        // §4.2, 200 MB there: 2.3x /dev/null), at 1 GiB.
        (
            "tr",
            "1 GiB of x (head -c | tr, pueue's producer)",
            "head -c 1073741824 /dev/zero | tr '\\0' x",
        ),
    ] {
        let mut captured = Vec::new();
        let mut to_null = Vec::new();
        let mut to_pipe = Vec::new();
        let mut to_bare_pipe = Vec::new();
        let timed_shell = |script: String| {
            let t0 = Instant::now();
            let st = Command::new("bash")
                .arg("-c")
                .arg(script)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            t0.elapsed()
        };
        for _ in 0..5 {
            to_null.push(timed_shell(format!("{producer} > /dev/null")));
            to_pipe.push(timed_shell(format!("{producer} | cat > /dev/null")));
            to_bare_pipe.push(into_bare_pipe(producer));
            let id = new_id();
            let t0 = Instant::now();
            b.start(&id, producer);
            let s = b.wait_supervisor_gone(&id);
            captured.push(t0.elapsed());
            assert!(s.stdout_truncated && s.stdout_bytes == 1 << 20, "{s:?}");
            assert_eq!(s.summary.exit_code, Some(0), "{s:?}");
            b.forget(&id);
        }
        let captured = median(captured);
        report(
            &format!("helper.capture_{key}"),
            &format!("capture of {label}, start to terminal seen"),
            captured,
            ("<= 1.3x baseline", "<=1.3x"),
            "same command to /dev/null",
            median(to_null),
        );
        report(
            &format!("helper.capture_{key}_vs_cat"),
            &format!("capture of {label}, start to terminal seen"),
            captured,
            ("none", "-"),
            "same command into a pipe drained by cat",
            median(to_pipe),
        );
        report(
            &format!("helper.capture_{key}_vs_splice"),
            &format!("capture of {label}, start to terminal seen"),
            captured,
            ("none", "-"),
            "same command into a pipe only spliced to /dev/null",
            median(to_bare_pipe),
        );
    }

    let flood = new_id();
    b.start(
        &flood,
        "head -c 104857600 /dev/zero; echo done >&2; sleep 1000",
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.status(&flood).stderr_bytes == 0 {
        assert!(Instant::now() < deadline, "the flood never finished");
        std::thread::sleep(Duration::from_millis(10));
    }
    let flood_hwm = vm_hwm_kib(b.supervisor_pid(&flood));
    b.cancel(&flood);
    b.forget(&flood);

    // 128 concurrent tasks, the per-user maximum.
    let many: Vec<TaskId> = (0..128).map(|_| new_id()).collect();
    for id in &many {
        b.start(id, "sleep 1000");
    }
    let total_pss: u64 = many.iter().map(|id| pss_kib(b.supervisor_pid(id))).sum();
    for id in &many {
        b.cancel(id);
    }
    println!(
        "128 concurrent supervisors: total PSS {:.1} MiB; baseline 128 x 4 MiB budget = 512 MiB; ratio {:.3}",
        total_pss as f64 / 1024.0,
        total_pss as f64 / (128.0 * 4096.0)
    );
    println!(
        "supervisor peak RSS (VmHWM) after a 100 MiB flood, 8 secrets: {flood_hwm} KiB (target <= 4096 KiB); \
         baseline idle supervisor: {idle_hwm} KiB; ratio {:.2}",
        flood_hwm as f64 / idle_hwm as f64
    );
    bench_line(
        "helper.pss_128_supervisors",
        total_pss as f64,
        "KiB",
        Some(128.0 * 4096.0),
        "-",
    );
    bench_line(
        "helper.flood_hwm",
        flood_hwm as f64,
        "KiB",
        Some(idle_hwm as f64),
        "<=4096",
    );
}
