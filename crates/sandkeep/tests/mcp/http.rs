//! End to end over Streamable HTTP: rmcp's HTTP client (legacy sessions and
//! 2026-07-28 stateless requests) against real `sandkeep serve --http`
//! child processes on the real local provider; raw requests for the HTTP
//! edge (token, Origin).

use crate::support;

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
    let client = a.legacy().await;
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
    let s1 = server.legacy().await;
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
    let s2 = server.legacy().await;
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
    let s = server.legacy().await;
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
async fn insecure_no_auth_is_refused_off_loopback() {
    let home = Home::new();
    let out = home
        .async_command()
        .args(["serve", "--http", "0.0.0.0:0", "--insecure-no-auth"])
        .env_remove("SANDKEEP_AUTH_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--insecure-no-auth") && stderr.contains("loopback"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_needs_the_generated_token_which_is_written_0600() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let token = server
        .token
        .clone()
        .expect("the server printed a generated token");
    assert_eq!(token.len(), 32, "128 bits as hex: {token}");
    let file = home.path().join("http-token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode of {}", file.display());

    let port = server.port();
    let response = raw_post(port, &[]).await;
    assert_eq!(response.status(), 401, "no token on loopback");
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        post(port, &[("authorization", &format!("Bearer {token}"))]).await,
        200
    );
    // The rmcp client with the token works end to end.
    let client = server.legacy().await;
    ok(&client, "list_sandboxes", json!({})).await;
    client.cancel().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_token_survives_restarts_is_shared_and_rotates_on_request() {
    let home = Home::new();
    let first = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let token = first.token.clone().expect("a generated token");
    let bearer = format!("Bearer {token}");

    // A second server on the same state directory uses the same token: the
    // first one's clients are not broken by it.
    let second = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    assert_eq!(second.token.as_deref(), Some(token.as_str()));
    for server in [&first, &second] {
        assert_eq!(
            post(server.port(), &[("authorization", &bearer)]).await,
            200
        );
    }
    first.stop().await;
    second.stop().await;

    // A raw client registered with the token survives a restart.
    let again = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    assert_eq!(again.token.as_deref(), Some(token.as_str()));
    assert_eq!(post(again.port(), &[("authorization", &bearer)]).await, 200);
    again.stop().await;

    // --rotate-token makes a new one; the old one is refused from then on.
    let rotated = HttpServer::start(&home, &["--http", "127.0.0.1:0", "--rotate-token"]).await;
    let fresh = rotated.token.clone().expect("a new token");
    assert_ne!(fresh, token);
    assert_eq!(
        std::fs::read_to_string(home.path().join("http-token")).unwrap(),
        fresh
    );
    assert_eq!(
        post(rotated.port(), &[("authorization", &bearer)]).await,
        401
    );
    assert_eq!(
        post(
            rotated.port(),
            &[("authorization", &format!("Bearer {fresh}"))]
        )
        .await,
        200
    );
    rotated.stop().await;
}

#[tokio::test]
async fn a_token_file_others_could_read_or_plant_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let file = home.path().join("http-token");
    let refused = |why: &'static str| {
        let home = &home;
        async move {
            let out = home
                .async_command()
                .args(["serve", "--http", "127.0.0.1:0"])
                .env_remove("SANDKEEP_AUTH_TOKEN")
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert_eq!(out.status.code(), Some(1), "{why}: {stderr}");
            assert!(
                stderr.contains(&file_name(home)) && stderr.contains(why),
                "{why}: {stderr}"
            );
            assert!(stderr.contains("--rotate-token"), "{stderr}");
        }
    };
    std::fs::write(&file, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused("open to group or others (mode 644)").await;
    std::fs::remove_file(&file).unwrap();
    let elsewhere = home.path().join("planted");
    std::fs::write(&elsewhere, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    refused("is a symbolic link").await;
    std::fs::remove_file(&file).unwrap();
    if rustix::process::geteuid().is_root() {
        std::fs::write(&file, "0123456789abcdef0123456789abcdef").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
        refused("is owned by uid 65534").await;
    }
    // --rotate-token replaces the refused file with a private one of ours.
    let rotated = HttpServer::start(&home, &["--http", "127.0.0.1:0", "--rotate-token"]).await;
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    rotated.stop().await;
}

fn file_name(home: &Home) -> String {
    home.path().join("http-token").display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_no_auth_on_loopback_serves_without_a_token_and_warns() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0", "--insecure-no-auth"]).await;
    assert_eq!(server.token, None);
    assert_eq!(post(server.port(), &[]).await, 200);
    let stderr = server.stderr.lock().unwrap().clone();
    assert!(stderr.contains("without a token"), "{stderr}");
    assert!(!home.path().join("http-token").exists());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let addr = format!("127.0.0.1:{}", server.port());
    http::assert_cut_off(http::slow_client(&addr, "POST", "/mcp").await).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_session_cap_initialize_gets_503_and_existing_sessions_work() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0", "--max-sessions", "2"]).await;
    let token = format!("Bearer {}", server.token.clone().unwrap());
    let a = server.legacy().await;
    let b = server.legacy().await;
    let refused = raw_post(server.port(), &[("authorization", &token)]).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"), "{refused:?}");
    for client in [&a, &b] {
        ok(client, "list_sandboxes", json!({})).await;
    }
    // A 2026-07-28 request holds no session and still passes.
    let modern = server.modern().await;
    ok(&modern, "list_sandboxes", json!({})).await;
    // Once a session ends, its place is free again.
    a.cancel().await.unwrap();
    until(Duration::from_secs(10), "a freed session place", || async {
        post(server.port(), &[("authorization", &token)]).await == 200
    })
    .await;
    b.cancel().await.unwrap();
    server.stop().await;
}

/// Past `--max-connections`, with every place taken by a request in
/// flight (here a call with the token whose body is still on its way), a
/// connection is told 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_connection_gets_503() {
    let home = Home::new();
    let server =
        HttpServer::start(&home, &["--http", "127.0.0.1:0", "--max-connections", "1"]).await;
    let addr = format!("127.0.0.1:{}", server.port());
    let token = server.token.clone().unwrap();
    let holder = http::request_in_flight(
        &addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n\
             content-length: 1000\r\n"
        ),
    )
    .await;
    http::assert_busy(&addr, "/mcp").await;
    drop(holder);
    server.stop().await;
}

/// Connections without a token that hold no request (nothing sent, HTTP/2
/// with no stream, half-sent headers; from other peers and from the
/// clients' own address), three times as many as there are places, keep
/// no client with the token out: it gets in at once, and each of them is
/// cut within 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_token_cannot_lock_a_client_out() {
    let home = Home::new();
    let server =
        HttpServer::start(&home, &["--http", "127.0.0.1:0", "--max-connections", "8"]).await;
    let addr = format!("127.0.0.1:{}", server.port());
    let auth = format!("Bearer {}", server.token.clone().unwrap());
    let held = http::hold_idle(&addr, 8).await;
    for _ in 0..3 {
        assert_eq!(post(server.port(), &[("authorization", &auth)]).await, 200);
    }
    let client = server.legacy().await;
    ok(&client, "list_sandboxes", json!({})).await;
    http::assert_all_cut(held).await;
    ok(&client, "list_sandboxes", json!({})).await;
    client.cancel().await.unwrap();
    server.stop().await;
}

/// A connection with no request in flight for 10 s is closed: one that
/// never sends a request, one speaking HTTP/2 that opens no stream, and one
/// kept alive after its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_idle_for_10_s_are_cut() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let addr = format!("127.0.0.1:{}", server.port());
    let silent = (http::send(&addr, b"").await, Instant::now());
    let h2 = (http::send(&addr, http::H2_PREFACE).await, Instant::now());
    let mut kept = http::send(&addr, b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    let answer = http::read_answer(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let kept = (kept, Instant::now());
    tokio::join!(
        http::assert_cut_off(silent),
        http::assert_cut_off(h2),
        http::assert_cut_off(kept)
    );
    server.stop().await;
}

async fn raw_post(port: u16, headers: &[(&str, &str)]) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let mut req = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

async fn post(port: u16, headers: &[(&str, &str)]) -> reqwest::StatusCode {
    raw_post(port, headers).await.status()
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
    let client = server.legacy().await;
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

    // On loopback a foreign Origin is rejected too, even with the token.
    let local = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let good = format!("Bearer {}", local.token.clone().unwrap());
    assert_eq!(
        post(
            local.port(),
            &[("authorization", &good), ("origin", "http://evil.example")]
        )
        .await,
        403
    );
    assert_eq!(post(local.port(), &[("authorization", &good)]).await, 200);
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
            let c = if n % 2 == 0 { server.legacy().await } else { server.modern().await };
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

/// Resident memory of a process, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// With the default caps: 5,000 initializes never followed up (the first
/// 128 open sessions, the rest are told 503) and 5,000 more requests, then
/// resident memory is under 64 MiB once the sessions expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_bounded_after_5000_abandoned_sessions_and_10000_requests() {
    let home = Home::new();
    let server = HttpServer::start(
        &home,
        &["--http", "127.0.0.1:0", "--session-idle-timeout", "2"],
    )
    .await;
    let pid = server.child.id().unwrap();
    let port = server.port();
    let auth = format!("Bearer {}", server.token.clone().unwrap());
    let started = Instant::now();
    let (mut opened, mut busy, mut requests) = (0, 0, 0);
    let client = reqwest::Client::new();
    for n in 0..10_000 {
        let body = if n < 5_000 {
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "abandoned", "version": "0"}}})
        } else {
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        };
        let status = client
            .post(format!("http://127.0.0.1:{port}/mcp"))
            .header("authorization", &auth)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("the server answers")
            .status();
        match (n < 5_000, status.as_u16()) {
            (true, 200) => opened += 1,
            (true, 503) => busy += 1,
            (false, _) => {}
            (true, other) => panic!("initialize #{n} answered {other}"),
        }
        requests += 1;
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "10,000 requests took over 240 s"
        );
    }
    assert_eq!(requests, 10_000);
    assert!(opened >= 128 && busy > 0, "opened {opened}, refused {busy}");
    let peak = rss_kib(pid);
    until(
        Duration::from_secs(60),
        "resident memory under 64 MiB",
        || std::future::ready(rss_kib(pid) < 64 * 1024),
    )
    .await;
    // The sessions expired: a new one opens again.
    until(
        Duration::from_secs(30),
        "a session place after expiry",
        || async { post(port, &[("authorization", &auth)]).await == 200 },
    )
    .await;
    eprintln!(
        "opened {opened}, refused {busy}; RSS peak {peak} KiB, after expiry {} KiB",
        rss_kib(pid)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_refused_and_the_server_serves_on() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let auth = format!("Bearer {}", server.token.clone().unwrap());
    // Over the 16 MiB cap: a write_file whose content alone is 17 MiB.
    let content = "x".repeat(17 << 20);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "big", "content": content}}});
    let status = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/mcp", server.port()))
        .header("authorization", &auth)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .map(|r| r.status().as_u16());
    // 413, or the connection closed while the rest was still being sent.
    assert!(matches!(status, Ok(413) | Err(_)), "{status:?}");
    assert_eq!(post(server.port(), &[("authorization", &auth)]).await, 200);
    server.stop().await;
}

/// A raw DELETE of the legacy session `id` (none: no header).
async fn delete(server: &HttpServer, id: Option<&str>) -> (reqwest::StatusCode, String) {
    let mut req = reqwest::Client::new()
        .delete(&server.url)
        .header("mcp-protocol-version", "2025-11-25")
        .header(
            "authorization",
            format!("Bearer {}", server.token.as_deref().unwrap()),
        );
    if let Some(id) = id {
        req = req.header("mcp-session-id", id);
    }
    let response = req.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_a_session_with_204_and_an_unknown_one_gets_404() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let token = format!("Bearer {}", server.token.clone().unwrap());
    let opened = raw_post(server.port(), &[("authorization", &token)]).await;
    assert_eq!(opened.status(), 200);
    let id = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();

    let (status, _) = delete(&server, Some(&id)).await;
    assert_eq!(status, 204, "the session was ended");
    let (status, body) = delete(&server, Some(&id)).await;
    assert_eq!(status, 404, "already ended: {body}");
    assert!(body.contains("no such session"), "{body}");
    let (status, body) = delete(&server, Some("never-issued")).await;
    assert_eq!(status, 404, "{body}");
    server.stop().await;
}

/// A raw POST of `body` as JSON, with the token.
async fn post_body(server: &HttpServer, body: &str) -> (reqwest::StatusCode, String, String) {
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header(
            "authorization",
            format!("Bearer {}", server.token.as_deref().unwrap()),
        )
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_gets_400_with_a_json_rpc_error() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    for (body, code) in [
        (r#"{"jsonrpc": "2.0", "id": 1, "method": "#, -32700),
        ("not json at all", -32700),
        (r#"{"hello": "world"}"#, -32600),
    ] {
        let (status, kind, text) = post_body(&server, body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(kind.starts_with("application/json"), "{body}: {kind}");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{body}: {e}: {text}"));
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        assert_eq!(v["id"], serde_json::Value::Null, "{v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
    // The server serves on.
    assert_eq!(
        post(
            server.port(),
            &[(
                "authorization",
                &format!("Bearer {}", server.token.clone().unwrap())
            )]
        )
        .await,
        200
    );
    server.stop().await;
}

/// The words a POSIX shell makes of `line` when `claude` is a function
/// printing its arguments: what Claude Code would be given.
fn claude_words(line: &str) -> Vec<String> {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("claude() {{ printf '%s\\0' \"$@\"; }}; {line}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{line}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_claude_code_lines_register_for_every_project() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let token = server.token.clone().unwrap();
    let stderr = server.stderr.lock().unwrap().clone();
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("sandkeep: Claude Code: "))
        .unwrap_or_else(|| panic!("no Claude Code line: {stderr}"));
    let words = claude_words(line);
    let header = format!("Authorization: Bearer {token}");
    let expected = [
        "mcp",
        "add",
        "--transport",
        "http",
        "--scope",
        "user",
        "sandkeep",
        &server.url,
        "--header",
        &header,
    ];
    assert_eq!(words, expected, "{line}");
    // mcp-config prints the same line for the running server, and the
    // stdio one with the same scope.
    let printed = home.ok(&["mcp-config", "claude-code", "--http", &server.url]);
    assert_eq!(printed.trim(), line);
    let stdio = home.ok(&["mcp-config", "claude-code"]);
    let words = claude_words(stdio.trim());
    assert_eq!(
        words[..5],
        ["mcp", "add", "--scope", "user", "sandkeep"],
        "{stdio}"
    );
    server.stop().await;
}
