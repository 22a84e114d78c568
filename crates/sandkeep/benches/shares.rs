//! Benchmark of host shares (SPEC §13) on a 10,000-file tree, each figure
//! with its baseline measured in the same run: `create_sandbox` with one
//! cow share against one without; `list_changes` with 10 and 1,000
//! changed files against `git status` of the same tree (and, printed
//! beside it, the same walk as one helper process); `apply_changes`
//! of 100 changed files against `cp` of the same files.
//!
//! Run: `cargo bench -p sandkeep --bench shares` (as root, like `local`).
//! Targets (issue 26): create ≤ 1.2×; list_changes ≤ 0.2× git status and
//! ≤ 20 ms with 10 changes, ≤ 1× with 1,000; apply ≤ 2× cp.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bench_line, exec_request, local_provider, median, ms, state_dir};
use sandkeep::provider::{Provider, SandboxId};
use sandkeep::service::{
    ApplyChangesArgs, CreateSandboxArgs, KillSandboxArgs, ListChangesArgs, RunCommandArgs, Service,
    Session,
};
use sandkeep_proto::shares::ChangesRequest;
use sandkeep_proto::wire;
use sandkeep_shares::ShareConfig;

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const ROUNDS: usize = 15;

fn main() {
    let home = state_dir("sk-bench-shares-");
    let tree = state_dir("sk-bench-tree-");
    let root = tree.path();
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            std::fs::write(
                dir.join(format!("f{f:03}.txt")),
                format!("line {d} {f}\n").repeat(40),
            )
            .unwrap();
        }
    }
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(["-c", "user.email=b@x", "-c", "user.name=b"])
            .args(args)
            .current_dir(root)
            .stdout(Stdio::null())
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "tree"]);
    let git_status = || {
        let t = Instant::now();
        git(&["status", "--porcelain"]);
        t.elapsed()
    };

    let provider: Arc<dyn Provider> = Arc::new(local_provider(home.path()));
    let cow = format!("{}:cow", root.display());
    let share = ShareConfig::parse(&cow, home.path()).expect("share");
    let service = Service::new(Arc::clone(&provider), Vec::new()).with_shares(vec![share]);
    let session = Session::stateless();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    rt.block_on(async {
        let create = |shares: Option<Vec<String>>| {
            let (service, session) = (&service, &session);
            async move {
                let t = Instant::now();
                let made = service
                    .create_sandbox(
                        session,
                        CreateSandboxArgs {
                            shares,
                            ..Default::default()
                        },
                    )
                    .await
                    .expect("create");
                let took = t.elapsed();
                (made.sandbox_id, took)
            }
        };
        let kill = |id: String| {
            let (service, session) = (&service, &session);
            async move {
                service
                    .kill_sandbox(session, KillSandboxArgs { sandbox_id: id })
                    .await
                    .expect("kill");
            }
        };
        let run = |id: &str, command: String| {
            let (service, session) = (&service, &session);
            let id = id.to_owned();
            async move {
                let out = service
                    .run_command(
                        session,
                        RunCommandArgs {
                            command,
                            sandbox_id: Some(id),
                            cwd: None,
                            timeout: Some(600),
                        },
                    )
                    .await
                    .expect("run");
                assert_eq!(out.exit_code, Some(0), "{}", out.stderr);
            }
        };
        let list = |id: &str| {
            let (service, id) = (&service, id.to_owned());
            async move {
                let t = Instant::now();
                let listed = service
                    .list_changes(ListChangesArgs {
                        sandbox_id: id,
                        diff: None,
                    })
                    .await
                    .expect("list_changes");
                (listed.changes.len(), t.elapsed())
            }
        };

        // The same walk as one helper process: how list_changes read
        // before the resident reader answered it (the exec alone).
        let one_shot = |id: &str| {
            let (provider, id) = (&provider, SandboxId::parse(id).expect("a sandbox id"));
            async move {
                let info = provider.info(&id).await.expect("info");
                let request = ChangesRequest {
                    shares: provider.share_layers(&info).expect("layers"),
                    diff: false,
                };
                let helper = provider.task_helper(&id).await.expect("helper");
                let line = wire::helper_command_line(&helper, wire::verb::CHANGES, &request);
                let t = Instant::now();
                let out = provider
                    .exec(&id, exec_request(line, 16 << 20))
                    .await
                    .expect("changes");
                let took = t.elapsed();
                assert_eq!(out.exit_code, Some(0), "{out:?}");
                took
            }
        };

        // Create, interleaved so that both see the same machine.
        let (mut plain, mut shared) = (Vec::new(), Vec::new());
        for i in 0..ROUNDS + 2 {
            let (a, ta) = create(Some(Vec::new())).await;
            let (b, tb) = create(None).await;
            kill(a).await;
            kill(b).await;
            if i >= 2 {
                plain.push(ta);
                shared.push(tb);
            }
        }
        let (plain, shared) = (median(plain), median(shared));
        eprintln!(
            "create: {:.2} ms with a cow share, {:.2} ms without",
            ms(shared),
            ms(plain)
        );
        bench_line("shares.create", ms(shared), "ms", Some(ms(plain)), "<=1.2x");

        // list_changes against git status of the same tree.
        for (changed, name, target) in [
            (10, "shares.list_10", "<=0.2x"),
            (1_000, "shares.list_1000", "<=1x"),
        ] {
            let (id, _) = create(None).await;
            run(
                &id,
                format!("for f in $(ls -d d*/* | head -n {changed}); do echo changed >> $f; done"),
            )
            .await;
            let (mut ours, mut theirs, mut helper) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let (n, t) = list(&id).await;
                assert_eq!(n, changed);
                ours.push(t);
                theirs.push(git_status());
                helper.push(one_shot(&id).await);
            }
            let (ours, theirs, helper) = (median(ours), median(theirs), median(helper));
            eprintln!(
                "list_changes, {changed} changes: {:.2} ms; git status: {:.2} ms; \
                 the walk as one helper process: {:.2} ms",
                ms(ours),
                ms(theirs),
                ms(helper)
            );
            bench_line(name, ms(ours), "ms", Some(ms(theirs)), target);
            kill(id).await;
        }

        // apply_changes of 100 files against cp of the same files; each
        // round a fresh sandbox (what was applied is no change any more).
        let copies = state_dir("sk-bench-cp-");
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..7 {
            let (id, _) = create(None).await;
            run(
                &id,
                format!("for f in d{round:03}/*; do echo round >> $f; done"),
            )
            .await;
            let t = Instant::now();
            let done = service
                .apply_changes(ApplyChangesArgs {
                    sandbox_id: id.clone(),
                    paths: None,
                })
                .await
                .expect("apply");
            ours.push(t.elapsed());
            assert_eq!(done.applied.len(), FILES_PER_DIR, "{:?}", done.conflicts);
            kill(id).await;
            let target = copies.path().join(format!("r{round}"));
            std::fs::create_dir(&target).unwrap();
            theirs.push(cp(&root.join(format!("d{round:03}")), &target));
        }
        let (ours, theirs) = (median(ours), median(theirs));
        eprintln!(
            "apply 100 files: {:.2} ms; cp: {:.2} ms",
            ms(ours),
            ms(theirs)
        );
        bench_line("shares.apply_100", ms(ours), "ms", Some(ms(theirs)), "<=2x");
    });
}

/// `cp -p` of every file of `from` into `to`, one process.
fn cp(from: &Path, to: &Path) -> Duration {
    let files: Vec<_> = std::fs::read_dir(from)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let t = Instant::now();
    let ok = Command::new("cp")
        .arg("-p")
        .args(&files)
        .arg(to)
        .status()
        .expect("cp")
        .success();
    assert!(ok);
    t.elapsed()
}
