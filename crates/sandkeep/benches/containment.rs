//! Benchmark of what containment costs (issue "Containment", its speed
//! targets), each figure beside a baseline measured in the same run:
//!
//! - a fresh sandbox from the CLI (`sandkeep exec -- true`: create, run,
//!   destroy; installed copies of the executables) against
//!   `bwrap --unshare-all … /bin/sh -c true`;
//! - `create_sandbox` with 200 live sandboxes against none;
//! - host memory per idle sandbox: the PSS of its keeper and every process
//!   below it (init, fork server, egress proxy), from `smaps_rollup`.
//!
//! Run: `cargo bench -p sandkeep --bench containment` as root. Needs
//! `bwrap` (Debian: `apt-get install bubblewrap`); refuses to run without it
//! rather than print a figure with no baseline. Prints one `BENCH` line a
//! figure for `scripts/bench`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{EXE, bench_line, keepers_pss_kib, local_config, median, ms, state_dir};
use sandkeep::provider::local::{HostBounds, LocalProvider};
use sandkeep::provider::{CreateSpec, Provider, SandboxId};

const FRESH_RUNS: usize = 200;
const CREATES: usize = 30;
const LIVE: usize = 200;
const WARMUP: usize = 3;

/// `sandkeep` and `sandkeep-keeper` copied side by side, as `cargo install`
/// lays them out: what people run, and installed like `bwrap`. The
/// linker's own output runs slower until the page cache settles (up to a
/// millisecond a fresh exec, docs/benchmarks-log.md).
fn installed_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let bin = state_dir("sk-bench-bin-");
    for name in ["sandkeep", "sandkeep-keeper"] {
        let from = Path::new(EXE).with_file_name(name);
        std::fs::copy(&from, bin.path().join(name))
            .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
    let exe = bin.path().join("sandkeep");
    (bin, exe)
}

fn main() {
    let bwrap = bwrap_argv();
    let home = state_dir("sk-bench-");
    let run = |argv: &[String], envs: &[(&str, &Path)]| {
        let t = Instant::now();
        let status = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("spawn");
        assert!(status.success(), "{argv:?} failed: {status}");
        t.elapsed()
    };
    let (_bin, installed) = installed_copy();
    let cli: Vec<String> = [
        installed.to_str().expect("a UTF-8 path"),
        "exec",
        "--",
        "true",
    ]
    .map(String::from)
    .to_vec();
    let cli_env = [("SANDKEEP_HOME", home.path())];
    // Interleaved, so a noisy neighbour weighs on both alike.
    let (mut fresh, mut bwrapped) = (Vec::new(), Vec::new());
    for i in 0..FRESH_RUNS + WARMUP {
        let f = run(&cli, &cli_env);
        let b = run(&bwrap, &[]);
        if i >= WARMUP {
            fresh.push(f);
            bwrapped.push(b);
        }
    }
    let (fresh, bwrapped) = (median(fresh), median(bwrapped));

    // 200 idle sandboxes on purpose: past the host-wide bounds a real
    // server keeps (16 per CPU, 80% of RAM committed), which every create
    // still counts.
    let bounds = HostBounds {
        sandboxes: LIVE as u32 + 1,
        memory_mib: u64::MAX,
    };
    let provider =
        LocalProvider::new(local_config(home.path()).with_bounds(bounds)).expect("local provider");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (idle_create, busy_create, pss_kib, isolation) = rt.block_on(async {
        let spec = || CreateSpec {
            template: "base".into(),
            timeout: 1800,
            envs: Default::default(),
            network: None,
            allow_hosts: Vec::new(),
            limits: Default::default(),
            shares: Vec::new(),
            on_timeout: Default::default(),
        };
        let creates = |n: usize| {
            let provider = &provider;
            async move {
                let mut v = Vec::new();
                for i in 0..n + WARMUP {
                    let t = Instant::now();
                    let info = provider.create(spec()).await.expect("create");
                    let c = t.elapsed();
                    assert!(provider.kill(&info.sandbox_id).await.expect("kill"));
                    if i >= WARMUP {
                        v.push(c);
                    }
                }
                median(v)
            }
        };
        let idle = creates(CREATES).await;
        let mut live: Vec<SandboxId> = Vec::new();
        let mut isolation = String::new();
        for _ in 0..LIVE {
            let info = provider
                .create(spec())
                .await
                .expect("create a live sandbox");
            isolation = info.isolation;
            live.push(info.sandbox_id);
        }
        let pss = keepers_pss_kib(home.path());
        let busy = creates(CREATES).await;
        for id in &live {
            provider.kill(id).await.expect("kill");
        }
        assert_eq!(pss.len(), LIVE, "one keeper per live sandbox");
        let per_sandbox = pss.iter().sum::<u64>() / pss.len() as u64;
        (idle, busy, per_sandbox, isolation)
    });

    println!("containment benchmark (isolation {isolation}, medians)");
    println!(
        "  sandkeep exec -- true (fresh)   : {:8.3} ms  ({FRESH_RUNS} runs), bwrap --unshare-all sh -c true {:.3} ms, ratio {:.2} (target <= 2)",
        ms(fresh),
        ms(bwrapped),
        fresh.as_secs_f64() / bwrapped.as_secs_f64()
    );
    println!(
        "  create with {LIVE} live sandboxes : {:8.3} ms  ({CREATES} runs), with none {:.3} ms, ratio {:.2} (target <= 2)",
        ms(busy_create),
        ms(idle_create),
        busy_create.as_secs_f64() / idle_create.as_secs_f64()
    );
    println!(
        "  host memory per idle sandbox    : {:8} KiB PSS (keeper and every process below it; target <= 1024)",
        pss_kib
    );
    bench_line(
        "containment.fresh_exec",
        ms(fresh),
        "ms",
        Some(ms(bwrapped)),
        "<=2x",
    );
    bench_line(
        "containment.create_200_live",
        ms(busy_create),
        "ms",
        Some(ms(idle_create)),
        "<=2x",
    );
    bench_line(
        "containment.idle_pss",
        pss_kib as f64,
        "KiB",
        None,
        "<=1024",
    );
}

/// bwrap with the host's /usr read-only and everything unshared: the
/// lightest sandbox of the same kind. /bin and friends follow the host's
/// layout (symlinks into /usr on merged-usr systems).
fn bwrap_argv() -> Vec<String> {
    let found = Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "bwrap is not installed: the baseline of this benchmark (Debian: apt-get install bubblewrap)"
    );
    let mut argv: Vec<String> = ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr"]
        .map(String::from)
        .to_vec();
    for dir in ["/bin", "/sbin", "/lib", "/lib64"] {
        match std::fs::read_link(dir) {
            Ok(target) => {
                argv.extend(["--symlink".into(), target.display().to_string(), dir.into()])
            }
            Err(_) if Path::new(dir).is_dir() => {
                argv.extend(["--ro-bind".into(), dir.into(), dir.into()])
            }
            Err(_) => {}
        }
    }
    argv.extend(["--proc", "/proc", "--dev", "/dev", "/bin/sh", "-c", "true"].map(String::from));
    argv
}
