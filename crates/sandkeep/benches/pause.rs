//! Benchmark of pause, resume, snapshots and fork (SPEC §17), each figure
//! with its baseline measured in the same run: pause and resume of a
//! sandbox with 100 processes (absolute target); a snapshot of a sandbox
//! that wrote 100 MiB against `cp -a` of the same files on the host;
//! create from a snapshot against create from `base`; fork against
//! snapshot + create.
//!
//! Run: `cargo bench -p sandkeep --bench pause` (as root: the cgroup
//! freezer). Targets (issue 32): pause, resume ≤ 5 ms; snapshot ≤ 1.5×
//! cp -a; create from a snapshot ≤ 1.5× create from base; fork ≤ 1×
//! snapshot + create.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bench_line, exec_request, local_provider, median, ms, state_dir};
use sandkeep::provider::{CreateSpec, Provider, SandboxId};
use sandkeep::service::{ForkSandboxArgs, Service, Session};

const ROUNDS: usize = 11;

fn spec(template: &str) -> CreateSpec {
    CreateSpec {
        template: template.into(),
        timeout: 600,
        envs: Default::default(),
        network: None,
        allow_hosts: Vec::new(),
        limits: Default::default(),
        shares: Vec::new(),
        on_timeout: Default::default(),
    }
}

fn main() {
    let home = state_dir("sk-bench-pause-");
    let provider = Arc::new(local_provider(home.path()));
    let service = Service::new(provider.clone(), Vec::new());
    let session = Session::stateless();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let p = provider.as_ref();
        let sh = |id: SandboxId, command: &'static str| async move {
            let mut request = exec_request(command, 4096);
            request.timeout = Duration::from_secs(120);
            let out = p.exec(&id, request).await.expect("exec");
            assert_eq!(
                out.exit_code,
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };

        // Pause and resume with 100 processes.
        let id = p.create(spec("base")).await.expect("create").sandbox_id;
        sh(
            id.clone(),
            "for i in $(seq 100); do setsid sleep 1000 </dev/null >/dev/null 2>&1 & done; \
             while [ $(pgrep -xc sleep) -lt 100 ]; do sleep 0.01; done",
        )
        .await;
        let (mut pauses, mut resumes) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = Instant::now();
            p.pause(&id).await.expect("pause");
            pauses.push(t.elapsed());
            let t = Instant::now();
            p.resume(&id, None).await.expect("resume");
            resumes.push(t.elapsed());
        }
        let (pause, resume) = (median(pauses), median(resumes));
        println!(
            "pause of 100 processes: {:.2} ms, resume: {:.2} ms",
            ms(pause),
            ms(resume)
        );
        bench_line("pause.pause_100", ms(pause), "ms", None, "<=5");
        bench_line("pause.resume_100", ms(resume), "ms", None, "<=5");
        p.kill(&id).await.expect("kill");

        // A snapshot of 100 MiB written against cp -a of the same files.
        let id = p.create(spec("base")).await.expect("create").sandbox_id;
        sh(
            id.clone(),
            "mkdir -p /app/data && for i in $(seq 100); do \
             head -c 1048576 /dev/urandom > /app/data/f$i; done",
        )
        .await;
        let host = state_dir("sk-bench-files-");
        let files = host.path().join("data");
        std::fs::create_dir(&files).unwrap();
        for i in 0..100 {
            let mut bytes = vec![0u8; 1 << 20];
            getrandom::fill(&mut bytes).unwrap();
            std::fs::write(files.join(format!("f{i}")), bytes).unwrap();
        }
        let (mut snaps, mut cps, mut names) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..5 {
            let t = Instant::now();
            let snap = p.snapshot(&id, None).await.expect("snapshot");
            snaps.push(t.elapsed());
            names.push(snap.snapshot_id);
            let dest = host.path().join(format!("copy{round}"));
            let t = Instant::now();
            let ok = Command::new("cp")
                .args(["-a"])
                .arg(&files)
                .arg(&dest)
                .status()
                .expect("cp")
                .success();
            cps.push(t.elapsed());
            assert!(ok);
            std::fs::remove_dir_all(&dest).unwrap();
        }
        let (snap, cp) = (median(snaps), median(cps));
        println!(
            "snapshot of 100 MiB written: {:.1} ms; cp -a of the same: {:.1} ms",
            ms(snap),
            ms(cp)
        );
        bench_line(
            "pause.snapshot_100mib",
            ms(snap),
            "ms",
            Some(ms(cp)),
            "<=1.5x",
        );
        for name in names {
            p.delete_snapshot(&name).await.expect("delete");
        }
        p.kill(&id).await.expect("kill");

        // Create from a snapshot of a sandbox that wrote a little against
        // create from base; fork against snapshot + create.
        let id = p.create(spec("base")).await.expect("create").sandbox_id;
        sh(
            id.clone(),
            "mkdir -p /app && echo built > /app/state && pip --version >/dev/null 2>&1; true",
        )
        .await;
        let snap = p.snapshot(&id, None).await.expect("snapshot");
        let (mut bases, mut froms, mut forks, mut snap_times) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let a = p.create(spec("base")).await.expect("create").sandbox_id;
            bases.push(t.elapsed());
            let t = Instant::now();
            let b = p
                .create(spec(&snap.snapshot_id))
                .await
                .expect("create from")
                .sandbox_id;
            froms.push(t.elapsed());
            let t = Instant::now();
            let s = p.snapshot(&id, None).await.expect("snapshot");
            snap_times.push(t.elapsed());
            p.delete_snapshot(&s.snapshot_id).await.expect("delete");
            let t = Instant::now();
            let c = service
                .fork_sandbox(
                    &session,
                    ForkSandboxArgs {
                        sandbox_id: id.to_string(),
                        timeout: None,
                    },
                )
                .await
                .expect("fork")
                .sandbox_id;
            forks.push(t.elapsed());
            for x in [a, b, SandboxId::parse(&c).unwrap()] {
                p.kill(&x).await.expect("kill");
            }
        }
        let (base, from, fork, snap_time) = (
            median(bases),
            median(froms),
            median(forks),
            median(snap_times),
        );
        println!(
            "create from base {:.1} ms, from a snapshot {:.1} ms; snapshot {:.1} ms, fork {:.1} ms",
            ms(base),
            ms(from),
            ms(snap_time),
            ms(fork)
        );
        bench_line(
            "pause.create_from_snapshot",
            ms(from),
            "ms",
            Some(ms(base)),
            "<=1.5x",
        );
        bench_line(
            "pause.fork",
            ms(fork),
            "ms",
            Some(ms(snap_time) + ms(from)),
            "<=1x",
        );
        p.delete_snapshot(&snap.snapshot_id).await.expect("delete");
        p.kill(&id).await.expect("kill");
    });
}
