//! End to end over Streamable HTTP: rmcp's HTTP client (legacy sessions and
//! 2026-07-28 stateless requests) against real `sandkeep serve --http`
//! child processes on the real local provider; raw requests for the HTTP
//! edge (token, Origin).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::mcp::*;
use support::*;

async fn sandbox_ids(client: &Client) -> Vec<String> {
    ok(client, "list_sandboxes", json!({})).await["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(sid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptance_path_over_http_with_sigkill_of_the_server() {
    let home = Home::new();
    let mut a = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let client = a.legacy(None).await;
    let id = sid(&ok(&client, "create_sandbox", json!({"timeout": 600})).await);
    let started = ok(
        &client,
        "start_task",
        json!({"command": "printf BEFORE; sleep 10; printf AFTER", "timeout": 120}),
    )
    .await;
    let task = tid(&started);
    assert_eq!(started["state"], "running");
    send_signal(a.child.id().unwrap() as i32, rustix::process::Signal::KILL);
    wait_exit(&mut a.child, Duration::from_secs(5)).await;
    drop(client);

    // A new server, and a 2026-07-28 client this time.
    let b = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let client = b.modern().await;
    let done = wait_terminal(&client, &id, &task, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(read_all_stdout(&client, &id, &task, 4).await, "BEFOREAFTER");
    let second = ok(
        &client,
        "start_task",
        json!({"sandbox_id": id, "command": "sleep 300"}),
    )
    .await;
    let t = Instant::now();
    let c = ok(
        &client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": second["task_id"]}),
    )
    .await;
    assert_eq!(c["state"], "cancelled");
    assert!(t.elapsed() < Duration::from_secs(4));
    assert_eq!(
        ok(&client, "kill_sandbox", json!({"sandbox_id": id})).await["killed"],
        true
    );
    assert!(host_pids_with(&id).is_empty());
    assert!(host_mounts_with(&id).is_empty());
    client.cancel().await.unwrap();
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sessions_clean_up_on_delete_and_idle_expiry_and_stateless_requests_keep_sandboxes() {
    let home = Home::new();
    let server = HttpServer::start(
        &home,
        &["--http", "127.0.0.1:0", "--session-idle-timeout", "2"],
    )
    .await;
    let observer = server.modern().await;

    // A legacy session ended by DELETE destroys its unretained sandbox and
    // keeps the retained one.
    let s1 = server.legacy(None).await;
    let scratch = sid(&ok(&s1, "create_sandbox", json!({})).await);
    let kept = sid(&ok(&s1, "create_sandbox", json!({"timeout": 120})).await);
    ok(&s1, "start_task", json!({"command": "sleep 100"})).await;
    s1.cancel().await.unwrap();
    until(
        Duration::from_secs(10),
        "the DELETEd session's sandbox to be destroyed",
        || async { !sandbox_ids(&observer).await.contains(&scratch) },
    )
    .await;
    assert!(sandbox_ids(&observer).await.contains(&kept));

    // A legacy session left idle expires, with the same cleanup.
    let s2 = server.legacy(None).await;
    let idle = sid(&ok(&s2, "create_sandbox", json!({})).await);
    until(
        Duration::from_secs(15),
        "the idle session's sandbox to be destroyed",
        || async { !sandbox_ids(&observer).await.contains(&idle) },
    )
    .await;
    drop(s2);

    // 2026-07-28 requests have no session: no default sandbox, and what
    // they create outlives the client.
    let stateless = server.modern().await;
    let free = sid(&ok(&stateless, "create_sandbox", json!({"timeout": 60})).await);
    let m = err(&stateless, "start_task", json!({"command": "true"})).await;
    assert!(m.contains("no default sandbox"), "{m}");
    stateless.cancel().await.unwrap();
    let ids = sandbox_ids(&observer).await;
    assert!(ids.contains(&free), "{ids:?}");
    for id in [free, kept] {
        ok(&observer, "kill_sandbox", json!({"sandbox_id": id})).await;
    }
    observer.cancel().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_live_http_sessions() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let s = server.legacy(None).await;
    let id = sid(&ok(&s, "create_sandbox", json!({})).await);
    server.stop().await;
    drop(s);
    let after = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let c = after.modern().await;
    assert!(
        !sandbox_ids(&c).await.contains(&id),
        "SIGTERM must end the live session"
    );
    c.cancel().await.unwrap();
    after.stop().await;
}

#[tokio::test]
async fn non_loopback_address_needs_a_token() {
    let home = Home::new();
    let out = home
        .async_command()
        .args(["serve", "--http", "0.0.0.0:0"])
        .env_remove("SANDKEEP_AUTH_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--auth-token") && stderr.contains("SANDKEEP_AUTH_TOKEN"),
        "{stderr}"
    );
}

async fn post(port: u16, headers: &[(&str, &str)]) -> reqwest::StatusCode {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let mut req = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_origin_are_enforced() {
    let home = Home::new();
    let token = "t0ken-for-the-test-0123456789";
    let server = HttpServer::start(&home, &["--http", "0.0.0.0:0", "--auth-token", token]).await;
    let port = server.port();
    let good = format!("Bearer {token}");
    let own_origin = format!("http://127.0.0.1:{port}");
    assert_eq!(post(port, &[]).await, 401, "no token");
    assert_eq!(
        post(port, &[("authorization", "Bearer wrong-token-0123456789")]).await,
        401
    );
    assert_eq!(
        post(port, &[("authorization", token)]).await,
        401,
        "scheme missing"
    );
    assert_eq!(
        post(
            port,
            &[("authorization", &good), ("origin", "http://evil.example")]
        )
        .await,
        403
    );
    assert_eq!(
        post(port, &[("authorization", &good), ("origin", "null")]).await,
        403
    );
    assert_eq!(
        post(port, &[("authorization", &good), ("origin", &own_origin)]).await,
        200
    );
    assert_eq!(post(port, &[("authorization", &good)]).await, 200);

    // rmcp's client with the token works end to end, and the token is
    // masked if a command prints it.
    let client = server.legacy(Some(token)).await;
    let run = ok(&client, "create_sandbox", json!({"timeout": 30})).await;
    let out = ok(
        &client,
        "run_command",
        json!({"command": format!("echo {token}")}),
    )
    .await;
    assert_eq!(out["stdout"], "[REDACTED]\n");
    ok(
        &client,
        "kill_sandbox",
        json!({"sandbox_id": run["sandbox_id"]}),
    )
    .await;
    client.cancel().await.unwrap();
    server.stop().await;

    // On loopback a foreign Origin is rejected too.
    let local = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    assert_eq!(
        post(local.port(), &[("origin", "http://evil.example")]).await,
        403
    );
    assert_eq!(post(local.port(), &[]).await, 200);
    local.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_clients_polling_get_task_get_correct_answers() {
    let home = Home::new();
    let server = Arc::new(HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await);
    let setup = server.modern().await;
    let id = sid(&ok(&setup, "create_sandbox", json!({"timeout": 300})).await);
    // One finished task with known output, one running.
    let done = ok(
        &setup,
        "start_task",
        json!({"sandbox_id": id, "command": "seq 1 2000"}),
    )
    .await;
    let done_id = tid(&done);
    wait_terminal(&setup, &id, &done_id, Duration::from_secs(10)).await;
    let running = ok(
        &setup,
        "start_task",
        json!({"sandbox_id": id, "command": "echo live; sleep 300"}),
    )
    .await;
    let running_id = tid(&running);
    let expected: String = (1..=2000).map(|i| format!("{i}\n")).collect();

    let mut clients = Vec::new();
    for n in 0..50u64 {
        let server = server.clone();
        let (id, done_id, running_id, expected) = (
            id.clone(),
            done_id.clone(),
            running_id.clone(),
            expected.clone(),
        );
        clients.push(tokio::spawn(async move {
            // Half legacy sessions, half stateless requests.
            let c = if n % 2 == 0 { server.legacy(None).await } else { server.modern().await };
            for round in 0..4u64 {
                let offset = (n * 97 + round * 13) % 8000;
                let v = ok(
                    &c,
                    "get_task",
                    json!({"sandbox_id": id, "task_id": done_id, "stdout_offset": offset, "limit": 100}),
                )
                .await;
                assert_eq!(v["task_id"], done_id.as_str());
                assert_eq!(v["state"], "succeeded");
                let end = (offset as usize + 100).min(expected.len());
                assert_eq!(v["stdout"], &expected[offset as usize..end], "client {n} offset {offset}");
                assert_eq!(v["stdout_next_offset"], end as u64);
                let r = ok(&c, "get_task", json!({"sandbox_id": id, "task_id": running_id})).await;
                assert_eq!(r["state"], "running");
                assert_eq!(r["stdout"], "live\n");
            }
            c.cancel().await.unwrap();
        }));
    }
    for c in clients {
        c.await.expect("client task");
    }
    ok(&setup, "kill_sandbox", json!({"sandbox_id": id})).await;
    setup.cancel().await.unwrap();
    Arc::into_inner(server)
        .expect("no client left")
        .stop()
        .await;
}
