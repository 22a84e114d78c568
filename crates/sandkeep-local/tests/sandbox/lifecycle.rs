//! The local provider's lifecycle against real sandboxes: create, exec,
//! files, kill, a second provider on the same home (and its retain racing a
//! session end), SIGKILL of the creating
//! process, expiry, stale state, the task helper end to end, and that
//! nothing survives destruction.

use crate::support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandkeep_local::{LocalConfig, LocalProvider};
use sandkeep_provider::{CreateSpec, FileKind, Provider, ProviderError, Release, SandboxId};
use support::local::*;
use support::*;

async fn assert_destroyed(
    p: &sandkeep_local::LocalProvider,
    home: &std::path::Path,
    id: &SandboxId,
) {
    assert!(
        !p.list().await.unwrap().iter().any(|s| &s.sandbox_id == id),
        "{id} still listed"
    );
    assert!(matches!(
        p.info(id).await,
        Err(ProviderError::NoSuchSandbox(_))
    ));
    assert!(
        !sandbox_dir(home, id).exists(),
        "{id}: directory left behind"
    );
    assert_eq!(
        host_mounts_under(home),
        Vec::<String>::new(),
        "mounts left in the host table"
    );
}

/// After a session end (`kill_unless_retained`): the sandbox is gone for
/// every call at once, its files follow within a bounded while (the keeper
/// removes them after the processes are dead), then nothing is left.
async fn assert_released(
    p: &sandkeep_local::LocalProvider,
    home: &std::path::Path,
    id: &SandboxId,
) {
    assert!(
        !p.list().await.unwrap().iter().any(|s| &s.sandbox_id == id),
        "{id} still listed after its session ended"
    );
    assert!(matches!(
        p.info(id).await,
        Err(ProviderError::NoSuchSandbox(_))
    ));
    until(
        Duration::from_secs(5),
        "the files of a released sandbox to be removed",
        || async { !sandbox_dir(home, id).exists() },
    )
    .await;
    assert_destroyed(p, home, id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_reports_and_lists_the_sandbox() {
    let (_home, p, info) = fresh_sandbox(120).await;
    assert!(
        info.isolation.starts_with("userns-"),
        "isolation {}",
        info.isolation
    );
    assert_eq!(info.expires_at, info.created_at + 120);
    assert!(!info.retained);
    assert_eq!(p.list().await.unwrap(), vec![info.clone()]);
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

/// Run by `the_servers_environment_never_reaches_a_sandbox` in a child
/// process whose environment holds `SK_SERVER_CANARY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of the_servers_environment_never_reaches_a_sandbox"]
async fn server_with_a_canary_in_its_environment() {
    assert_eq!(
        std::env::var("SK_SERVER_CANARY").as_deref(),
        Ok("leaked"),
        "run by the_servers_environment_never_reaches_a_sandbox"
    );
    let home = state_dir();
    let p = provider(home.path());
    let mut envs = BTreeMap::new();
    envs.insert("GREETING".to_owned(), "hi there".to_owned());
    let info = p.create(CreateSpec { envs, ..spec(120) }).await.unwrap();
    let out = sh(
        &p,
        &info.sandbox_id,
        "pwd; echo \"$HOME|$USER|$GREETING|${SK_SERVER_CANARY:-clean}\"; id -u",
    )
    .await;
    assert_eq!(text(&out.stdout), "/root\n/root|root|hi there|clean\n0\n");
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

/// A sandbox's environment is its basics plus the create-time `envs`,
/// never the server's own (which may hold its secrets).
#[test]
fn the_servers_environment_never_reaches_a_sandbox() {
    let out = ignored_test("lifecycle::server_with_a_canary_in_its_environment")
        .env("SK_SERVER_CANARY", "leaked")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_reports_output_status_and_death_by_signal() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(&p, id, "echo hello; echo oops >&2; exit 3").await;
    assert_eq!(
        (
            text(&out.stdout).as_str(),
            text(&out.stderr).as_str(),
            out.exit_code
        ),
        ("hello\n", "oops\n", Some(3))
    );
    let out = sh(&p, id, "kill -9 $$").await;
    assert_eq!(out.exit_code, Some(137));
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_bash_like_a_task() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let out = sh(&p, &info.sandbox_id, "[[ 1 == 1 ]] && echo $BASH_VERSION").await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with('5'), "{}", text(&out.stdout));
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_takes_a_working_directory_and_stdin() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let mut r = request("pwd; cat");
    r.cwd = Some("/tmp".into());
    r.stdin = Some(b"from stdin".to_vec());
    let out = p.exec(id, r).await.unwrap();
    assert_eq!(text(&out.stdout), "/tmp\nfrom stdin");
    let mut r = request("pwd");
    r.cwd = Some("/no/such/dir".into());
    let out = p.exec(id, r).await.unwrap();
    assert_eq!(out.exit_code, Some(1));
    assert!(
        text(&out.stderr).contains("/no/such/dir"),
        "{}",
        text(&out.stderr)
    );
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_keeps_the_tail_of_long_output_and_times_out() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let mut r = request("head -c 300000 /dev/zero | tr '\\0' a; printf END");
    r.output_limit = 1000;
    let out = p.exec(id, r).await.unwrap();
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout.ends_with(b"aaaEND") && out.stdout_truncated && !out.stderr_truncated);

    let mut r = request("echo started; sleep 30");
    r.timeout = Duration::from_millis(300);
    let t = Instant::now();
    let out = p.exec(id, r).await.unwrap();
    assert!(
        out.timed_out && t.elapsed() < Duration::from_secs(5),
        "{out:?} after {:?}",
        t.elapsed()
    );
    assert_eq!(text(&out.stdout), "started\n");
    assert!(p.kill(id).await.unwrap());
}

/// A caller that stops waiting (a cancelled MCP request, a client gone)
/// drops the exec future: the command's whole process group dies within
/// a second, background children included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_exec_kills_its_process_group() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let r = request("sleep 1001 & echo $! > /tmp/child; exec sleep 1002");
    let dropped = tokio::time::timeout(Duration::from_millis(500), p.exec(id, r)).await;
    assert!(
        dropped.is_err(),
        "the command should still run: {dropped:?}"
    );
    let dropped_at = Instant::now();
    let alive = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '^sleep 100[12]' || true";
    loop {
        let out = p.exec(id, request(alive)).await.unwrap();
        let count = text(&out.stdout).trim().to_owned();
        if count == "0" {
            break;
        }
        assert!(
            dropped_at.elapsed() < Duration::from_secs(1),
            "{count} of the sleeps still run {:?} after the caller went away",
            dropped_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(p.kill(id).await.unwrap());
}

/// Files, relative to the home and absolute, and their errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_written_read_listed_and_refused_precisely() {
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    assert_eq!(
        p.write_file(id, "dir/sub/f.txt", b"content").await.unwrap(),
        7
    );
    assert_eq!(
        p.read_file(id, "dir/sub/f.txt", 1 << 20).await.unwrap(),
        b"content"
    );
    assert_eq!(
        p.read_file(id, "/root/dir/sub/f.txt", 1 << 20)
            .await
            .unwrap(),
        b"content"
    );
    assert_eq!(p.write_file(id, "dir/sub/f.txt", b"new").await.unwrap(), 3);
    assert_eq!(text(&sh(&p, id, "cat dir/sub/f.txt").await.stdout), "new");
    sh(&p, id, "ln -s f.txt dir/sub/link; mkdir dir/sub/d").await;
    let entries = p.list_files(id, "dir/sub").await.unwrap();
    let kinds: Vec<(&str, FileKind, u64)> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind, e.size))
        .collect();
    assert_eq!(
        kinds[1..],
        [("f.txt", FileKind::File, 3), ("link", FileKind::Symlink, 5)]
    );
    assert_eq!((kinds[0].0, kinds[0].1), ("d", FileKind::Dir));
    assert!(entries[1].modified_at >= info.created_at);
    p.write_file(id, "/tmp/big", &vec![b'x'; 2000])
        .await
        .unwrap();
    match p.read_file(id, "/tmp/big", 1000).await {
        Err(ProviderError::FileTooLarge {
            size: 2000,
            limit: 1000,
            ..
        }) => {}
        other => panic!("expected FileTooLarge, got {other:?}"),
    }
    assert!(matches!(
        p.read_file(id, "nope", 10).await,
        Err(ProviderError::NoSuchPath { .. })
    ));
    assert!(matches!(
        p.list_files(id, "nope").await,
        Err(ProviderError::NoSuchPath { .. })
    ));
    assert!(matches!(
        p.read_file(id, "dir", 10).await,
        Err(ProviderError::FileError { .. })
    ));
    // The home's files (on the sandbox's sized disk, seen from the host
    // through its init) belong to the sandbox's own uid block.
    let init = recorded_pid(home.path(), id, "init");
    let on_host = std::path::PathBuf::from(format!("/proc/{init}/root/root/dir/sub/f.txt"));
    let md = std::fs::metadata(&on_host).expect("home file seen from the host");
    assert!(
        md.uid() >= 1 << 30,
        "home files must not be owned by host uid {}",
        md.uid()
    );

    assert!(p.kill(id).await.unwrap());
}

/// Renew and retain are persisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_and_retain_are_persisted() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let renewed = p.renew(id).await.unwrap();
    assert!(renewed.expires_at >= info.expires_at);
    p.retain(id).await.unwrap();
    let again = p.info(id).await.unwrap();
    assert!(again.retained && again.expires_at == renewed.expires_at);
    assert_eq!(p.task_helper(id).await.unwrap(), "/.sandkeep/sandkeep-task");
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_destroys_and_the_sandbox_is_gone_for_every_call() {
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    assert!(p.kill(id).await.unwrap());
    assert_destroyed(&p, home.path(), id).await;
    assert!(!p.kill(id).await.unwrap());
    assert!(matches!(
        p.exec(id, request("true")).await,
        Err(ProviderError::NoSuchSandbox(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_template_names_the_available_ones() {
    let home = state_dir();
    let p = provider(home.path());
    match p
        .create(CreateSpec {
            template: "ubuntu".into(),
            ..spec(10)
        })
        .await
    {
        Err(e @ ProviderError::UnknownTemplate { .. }) => assert!(e.to_string().contains("base")),
        other => panic!("expected UnknownTemplate, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_provider_sees_uses_and_kills() {
    let home = state_dir();
    let first = provider(home.path());
    let info = create(&first, 60).await;
    first
        .write_file(&info.sandbox_id, "note", b"from first")
        .await
        .unwrap();
    let second = provider(home.path());
    assert_eq!(second.list().await.unwrap(), vec![info.clone()]);
    let out = sh(&second, &info.sandbox_id, "cat note").await;
    assert_eq!(text(&out.stdout), "from first");
    second.retain(&info.sandbox_id).await.unwrap();
    assert!(first.info(&info.sandbox_id).await.unwrap().retained);
    assert!(second.kill(&info.sandbox_id).await.unwrap());
    assert!(first.list().await.unwrap().is_empty());
    assert_destroyed(&first, home.path(), &info.sandbox_id).await;
}

/// A session end (`kill_unless_retained`) racing a task start from another
/// server process (`retain` through a second provider): whichever wins,
/// a retain that succeeded always finds its sandbox alive afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retain_racing_a_session_end_never_loses_its_sandbox() {
    let home = state_dir();
    let ending = std::sync::Arc::new(provider(home.path()));
    let starting = std::sync::Arc::new(provider(home.path()));
    let mut outcomes = BTreeMap::new();
    for round in 0..16 {
        let id = create(&ending, 60).await.sandbox_id;
        // Alternate which call is issued first, so both orders are raced.
        let (end, start) = if round % 2 == 0 {
            let end = tokio::spawn({
                let (p, id) = (ending.clone(), id.clone());
                async move { p.kill_unless_retained(&id).await }
            });
            let start = starting.retain(&id).await;
            (end.await.unwrap().unwrap(), start)
        } else {
            let start = tokio::spawn({
                let (p, id) = (starting.clone(), id.clone());
                async move { p.retain(&id).await }
            });
            let end = ending.kill_unless_retained(&id).await.unwrap();
            (end, start.await.unwrap())
        };
        let alive = ending.info(&id).await.is_ok();
        match (&start, end) {
            (Ok(()), Release::Retained) => assert!(alive, "round {round}: retained but gone"),
            (Err(ProviderError::NoSuchSandbox(_)), Release::Destroyed) => {
                assert_released(&ending, home.path(), &id).await
            }
            _ => panic!("round {round}: retain {start:?} vs session end {end:?} (alive: {alive})"),
        }
        *outcomes.entry(format!("{end:?}")).or_insert(0) += 1;
        if alive {
            assert!(ending.kill(&id).await.unwrap());
        }
    }
    eprintln!("outcomes over 16 races: {outcomes:?}");
    let info = create(&ending, 60).await;
    starting.retain(&info.sandbox_id).await.unwrap();
    assert_eq!(
        ending.kill_unless_retained(&info.sandbox_id).await.unwrap(),
        Release::Retained
    );
    assert!(ending.kill(&info.sandbox_id).await.unwrap());
    assert_eq!(
        ending.kill_unless_retained(&info.sandbox_id).await.unwrap(),
        Release::Gone
    );
}

/// Not a test by itself: the body of the creator process that
/// `sigkill_of_the_creator_changes_nothing` starts and kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of sigkill_of_the_creator_changes_nothing"]
async fn creator_process() {
    let (Ok(home), Ok(m)) = (
        std::env::var("SK_CREATOR_HOME"),
        std::env::var("SK_CREATOR_TAG"),
    ) else {
        return;
    };
    let p = provider(std::path::Path::new(&home));
    let info = create(&p, 120).await;
    let out = sh(
        &p,
        &info.sandbox_id,
        &format!("sleep 1000.{m} </dev/null >/dev/null 2>&1 & echo ok"),
    )
    .await;
    assert_eq!(text(&out.stdout), "ok\n");
    println!("SANDBOX {}", info.sandbox_id);
    std::thread::sleep(Duration::from_secs(600));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_creator_changes_nothing() {
    let home = state_dir();
    let m = tag("4242");
    let mut child = ignored_test("lifecycle::creator_process")
        .env("SK_CREATOR_HOME", home.path())
        .env("SK_CREATOR_TAG", &m)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // The harness prints "test creator_process ... " before it.
        if let Some((_, rest)) = line.split_once("SANDBOX ") {
            id = Some(SandboxId::parse(rest.trim()).unwrap());
            break;
        }
    }
    let id = id.expect("the creator process printed no sandbox id");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let p = provider(home.path());
    assert!(p.list().await.unwrap().iter().any(|s| s.sandbox_id == id));
    assert_eq!(
        host_pids_with(&format!("1000.{m}")).len(),
        1,
        "the background process died with its creator"
    );
    let out = sh(&p, &id, "echo alive").await;
    assert_eq!(text(&out.stdout), "alive\n");
    assert!(p.kill(&id).await.unwrap());
    assert!(host_pids_with(&format!("1000.{m}")).is_empty());
    assert_destroyed(&p, home.path(), &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leaves_no_process_mount_or_file() {
    let (home, p, info) = fresh_sandbox(60).await;
    let m = tag("5151");
    start_zoo(&p, &info.sandbox_id, &m).await;
    let keeper = recorded_pid(home.path(), &info.sandbox_id, "keeper");
    let t = Instant::now();
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    let took = t.elapsed();
    assert_no_survivors(&format!("1000.{m}"), "kill");
    assert_destroyed(&p, home.path(), &info.sandbox_id).await;
    assert!(took < Duration::from_secs(2), "kill took {took:?}");
    // The keeper is the provider's child, not waited for: the runtime
    // reaps it, so no zombie is left in a long-running server.
    until(
        Duration::from_secs(5),
        "the keeper's zombie to be reaped",
        || async { !std::path::Path::new(&format!("/proc/{keeper}")).exists() },
    )
    .await;
}

/// A session end returns before the sandbox's files are removed, but
/// never before its last process is dead: escaped ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_returns_only_once_every_process_is_dead() {
    let (home, p, info) = fresh_sandbox(60).await;
    let m = tag("5252");
    start_zoo(&p, &info.sandbox_id, &m).await;
    assert_eq!(
        p.kill_unless_retained(&info.sandbox_id).await.unwrap(),
        Release::Destroyed
    );
    assert_no_survivors(&format!("1000.{m}"), "the session end");
    assert_released(&p, home.path(), &info.sandbox_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_destroys_everything_within_a_second() {
    let (home, p, info) = fresh_sandbox(3).await;
    let m = tag("6161");
    start_zoo(&p, &info.sandbox_id, &m).await;
    let deadline = std::time::UNIX_EPOCH + Duration::from_secs(info.expires_at);
    until(
        Duration::from_secs(6),
        "the expired sandbox to disappear",
        || async { !sandbox_dir(home.path(), &info.sandbox_id).exists() },
    )
    .await;
    let late = std::time::SystemTime::now()
        .duration_since(deadline)
        .unwrap_or_default();
    assert!(
        late < Duration::from_millis(1200),
        "destroyed {late:?} after expires_at"
    );
    assert_no_survivors(&format!("1000.{m}"), "expiry");
    assert_destroyed(&p, home.path(), &info.sandbox_id).await;
    assert!(!p.kill(&info.sandbox_id).await.unwrap());
}

/// The deadline is a few seconds away, not one or two: a create on a loaded
/// machine can take two seconds, and a sandbox that expired before its
/// create returned fails the create (meta.json gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_postpones_expiry() {
    const TIMEOUT: u64 = 5;
    let (home, p, info) = fresh_sandbox(TIMEOUT).await;
    let renew_at = std::time::UNIX_EPOCH + Duration::from_secs(info.created_at + 1);
    until(Duration::from_secs(3), "one second to pass", || async {
        std::time::SystemTime::now() >= renew_at
    })
    .await;
    let renewed = p.renew(&info.sandbox_id).await.unwrap();
    assert!(renewed.expires_at > info.expires_at);
    let past_old = std::time::UNIX_EPOCH + Duration::from_millis(info.expires_at * 1000 + 500);
    until(
        Duration::from_secs(TIMEOUT + 2),
        "the old deadline to pass",
        || async { std::time::SystemTime::now() >= past_old },
    )
    .await;
    assert_eq!(
        text(&sh(&p, &info.sandbox_id, "echo still").await.stdout),
        "still\n"
    );
    until(
        Duration::from_secs(TIMEOUT + 3),
        "expiry at the renewed deadline",
        || async { !sandbox_dir(home.path(), &info.sandbox_id).exists() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_state_is_cleaned_never_listed() {
    let (home, p, info) = fresh_sandbox(60).await;
    let m = tag("7171");
    start_zoo(&p, &info.sandbox_id, &m).await;
    // A crashed keeper: its init follows it (PDEATHSIG), and the record is
    // stale from then on.
    let keeper = recorded_pid(home.path(), &info.sandbox_id, "keeper");
    // Root's sandboxes hold a uid block, claimed by a slot file naming
    // the sandbox's directory; the dead keeper cannot release it.
    let dir = sandbox_dir(home.path(), &info.sandbox_id);
    let root = rustix::process::geteuid().is_root();
    if root {
        assert_eq!(
            uid_slots_naming(&dir),
            1,
            "no uid slot names {}",
            dir.display()
        );
    }
    send_signal(keeper, rustix::process::Signal::KILL);
    until(
        Duration::from_secs(5),
        "the sandbox's processes to die with its keeper",
        || async { host_pids_with(&format!("1000.{m}")).is_empty() },
    )
    .await;
    assert!(p.list().await.unwrap().is_empty());
    assert!(!dir.exists());
    if root {
        assert_eq!(
            uid_slots_naming(&dir),
            0,
            "the dead keeper's uid slot was left behind"
        );
    }

    // A record from before a reboot: same pid as a live process, other
    // start time.
    let fake = SandboxId::parse("sb-rebooted").unwrap();
    let dir = sandbox_dir(home.path(), &fake);
    std::fs::create_dir_all(&dir).unwrap();
    let me = std::process::id();
    let record = serde_json::json!({
        "info": {"sandbox_id": "sb-rebooted", "template": "base", "created_at": 1, "expires_at": 4_000_000_000u64,
                 "timeout": 300, "retained": true, "isolation": "userns-idmap"},
        "keeper": {"pid": me, "start_time": 1},
        "init": {"pid": me, "start_time": 1},
    });
    std::fs::write(dir.join("meta.json"), record.to_string()).unwrap();
    assert!(p.list().await.unwrap().is_empty());
    assert!(!dir.exists(), "stale record not cleaned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_helper_runs_tasks_end_to_end() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let helper = p.task_helper(id).await.unwrap();
    let call = |verb: &'static str, json: serde_json::Value| {
        let p = p.clone();
        let helper = helper.clone();
        async move {
            let arg = json.to_string().replace('\'', "'\\''");
            let out = sh(&p, id, &format!("{helper} {verb} '{arg}'")).await;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("{verb}: {e}: {} {}", text(&out.stdout), text(&out.stderr))
            });
            v
        }
    };
    let task = "0123456789abcdef0123456789abcdef";
    let started = call("start", serde_json::json!({"task_id": task, "command": "printf BEFORE; sleep 1; printf AFTER", "timeout": 60})).await;
    assert_eq!(started["state"], "running", "{started}");
    let limit = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = call("status", serde_json::json!({"task_id": task})).await;
        if status["state"] == "succeeded" {
            break status;
        }
        assert!(
            Instant::now() < limit,
            "the task did not succeed in time: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["stdout"], "BEFOREAFTER", "{status}");
    let other = "fedcba9876543210fedcba9876543210";
    call(
        "start",
        serde_json::json!({"task_id": other, "command": "sleep 100", "timeout": 60}),
    )
    .await;
    let cancelled = call("cancel", serde_json::json!({"task_id": other})).await;
    assert_eq!(
        (
            cancelled["state"].as_str(),
            cancelled["confirmed"].as_bool()
        ),
        (Some("cancelled"), Some(true)),
        "{cancelled}"
    );
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn death_of_the_init_destroys_the_sandbox() {
    let (home, p, info) = fresh_sandbox(60).await;
    let m = tag("3838");
    start_zoo(&p, &info.sandbox_id, &m).await;
    let init = recorded_pid(home.path(), &info.sandbox_id, "init");
    send_signal(init, rustix::process::Signal::KILL);
    until(
        Duration::from_secs(5),
        "the keeper to clean up after its init",
        || async { !sandbox_dir(home.path(), &info.sandbox_id).exists() },
    )
    .await;
    assert_no_survivors(&format!("1000.{m}"), "the init's death");
    assert_destroyed(&p, home.path(), &info.sandbox_id).await;
}

/// Copies `/bin/sh` and the libraries it loads into `root`: the smallest
/// root filesystem that runs commands.
fn minimal_rootfs(root: &std::path::Path) {
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let ldd = Command::new("ldd").arg(&sh).output().unwrap();
    let mut files = vec![(sh, std::path::PathBuf::from("/bin/sh"))];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(std::path::PathBuf::from);
        if let Some(p) = path {
            files.push((std::fs::canonicalize(&p).unwrap(), p));
        }
    }
    for (src, dst) in files {
        let dst = root.join(dst.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dst).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_filesystem_directory_is_a_template() {
    let home = state_dir();
    let p = provider(home.path());
    minimal_rootfs(&home.path().join("templates/mini"));
    assert_eq!(p.templates(), ["base", "mini"]);
    let info = p
        .create(CreateSpec {
            template: "mini".into(),
            ..spec(60)
        })
        .await
        .unwrap();
    assert_eq!(info.template, "mini");
    let out = sh(
        &p,
        &info.sandbox_id,
        "echo in-template; echo changed > /bin/new; test -e /usr || echo no-usr",
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "in-template\nno-usr\n",
        "{}",
        text(&out.stderr)
    );
    assert!(
        !home.path().join("templates/mini/bin/new").exists(),
        "the template was modified"
    );
    assert_eq!(p.write_file(&info.sandbox_id, "f", b"x").await.unwrap(), 1);
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    match p
        .create(CreateSpec {
            template: "nope".into(),
            ..spec(10)
        })
        .await
    {
        Err(e @ ProviderError::UnknownTemplate { .. }) => {
            assert!(e.to_string().contains("base, mini"), "{e}");
        }
        other => panic!("expected UnknownTemplate, got {other:?}"),
    }
}

/// A spawned argv runs with no shell in between: `PATH` finds the
/// program, `env` adds to and overrides the sandbox's environment, every
/// word arrives unchanged, and a program that is nowhere exits 127 naming
/// it.
#[tokio::test]
async fn a_spawned_argv_runs_without_a_shell() {
    use sandkeep_provider::{Program, SpawnRequest};
    use tokio::io::AsyncReadExt;

    let (_home, p, info) = fresh_sandbox(120).await;
    let id = info.sandbox_id;
    let run = |argv: &[&str], env: &[(&str, &str)]| {
        let request = SpawnRequest {
            program: Program::Argv {
                argv: argv.iter().map(|w| w.to_string()).collect(),
                env: env
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
            },
            cwd: Some("/tmp".into()),
            stdin: false,
        };
        let p = &p;
        let id = &id;
        async move {
            let mut spawned = p.spawn(id, request).await.expect("spawn");
            let (mut out, mut err) = (String::new(), String::new());
            spawned.stdout.read_to_string(&mut out).await.unwrap();
            spawned.stderr.read_to_string(&mut err).await.unwrap();
            let code = tokio::time::timeout(Duration::from_secs(30), spawned.process.wait())
                .await
                .expect("the process to end within 30 s")
                .expect("its exit status")
                .shell_code();
            (code, out, err)
        }
    };
    let (code, out, err) = run(
        &["printenv", "SK_ADDED", "HOME"],
        &[("SK_ADDED", "it's $x `y`"), ("HOME", "/elsewhere")],
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(out, "it's $x `y`\n/elsewhere\n");
    assert_eq!(run(&["pwd"], &[]).await.1, "/tmp\n");
    let (code, out, _) = run(&["sh", "-c", "echo \"$0|$1\"", "a b", "c"], &[]).await;
    assert_eq!((code, out.as_str()), (0, "a b|c\n"));
    let (code, _, err) = run(&["no-such-program-sk"], &[]).await;
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("no-such-program-sk"), "{err}");
    assert!(p.kill(&id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_executable_of_another_build_is_passed_over() {
    // A copy of sandkeep with a stale keeper beside it: one that does not
    // take this build's arguments, as an older build would not.
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("sandkeep");
    std::fs::copy(EXE, &exe).unwrap();
    let stale = bin.path().join("sandkeep-keeper");
    std::fs::write(
        &stale,
        "#!/bin/sh\necho 'usage: an older keeper' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = state_dir();
    let p = LocalProvider::new(LocalConfig::new(home.path(), &exe)).unwrap();
    for _ in 0..2 {
        let info = create(&p, 60).await;
        let keeper = recorded_pid(home.path(), &info.sandbox_id, "keeper");
        assert_eq!(exe_of(keeper), exe, "the whole sandkeep keeps the sandbox");
        let out = sh(&p, &info.sandbox_id, "echo works").await;
        assert_eq!(text(&out.stdout), "works\n");
        assert!(p.kill(&info.sandbox_id).await.unwrap());
    }
    let report = p.doctor().await.unwrap();
    let line = report.checks.iter().find(|c| c.name == "keeper executable");
    assert!(
        line.is_some_and(|c| c.detail.contains("refused: not of this build")),
        "{line:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandkeep_of_another_build_makes_create_fail_saying_so() {
    // The server's executable replaced on disk by another build.
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("sandkeep");
    std::fs::write(&exe, "#!/bin/sh\necho 'usage: another build' >&2\nexit 2\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = state_dir();
    let p = LocalProvider::new(LocalConfig::new(home.path(), &exe)).unwrap();
    let err = p
        .create(spec(60))
        .await
        .expect_err("no keeper of this build");
    let message = err.to_string();
    assert!(
        message.contains("not of this server's build") && message.contains("restart the server"),
        "{message}"
    );
}
