//! wait_task, list_tasks and delete_task end to end (SPEC.md §4): rmcp
//! clients, `sandkeep serve` children, real local sandboxes.
//!
//! The long-poll answers on exit, on output past each offset and at its
//! timeout; a cancelled wait leaves no waiter in the sandbox; 100 waiters
//! on 100 tasks all answer right after their tasks end; delete_task frees
//! one of the 128 places; bad input names the parameter.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest, Request};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use support::mcp::*;
use support::*;

async fn sandbox(server: &StdioServer) -> String {
    sid(&server.ok("create_sandbox", json!({"timeout": 600})).await)
}

async fn start(server: &StdioServer, sb: &str, command: &str) -> String {
    tid(&server
        .ok("start_task", json!({"sandbox_id": sb, "command": command}))
        .await)
}

/// wait_task and the time it took as the client saw it.
async fn wait(server: &StdioServer, args: Value) -> (Value, Duration) {
    let t = Instant::now();
    let v = server.ok("wait_task", args).await;
    (v, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_task_answers_on_exit_on_output_and_at_its_timeout() {
    let home = Home::new();
    let server = StdioServer::start(&home).await;
    let sb = sandbox(&server).await;

    let task = start(&server, &sb, "sleep 0.7; exit 4").await;
    let (done, took) = wait(&server, json!({"sandbox_id": sb, "task_id": task})).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["exit_code"], 4);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(done["waited_ms"].as_u64().unwrap() >= 300, "{done}");

    let task = start(
        &server,
        &sb,
        "sleep 0.5; printf out; sleep 0.5; printf err >&2; exec sleep 60",
    )
    .await;
    let (first, _) = wait(&server, json!({"sandbox_id": sb, "task_id": task})).await;
    assert_eq!(first["stdout"], "out", "{first}");
    assert_eq!(first["state"], "running");
    let (second, _) = wait(
        &server,
        json!({"sandbox_id": sb, "task_id": task, "stdout_offset": first["stdout_next_offset"]}),
    )
    .await;
    assert_eq!(second["stderr"], "err", "{second}");
    let (quiet, took) = wait(
        &server,
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

    // list_tasks: newest first, with the command and the bytes saved.
    let listed = server.ok("list_tasks", json!({"sandbox_id": sb})).await;
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{listed}");
    assert_eq!(tasks[0]["task_id"], task.as_str());
    assert!(
        tasks[0]["command"]
            .as_str()
            .unwrap()
            .starts_with("sleep 0.5; printf out")
    );
    assert_eq!(tasks[0]["stdout_bytes"], 3);
    assert_eq!(tasks[0]["stderr_bytes"], 3);

    // delete_task refuses a running task and leaves it whole.
    let handle = json!({"sandbox_id": sb, "task_id": task});
    let e = err(&server.client, "delete_task", handle.clone()).await;
    assert!(e.contains("cancel it first"), "{e}");
    assert_eq!(server.ok("get_task", handle.clone()).await["stdout"], "out");
    server.ok("cancel_task", handle.clone()).await;
    let deleted = server.ok("delete_task", handle.clone()).await;
    assert_eq!(deleted["deleted"], true, "{deleted}");
    let e = err(&server.client, "get_task", handle).await;
    assert!(e.contains("no such task"), "{e}");

    server.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    assert!(server.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_tool_error_naming_the_parameter() {
    let home = Home::new();
    let server = StdioServer::start(&home).await;
    let sb = sandbox(&server).await;
    let task = start(&server, &sb, "true").await;
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
        let e = err(&server.client, "wait_task", args.clone()).await;
        assert!(e.contains(param), "{args} → {e}");
    }
    let unknown = json!({"sandbox_id": sb, "task_id": "0".repeat(32)});
    for tool in ["wait_task", "delete_task"] {
        let e = err(&server.client, tool, unknown.clone()).await;
        assert!(e.contains("no such task"), "{tool}: {e}");
    }
    let e = err(
        &server.client,
        "delete_task",
        json!({"sandbox_id": sb, "task_id": "x"}),
    )
    .await;
    assert!(e.contains("`task_id`"), "{e}");
    let e = err(&server.client, "list_tasks", json!({})).await;
    assert!(e.contains("sandbox_id"), "{e}");
    server.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    assert!(server.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_task_frees_a_place_for_the_129th_start() {
    let home = Home::new();
    let server = StdioServer::start(&home).await;
    let sb = sandbox(&server).await;
    let mut first = None;
    for _ in 0..128 {
        let id = start(&server, &sb, "true").await;
        first.get_or_insert(id);
    }
    let e = err(
        &server.client,
        "start_task",
        json!({"sandbox_id": sb, "command": "true"}),
    )
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
    server.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    assert!(server.close().await.success());
}

/// In-sandbox waiters of `task_id` still alive (seen from the host).
fn waiters_of(task_id: &str) -> Vec<i32> {
    host_pids_where(|cmd| cmd.contains(" wait ") && cmd.contains(task_id))
        .into_iter()
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| !r.trim_start().starts_with('Z'))
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_no_waiter_in_the_sandbox() {
    let home = Home::new();
    let server = StdioServer::start(&home).await;
    let sb = sandbox(&server).await;
    let task = start(&server, &sb, "exec sleep 600").await;
    let params = CallToolRequestParams::new("wait_task").with_arguments(
        json!({"sandbox_id": sb, "task_id": task, "timeout": 300})
            .as_object()
            .unwrap()
            .clone(),
    );
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = server
        .client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("sending wait_task");
    until(
        Duration::from_secs(10),
        "the waiter to start in the sandbox",
        || std::future::ready(!waiters_of(&task).is_empty()),
    )
    .await;
    handle
        .cancel(Some("the client gave up".into()))
        .await
        .expect("sending the cancellation");
    until(Duration::from_secs(3), "the waiter to be gone", || {
        std::future::ready(waiters_of(&task).is_empty())
    })
    .await;
    // The server still serves, and the task is untouched.
    let v = server
        .ok("get_task", json!({"sandbox_id": sb, "task_id": task}))
        .await;
    assert_eq!(v["state"], "running", "{v}");
    server.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    assert!(server.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waiters_answer_right_after_their_tasks_end() {
    const N: usize = 100;
    let home = Home::new();
    let server = Arc::new(StdioServer::start(&home).await);
    let sb = sandbox(&server).await;
    // One gate task holds an exclusive lock; the 100 tasks each end as
    // soon as they get it shared, i.e. when the gate is cancelled.
    let gate = start(&server, &sb, "exec flock /tmp/gate sleep 600").await;
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
        tasks.push(start(&server, &sb, "flock -s /tmp/gate true").await);
    }
    let waiters: Vec<_> = tasks
        .iter()
        .map(|task| {
            let server = server.clone();
            let args = json!({"sandbox_id": sb, "task_id": task, "timeout": 120});
            tokio::spawn(async move {
                let v = server.ok("wait_task", args).await;
                (v, Instant::now())
            })
        })
        .collect();
    until(
        Duration::from_secs(60),
        "all 100 waiters to be asleep",
        || std::future::ready(tasks.iter().all(|t| !waiters_of(t).is_empty())),
    )
    .await;
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
    eprintln!("the last of {N} waiters answered {latest:?} after the gate opened");
    assert!(
        latest < Duration::from_secs(5),
        "the last waiter answered {latest:?} after the tasks could end"
    );
    server.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    let server = Arc::into_inner(server).expect("no other user of the server");
    assert!(server.close().await.success());
}
