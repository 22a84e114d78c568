//! expose_port end to end (SPEC.md §14): real `sandkeep serve` processes
//! on the local provider, real servers inside real sandboxes, and host
//! clients connecting through the forwards. Local provider only (the e2b
//! provider answers E2B's host names; tests/e2b covers those).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::*;
use support::ports::*;
use support::*;

/// Writes `script` into the sandbox and starts `python3 script PORT` as a
/// task (which also retains the sandbox).
async fn serve_in(client: &Client, id: &str, name: &str, script: &str, port: u16) {
    ok(
        client,
        "write_file",
        json!({"sandbox_id": id, "path": name, "content": script}),
    )
    .await;
    let started = ok(
        client,
        "start_task",
        json!({"sandbox_id": id, "command": format!("exec python3 {name} {port}"), "timeout": 600}),
    )
    .await;
    assert_eq!(started["state"], "running", "{started}");
}

async fn expose(client: &Client, id: &str, port: u16) -> String {
    let v = ok(
        client,
        "expose_port",
        json!({"sandbox_id": id, "port": port}),
    )
    .await;
    assert_eq!(v["sandbox_id"], id);
    assert_eq!(v["port"], port);
    v["url"].as_str().expect("a url").to_owned()
}

fn ports_of(listed: &Value, id: &str) -> Value {
    listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox_id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"))["ports"]
        .clone()
}

/// Whether `pid` runs (a zombie, left to whoever adopted an orphan, has
/// ended).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Connects to `addr` and expects the forward to end the connection
/// without an answer (a reset, or an end of file) within `limit`.
async fn refused_or_reset(addr: &str, limit: Duration) {
    let start = Instant::now();
    let outcome = tokio::time::timeout(limit, echo_once(addr, b"hello")).await;
    match outcome {
        Err(_) => panic!("{addr}: the connection hung for {limit:?}"),
        Ok(Ok(bytes)) => assert!(bytes.is_empty(), "{addr} answered {bytes:?}"),
        Ok(Err(_)) => {}
    }
    assert!(start.elapsed() < limit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reaches_the_server_inside_and_the_same_port_keeps_its_url() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let created = ok(c, "create_sandbox", json!({"timeout": 300})).await;
    assert_eq!(created["ports"], json!([]), "{created}");
    let id = sid(&created);
    let marker = format!("served-from-{id}");
    ok(
        c,
        "write_file",
        json!({"sandbox_id": id, "path": "www/index.html", "content": marker}),
    )
    .await;
    ok(
        c,
        "start_task",
        json!({"sandbox_id": id, "timeout": 600,
               "command": "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory www"}),
    )
    .await;
    // Exposed before anything listens: the forward exists all the same.
    let url = expose(c, &id, 8000).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(
        expose(c, &id, 8000).await,
        url,
        "the same port, the same url"
    );
    // Without sandbox_id: the session's default sandbox.
    let again = ok(c, "expose_port", json!({"port": 8000})).await;
    assert_eq!(again["url"], url.as_str());
    let listed = ok(c, "list_sandboxes", json!({})).await;
    assert_eq!(
        ports_of(&listed, &id),
        json!([{"port": 8000, "url": url}]),
        "{listed}"
    );

    let http = reqwest::Client::new();
    let start = Instant::now();
    let body = loop {
        match http
            .get(format!("{url}/index.html"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => break r.text().await.unwrap(),
            other => assert!(
                start.elapsed() < Duration::from_secs(20),
                "the server inside did not answer through {url}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body, marker);
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_where_nothing_listens_is_reset_at_once() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let id = sid(&ok(c, "create_sandbox", json!({"timeout": 120})).await);
    let url = expose(c, &id, 9).await;
    for _ in 0..3 {
        refused_or_reset(authority(&url), Duration::from_secs(2)).await;
    }
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_bytes_pass_both_ways_unchanged_and_many_connections_are_served() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let id = sid(&ok(c, "create_sandbox", json!({"timeout": 600})).await);
    serve_in(c, &id, "echo.py", ECHO_PY, 7000).await;
    let url = expose(c, &id, 7000).await;
    until_answering(&url, Duration::from_secs(20)).await;
    let addr = authority(&url).to_owned();

    // 100 MiB each way at once.
    let data = pattern(100 << 20, 7);
    let back = echo_bulk(&addr, &data).await;
    assert_eq!(back.len(), data.len(), "bytes lost or added");
    assert!(back == data, "bytes changed on the way");

    // 200 connections open at once, each served.
    let mut conns = Vec::new();
    for i in 0..200u32 {
        let addr = addr.clone();
        conns.push(tokio::spawn(async move {
            let message = format!("connection {i} says hello");
            let back = echo_once(&addr, message.as_bytes()).await;
            (message, back)
        }));
    }
    for conn in conns {
        let (message, back) = conn.await.unwrap();
        let back = back.unwrap_or_else(|e| panic!("{message}: {e}"));
        assert_eq!(String::from_utf8_lossy(&back), message);
    }
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_pass_through_the_forward() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let id = sid(&ok(c, "create_sandbox", json!({"timeout": 300})).await);
    serve_in(c, &id, "ws.py", WEBSOCKET_PY, 8765).await;
    let url = expose(c, &id, 8765).await;
    let addr = authority(&url).to_owned();
    let start = Instant::now();
    // Until the server inside listens, the forward resets the connection.
    while tokio::net::TcpStream::connect(&addr).await.is_err()
        || echo_once(&addr, b"").await.is_err()
    {
        assert!(start.elapsed() < Duration::from_secs(20), "no server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let echoed = websocket_echo(&addr, &addr, "/", "hello through the forward").await;
    assert_eq!(echoed, "hello through the forward");
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forward_outlives_its_server_and_ends_with_the_sandbox() {
    let home = Home::local();
    let first = StdioServer::start(&home).await;
    let id = sid(&ok(&first.client, "create_sandbox", json!({"timeout": 300})).await);
    serve_in(&first.client, &id, "echo.py", ECHO_PY, 7000).await;
    let url = expose(&first.client, &id, 7000).await;
    until_answering(&url, Duration::from_secs(20)).await;

    // The server that made it dies without a word.
    send_signal(first.pid(), rustix::process::Signal::KILL);
    let StdioServer { mut child, .. } = first;
    wait_exit(&mut child, Duration::from_secs(10)).await;
    let addr = authority(&url).to_owned();
    assert_eq!(
        echo_once(&addr, b"still here").await.unwrap(),
        b"still here"
    );

    // A new server and the CLI see it, and the same port keeps its url.
    let second = StdioServer::start(&home).await;
    let listed = ok(&second.client, "list_sandboxes", json!({})).await;
    assert_eq!(ports_of(&listed, &id), json!([{"port": 7000, "url": url}]));
    assert_eq!(expose(&second.client, &id, 7000).await, url);
    let out = home
        .command(&["sandbox", "expose", &id, "7000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), url);
    let table = home.command(&["sandbox", "list"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&table.stdout).contains(&format!("7000 {url}")),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );

    // Gone with the sandbox: no listener, no keeper.
    let keeper = support::local::recorded_pid(
        home.path(),
        &sandkeep::provider::SandboxId::parse(&id).unwrap(),
        "keeper",
    );
    let killed = ok(&second.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert_eq!(killed["killed"], true);
    match tokio::net::TcpStream::connect(&addr).await {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("{addr} still accepts after kill_sandbox"),
    }
    assert!(
        !running(keeper),
        "the keeper {keeper} outlived kill_sandbox"
    );
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_none_sandbox_is_exposed_and_reaches_nothing_through_it() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let created = ok(
        c,
        "create_sandbox",
        json!({"timeout": 300, "network": "none"}),
    )
    .await;
    assert_eq!(created["network"], "none");
    let id = sid(&created);
    serve_in(c, &id, "echo.py", ECHO_PY, 7000).await;
    let url = expose(c, &id, 7000).await;
    until_answering(&url, Duration::from_secs(20)).await;
    let host_port = authority(&url).rsplit(':').next().unwrap().to_owned();

    // From inside, the forward's host port is nobody's: the listener is in
    // the host's namespace, out of the sandbox's reach.
    let probe = format!(
        "python3 -c \"import socket\ntry:\n socket.create_connection(('127.0.0.1', {host_port}), 3)\n \
         print('REACHED')\nexcept OSError as e:\n print('REFUSED', e)\""
    );
    let out = ok(
        c,
        "run_command",
        json!({"sandbox_id": id, "command": probe, "timeout": 20}),
    )
    .await;
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("REFUSED"), "{out}");
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ports_and_unknown_sandboxes_are_tool_errors() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let e = err(c, "expose_port", json!({"port": 8000})).await;
    assert!(e.contains("no default sandbox"), "{e}");
    let e = err(
        c,
        "expose_port",
        json!({"sandbox_id": "sb-0000000000000000", "port": 8000}),
    )
    .await;
    assert!(e.contains("no such sandbox"), "{e}");
    for bad in [
        json!(0),
        json!(65536),
        json!(-1),
        json!("8000"),
        json!(80.5),
    ] {
        let e = err(
            c,
            "expose_port",
            json!({"sandbox_id": "sb-0000000000000000", "port": bad}),
        )
        .await;
        assert!(
            e.contains("`port`") && e.contains("1 to 65535"),
            "{bad}: {e}"
        );
    }
    let e = err(
        c,
        "expose_port",
        json!({"sandbox_id": "sb-0000000000000000"}),
    )
    .await;
    assert!(e.contains("port"), "{e}");
    server.close().await;
}
