//! Interactive tasks end to end (SPEC.md §15): real `sandkeep serve`
//! processes on the real local provider, input sent by one server that is
//! SIGKILLed and then by its replacement, a terminal that follows resizes,
//! a Python REPL driven line by line, and the refusals.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::*;
use support::*;

/// wait_task until stdout holds `what` (bounded), following the offsets.
async fn wait_for_stdout(client: &Client, sandbox: &str, task: &str, what: &str) -> String {
    let mut seen = String::new();
    let mut offset = 0u64;
    let start = std::time::Instant::now();
    while !seen.contains(what) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "task {task} never showed {what:?}; stdout so far: {seen:?}"
        );
        let v = ok(
            client,
            "wait_task",
            json!({"sandbox_id": sandbox, "task_id": task, "stdout_offset": offset, "timeout": 5}),
        )
        .await;
        seen.push_str(v["stdout"].as_str().unwrap());
        offset = v["stdout_next_offset"].as_u64().unwrap();
        assert!(
            v["state"] == "running" || seen.contains(what),
            "task ended without showing {what:?}: {v}"
        );
    }
    seen
}

async fn send(client: &Client, sandbox: &str, task: &str, data: &str, close: bool) -> Value {
    ok(
        client,
        "send_input",
        json!({"sandbox_id": sandbox, "task_id": task, "data": data, "close": close}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_survives_the_server_that_accepted_it_in_order_and_once() {
    let home = Home::new();
    let mut a = StdioServer::start(&home).await;
    let id = sid(&a.ok("create_sandbox", json!({"timeout": 600})).await);
    // A reader answered line by line, then one that reads only once told
    // to: what server A accepted must still be waiting for it after A died.
    let reader = tid(&a
        .ok(
            "start_interactive_task",
            json!({"command": "read a; echo \"got $a\"; read b; echo \"got $b\""}),
        )
        .await);
    let late = tid(&a
        .ok(
            "start_interactive_task",
            json!({"command": "while [ ! -e go ]; do sleep 0.02; done; cat"}),
        )
        .await);
    let sent = send(&a.client, &id, &reader, "one\n", false).await;
    assert_eq!(sent["bytes_accepted"], 4, "{sent}");
    wait_for_stdout(&a.client, &id, &reader, "got one").await;
    send(&a.client, &id, &late, "a\n", false).await;
    send(&a.client, &id, &late, "b\n", false).await;

    send_signal(a.pid(), rustix::process::Signal::KILL);
    wait_exit(&mut a.child, Duration::from_secs(5)).await;

    let b = StdioServer::start(&home).await;
    send(&b.client, &id, &reader, "two\n", false).await;
    let done = wait_terminal(&b.client, &id, &reader, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout"], "got one\ngot two\n");

    send(&b.client, &id, &late, "c\n", true).await;
    b.ok(
        "run_command",
        json!({"sandbox_id": id, "command": "touch go"}),
    )
    .await;
    let done = wait_terminal(&b.client, &id, &late, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout"], "a\nb\nc\n", "in order, each once");
    b.ok("kill_sandbox", json!({"sandbox_id": id})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_follows_resizes_and_a_repl_answers_line_by_line() {
    let home = Home::new();
    let s = StdioServer::start(&home).await;
    let id = sid(&s.ok("create_sandbox", json!({"timeout": 600})).await);
    let term = tid(&s
        .ok(
            "start_interactive_task",
            json!({"command": "tty; stty size; read x; stty size", "pty": true,
                   "cols": 100, "rows": 30}),
        )
        .await);
    let first = wait_for_stdout(&s.client, &id, &term, "30 100").await;
    assert!(first.contains("/dev/pts/"), "{first:?}");
    let resized = s
        .ok(
            "resize_terminal",
            json!({"sandbox_id": id, "task_id": term, "cols": 120, "rows": 40}),
        )
        .await;
    assert_eq!(resized["cols"], 120, "{resized}");
    send(&s.client, &id, &term, "\n", false).await;
    let done = wait_terminal(&s.client, &id, &term, Duration::from_secs(20)).await;
    assert!(
        done["stdout"].as_str().unwrap().contains("40 120"),
        "{done}"
    );

    let has_python = s
        .ok(
            "run_command",
            json!({"sandbox_id": id, "command": "command -v python3"}),
        )
        .await["exit_code"]
        == 0;
    if require(has_python, "python3 is not in the sandbox") {
        let repl = tid(&s
            .ok(
                "start_interactive_task",
                json!({"sandbox_id": id, "command": "python3 -i -q -u"}),
            )
            .await);
        send(&s.client, &id, &repl, "x = 6\n", false).await;
        send(&s.client, &id, &repl, "print(x * 7)\n", false).await;
        wait_for_stdout(&s.client, &id, &repl, "42").await;
        send(&s.client, &id, &repl, "print('bye')\n", true).await;
        let done = wait_terminal(&s.client, &id, &repl, Duration::from_secs(20)).await;
        assert_eq!(done["state"], "succeeded", "{done}");
        assert_eq!(done["stdout"], "42\nbye\n");
    }
    s.ok("kill_sandbox", json!({"sandbox_id": id})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_the_wrong_tasks_are_refused_with_the_reason() {
    let home = Home::new();
    let s = StdioServer::start(&home).await;
    let id = sid(&s.ok("create_sandbox", json!({"timeout": 600})).await);
    let plain = tid(&s.ok("start_task", json!({"command": "sleep 60"})).await);
    let pipe = tid(&s
        .ok("start_interactive_task", json!({"command": "sleep 60"}))
        .await);
    let input = |task: &str, data: Value, extra: Value| {
        let mut args = json!({"sandbox_id": id, "task_id": task, "data": data});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    let e = err(
        &s.client,
        "send_input",
        input(&plain, json!("x"), json!({})),
    )
    .await;
    assert!(e.contains("start_task"), "{e}");
    let e = err(
        &s.client,
        "send_input",
        input(&pipe, json!("%%%"), json!({"encoding": "base64"})),
    )
    .await;
    assert!(e.contains("`data`") && e.contains("base64"), "{e}");
    let big = "x".repeat(65_537);
    let e = err(&s.client, "send_input", input(&pipe, json!(big), json!({}))).await;
    assert!(e.contains("`data`") && e.contains("65536"), "{e}");
    let e = err(
        &s.client,
        "resize_terminal",
        json!({"sandbox_id": id, "task_id": pipe, "cols": 80, "rows": 24}),
    )
    .await;
    assert!(e.contains("no terminal"), "{e}");
    let e = err(
        &s.client,
        "start_interactive_task",
        json!({"sandbox_id": id, "command": "true", "pty": true, "cols": 0}),
    )
    .await;
    assert!(e.contains("`cols`"), "{e}");
    // The seed's start_task takes nothing new.
    let e = err(
        &s.client,
        "start_task",
        json!({"sandbox_id": id, "command": "true", "pty": true}),
    )
    .await;
    assert!(e.contains("unknown parameter `pty`"), "{e}");

    let sent = ok(
        &s.client,
        "send_input",
        input(
            &pipe,
            json!("AAEC"),
            json!({"encoding": "base64", "close": true}),
        ),
    )
    .await;
    assert_eq!(sent["bytes_accepted"], 3, "{sent}");
    let e = err(&s.client, "send_input", input(&pipe, json!("x"), json!({}))).await;
    assert!(e.contains("closed"), "{e}");
    ok(
        &s.client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": plain}),
    )
    .await;
    let e = err(
        &s.client,
        "send_input",
        input(&plain, json!("x"), json!({})),
    )
    .await;
    assert!(e.contains("start_task"), "{e}");
    s.ok("kill_sandbox", json!({"sandbox_id": id})).await;
}
