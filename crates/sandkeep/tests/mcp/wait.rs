//! wait_task, list_tasks and delete_task end to end (docs/tools.md): rmcp
//! clients, `sandkeep serve` children, real local sandboxes.
//!
//! The long-poll answers on exit, on output past each offset and at its
//! timeout; waiters share one watcher process in the sandbox, which ends
//! with the last of them and is replaced if killed; 300 waiters on 100
//! tasks all answer right after their tasks end; a provider without
//! `spawn` still waits (one helper call per waiter); delete_task frees one
//! of the 128 places; bad input names the parameter. A wait reports
//! progress less often than a command, and open sessionless waits over
//! HTTP do not count against the session cap.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientRequest, ProgressNotificationParam, Request};
use rmcp::service::{NotificationContext, PeerRequestOptions};
use sandkeep::provider::{
    CreateSpec, ExecOutput, ExecRequest, FileEntry, Provider, Release, Result as PResult,
    SandboxId, SandboxInfo,
};
use sandkeep::service::{Service, Session};
use serde_json::{Value, json};
use support::mcp::*;
use support::*;

/// What every test here starts from: a stdio server and one sandbox.
struct Fixture {
    server: Arc<StdioServer>,
    sb: String,
    _home: Home,
}

impl Fixture {
    async fn new() -> Self {
        let home = Home::new();
        let server = StdioServer::start(&home).await;
        let sb = sid(&server.ok("create_sandbox", json!({"timeout": 600})).await);
        Self {
            server: Arc::new(server),
            sb,
            _home: home,
        }
    }

    async fn ok(&self, tool: &str, args: Value) -> Value {
        self.server.ok(tool, args).await
    }

    async fn err(&self, tool: &str, args: Value) -> String {
        err(&self.server.client, tool, args).await
    }

    /// Starts a task in the sandbox; its task_id.
    async fn start(&self, command: &str) -> String {
        tid(&self
            .ok(
                "start_task",
                json!({"sandbox_id": self.sb, "command": command}),
            )
            .await)
    }

    /// Kills the sandbox and checks that the server exits cleanly.
    async fn finish(self) {
        self.ok("kill_sandbox", json!({"sandbox_id": self.sb}))
            .await;
        let server = Arc::into_inner(self.server).expect("no other user of the server");
        assert!(server.close().await.success());
    }
}

/// wait_task and the time it took as the client saw it.
async fn wait(server: &StdioServer, args: Value) -> (Value, Duration) {
    let t = Instant::now();
    let v = server.ok("wait_task", args).await;
    (v, t.elapsed())
}

/// The sandbox's one shared watcher, once it watches `tasks` tasks.
async fn watcher_watching(marker: &str, tasks: usize, within: Duration) -> i32 {
    until(
        within,
        &format!("one watcher watching {tasks} tasks"),
        || {
            std::future::ready(
                watchers(marker)
                    .first()
                    .is_some_and(|&w| watches_of(w) == tasks),
            )
        },
    )
    .await;
    let found = watchers(marker);
    assert_eq!(found.len(), 1, "one watcher: {found:?}");
    assert!(
        in_sandbox_of(marker, " wait {").is_empty(),
        "no waiter runs a process of its own"
    );
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_task_answers_on_exit_on_output_and_at_its_timeout() {
    let f = Fixture::new().await;
    let (server, sb) = (&f.server, &f.sb);

    let task = f.start("sleep 0.7; exit 4").await;
    let (done, took) = wait(server, json!({"sandbox_id": sb, "task_id": task})).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["exit_code"], 4);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(done["waited_ms"].as_u64().unwrap() >= 300, "{done}");

    let task = f
        .start("sleep 0.5; printf out; sleep 0.5; printf err >&2; exec sleep 60")
        .await;
    let (first, _) = wait(server, json!({"sandbox_id": sb, "task_id": task})).await;
    assert_eq!(first["stdout"], "out", "{first}");
    assert_eq!(first["state"], "running");
    let (second, _) = wait(
        server,
        json!({"sandbox_id": sb, "task_id": task, "stdout_offset": first["stdout_next_offset"]}),
    )
    .await;
    assert_eq!(second["stderr"], "err", "{second}");
    let (quiet, took) = wait(
        server,
        json!({"sandbox_id": sb, "task_id": task, "timeout": 1,
               "stdout_offset": second["stdout_next_offset"],
               "stderr_offset": second["stderr_next_offset"]}),
    )
    .await;
    assert_eq!(quiet["state"], "running", "{quiet}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "a quiet task answers at the timeout: {took:?}"
    );

    // list_tasks: newest first (started_at is in whole seconds, and both
    // tasks may share one), with the command and the bytes saved.
    let listed = server.ok("list_tasks", json!({"sandbox_id": sb})).await;
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{listed}");
    let started = |i: usize| tasks[i]["started_at"].as_u64().unwrap();
    assert!(started(0) >= started(1), "newest first: {listed}");
    let latest = tasks
        .iter()
        .find(|t| t["task_id"] == task.as_str())
        .unwrap_or_else(|| panic!("the second task is listed: {listed}"));
    assert!(
        latest["command"]
            .as_str()
            .unwrap()
            .starts_with("sleep 0.5; printf out")
    );
    assert_eq!(latest["stdout_bytes"], 3);
    assert_eq!(latest["stderr_bytes"], 3);

    // delete_task refuses a running task and leaves it whole.
    let handle = json!({"sandbox_id": sb, "task_id": task});
    let e = f.err("delete_task", handle.clone()).await;
    assert!(e.contains("cancel it first"), "{e}");
    assert_eq!(server.ok("get_task", handle.clone()).await["stdout"], "out");
    server.ok("cancel_task", handle.clone()).await;
    let deleted = server.ok("delete_task", handle.clone()).await;
    assert_eq!(deleted["deleted"], true, "{deleted}");
    let e = f.err("get_task", handle).await;
    assert!(e.contains("no such task"), "{e}");

    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_tool_error_naming_the_parameter() {
    let f = Fixture::new().await;
    let sb = &f.sb;
    let task = f.start("true").await;
    for (args, param) in [
        (
            json!({"sandbox_id": sb, "task_id": task, "timeout": 0}),
            "`timeout`",
        ),
        (
            json!({"sandbox_id": sb, "task_id": task, "timeout": 301}),
            "`timeout`",
        ),
        (
            json!({"sandbox_id": sb, "task_id": task, "timeout": "5"}),
            "`timeout`",
        ),
        (
            json!({"sandbox_id": sb, "task_id": task, "stdout_offset": 1_048_577}),
            "`stdout_offset`",
        ),
        (
            json!({"sandbox_id": sb, "task_id": task, "limit": 0}),
            "`limit`",
        ),
        (json!({"sandbox_id": sb, "task_id": "XYZ"}), "`task_id`"),
        (
            json!({"sandbox_id": "Not An Id", "task_id": task}),
            "`sandbox_id`",
        ),
    ] {
        let e = f.err("wait_task", args.clone()).await;
        assert!(e.contains(param), "{args} → {e}");
    }
    let unknown = json!({"sandbox_id": sb, "task_id": "0".repeat(32)});
    for tool in ["wait_task", "delete_task"] {
        let e = f.err(tool, unknown.clone()).await;
        assert!(e.contains("no such task"), "{tool}: {e}");
    }
    let e = f
        .err("delete_task", json!({"sandbox_id": sb, "task_id": "x"}))
        .await;
    assert!(e.contains("`task_id`"), "{e}");
    let e = f.err("list_tasks", json!({})).await;
    assert!(e.contains("sandbox_id"), "{e}");
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_task_frees_a_place_for_the_129th_start() {
    let f = Fixture::new().await;
    let (server, sb) = (&f.server, &f.sb);
    let mut first = None;
    for _ in 0..128 {
        let id = f.start("true").await;
        first.get_or_insert(id);
    }
    let e = f
        .err("start_task", json!({"sandbox_id": sb, "command": "true"}))
        .await;
    assert!(e.contains("128"), "{e}");
    let first = first.unwrap();
    let handle = json!({"sandbox_id": sb, "task_id": first});
    let done = server.ok("wait_task", handle.clone()).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    server.ok("delete_task", handle).await;
    let again = server
        .ok(
            "start_task",
            json!({"sandbox_id": sb, "command": "echo 129"}),
        )
        .await;
    assert_ne!(again["state"], "unknown", "{again}");
    f.finish().await;
}

/// Live processes in the sandbox where the process whose command line
/// contains `marker` runs (its pid namespace), whose command line contains
/// `what`.
fn in_sandbox_of(marker: &str, what: &str) -> Vec<i32> {
    let pid_ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(ns) = host_pids_with(marker).into_iter().find_map(pid_ns) else {
        return Vec::new();
    };
    host_pids_where(|cmd| cmd.contains(what))
        .into_iter()
        .filter(|&pid| {
            pid_ns(pid).as_ref() == Some(&ns)
                && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| !r.trim_start().starts_with('Z'))
                })
        })
        .collect()
}

/// The shared watchers in the sandbox of `marker`.
fn watchers(marker: &str) -> Vec<i32> {
    in_sandbox_of(marker, " wait --stream")
}

/// How many task directories a watcher has an inotify watch on.
fn watches_of(pid: i32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

/// Sends wait_task so that it can be cancelled, as a client giving up does.
async fn cancellable_wait(
    server: &StdioServer,
    sb: &str,
    task: &str,
) -> rmcp::service::RequestHandle<rmcp::RoleClient> {
    let params = CallToolRequestParams::new("wait_task").with_arguments(
        json!({"sandbox_id": sb, "task_id": task, "timeout": 300})
            .as_object()
            .unwrap()
            .clone(),
    );
    let request = ClientRequest::CallToolRequest(Request::new(params));
    server
        .client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("sending wait_task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_watcher_that_ends_with_the_last_of_them() {
    let f = Fixture::new().await;
    let (server, sb) = (&f.server, &f.sb);
    let marker = "600.201";
    let a = f.start(&format!("exec sleep {marker}")).await;
    let b = f.start("exec sleep 600.202").await;
    let on_a = cancellable_wait(server, sb, &a).await;
    let on_b1 = cancellable_wait(server, sb, &b).await;
    let on_b2 = cancellable_wait(server, sb, &b).await;
    let watcher = watcher_watching(marker, 2, Duration::from_secs(10)).await;

    // The last waiter of a task gone: the task is no longer watched.
    on_a.cancel(Some("gave up".into())).await.unwrap();
    until(Duration::from_secs(3), "task a to be unwatched", || {
        std::future::ready(watches_of(watcher) == 1)
    })
    .await;
    on_b1.cancel(Some("gave up".into())).await.unwrap();
    // The last waiter in the sandbox gone: nothing is left there.
    on_b2.cancel(Some("gave up".into())).await.unwrap();
    until(Duration::from_secs(3), "the watcher to be gone", || {
        std::future::ready(watchers(marker).is_empty())
    })
    .await;

    // The next waiter starts a new watcher, and ends it when answered.
    let (quiet, took) = wait(
        server,
        json!({"sandbox_id": sb, "task_id": b, "timeout": 1}),
    )
    .await;
    assert_eq!(quiet["state"], "running", "{quiet}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    until(Duration::from_secs(3), "the new watcher to be gone", || {
        std::future::ready(watchers(marker).is_empty())
    })
    .await;
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_watcher_is_replaced_and_its_waiter_still_answers() {
    let f = Fixture::new().await;
    let (server, sb) = (&f.server, &f.sb);
    let marker = "600.301";
    f.start(&format!("exec sleep {marker}")).await;
    let task = f.start("sleep 3; printf late; exec sleep 60").await;
    let waiter = {
        let (server, args) = (
            server.clone(),
            json!({"sandbox_id": sb, "task_id": task, "timeout": 60}),
        );
        tokio::spawn(async move { wait(&server, args).await })
    };
    let first = watcher_watching(marker, 1, Duration::from_secs(10)).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(first).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    until(
        Duration::from_secs(2),
        "a new watcher to watch the task",
        || {
            std::future::ready(
                watchers(marker)
                    .first()
                    .is_some_and(|&w| w != first && watches_of(w) == 1),
            )
        },
    )
    .await;
    let (v, _) = waiter.await.unwrap();
    assert_eq!(v["stdout"], "late", "{v}");
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_waiters_share_one_watcher_and_answer_right_after_their_tasks_end() {
    const N: usize = 100;
    const PER_TASK: usize = 3;
    let f = Fixture::new().await;
    let (server, sb) = (&f.server, &f.sb);
    // One gate task holds an exclusive lock; the 100 tasks each end as
    // soon as they get it shared, i.e. when the gate is cancelled.
    let gate = f.start("exec flock /tmp/gate sleep 600").await;
    until(Duration::from_secs(10), "the gate to hold its lock", || {
        let server = server.clone();
        let sb = sb.clone();
        async move {
            let v = server
                .ok(
                    "run_command",
                    json!({"sandbox_id": sb, "command": "flock -n -s /tmp/gate true; echo $?"}),
                )
                .await;
            v["stdout"] == "1\n"
        }
    })
    .await;
    let mut tasks = Vec::new();
    for _ in 0..N {
        tasks.push(f.start("flock -s /tmp/gate true").await);
    }
    let waiters: Vec<_> = (0..PER_TASK)
        .flat_map(|_| &tasks)
        .map(|task| {
            let server = server.clone();
            let args = json!({"sandbox_id": sb, "task_id": task, "timeout": 120});
            tokio::spawn(async move {
                let v = server.ok("wait_task", args).await;
                (v, Instant::now())
            })
        })
        .collect();
    // The gate's `flock` names /tmp/gate: it marks the sandbox.
    let marker = "/tmp/gate sleep 600";
    watcher_watching(marker, N, Duration::from_secs(60)).await;
    let released = Instant::now();
    server
        .ok("cancel_task", json!({"sandbox_id": sb, "task_id": gate}))
        .await;
    let mut latest = Duration::ZERO;
    for w in waiters {
        let (v, at) = w.await.unwrap();
        assert_eq!(v["state"], "succeeded", "{v}");
        let after = at
            .checked_duration_since(released)
            .unwrap_or_else(|| panic!("a waiter answered before the gate opened: {v}"));
        latest = latest.max(after);
    }
    eprintln!(
        "the last of {} waiters answered {latest:?} after the gate opened",
        N * PER_TASK
    );
    // On e2b the watcher's answers come through envd's stream (here the
    // local endpoint, on the same two cores as the test), and the tasks
    // were started with a helper call each.
    let bound = if support::e2b::enabled() {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(5)
    };
    assert!(
        latest < bound,
        "the last waiter answered {latest:?} after the tasks could end (bound {bound:?})"
    );
    f.finish().await;
}

/// Counts the progress notifications a client hears (rmcp's client asks
/// for progress on every call).
#[derive(Clone, Default)]
struct HeardProgress(Arc<AtomicUsize>);

impl rmcp::ClientHandler for HeardProgress {
    async fn on_progress(
        &self,
        _: ProgressNotificationParam,
        _: NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A long-poll reports progress every 25 s, other calls every 5 s: a 6 s
/// run_command is heard from, a 6 s wait_task is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_reports_progress_less_often_than_a_command() {
    let home = Home::new();
    let mut child = home.spawn_serve(std::process::Stdio::inherit());
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let heard = HeardProgress::default();
    let client = heard
        .clone()
        .serve((stdout, stdin))
        .await
        .expect("handshake");
    let call = |tool: &'static str, args: Value| {
        let client = &client;
        async move {
            let params =
                CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
            let r = client.call_tool(params).await.expect("tools/call");
            assert_ne!(r.is_error, Some(true), "{tool}: {:?}", r.content);
            r.structured_content.expect("structuredContent")
        }
    };
    let sb = sid(&call("create_sandbox", json!({"timeout": 600})).await);
    call(
        "run_command",
        json!({"sandbox_id": sb, "command": "sleep 6"}),
    )
    .await;
    until(
        Duration::from_secs(3),
        "progress from a 6 s run_command",
        || std::future::ready(heard.0.load(Ordering::SeqCst) >= 1),
    )
    .await;
    heard.0.store(0, Ordering::SeqCst);
    let task = tid(&call(
        "start_task",
        json!({"sandbox_id": sb, "command": "exec sleep 600"}),
    )
    .await);
    let quiet = call(
        "wait_task",
        json!({"sandbox_id": sb, "task_id": task, "timeout": 6}),
    )
    .await;
    assert_eq!(quiet["state"], "running", "{quiet}");
    assert_eq!(
        heard.0.load(Ordering::SeqCst),
        0,
        "a 6 s wait_task reported progress"
    );
    call("kill_sandbox", json!({"sandbox_id": sb})).await;
    client.cancel().await.expect("client stops");
    assert!(
        wait_exit(&mut child, Duration::from_secs(15))
            .await
            .success()
    );
}

/// Sessionless requests in flight are no sessions: with more waits open
/// than the session cap allows sessions, a client can still open one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_sessionless_waits_leave_room_for_a_session() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0", "--max-sessions", "2"]).await;
    let modern = Arc::new(server.modern().await);
    let sb = sid(&ok(&modern, "create_sandbox", json!({"timeout": 600})).await);
    let marker = "600.501";
    let command = format!("exec sleep {marker}");
    ok(
        &modern,
        "start_task",
        json!({"sandbox_id": sb, "command": command}),
    )
    .await;
    let mut waits = Vec::new();
    for _ in 0..3 {
        let args = json!({"sandbox_id": sb, "command": "exec sleep 600"});
        let task = tid(&ok(&modern, "start_task", args).await);
        let args = json!({"sandbox_id": sb, "task_id": task, "timeout": 120});
        let modern = modern.clone();
        waits.push(tokio::spawn(
            async move { ok(&modern, "wait_task", args).await },
        ));
    }
    watcher_watching(marker, 3, Duration::from_secs(10)).await;
    let legacy = server.legacy().await;
    ok(&legacy, "list_sandboxes", json!({})).await;
    for wait in waits {
        wait.abort();
    }
    ok(&modern, "kill_sandbox", json!({"sandbox_id": sb})).await;
    server.stop().await;
}

/// The local provider without `spawn`: how a provider that cannot keep a
/// process running (E2B here) looks to the service.
struct NoSpawn(sandkeep::provider::local::LocalProvider);

#[async_trait::async_trait]
impl Provider for NoSpawn {
    fn kind(&self) -> &'static str {
        "local without spawn"
    }
    async fn create(&self, spec: CreateSpec) -> PResult<SandboxInfo> {
        self.0.create(spec).await
    }
    async fn kill(&self, id: &SandboxId) -> PResult<bool> {
        self.0.kill(id).await
    }
    async fn kill_unless_retained(&self, id: &SandboxId) -> PResult<Release> {
        self.0.kill_unless_retained(id).await
    }
    async fn list(&self) -> PResult<Vec<SandboxInfo>> {
        self.0.list().await
    }
    async fn info(&self, id: &SandboxId) -> PResult<SandboxInfo> {
        self.0.info(id).await
    }
    async fn exec(&self, id: &SandboxId, request: ExecRequest) -> PResult<ExecOutput> {
        self.0.exec(id, request).await
    }
    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> PResult<Vec<u8>> {
        self.0.read_file(id, path, limit).await
    }
    async fn write_file(&self, id: &SandboxId, path: &str, content: &[u8]) -> PResult<u64> {
        self.0.write_file(id, path, content).await
    }
    async fn list_files(&self, id: &SandboxId, path: &str) -> PResult<Vec<FileEntry>> {
        self.0.list_files(id, path).await
    }
    async fn renew(&self, id: &SandboxId) -> PResult<SandboxInfo> {
        self.0.renew(id).await
    }
    async fn retain(&self, id: &SandboxId) -> PResult<()> {
        self.0.retain(id).await
    }
    async fn task_helper(&self, id: &SandboxId) -> PResult<String> {
        self.0.task_helper(id).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_spawn_wait_task_waits_in_one_helper_call_of_its_own() {
    let home = Home::new();
    let provider = Arc::new(NoSpawn(support::local::provider(home.path())));
    let service = Service::new(provider, Vec::new());
    let session = Session::new();
    let call = |tool: &'static str, args: Value| {
        let (service, session) = (&service, &session);
        async move {
            service
                .call_json(session, tool, args.as_object().cloned())
                .await
                .unwrap_or_else(|e| panic!("{tool}: {e}"))
        }
    };
    let sb = sid(&call("create_sandbox", json!({"timeout": 600})).await);
    let marker = "600.401";
    call(
        "start_task",
        json!({"sandbox_id": sb, "command": format!("exec sleep {marker}")}),
    )
    .await;
    let task = tid(&call(
        "start_task",
        json!({"sandbox_id": sb, "command": "sleep 1; exit 3"}),
    )
    .await);
    let waiting = call("wait_task", json!({"sandbox_id": sb, "task_id": task}));
    let watch = async {
        until(
            Duration::from_secs(10),
            "the waiter's own helper call",
            || std::future::ready(!in_sandbox_of(marker, " wait {").is_empty()),
        )
        .await;
        assert!(
            watchers(marker).is_empty(),
            "no shared watcher without spawn"
        );
    };
    let (done, ()) = tokio::join!(waiting, watch);
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["exit_code"], 3, "{done}");
    assert!(done["waited_ms"].as_u64().unwrap() >= 500, "{done}");
    call("kill_sandbox", json!({"sandbox_id": sb})).await;
}
