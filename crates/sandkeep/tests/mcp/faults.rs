//! Faults at the MCP surface, end to end against `sandkeep serve` children:
//! malformed protocol input, an output flood read back page by page, the
//! 129th task, many concurrent calls on one connection, the stdio session
//! rules under the 2026-07-28 protocol, and which tools renew a deadline.

use crate::support;

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use support::mcp::*;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::test]
async fn malformed_lines_are_answered_or_ignored_and_the_session_goes_on() {
    let home = Home::new();
    let mut child = home.spawn_serve(std::process::Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |line: &str| {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    };
    send(RAW_INITIALIZE).await;
    send(RAW_INITIALIZED).await;
    send("this is not json").await;
    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sandboxes","arguments":"oops"}}"#)
        .await;
    send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"start_task","arguments":{"command":"x","nice":5}}}"#).await;
    send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#).await;
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 4 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .expect("the server keeps its stdout open");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        answers.insert(v["id"].as_u64().expect("only responses"), v);
    }
    assert!(
        answers[&2]["error"].is_object(),
        "non-object arguments: protocol error {}",
        answers[&2]
    );
    let bad = &answers[&3]["result"];
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`nice`"),
        "{bad}"
    );
    assert_eq!(answers[&4]["result"]["tools"].as_array().unwrap().len(), 25);
    drop(stdin);
    assert!(
        wait_exit(&mut child, Duration::from_secs(10))
            .await
            .success()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_flood_is_capped_and_read_back_completely_by_pages() {
    let home = Home::new();
    let s = StdioServer::start(&home).await;
    let sb = ok(&s.client, "create_sandbox", json!({"timeout": 120})).await;
    let id = sid(&sb);
    let t = ok(
        &s.client,
        "start_task",
        json!({"command": "head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2"}),
    )
    .await;
    let task = tid(&t);
    let done = wait_terminal(&s.client, &id, &task, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout_bytes"], 1_048_576);
    assert_eq!(done["stdout_truncated"], true);
    assert_eq!(done["stderr"], "done\n");
    assert_eq!(done["stderr_truncated"], false);
    let all = read_all_stdout(&s.client, &id, &task, 65_536).await;
    assert_eq!(all.len(), 1_048_576);
    assert!(all.bytes().all(|b| b == b'x'));
    let past = ok(
        &s.client,
        "get_task",
        json!({"sandbox_id": id, "task_id": task, "stdout_offset": 1_048_576}),
    )
    .await;
    assert_eq!(past["stdout"], "");
    assert_eq!(past["stdout_next_offset"], 1_048_576);
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert!(s.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_129th_task_is_refused_with_advice_and_concurrent_calls_stay_correct() {
    let home = Home::new();
    let s = StdioServer::start(&home).await;
    let id = ok(&s.client, "create_sandbox", json!({"timeout": 300})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut tasks = Vec::new();
    for n in 0..128 {
        let t = ok(
            &s.client,
            "start_task",
            json!({"command": format!("echo {n}")}),
        )
        .await;
        tasks.push(tid(&t));
    }
    let m = err(
        &s.client,
        "start_task",
        json!({"command": "echo one-too-many"}),
    )
    .await;
    assert!(m.contains("128") && m.contains("create_sandbox"), "{m}");

    // All 128 queried at once over the one connection: each answer belongs
    // to its own task.
    let client = &s.client;
    let answers = futures_join_all(tasks.iter().enumerate().map(|(n, task)| {
        let id = id.clone();
        async move {
            let v = wait_terminal(client, &id, task, Duration::from_secs(30)).await;
            (n, task.clone(), v)
        }
    }))
    .await;
    for (n, task, v) in answers {
        assert_eq!(v["task_id"], task.as_str());
        assert_eq!(v["stdout"], format!("{n}\n"), "{v}");
    }
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert!(s.close().await.success());
}

/// Runs the futures concurrently on this task and collects their outputs in
/// order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, f) in out.iter_mut().zip(set.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_stdio_client_gets_the_same_session_rules() {
    let home = Home::new();
    let mut child = home.spawn_serve(std::process::Stdio::null());
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ()
        .serve_with_lifecycle(
            (stdout, stdin),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("2026-07-28 over stdio");
    let scratch = ok(&client, "create_sandbox", json!({})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The process is the session: the default sandbox exists.
    let task = ok(&client, "start_task", json!({"command": "true"})).await;
    assert_eq!(task["sandbox_id"], scratch.as_str());
    let other = ok(&client, "create_sandbox", json!({})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    client.cancel().await.unwrap();
    assert!(
        wait_exit(&mut child, Duration::from_secs(15))
            .await
            .success()
    );

    let s = StdioServer::start(&home).await;
    let ids: Vec<String> = ok(&s.client, "list_sandboxes", json!({})).await["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(sid)
        .collect();
    assert_eq!(
        ids,
        vec![scratch.clone()],
        "retained kept, {other} destroyed"
    );
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": scratch})).await;
    assert!(s.close().await.success());
}

async fn expires_at(client: &Client, id: &str) -> u64 {
    let v = ok(client, "list_sandboxes", json!({})).await;
    v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox_id"] == id)
        .and_then(|s| s["expires_at"].as_u64())
        .expect("listed")
}

/// Waits until the wall clock is past `t` (deadlines have 1 s resolution).
async fn clock_past(t: u64) {
    until(Duration::from_secs(5), "the clock to move on", || {
        std::future::ready(sandkeep::provider::unix_now() > t)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_tools_never_renew_the_deadline_and_commands_and_files_do() {
    let home = Home::new();
    let s = StdioServer::start(&home).await;
    let c = &s.client;
    let sb = ok(c, "create_sandbox", json!({"timeout": 100})).await;
    let id = sid(&sb);
    let e0 = sb["expires_at"].as_u64().unwrap();
    assert_eq!(e0, sb["created_at"].as_u64().unwrap() + 100);

    clock_past(e0 - 100).await;
    let t = ok(c, "start_task", json!({"command": "sleep 30"})).await;
    let handle = json!({"sandbox_id": id, "task_id": t["task_id"]});
    ok(c, "get_task", handle.clone()).await;
    ok(c, "cancel_task", handle).await;
    assert_eq!(expires_at(c, &id).await, e0, "task tools must not renew");

    for (tool, args) in [
        ("run_command", json!({"command": "true"})),
        ("write_file", json!({"path": "f.txt", "content": "x"})),
        ("read_file", json!({"path": "f.txt"})),
        ("list_files", json!({"path": "."})),
    ] {
        let before = expires_at(c, &id).await;
        clock_past(before - 100).await;
        ok(c, tool, args).await;
        let after = expires_at(c, &id).await;
        assert!(after > before, "{tool} must renew: {before} -> {after}");
        assert!(
            after >= sandkeep::provider::unix_now() + 99,
            "{tool} renews to now + timeout"
        );
    }
    // A command's end renews again: the deadline counts from the end of
    // the last use. Started over 2 s earlier, the first renewal gives at
    // most ended + 98.
    ok(c, "run_command", json!({"command": "sleep 2.5"})).await;
    let ended = sandkeep::provider::unix_now();
    let after = expires_at(c, &id).await;
    assert!(
        after >= ended + 99,
        "run_command's end renews: {after}, ended {ended}"
    );
    ok(c, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert!(s.close().await.success());
}
