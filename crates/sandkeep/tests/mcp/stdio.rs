//! End to end over stdio: rmcp's client drives real `sandkeep serve` child
//! processes on the real local provider. The acceptance path of SPEC.md §9
//! with a SIGKILL of the server mid-task, the session rules of §6, and the
//! stdio edge cases (notification first, EOF first, signals).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::mcp::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn listed(client: &Client) -> Vec<serde_json::Value> {
    ok(client, "list_sandboxes", json!({})).await["sandboxes"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptance_path_survives_sigkill_of_the_server() {
    let home = Home::new();
    let mut a = StdioServer::start(&home).await;
    let sandbox = ok(&a.client, "create_sandbox", json!({"timeout": 600})).await;
    let id = sid(&sandbox);
    let started = ok(
        &a.client,
        "start_task",
        json!({"command": "printf BEFORE; sleep 10; printf AFTER", "timeout": 120}),
    )
    .await;
    assert_eq!(started["state"], "running", "{started}");
    assert_eq!(started["sandbox_id"], id.as_str());
    let task = tid(&started);
    assert!(sandkeep_proto::TaskId::parse(&task).is_ok(), "{task}");
    // BEFORE is visible while the task runs.
    let t0 = Instant::now();
    loop {
        let v = ok(
            &a.client,
            "get_task",
            json!({"sandbox_id": id, "task_id": task}),
        )
        .await;
        if v["stdout"] == "BEFORE" {
            assert_eq!(v["state"], "running");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "BEFORE not saved promptly: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The server dies without any chance to clean up.
    let pid = a.pid();
    send_signal(pid, rustix::process::Signal::KILL);
    wait_exit(&mut a.child, Duration::from_secs(5)).await;

    // A new server process with the same SANDKEEP_HOME reads everything.
    let b = StdioServer::start(&home).await;
    let sandboxes = listed(&b.client).await;
    let entry = sandboxes
        .iter()
        .find(|s| s["sandbox_id"] == id.as_str())
        .expect("sandbox survived");
    assert_eq!(entry["retained"], true);
    let done = wait_terminal(&b.client, &id, &task, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["stdout_bytes"], 11);
    // By offsets, three bytes a page (pages cut anywhere).
    assert_eq!(
        read_all_stdout(&b.client, &id, &task, 3).await,
        "BEFOREAFTER"
    );
    // Reading the same offset again gives the same bytes.
    let again = ok(
        &b.client,
        "get_task",
        json!({"sandbox_id": id, "task_id": task, "stdout_offset": 6}),
    )
    .await;
    assert_eq!(again["stdout"], "AFTER");
    assert_eq!(again["stdout_next_offset"], 11);

    // Another task, cancelled and confirmed within 3 s.
    let marker = format!("4242.{}", std::process::id());
    let second = ok(
        &b.client,
        "start_task",
        json!({"sandbox_id": id, "command": format!("sleep {marker}")}),
    )
    .await;
    let second_id = second["task_id"].as_str().unwrap();
    until(
        Duration::from_secs(5),
        "the second task's sleep is running",
        || async { !host_pids_with(&marker).is_empty() },
    )
    .await;
    let t = Instant::now();
    let cancelled = ok(
        &b.client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": second_id}),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "cancel took {:?}",
        t.elapsed()
    );
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");

    // kill_sandbox: nothing of the sandbox is left on the host.
    let killed = ok(&b.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert_eq!(killed["killed"], true);
    assert!(host_pids_with(&marker).is_empty());
    assert!(host_pids_with(&id).is_empty(), "processes of {id} left");
    assert!(
        host_mounts_with(&id).is_empty(),
        "mounts of {id} left: {:?}",
        host_mounts_with(&id)
    );
    let leftovers: Vec<_> = walk_names(home.path())
        .into_iter()
        .filter(|p| p.contains(&id))
        .collect();
    assert!(leftovers.is_empty(), "files of {id} left: {leftovers:?}");
    assert!(
        listed(&b.client)
            .await
            .iter()
            .all(|s| s["sandbox_id"] != id.as_str())
    );
    let gone = err(
        &b.client,
        "get_task",
        json!({"sandbox_id": id, "task_id": task}),
    )
    .await;
    assert!(gone.contains("no such sandbox"), "{gone}");
    assert!(b.close().await.success());
}

fn walk_names(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.to_string_lossy().into_owned());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk_names(&p));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_end_destroys_unretained_keeps_retained_and_queried() {
    let home = Home::new();
    let a = StdioServer::start(&home).await;
    let scratch = sid(&ok(&a.client, "create_sandbox", json!({})).await);
    let worker = sid(&ok(&a.client, "create_sandbox", json!({"timeout": 120})).await);
    // The default is the latest sandbox; a task retains it.
    let task = ok(&a.client, "start_task", json!({"command": "sleep 60"})).await;
    assert_eq!(task["sandbox_id"], worker.as_str());
    let task_id = tid(&task);
    let t = Instant::now();
    let log = a.stderr.clone();
    assert!(a.close().await.success(), "stdin EOF is a clean exit");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "exit took {:?}",
        t.elapsed()
    );
    // The log says what the session kept alive, and why.
    let log = log.lock().unwrap().clone();
    let ended = log
        .lines()
        .find(|l| l.contains("session ended"))
        .unwrap_or_else(|| panic!("no session end in the log: {log}"));
    assert!(
        ended.contains(&format!("destroyed={scratch}"))
            && ended.contains(&format!("retained={worker}")),
        "{ended}"
    );

    let b = StdioServer::start(&home).await;
    let ids: Vec<_> = listed(&b.client).await.iter().map(sid).collect();
    assert!(
        !ids.contains(&scratch),
        "the unretained sandbox must be destroyed: {ids:?}"
    );
    assert!(
        ids.contains(&worker),
        "the retained sandbox must be kept: {ids:?}"
    );
    // Without a default sandbox in this new session, start_task fails and
    // creates nothing.
    let m = err(&b.client, "start_task", json!({"command": "true"})).await;
    assert!(m.contains("no default sandbox"), "{m}");
    // Only querying a sandbox does not make it this session's.
    ok(
        &b.client,
        "get_task",
        json!({"sandbox_id": worker, "task_id": task_id}),
    )
    .await;
    ok(
        &b.client,
        "cancel_task",
        json!({"sandbox_id": worker, "task_id": task_id}),
    )
    .await;
    ok(
        &b.client,
        "run_command",
        json!({"sandbox_id": worker, "command": "true"}),
    )
    .await;
    assert!(b.close().await.success());

    let c = StdioServer::start(&home).await;
    let ids: Vec<_> = listed(&c.client).await.iter().map(sid).collect();
    assert_eq!(
        ids,
        vec![worker.clone()],
        "creates nothing, destroys nothing it only queried"
    );
    ok(&c.client, "kill_sandbox", json!({"sandbox_id": worker})).await;
    assert!(c.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_end_the_session_promptly() {
    for signal in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let home = Home::new();
        let mut a = StdioServer::start(&home).await;
        let id = sid(&ok(&a.client, "create_sandbox", json!({})).await);
        let t = Instant::now();
        send_signal(a.pid(), signal);
        let status = wait_exit(&mut a.child, Duration::from_secs(10)).await;
        assert!(
            status.success(),
            "{signal:?}: {status:?}\n{}",
            a.stderr.lock().unwrap()
        );
        assert!(t.elapsed() < Duration::from_secs(10));
        let b = StdioServer::start(&home).await;
        assert!(
            listed(&b.client).await.iter().all(|s| sid(s) != id),
            "{signal:?} left {id}"
        );
        assert!(b.close().await.success());
    }
}

/// A raw child process: what a client that is not rmcp might do.
async fn raw_server(home: &Home, input: &[u8]) -> (std::process::ExitStatus, String, String) {
    let mut child = home.spawn_serve(std::process::Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await.unwrap();
    drop(stdin);
    let mut stdout = String::new();
    let mut stderr = String::new();
    let (mut o, mut e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (r1, r2) = tokio::join!(o.read_to_string(&mut stdout), e.read_to_string(&mut stderr));
    r1.unwrap();
    r2.unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(10)).await;
    (status, stdout, stderr)
}

#[tokio::test]
async fn eof_or_notification_before_handshake_exits_cleanly() {
    let home = Home::new();
    for input in [
        &b""[..],
        &b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"[..],
    ] {
        let (status, stdout, stderr) = raw_server(&home, input).await;
        let shown = String::from_utf8_lossy(input);
        assert!(status.success(), "{shown}: {status:?}\n{stderr}");
        assert!(
            stdout.is_empty(),
            "{shown}: stdout must stay clean: {stdout:?}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{shown}: {stderr}"
        );
    }
}

#[tokio::test]
async fn stdout_carries_only_protocol_messages() {
    let home = Home::new();
    let input = raw_session(&[
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_task","arguments":{"sandbox_id":"nope","task_id":"0123456789abcdef0123456789abcdef"}}}"#,
    ]);
    let (status, stdout, stderr) = raw_server(&home, input.as_bytes()).await;
    assert!(status.success(), "{stderr}");
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "one response per request and nothing else: {stdout}"
    );
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["jsonrpc"], "2.0");
    }
    assert!(!stderr.is_empty(), "logs go to stderr");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sandbox_process_holds_the_clients_stdout_pipe() {
    // A retained sandbox (its keeper and the task's supervisor) outlives the
    // server. If any of them held the server's stdout, the client would
    // never see EOF after the server exits.
    let home = Home::new();
    let input = raw_session(&[
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox","arguments":{"timeout":60}}}"#,
    ]);
    let mut child = home.spawn_serve(std::process::Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(input.as_bytes()).await.unwrap();
    let mut line = String::new();
    let mut sandbox = String::new();
    while sandbox.is_empty() {
        line.clear();
        tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 2 {
            sandbox = v["result"]["structuredContent"]["sandbox_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
    }
    let start = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"start_task","arguments":{"command":"sleep 50"}}}"#;
    stdin.write_all(start.as_bytes()).await.unwrap();
    stdin.write_all(b"\n").await.unwrap();
    line.clear();
    tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
        .await
        .unwrap();
    assert!(line.contains("running"), "{line}");
    drop(stdin);
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(10), stdout.read_to_string(&mut rest))
        .await
        .expect("stdout reaches EOF when the server exits")
        .unwrap();
    assert!(rest.is_empty(), "{rest}");
    assert!(
        wait_exit(&mut child, Duration::from_secs(10))
            .await
            .success()
    );
    let b = StdioServer::start(&home).await;
    assert!(
        listed(&b.client).await.iter().any(|s| sid(s) == sandbox),
        "the retained sandbox lives on"
    );
    ok(&b.client, "kill_sandbox", json!({"sandbox_id": sandbox})).await;
    assert!(b.close().await.success());
}

/// A server holds about six descriptors per running sandbox call: it lifts
/// its soft open-file limit to the hard one, or the common 1,024 would
/// fail a few hundred concurrent wait_task calls with EMFILE.
#[test]
fn serve_lifts_its_open_file_limit_to_the_hard_one() {
    let home = Home::new();
    let mut server = std::process::Command::new("prlimit")
        .args(["--nofile=256:8192", "--", bin(), "serve"])
        .env("SANDKEEP_HOME", home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prlimit (util-linux) runs sandkeep serve");
    let pid = server.id();
    let limits = poll(
        Duration::from_secs(10),
        "the lifted open-file limit",
        || {
            let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
            let line = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))?
                .to_owned();
            line.split_whitespace()
                .nth(3)
                .is_some_and(|soft| soft == "8192")
                .then_some(line)
        },
    );
    assert!(limits.contains("8192"), "{limits}");
    server.kill().unwrap();
    server.wait().unwrap();
}
