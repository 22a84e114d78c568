//! Benchmark of the local provider: create, exec of `true` and kill, with
//! a plain fork+exec of `true`, and of `bash -c true` (what an exec in a
//! sandbox runs), measured in the same run as the baselines.
//!
//! Run: `cargo bench -p sandkeep --bench local` (as root for the root-mode
//! figures). Targets: create ≤ 50 ms, exec ≤ 3 ms, kill ≤ 50 ms (medians).

mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::{bench_line, exec_request, local_config, local_provider, median, ms, state_dir};
use sandkeep::provider::local::LocalProvider;
use sandkeep::provider::{CreateSpec, Provider};

const SANDBOXES: usize = 30;
const EXECS: usize = 300;
const WARMUP: usize = 3;

fn main() {
    // `cargo bench` passes --bench; this harness takes no options.
    let home = state_dir("sk-bench-");
    let provider = local_provider(home.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    let spawn = |argv: &[&str]| {
        let t = Instant::now();
        let status = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("spawn");
        assert!(status.success());
        t.elapsed()
    };
    for _ in 0..WARMUP * 10 {
        spawn(&["/bin/true"]);
    }
    let baseline = median((0..EXECS).map(|_| spawn(&["/bin/true"])).collect());
    // What an exec in a sandbox runs: `bash -c COMMAND` (docs/tools.md).
    let bash_baseline = median(
        (0..EXECS)
            .map(|_| spawn(&["/bin/bash", "-c", "true"]))
            .collect(),
    );

    let spec = || CreateSpec {
        template: "base".into(),
        timeout: 600,
        envs: Default::default(),
        network: None,
        allow_hosts: Vec::new(),
        limits: Default::default(),
        shares: Vec::new(),
        on_timeout: Default::default(),
    };
    let (create, kill, exec, isolation) = rt.block_on(async {
        let mut creates = Vec::new();
        let mut kills = Vec::new();
        let mut isolation = String::new();
        for i in 0..SANDBOXES + WARMUP {
            let t = Instant::now();
            let info = provider.create(spec()).await.expect("create");
            let c = t.elapsed();
            let t = Instant::now();
            assert!(provider.kill(&info.sandbox_id).await.expect("kill"));
            let k = t.elapsed();
            if i >= WARMUP {
                creates.push(c);
                kills.push(k);
            }
            isolation = info.isolation;
        }
        let info = provider.create(spec()).await.expect("create");
        let mut execs = Vec::new();
        for i in 0..EXECS + WARMUP * 10 {
            let t = Instant::now();
            let out = provider
                .exec(&info.sandbox_id, exec_request("true", 65536))
                .await
                .expect("exec");
            let e = t.elapsed();
            assert_eq!(out.exit_code, Some(0));
            if i >= WARMUP * 10 {
                execs.push(e);
            }
        }
        provider.kill(&info.sandbox_id).await.expect("kill");
        (median(creates), median(kills), median(execs), isolation)
    });

    // The weaker level used where namespaces are refused, for comparison.
    let weak = LocalProvider::new(local_config(home.path()).with_process_only(true))
        .expect("local provider");
    let (weak_create, weak_exec, weak_isolation) = rt.block_on(async {
        let mut creates = Vec::new();
        for _ in 0..SANDBOXES {
            let t = Instant::now();
            let info = weak.create(spec()).await.expect("create");
            creates.push(t.elapsed());
            weak.kill(&info.sandbox_id).await.expect("kill");
        }
        let info = weak.create(spec()).await.expect("create");
        let mut execs = Vec::new();
        for _ in 0..EXECS {
            let t = Instant::now();
            let out = weak
                .exec(&info.sandbox_id, exec_request("true", 65536))
                .await
                .expect("exec");
            assert_eq!(out.exit_code, Some(0));
            execs.push(t.elapsed());
        }
        weak.kill(&info.sandbox_id).await.expect("kill");
        (median(creates), median(execs), info.isolation)
    });

    println!("local provider benchmark (isolation {isolation}, medians)");
    println!(
        "  baseline fork+exec of /bin/true : {:8.3} ms  ({EXECS} runs); of bash -c true: {:.3} ms",
        ms(baseline),
        ms(bash_baseline)
    );
    println!(
        "  create_sandbox                   : {:8.3} ms  ({SANDBOXES} runs, target <= 15 ms)",
        ms(create)
    );
    println!(
        "  exec of `true` in a sandbox      : {:8.3} ms  ({EXECS} runs, target <= 3 ms), ratio to /bin/true {:.2}, to bash -c true {:.2}",
        ms(exec),
        exec.as_secs_f64() / baseline.as_secs_f64(),
        exec.as_secs_f64() / bash_baseline.as_secs_f64()
    );
    println!(
        "  kill_sandbox                     : {:8.3} ms  ({SANDBOXES} runs, target <= 50 ms)",
        ms(kill)
    );
    println!(
        "  fallback ({weak_isolation}) create : {:8.3} ms, exec of `true`: {:.3} ms (ratio {:.2})",
        ms(weak_create),
        ms(weak_exec),
        weak_exec.as_secs_f64() / baseline.as_secs_f64()
    );
    bench_line("local.create", ms(create), "ms", None, "<=15");
    bench_line("local.kill", ms(kill), "ms", None, "<=50");
    bench_line(
        "local.exec",
        ms(exec),
        "ms",
        Some(ms(bash_baseline)),
        "<=1.5x",
    );
    bench_line("local.fallback_create", ms(weak_create), "ms", None, "-");
    bench_line(
        "local.fallback_exec",
        ms(weak_exec),
        "ms",
        Some(ms(baseline)),
        "-",
    );
}
