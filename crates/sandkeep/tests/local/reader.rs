//! The resident task reader (`sandkeep-task serve`) in real sandboxes:
//! its answers are byte for byte the one-shot helper's; the service's reads
//! all go through one reader per sandbox; a reader killed or stopped in the
//! middle of a read is replaced and the read answers correctly within 2 s;
//! no process of the sandbox can reach its pipes to answer in its name; an
//! idle reader uses no CPU; cancel_task of a task that is not running and
//! list_changes start no helper process; a long `changes` walk does not
//! hold up a status read; waiters woken together read nothing themselves
//! (the shared watcher answers them).

use crate::support;

use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sandkeep::provider::local::LocalProvider;
use sandkeep::provider::{Program, Provider, SandboxId, SpawnRequest};
use sandkeep::service::{
    GetTaskArgs, ListTasksArgs, Service, Session, StartTaskArgs, TaskResult, ToolError,
    WaitTaskArgs,
};
use sandkeep_proto::wire::shell_quote;
use serde_json::json;
use support::local::*;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long a read may take when its reader was killed or stopped under it.
const REPLACED_WITHIN: Duration = Duration::from_secs(2);

/// A service over a fresh sandbox, with one finished and one running task
/// whose logs no longer change.
struct Fixture {
    _home: tempfile::TempDir,
    local: LocalProvider,
    service: Service,
    sandbox: SandboxId,
    done: String,
    running: String,
    /// In the running task's command line: finds the sandbox's processes.
    marker: String,
}

impl Fixture {
    async fn new() -> Self {
        static FIXTURES: AtomicUsize = AtomicUsize::new(0);
        let marker = format!("{}.{}", tag("9"), FIXTURES.fetch_add(1, Ordering::Relaxed));
        let (home, local, info) = fresh_sandbox(300).await;
        let service = Service::new(Arc::new(local.clone()), Vec::new());
        let session = Session::stateless();
        let start = |command: String| StartTaskArgs {
            command,
            sandbox_id: Some(info.sandbox_id.to_string()),
            cwd: None,
            timeout: None,
        };
        let done = service
            .start_task(
                &session,
                start(r"printf 'out\377é'; printf err >&2; exit 3".into()),
            )
            .await
            .expect("start the finished task")
            .task_id;
        let running = service
            .start_task(
                &session,
                start(format!("printf 'so far'; exec sleep {marker}")),
            )
            .await
            .expect("start the running task")
            .task_id;
        let f = Self {
            _home: home,
            local,
            service,
            sandbox: info.sandbox_id,
            done,
            running,
            marker,
        };
        until(
            Duration::from_secs(10),
            "both tasks settle their output",
            || {
                let f = &f;
                async move {
                    f.get(&f.done).await.state.to_string() == "failed"
                        && f.get(&f.running).await.stdout == "so far"
                }
            },
        )
        .await;
        f
    }

    async fn get(&self, task: &str) -> TaskResult {
        self.service
            .get_task(GetTaskArgs {
                sandbox_id: self.sandbox.to_string(),
                task_id: task.into(),
                stdout_offset: None,
                stderr_offset: None,
                limit: None,
            })
            .await
            .expect("get_task")
    }

    /// The live resident readers in this sandbox.
    fn readers(&self) -> Vec<i32> {
        let pid_ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
        let ns = host_pids_with(&self.marker)
            .into_iter()
            .find_map(pid_ns)
            .expect("the running task's process");
        host_pids_where(|cmd| cmd.contains("sandkeep-task serve"))
            .into_iter()
            .filter(|&pid| pid_ns(pid).as_ref() == Some(&ns) && !zombie(pid))
            .collect()
    }

    /// How many read calls `pid` has made so far (`/proc/PID/io`).
    fn reads_by(pid: i32) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("syscr: "))
            .and_then(|n| n.parse().ok())
            .expect("syscr in /proc/PID/io")
    }

    /// The one reader, once the service has started it.
    fn reader(&self) -> i32 {
        let found = self.readers();
        assert_eq!(found.len(), 1, "one reader in the sandbox: {found:?}");
        found[0]
    }

    async fn helper(&self) -> String {
        self.local
            .task_helper(&self.sandbox)
            .await
            .expect("helper path")
    }

    /// A new process's pid in the sandbox: its pid namespace hands pids
    /// out in order, so the difference between two of these counts the
    /// processes started in between (and this call's own).
    async fn next_pid(&self) -> i32 {
        next_pid(&self.local, &self.sandbox).await
    }

    async fn cancel(&self, task: &str) -> Result<TaskResult, ToolError> {
        self.service
            .cancel_task(GetTaskArgs {
                sandbox_id: self.sandbox.to_string(),
                task_id: task.into(),
                stdout_offset: None,
                stderr_offset: None,
                limit: None,
            })
            .await
    }

    /// The finished task read as every read must find it.
    async fn check_done(&self) {
        let r = self.get(&self.done).await;
        assert_eq!(
            (
                r.state.to_string(),
                r.exit_code,
                r.stdout.as_str(),
                r.stderr.as_str()
            ),
            ("failed".to_owned(), Some(3), "out\u{fffd}é", "err"),
            "{r:?}"
        );
    }

    async fn finish(self) {
        assert!(self.local.kill(&self.sandbox).await.unwrap());
    }
}

/// See [`Fixture::next_pid`].
async fn next_pid(local: &LocalProvider, sandbox: &SandboxId) -> i32 {
    let out = sh(local, sandbox, "echo $$").await;
    text(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a pid from the sandbox's shell: {out:?}"))
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

fn signal(pid: i32, signal: Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), signal)
        .unwrap_or_else(|e| panic!("signal {signal:?} to the reader {pid}: {e}"));
}

/// User and system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Bytes waiting unread in the reader's stdin: the host (root here) peeks
/// at the pipe through `/proc` without taking anything from it. `None`
/// where this process may not look (not root).
fn unread_requests(reader: i32) -> Option<usize> {
    let pipe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(format!("/proc/{reader}/fd/0"))
        .ok()?;
    rustix::io::ioctl_fionread(&pipe).ok().map(|n| n as usize)
}

/// Requests of every kind a read may carry: pages at, inside and past the
/// logs, the smallest page, a task that does not exist, out-of-range and
/// malformed requests, `list`, and `changes` without a diff.
fn requests(f: &Fixture) -> Vec<(&'static str, String)> {
    let status = |task: &str, out: u64, err: u64, limit: u64| {
        json!({"task_id": task, "stdout_offset": out, "stderr_offset": err, "limit": limit})
            .to_string()
    };
    vec![
        ("status", status(&f.done, 0, 0, 16384)),
        ("status", status(&f.done, 4, 1, 1)),
        ("status", status(&f.done, 3, 0, 2)),
        ("status", status(&f.done, 1_000_000, 1_048_576, 65536)),
        ("status", status(&f.running, 0, 0, 3)),
        ("status", status(&f.running, 2, 0, 65536)),
        ("status", status(&"0".repeat(32), 0, 0, 10)),
        ("status", status(&f.done, 0, 0, 0)),
        ("status", status(&f.done, 1_048_577, 0, 10)),
        ("status", json!({"task_id": f.done}).to_string()),
        ("status", r#"{"task_id": "xyz"}"#.into()),
        ("status", r#"{"task_id": 1, "#.into()),
        ("status", json!({"task_id": f.done, "extra": 1}).to_string()),
        ("list", "{}".into()),
        ("list", r#"{"a": 1}"#.into()),
        ("changes", r#"{"shares": [], "diff": false}"#.into()),
        ("changes", r#"{"shares": [{"path": "/nowhere"}]}"#.into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_answers_byte_for_byte_as_the_one_shot_helper() {
    let f = Fixture::new().await;
    let helper = f.helper().await;
    let spawned = f
        .local
        .spawn(
            &f.sandbox,
            SpawnRequest {
                program: Program::Argv {
                    argv: vec![helper.clone(), "serve".into()],
                    env: Vec::new(),
                },
                cwd: None,
                stdin: true,
            },
        )
        .await
        .expect("spawn a reader");
    let mut stdin = spawned.stdin.expect("the reader's stdin");
    let mut answers = BufReader::new(spawned.stdout).lines();
    for (n, (verb, request)) in requests(&f).into_iter().enumerate() {
        let one_shot = sh(
            &f.local,
            &f.sandbox,
            &format!("{} {verb} {}", shell_quote(&helper), shell_quote(&request)),
        )
        .await;
        let id = n + 7;
        stdin
            .write_all(format!("{id} {verb} {request}\n").as_bytes())
            .await
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), answers.next_line())
            .await
            .expect("the reader answers within 5 s")
            .unwrap()
            .expect("an answer line");
        let expected = format!(
            "{id} {} {}",
            one_shot.exit_code.expect("the helper exited"),
            text(&one_shot.stdout).trim_end_matches('\n')
        );
        assert_eq!(answer, expected, "{verb} {request}");
    }
    // A verb that changes something is not the reader's to answer.
    stdin
        .write_all(format!("99 cancel {{\"task_id\":\"{}\"}}\n", f.running).as_bytes())
        .await
        .unwrap();
    let refused = answers.next_line().await.unwrap().unwrap();
    assert!(
        refused.starts_with("99 1 ") && refused.contains("answers status, list, changes only"),
        "{refused}"
    );
    assert_eq!(f.get(&f.running).await.state.to_string(), "running");
    // The end of its stdin ends it.
    drop(stdin);
    let ended = tokio::time::timeout(Duration::from_secs(5), spawned.process.wait())
        .await
        .expect("the reader exits within 5 s of its stdin's end")
        .expect("its exit status");
    assert!(ended.success(), "{ended:?}");
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_goes_through_one_resident_reader_that_idles_without_cpu() {
    let f = Fixture::new().await;
    let reader = f.reader();
    let reads_before = Fixture::reads_by(reader);
    for _ in 0..50 {
        f.check_done().await;
        let listed = f
            .service
            .list_tasks(ListTasksArgs {
                sandbox_id: f.sandbox.to_string(),
            })
            .await
            .expect("list_tasks");
        assert_eq!(listed.tasks.len(), 2, "{listed:?}");
    }
    assert_eq!(f.reader(), reader, "the same reader answered every read");
    let reads = Fixture::reads_by(reader) - reads_before;
    assert!(
        reads >= 100,
        "the reader read for all 100 calls: {reads} reads"
    );
    // Idle: asleep in one poll, no CPU spent over a second.
    let before = cpu_ticks(reader);
    let idle_from = Instant::now();
    until(
        Duration::from_secs(5),
        "a second of the reader's idleness",
        || std::future::ready(idle_from.elapsed() >= Duration::from_secs(1)),
    )
    .await;
    assert_eq!(cpu_ticks(reader), before, "an idle reader uses no CPU");
    let state = std::fs::read_to_string(format!("/proc/{reader}/stat")).unwrap();
    assert!(
        state
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('S'),
        "the idle reader sleeps: {state}"
    );
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_killed_mid_request_is_replaced_and_the_read_answers() {
    let f = Fixture::new().await;
    let reader = f.reader();
    // Stopped, it takes the request and cannot answer it...
    signal(reader, Signal::STOP);
    let started = Instant::now();
    let args = GetTaskArgs {
        sandbox_id: f.sandbox.to_string(),
        task_id: f.done.clone(),
        stdout_offset: Some(1),
        stderr_offset: None,
        limit: Some(3),
    };
    let result = {
        let read = f.service.get_task(args);
        tokio::pin!(read);
        // ...so the read is pending until the request is in the reader's pipe.
        let pending = async {
            until(
                REPLACED_WITHIN,
                "the request waits in the stopped reader's stdin",
                || std::future::ready(unread_requests(reader).is_none_or(|n| n > 0)),
            )
            .await;
            // ...and then killed under it.
            signal(reader, Signal::KILL);
        };
        tokio::select! {
            r = &mut read => panic!("a stopped reader answered: {r:?}"),
            () = pending => (&mut read).await.expect("get_task after the kill"),
        }
    };
    assert!(
        started.elapsed() < REPLACED_WITHIN,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (
            result.state.to_string(),
            result.stdout.as_str(),
            result.stdout_next_offset
        ),
        ("failed".to_owned(), "ut\u{fffd}", 4),
        "{result:?}"
    );
    let replacement = f.reader();
    assert_ne!(replacement, reader, "a new reader took over");
    f.check_done().await;
    assert_eq!(f.reader(), replacement);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_reader_is_replaced_and_the_read_answers_within_2_s() {
    let f = Fixture::new().await;
    let reader = f.reader();
    signal(reader, Signal::STOP);
    let started = Instant::now();
    let r = f.get(&f.running).await;
    let took = started.elapsed();
    assert!(took < REPLACED_WITHIN, "the read took {took:?}");
    assert_eq!(
        (r.state.to_string(), r.stdout.as_str()),
        ("running".to_owned(), "so far")
    );
    until(REPLACED_WITHIN, "the stopped reader is killed", || {
        std::future::ready(zombie(reader))
    })
    .await;
    // The next read starts a fresh reader and is answered without the
    // stopped one's wait (bounded as the first read is: a reader's start
    // on a loaded 2-core machine has taken more than half a second).
    let started = Instant::now();
    f.check_done().await;
    assert!(
        started.elapsed() < REPLACED_WITHIN,
        "{:?}",
        started.elapsed()
    );
    assert_ne!(f.reader(), reader);
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sandbox_process_can_answer_for_the_reader() {
    let f = Fixture::new().await;
    let reader = f.reader();
    // Every number the service could be waiting for, answered "succeeded".
    let forged = (0..200)
        .map(|id| {
            format!(
                r#"{id} 0 {{"task_id":"{}","state":"succeeded","exit_code":0,"started_at":1,"finished_at":2,"stdout":"forged","stderr":"","stdout_next_offset":6,"stderr_next_offset":0,"stdout_bytes":6,"stderr_bytes":0,"stdout_truncated":false,"stderr_truncated":false}}"#,
                f.running
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    // No path leads to the reader (its channel is the pipes it was started
    // with), so the sandbox user's only way in would be its descriptors
    // through /proc: it tries each of them.
    let attempt = sh(
        &f.local,
        &f.sandbox,
        &format!(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'sandkeep-tas[k] serve' || continue; \
             echo found $p; for fd in 0 1 2; do printf '%s\\n' '{}' > $p/fd/$fd && echo wrote $p $fd; done; done; true",
            forged.lines().next().unwrap().replace('\'', "")
        ),
    )
    .await;
    assert!(
        text(&attempt.stdout).contains("found"),
        "the sandbox sees the reader: {}",
        text(&attempt.stdout)
    );
    assert!(
        !text(&attempt.stdout).contains("wrote"),
        "a sandbox process wrote into the reader's pipes: {}\n{}",
        text(&attempt.stdout),
        text(&attempt.stderr)
    );
    assert!(
        text(&attempt.stderr).contains("Permission denied"),
        "the reader's descriptors are refused: {}",
        text(&attempt.stderr)
    );
    for _ in 0..5 {
        let r = f.get(&f.running).await;
        assert_eq!(
            (r.state.to_string(), r.stdout.as_str()),
            ("running".to_owned(), "so far")
        );
    }
    assert_eq!(f.reader(), reader, "the reader kept serving");
    f.finish().await;
}

/// A supervisor lost while the reader serves: the next read says
/// `unknown` (and keeps saying it), as a one-shot helper would; the reader
/// neither adopts the task nor renews or retains anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_supervisor_reads_unknown_through_the_reader() {
    let f = Fixture::new().await;
    let reader = f.reader();
    let before = f.local.info(&f.sandbox).await.expect("info");
    let supervisors =
        host_pids_where(|cmd| cmd.contains("__supervise") && cmd.contains(f.running.as_str()));
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    signal(supervisors[0], Signal::KILL);
    until(
        Duration::from_secs(5),
        "the read to say unknown",
        || async { f.get(&f.running).await.state.to_string() == "unknown" },
    )
    .await;
    for _ in 0..5 {
        let r = f.get(&f.running).await;
        assert_eq!(
            (r.state.to_string(), r.exit_code),
            ("unknown".to_owned(), None)
        );
    }
    // Nothing to signal and nothing confirmed: cancel_task says so with
    // the state the reader saw.
    match f.cancel(&f.running).await {
        Err(ToolError::CancelNotConfirmed(r)) => {
            assert_eq!((r.state.to_string(), r.exit_code), ("unknown".into(), None))
        }
        other => panic!("cancelling a lost task is not confirmed: {other:?}"),
    }
    assert_eq!(f.reader(), reader, "the reader answered");
    let after = f.local.info(&f.sandbox).await.expect("info");
    assert_eq!(
        (after.expires_at, after.retained),
        (before.expires_at, before.retained),
        "reads neither renew nor retain"
    );
    f.finish().await;
}

/// cancel_task looks at the task through the reader: a task that is not
/// running is answered from that look, as the `cancel` verb would answer
/// it, without a helper process; only a running task's cancel starts one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_starts_a_helper_only_for_a_running_task() {
    let f = Fixture::new().await;
    let reader = f.reader();
    let first = f.next_pid().await;
    let per_look = f.next_pid().await - first;
    let before = f.next_pid().await;
    let r = f.cancel(&f.done).await.expect("cancel a finished task");
    assert_eq!(
        (
            r.state.to_string(),
            r.exit_code,
            r.stdout.as_str(),
            r.stderr.as_str()
        ),
        ("failed".to_owned(), Some(3), "out\u{fffd}é", "err"),
        "its saved result, unchanged: {r:?}"
    );
    assert_eq!(
        f.next_pid().await - before,
        per_look,
        "no process was started to cancel a finished task"
    );
    assert_eq!(f.reader(), reader, "the reader looked at the finished task");
    let before = f.next_pid().await;
    let r = f.cancel(&f.running).await.expect("cancel the running task");
    assert_eq!(r.state.to_string(), "cancelled", "{r:?}");
    assert!(
        f.next_pid().await - before > per_look,
        "the running task's cancel went to its supervisor through a helper"
    );
    f.finish().await;
}

/// list_changes is a read too: its list (without a diff) comes from the
/// reader, without a helper process, and is the list the one-shot helper
/// gives with the diff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changes_is_answered_by_the_reader() {
    let home = state_dir();
    let project = tempfile::Builder::new()
        .prefix("sandkeep-reader-share")
        .tempdir()
        .unwrap();
    std::fs::write(project.path().join("README"), "hello\n").unwrap();
    std::fs::write(project.path().join("gone"), "bye\n").unwrap();
    let path = std::fs::canonicalize(project.path()).unwrap();
    let path = path.to_str().unwrap();
    let local = provider(home.path());
    let share = sandkeep_shares::ShareConfig::parse(&format!("{path}:cow"), home.path())
        .expect("a cow share");
    let service = Service::new(Arc::new(local.clone()), Vec::new()).with_shares(vec![share]);
    let session = Session::new();
    let call = |tool: &'static str, args: serde_json::Value| {
        let (service, session) = (&service, &session);
        async move {
            service
                .call_json(session, tool, args.as_object().cloned())
                .await
                .unwrap_or_else(|e| panic!("{tool}: {e}"))
        }
    };
    let created = call("create_sandbox", json!({})).await;
    let sb = created["sandbox_id"].as_str().unwrap().to_owned();
    let sandbox = SandboxId::parse(&sb).unwrap();
    call(
        "run_command",
        json!({"sandbox_id": sb, "command": "echo more >> README; echo new > added; rm gone"}),
    )
    .await;
    let expected = json!([
        {"path": format!("{path}/README"), "kind": "modified"},
        {"path": format!("{path}/added"), "kind": "added"},
        {"path": format!("{path}/gone"), "kind": "deleted"},
    ]);
    let listed = |diff: bool| call("list_changes", json!({"sandbox_id": sb, "diff": diff}));
    let kinds = |v: &serde_json::Value| {
        json!(
            v["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| json!({"path": c["path"], "kind": c["kind"]}))
                .collect::<Vec<_>>()
        )
    };
    // The first read starts the reader.
    assert_eq!(kinds(&listed(false).await), expected);
    let first = next_pid(&local, &sandbox).await;
    let per_look = next_pid(&local, &sandbox).await - first;
    let before = next_pid(&local, &sandbox).await;
    let from_reader = listed(false).await;
    assert_eq!(
        next_pid(&local, &sandbox).await - before,
        per_look,
        "no process was started to list the changes"
    );
    assert_eq!(kinds(&from_reader), expected, "{from_reader}");
    assert_eq!(from_reader["diff"], serde_json::Value::Null);
    let with_diff = listed(true).await;
    assert_eq!(with_diff["changes"], from_reader["changes"]);
    assert!(
        with_diff["diff"].as_str().unwrap().contains("+more"),
        "{with_diff}"
    );
    assert!(local.kill(&sandbox).await.unwrap());
}

/// A `changes` walk is answered by a thread of the reader's own: a status
/// read asked after it is answered while the walk still reads (here two
/// 2 GiB files compared byte for byte), not behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_changes_walk_does_not_hold_up_a_status_read() {
    let f = Fixture::new().await;
    let made = sh(
        &f.local,
        &f.sandbox,
        "mkdir -p /tmp/walk/upper /tmp/walk/lower && \
         truncate -s 2G /tmp/walk/upper/big /tmp/walk/lower/big",
    )
    .await;
    assert_eq!(made.exit_code, Some(0), "{made:?}");
    let spawned = f
        .local
        .spawn(
            &f.sandbox,
            SpawnRequest {
                program: Program::Argv {
                    argv: vec![f.helper().await, "serve".into()],
                    env: Vec::new(),
                },
                cwd: None,
                stdin: true,
            },
        )
        .await
        .expect("spawn a reader");
    let mut stdin = spawned.stdin.expect("the reader's stdin");
    let mut answers = BufReader::new(spawned.stdout).lines();
    let walk = json!({"shares": [{"path": "/tmp/walk/upper", "upper": "/tmp/walk/upper",
                                  "lower": "/tmp/walk/lower"}], "diff": false});
    let status = json!({"task_id": f.done});
    stdin
        .write_all(format!("1 changes {walk}\n2 status {status}\n").as_bytes())
        .await
        .unwrap();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), answers.next_line())
            .await
            .expect("the reader answers within 30 s")
            .unwrap()
            .expect("an answer line")
    };
    let first = next().await;
    assert!(
        first.starts_with("2 0 ") && first.contains("\"failed\""),
        "the status read is answered first: {first}"
    );
    let second = next().await;
    assert_eq!(
        second, r#"1 0 {"changes":[],"truncated":false,"diff_truncated":false}"#,
        "then the walk, which found the files equal"
    );
    f.finish().await;
}

/// 100 waiters whose tasks end at once are answered by the sandbox's
/// shared watcher, which reads each answer (the `status` read the helper
/// gives) when it sees the task end: they make no read of their own, so
/// no reader is even started. (Each woken waiter read its answer through
/// the reader before: 100 reads queued behind the watcher's report.) Each
/// answer is byte for byte what get_task reads afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_woken_together_are_answered_without_a_read_of_their_own() {
    const N: usize = 100;
    let (_home, local, info) = fresh_sandbox(300).await;
    let service = Arc::new(Service::new(Arc::new(local.clone()), Vec::new()));
    let sandbox = info.sandbox_id.to_string();
    let session = Session::stateless();
    let start = |command: String| StartTaskArgs {
        command,
        sandbox_id: Some(sandbox.clone()),
        cwd: None,
        timeout: None,
    };
    // The gate holds /tmp/gate while its sleep lives; every task ends as
    // soon as it gets the lock shared. The sleep marks the sandbox.
    let marker = tag("8");
    service
        .start_task(
            &session,
            start(format!("exec flock /tmp/gate sleep 1000.{marker}")),
        )
        .await
        .expect("start the gate");
    until(Duration::from_secs(10), "the gate to hold its lock", || {
        let (local, sandbox) = (&local, &info.sandbox_id);
        async move {
            text(
                &sh(local, sandbox, "flock -n -s /tmp/gate true; echo $?")
                    .await
                    .stdout,
            ) == "1\n"
        }
    })
    .await;
    let gate = host_pids_where(|cmd| cmd.starts_with(&format!("sleep 1000.{marker}")));
    assert_eq!(gate.len(), 1, "the gate's sleep: {gate:?}");
    let pid_ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let ns = pid_ns(gate[0]).expect("the gate's pid namespace");
    let readers = || {
        host_pids_where(|cmd| cmd.contains("sandkeep-task serve"))
            .into_iter()
            .filter(|&pid| pid_ns(pid).as_ref() == Some(&ns) && !zombie(pid))
            .count()
    };
    let mut tasks = Vec::with_capacity(N);
    for _ in 0..N {
        let task = service
            .start_task(&session, start("flock -s /tmp/gate printf ended".into()))
            .await
            .expect("start a task");
        tasks.push(task.task_id);
    }
    // Past the output ("ended"): only each task's end answers its wait.
    let args = |task: &str| WaitTaskArgs {
        sandbox_id: sandbox.clone(),
        task_id: task.into(),
        stdout_offset: Some(5),
        stderr_offset: None,
        limit: None,
        timeout: Some(120),
    };
    let waits: Vec<_> = tasks
        .iter()
        .map(|task| {
            let (service, args) = (Arc::clone(&service), args(task));
            tokio::spawn(async move { service.wait_task(args).await })
        })
        .collect();
    signal(gate[0], Signal::KILL);
    let mut answers = Vec::with_capacity(N);
    for wait in waits {
        let answer = tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("every wait is answered within 60 s of the gate's opening")
            .unwrap()
            .expect("wait_task");
        assert_eq!(answer.task.state.to_string(), "succeeded", "{answer:?}");
        answers.push(answer);
    }
    assert_eq!(readers(), 0, "the answers started no reader");
    for (task, answer) in tasks.iter().zip(&answers) {
        let read = service
            .get_task(GetTaskArgs {
                sandbox_id: sandbox.clone(),
                task_id: task.clone(),
                stdout_offset: Some(5),
                stderr_offset: None,
                limit: None,
            })
            .await
            .expect("get_task");
        assert_eq!(
            serde_json::to_string(&answer.task).unwrap(),
            serde_json::to_string(&read).unwrap()
        );
    }
    // The look above can tell: get_task's reads started one.
    assert_eq!(readers(), 1, "get_task's reader");
    assert!(local.kill(&info.sandbox_id).await.unwrap());
}
