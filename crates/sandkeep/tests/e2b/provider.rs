//! The e2b provider against `sandkeep serve --e2b` (which reproduces
//! envd's traps over local sandboxes), whatever SANDKEEP_TEST_PROVIDER
//! says: the helper upload (once, verified, repeated when it is deleted or
//! altered inside), retention racing a session end across providers and
//! server processes, SPEC.md §9's path with the server SIGKILLed, a task
//! read long after envd forgot its process, a setsid escapee, a start
//! whose envd call breaks after it was forwarded, and a sandbox list that
//! spans two of E2B's pages.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sandkeep::provider::e2b::{E2bConfig, E2bProvider};
use sandkeep::provider::{CreateSpec, ExecRequest, Provider, ProviderError, Release, SandboxId};
use serde_json::json;
use support::e2b::Endpoint;
use support::mcp::*;
use support::*;

fn provider(endpoint: &Endpoint) -> E2bProvider {
    E2bProvider::new(E2bConfig {
        api_key: endpoint.key.clone(),
        domain: "e2b.app".into(),
        api_url: endpoint.api_url.clone(),
        sandbox_url: endpoint.sandbox_url.clone(),
    })
    .expect("e2b provider")
    .with_helper(bin())
}

fn spec() -> CreateSpec {
    CreateSpec {
        template: "base".into(),
        timeout: 300,
        envs: Default::default(),
        network: None,
        allow_hosts: Vec::new(),
        limits: Default::default(),
        shares: Vec::new(),
        on_timeout: Default::default(),
    }
}

async fn sh(p: &E2bProvider, id: &SandboxId, command: &str) -> String {
    let out = p
        .exec(
            id,
            ExecRequest {
                command: command.into(),
                cwd: None,
                timeout: Duration::from_secs(30),
                stdin: None,
                output_limit: 1 << 16,
            },
        )
        .await
        .expect("exec");
    assert_eq!(
        out.exit_code,
        Some(0),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256_of(path: &str) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_is_uploaded_once_verified_and_again_when_deleted_or_altered() {
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;

    let path = p.task_helper(&id).await.expect("helper");
    assert_eq!(p.stats().helper_uploads(), 1);
    assert!(path.ends_with("/.sandkeep/bin/sandkeep-task"), "{path}");
    let inside = sh(&p, &id, &format!("sha256sum {path} | cut -c1-64")).await;
    assert_eq!(
        inside.trim(),
        sha256_of(bin()),
        "the helper inside is this binary"
    );
    let reply = sh(&p, &id, &format!("{path} list '{{}}' || true")).await;
    assert!(reply.contains("tasks"), "the helper runs: {reply}");

    assert_eq!(p.task_helper(&id).await.unwrap(), path);
    assert_eq!(
        p.stats().helper_uploads(),
        1,
        "present and intact: no upload"
    );

    sh(&p, &id, &format!("rm -f {path}")).await;
    assert_eq!(p.task_helper(&id).await.unwrap(), path);
    assert_eq!(
        p.stats().helper_uploads(),
        2,
        "deleted inside: uploaded again"
    );

    sh(&p, &id, &format!("printf x >> {path}")).await;
    assert_eq!(p.task_helper(&id).await.unwrap(), path);
    assert_eq!(
        p.stats().helper_uploads(),
        3,
        "altered inside: uploaded again"
    );
    let inside = sh(&p, &id, &format!("sha256sum {path} | cut -c1-64")).await;
    assert_eq!(inside.trim(), sha256_of(bin()));

    assert!(p.kill(&id).await.unwrap());
}

/// Runs a copy of `sandkeep` from `dir` with the endpoint's settings; its
/// stdout, or the test fails with its stderr.
fn sandkeep_in(dir: &std::path::Path, endpoint: &Endpoint, args: &[&str]) -> String {
    let out = std::process::Command::new(dir.join("sandkeep"))
        .args(args)
        .envs(endpoint.vars())
        .env("SANDKEEP_HOME", dir.join("home"))
        .env_remove(sandkeep::provider::e2b::HELPER_ENV)
        .output()
        .expect("run the copy of sandkeep");
    assert!(
        out.status.success(),
        "sandkeep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Without SANDKEEP_TASK_HELPER the helper uploaded is the small
/// `sandkeep-task` beside the server's executable, but only if it prints
/// this build's version line: one of another build (a stale binary, here
/// a script claiming protocol 0) is not used, the whole executable is,
/// and doctor says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_beside_the_executable_is_uploaded_only_if_it_is_this_build() {
    let endpoint = Endpoint::start();
    for this_build in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(bin(), dir.path().join("sandkeep")).expect("copy sandkeep");
        let helper = dir.path().join("sandkeep-task");
        if this_build {
            // The same build under the helper's name, told apart from the
            // whole executable by bytes past its end (the loader ignores
            // them).
            let mut bytes = std::fs::read(bin()).expect("read sandkeep");
            bytes.extend_from_slice(b"\nthe small helper\n");
            std::fs::write(&helper, bytes).expect("write the helper");
        } else {
            std::fs::write(
                &helper,
                "#!/bin/sh\necho 'sandkeep-task 0.1.0 protocol 0 source 0000000000000000'\n",
            )
            .expect("write the stale helper");
        }
        std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let expected = if this_build {
            helper.clone()
        } else {
            dir.path().join("sandkeep")
        };

        let doctor = sandkeep_in(dir.path(), &endpoint, &["doctor"]);
        let line = doctor
            .lines()
            .find(|l| l.starts_with("task helper"))
            .unwrap_or_else(|| panic!("no task helper line:\n{doctor}"));
        assert_eq!(
            line.contains("beside this executable"),
            this_build,
            "{doctor}"
        );
        assert_eq!(!line.contains("WARNING"), this_build, "{doctor}");

        let created = sandkeep_in(dir.path(), &endpoint, &["sandbox", "create", "--json"]);
        let id = serde_json::from_str::<serde_json::Value>(&created).expect("JSON")["sandbox_id"]
            .as_str()
            .expect("sandbox_id")
            .to_owned();
        sandkeep_in(
            dir.path(),
            &endpoint,
            &["task", "start", "--sandbox", &id, "--", "true"],
        );
        let inside = sandkeep_in(
            dir.path(),
            &endpoint,
            &[
                "exec",
                "--sandbox",
                &id,
                "--",
                "stat -c %s .sandkeep/bin/sandkeep-task; sha256sum .sandkeep/bin/sandkeep-task | cut -c1-64",
            ],
        );
        let size = std::fs::metadata(&expected).unwrap().len();
        assert_eq!(
            inside.split_whitespace().collect::<Vec<_>>(),
            [size.to_string(), sha256_of(expected.to_str().unwrap())],
            "the helper inside the sandbox is {} (this build: {this_build})",
            expected.display()
        );
        sandkeep_in(dir.path(), &endpoint, &["sandbox", "kill", &id]);
    }
}

/// A write whose final rename fails (the target is a directory) leaves
/// no temporary upload beside the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_rename_fails_leaves_no_temporary_file() {
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    sh(&p, &id, "mkdir -p /tmp/w/d && touch /tmp/w/d/inside").await;
    let e = p
        .write_file(&id, "/tmp/w/d", b"content")
        .await
        .expect_err("a file cannot replace a directory");
    assert!(
        matches!(e, ProviderError::FileError { .. }),
        "a file error: {e}"
    );
    assert_eq!(sh(&p, &id, "ls -A /tmp/w").await, "d\n", "nothing left");
    assert_eq!(p.write_file(&id, "/tmp/w/f", b"ok").await.unwrap(), 2);
    assert_eq!(sh(&p, &id, "ls -A /tmp/w").await, "d\nf\n");
    assert!(p.kill(&id).await.unwrap());
}

/// A spawned process over envd: its stdin and stdout are live pipes, its
/// pid is its own in the sandbox (a kill reaches its whole group), and
/// dropping its stdout ends it, as a closed pipe would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_process_has_live_pipes_and_ends_with_its_stdout() {
    use sandkeep::provider::{ExitStatus, Program, SpawnRequest};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let spawn = |command: &str| {
        p.spawn(
            &id,
            SpawnRequest {
                program: Program::Shell(command.into()),
                cwd: Some("/tmp".into()),
                stdin: true,
            },
        )
    };
    let running = |marker: &'static str| {
        let p = &p;
        let id = &id;
        async move {
            sh(
                p,
                id,
                &format!("ps -eo args | grep -c '^sleep {marker}' || true"),
            )
            .await
            .trim()
            .to_owned()
        }
    };

    // Lines in, lines out, in the asked directory.
    let spawned = spawn("pwd; while read -r l; do echo \"got $l\"; done")
        .await
        .unwrap();
    let mut stdin = spawned.stdin.expect("a stdin pipe");
    let mut lines = BufReader::new(spawned.stdout).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("/tmp"));
    for word in ["one", "two"] {
        stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .unwrap();
        // Each line is answered while stdin stays open: the input is
        // passed on as it is written, not when it ends.
        let answer = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no answer to {word:?} within 10 s"));
        assert_eq!(answer.unwrap(), Some(format!("got {word}")));
    }
    drop(stdin);
    assert_eq!(lines.next_line().await.unwrap(), None, "stdin closed: done");
    assert_eq!(spawned.process.wait().await.unwrap(), ExitStatus::Code(0));

    // The group kill reaches a child of the process too.
    let spawned = spawn("sleep 301 & exec sleep 302").await.unwrap();
    until(Duration::from_secs(10), "both sleeps to run", || async {
        running("30[12]").await == "2"
    })
    .await;
    spawned.process.kill_group().unwrap();
    assert_eq!(spawned.process.wait().await.unwrap(), ExitStatus::Signal(9));
    until(
        Duration::from_secs(10),
        "both sleeps to be gone",
        || async { running("30[12]").await == "0" },
    )
    .await;

    // Its stdout dropped, a process is ended at its next output.
    let spawned = spawn("while :; do echo tick; sleep 0.2; done & exec sleep 303")
        .await
        .unwrap();
    let mut lines = BufReader::new(spawned.stdout).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("tick"));
    drop(lines);
    tokio::time::timeout(Duration::from_secs(10), spawned.process.wait())
        .await
        .expect("ended within 10 s of its stdout being dropped")
        .unwrap();
    assert_eq!(running("303").await, "0");
    assert!(p.kill(&id).await.unwrap());
}

/// A reverse proxy to `upstream` that answers StreamInput as connect-go
/// answers a method it does not serve (a bare 404), counting those
/// refusals; every other request goes through.
async fn refusing_stream_input(upstream: String) -> (String, Arc<AtomicUsize>) {
    use axum::http::header;
    use axum::response::IntoResponse;

    let refused = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&refused);
    let client = reqwest::Client::new();
    let hop = [
        header::HOST,
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
    ];
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (client, upstream, counted) = (client.clone(), upstream.clone(), Arc::clone(&counted));
        let hop = hop.clone();
        async move {
            if request.uri().path() == "/process.Process/StreamInput" {
                // Once input came on it (so that what went on the refused
                // stream must be sent again), never forwarded.
                let mut body = request.into_body();
                let mut seen = Vec::new();
                while !seen.windows(6).any(|w| w == b"\"data\"") {
                    use axum::body::HttpBody;
                    let frame =
                        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx));
                    match frame.await {
                        Some(Ok(frame)) => {
                            seen.extend_from_slice(frame.data_ref().map_or(&[][..], |d| &d[..]))
                        }
                        _ => break,
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                return (axum::http::StatusCode::NOT_FOUND, "404 page not found\n").into_response();
            }
            let (parts, body) = request.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut forward = client
                .request(parts.method, format!("{upstream}{path}"))
                .body(reqwest::Body::wrap_stream(body.into_data_stream()));
            for (name, value) in parts.headers.iter().filter(|(n, _)| !hop.contains(n)) {
                forward = forward.header(name, value);
            }
            let answer = forward.send().await.expect("the endpoint answers");
            let mut response = axum::http::Response::builder().status(answer.status());
            for (name, value) in answer.headers().iter().filter(|(n, _)| !hop.contains(n)) {
                response = response.header(name, value);
            }
            response
                .body(axum::body::Body::from_stream(answer.bytes_stream()))
                .expect("a response")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), refused)
}

/// Where envd refuses StreamInput, a spawned process's input goes by
/// SendInput, none of it lost: what went on the refused stream is sent
/// again, and the rest follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_input_goes_by_send_input_where_stream_input_is_refused() {
    use sandkeep::provider::ExitStatus;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let mut endpoint = Endpoint::start();
    if endpoint.shared() {
        return eprintln!("skipped: a real E2B account's envd is not behind this proxy");
    }
    let (proxy, refused) = refusing_stream_input(endpoint.api_url.clone()).await;
    endpoint.sandbox_url = Some(proxy);
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let spawned = spawn_reading(&p, &id, "while read -r l; do echo \"got $l\"; done").await;
    let mut stdin = spawned.stdin.expect("a stdin pipe");
    let mut lines = BufReader::new(spawned.stdout).lines();
    stdin.write_all(b"one\ntwo\n").await.unwrap();
    for word in ["one", "two", "three"] {
        if word == "three" {
            stdin.write_all(b"three\n").await.unwrap();
        }
        let answer = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no answer to {word:?} within 10 s"));
        assert_eq!(answer.unwrap(), Some(format!("got {word}")));
    }
    assert_eq!(
        refused.load(Ordering::SeqCst),
        1,
        "StreamInput was tried once"
    );
    drop(stdin);
    assert_eq!(lines.next_line().await.unwrap(), None, "stdin closed: done");
    assert_eq!(spawned.process.wait().await.unwrap(), ExitStatus::Code(0));
    assert!(p.kill(&id).await.unwrap());
}

/// `script` spawned by the shell with a stdin pipe.
async fn spawn_reading(
    p: &E2bProvider,
    id: &sandkeep::provider::SandboxId,
    script: &str,
) -> sandkeep::provider::Spawned {
    use sandkeep::provider::{Program, SpawnRequest};
    let request = SpawnRequest {
        program: Program::Shell(script.into()),
        cwd: None,
        stdin: true,
    };
    p.spawn(id, request).await.expect("spawn")
}

/// A spawned process's input stream cut under it (the connection of its
/// StreamInput breaks) ends its input: the process sees the end of its
/// stdin, so a reader or watcher exits and is replaced instead of waiting
/// for input that can no longer come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_input_stream_closes_the_processs_stdin() {
    use sandkeep::provider::ExitStatus;
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut endpoint = Endpoint::start();
    if endpoint.shared() {
        return eprintln!("skipped: a real E2B account's envd is not behind this relay");
    }
    let upstream = endpoint.api_url.trim_start_matches("http://").to_owned();
    endpoint.sandbox_url = Some(breaking_relay(upstream, b"/process.Process/StreamInput").await);
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let spawned = spawn_reading(&p, &id, "while read -r l; do :; done; echo eof").await;
    let _stdin = spawned.stdin.expect("a stdin pipe");
    let mut lines = BufReader::new(spawned.stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the process saw the end of its stdin within 10 s");
    assert_eq!(line.unwrap().as_deref(), Some("eof"));
    assert_eq!(spawned.process.wait().await.unwrap(), ExitStatus::Code(0));
    assert!(p.kill(&id).await.unwrap());
}

/// Two providers (as two server processes would be) race a retain against
/// a session end on the same sandbox, many times: exactly one wins, and a
/// sandbox whose retain succeeded is never destroyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_and_session_end_never_both_win() {
    let endpoint = Endpoint::start();
    let starter = Arc::new(provider(&endpoint));
    let ender = Arc::new(provider(&endpoint));
    let (mut kept, mut destroyed) = (0, 0);
    for _ in 0..6 {
        let id = ender.create(spec()).await.expect("create").sandbox_id;
        let (retain, end) = tokio::join!(
            {
                let (p, id) = (Arc::clone(&starter), id.clone());
                async move { p.retain(&id).await }
            },
            {
                let (p, id) = (Arc::clone(&ender), id.clone());
                async move { p.kill_unless_retained(&id).await }
            }
        );
        match (retain, end.expect("session end")) {
            (Ok(()), Release::Retained) => {
                kept += 1;
                let info = starter.info(&id).await.expect("a retained sandbox lives");
                assert!(info.retained, "{info:?}");
                assert!(starter.kill(&id).await.unwrap());
            }
            // The retain either read "released" (no such sandbox) or was
            // cut short by the destruction: the start fails either way.
            (Err(_), Release::Destroyed) => {
                destroyed += 1;
                assert!(matches!(
                    starter.info(&id).await,
                    Err(ProviderError::NoSuchSandbox(_))
                ));
            }
            (retain, end) => panic!("both or neither won: retain {retain:?}, session end {end:?}"),
        }
    }
    eprintln!("kept {kept}, destroyed {destroyed}");
    // Once decided, the decision holds for every later caller.
    let id = ender.create(spec()).await.unwrap().sandbox_id;
    starter.retain(&id).await.unwrap();
    assert_eq!(
        ender.kill_unless_retained(&id).await.unwrap(),
        Release::Retained
    );
    starter.retain(&id).await.unwrap();
    assert!(ender.kill(&id).await.unwrap());
    assert_eq!(
        ender.kill_unless_retained(&id).await.unwrap(),
        Release::Gone
    );
}

/// The same race through two `sandkeep serve` processes: A creates the
/// sandbox (its destruction set) and ends its session while B starts a
/// task in it. A confirmed start always finds its sandbox alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_from_another_server_and_a_session_end_agree() {
    let home = Home::with_e2b();
    let b = StdioServer::start(&home).await;
    for _ in 0..3 {
        let a = StdioServer::start(&home).await;
        let id = sid(&ok(&a.client, "create_sandbox", json!({})).await);
        let start = call(
            &b.client,
            "start_task",
            json!({"sandbox_id": id, "command": "sleep 60"}),
        );
        let (started, _) = tokio::join!(start, a.close());
        let listed = ok(&b.client, "list_sandboxes", json!({})).await;
        let alive = listed["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sandbox_id"] == id.as_str());
        if started.is_error == Some(true) {
            assert!(
                !alive,
                "start refused but the sandbox was kept: {}",
                text(&started)
            );
        } else {
            let v = started.structured_content.unwrap();
            assert!(alive, "a started task's sandbox was destroyed: {v}");
            assert_eq!(v["state"], "running", "{v}");
            ok(&b.client, "kill_sandbox", json!({"sandbox_id": id})).await;
        }
    }
    b.close().await;
}

/// SPEC.md §9 on the e2b provider: the server is SIGKILLed mid-task and a
/// new server process reads the whole result and cancels another task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptance_path_with_the_server_sigkilled() {
    let home = Home::with_e2b();
    let mut a = StdioServer::start(&home).await;
    let id = sid(&ok(&a.client, "create_sandbox", json!({"timeout": 600})).await);
    let started = ok(
        &a.client,
        "start_task",
        json!({"command": "printf BEFORE; sleep 4; printf AFTER", "timeout": 120}),
    )
    .await;
    assert_eq!(started["state"], "running", "{started}");
    let task = tid(&started);
    send_signal(a.pid(), rustix::process::Signal::KILL);
    wait_exit(&mut a.child, Duration::from_secs(10)).await;

    let b = StdioServer::start(&home).await;
    let done = wait_terminal(&b.client, &id, &task, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(
        read_all_stdout(&b.client, &id, &task, 3).await,
        "BEFOREAFTER"
    );

    let second = tid(&ok(
        &b.client,
        "start_task",
        json!({"sandbox_id": id, "command": "sleep 100"}),
    )
    .await);
    let t0 = Instant::now();
    let cancelled = ok(
        &b.client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": second}),
    )
    .await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let killed = ok(&b.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert_eq!(killed["killed"], true);
    b.close().await;
}

/// envd keeps an exited process's end event 30 s, and so does the
/// endpoint unless `SANDKEEP_E2B_END_RETENTION_MS` shortens it: here to
/// [`END_RETENTION`], and this test waits the window out (30 s on a real
/// account, which has no such knob). The task's result comes from the
/// helper's files, so it is still there after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_read_after_envds_end_event_window_keeps_its_exit_code() {
    /// The end retention the endpoint is given here (envd's is 30 s).
    const END_RETENTION: Duration = Duration::from_secs(1);
    let home = Home::with_e2b_endpoint_env(&[(
        "SANDKEEP_E2B_END_RETENTION_MS",
        &END_RETENTION.as_millis().to_string(),
    )]);
    let window = if home.e2b.as_ref().is_some_and(Endpoint::shared) {
        Duration::from_secs(30)
    } else {
        END_RETENTION
    };
    let s = StdioServer::start(&home).await;
    let id = sid(&ok(&s.client, "create_sandbox", json!({"timeout": 600})).await);
    let task = tid(&ok(
        &s.client,
        "start_task",
        json!({"command": "echo out; sleep 1; exit 7"}),
    )
    .await);
    let done = wait_terminal(&s.client, &id, &task, Duration::from_secs(20)).await;
    assert_eq!(done["exit_code"], 7, "{done}");
    // The passing of time is what is tested here.
    tokio::time::sleep(window + Duration::from_secs(2)).await;
    let later = ok(
        &s.client,
        "get_task",
        json!({"sandbox_id": id, "task_id": task}),
    )
    .await;
    assert_eq!(later["state"], "failed", "{later}");
    assert_eq!(later["exit_code"], 7, "{later}");
    assert_eq!(later["stdout"], "out\n");
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_does_not_keep_a_task_running() {
    let home = Home::with_e2b();
    let s = StdioServer::start(&home).await;
    let id = sid(&ok(&s.client, "create_sandbox", json!({})).await);
    let task = tid(&ok(
        &s.client,
        "start_task",
        json!({"command": "setsid sh -c 'sleep 60' & echo main done"}),
    )
    .await);
    let done = wait_terminal(&s.client, &id, &task, Duration::from_secs(10)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout"], "main done\n");
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_command_kills_the_whole_group_at_its_timeout() {
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let t0 = Instant::now();
    let out = p
        .exec(
            &id,
            ExecRequest {
                command: "(sleep 300; echo child) & echo parent; sleep 300".into(),
                cwd: None,
                timeout: Duration::from_secs(2),
                stdin: None,
                output_limit: 1 << 16,
            },
        )
        .await
        .expect("exec");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "parent\n");
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    let left = sh(&p, &id, "ps -eo args | grep -c '^sleep 300' || true").await;
    assert_eq!(left.trim(), "0", "the group's children are gone");
    let fed = p
        .exec(
            &id,
            ExecRequest {
                command: "cat; exit 3".into(),
                cwd: Some("/tmp".into()),
                timeout: Duration::from_secs(10),
                stdin: Some(b"in".to_vec()),
                output_limit: 1 << 16,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (fed.exit_code, fed.stdout.as_slice()),
        (Some(3), &b"in"[..])
    );
    assert!(p.kill(&id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_allow_hosts_are_refused_and_nothing_is_created() {
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let mut s = spec();
    s.limits.memory_mib = Some(512);
    let e = p.create(s).await.unwrap_err().to_string();
    assert!(
        e.contains("memory_mib") && e.contains("Nothing was created"),
        "{e}"
    );
    let mut s = spec();
    s.allow_hosts = vec!["example.com".into()];
    let e = p.create(s).await.unwrap_err().to_string();
    assert!(e.contains("allow_hosts"), "{e}");
    assert!(p.list().await.unwrap().is_empty());
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The e2b provider's log lines of one kind (the server logs every HTTP
/// request it sends at debug level).
fn count(log: &std::sync::Mutex<String>, what: &str) -> usize {
    log.lock().unwrap().matches(what).count()
}

/// Round trips of start_task, get_task and cancel_task through a stdio
/// server on the e2b provider (against `serve --e2b` on loopback) and on
/// the local provider, in one run; HTTP requests per tool call; helper
/// uploads per sandbox, the helper's size and its upload time. Run (the
/// small helper built first, so it is the one uploaded):
/// `cargo build --release -p sandkeep-task && cargo test --release -p sandkeep --test e2b -- --ignored --nocapture bench`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it explicitly"]
async fn bench_round_trips_e2b_vs_local() {
    const N: usize = 30;
    let local_home = Home::new();
    let e2b_home = Home::with_e2b();
    let mut results = Vec::new();
    for (name, home) in [("local", &local_home), ("e2b", &e2b_home)] {
        let s = StdioServer::start(home).await;
        let id = sid(&ok(&s.client, "create_sandbox", json!({"timeout": 900})).await);
        let (mut starts, mut gets, mut cancels) = (Vec::new(), Vec::new(), Vec::new());
        let (mut start_reqs, mut get_reqs, mut cancel_reqs) = (Vec::new(), Vec::new(), Vec::new());
        // Warm-up: the helper is placed (uploaded on e2b) and verified.
        let warm = tid(&ok(
            &s.client,
            "start_task",
            json!({"sandbox_id": id, "command": "true"}),
        )
        .await);
        wait_terminal(&s.client, &id, &warm, Duration::from_secs(30)).await;
        for _ in 0..N {
            let before = count(&s.stderr, "e2b request:");
            let t = Instant::now();
            let task = tid(&ok(
                &s.client,
                "start_task",
                json!({"sandbox_id": id, "command": "sleep 100"}),
            )
            .await);
            starts.push(t.elapsed());
            let mid = count(&s.stderr, "e2b request:");
            start_reqs.push(mid - before);
            let t = Instant::now();
            ok(
                &s.client,
                "get_task",
                json!({"sandbox_id": id, "task_id": task}),
            )
            .await;
            gets.push(t.elapsed());
            let after_get = count(&s.stderr, "e2b request:");
            get_reqs.push(after_get - mid);
            let t = Instant::now();
            let v = ok(
                &s.client,
                "cancel_task",
                json!({"sandbox_id": id, "task_id": task}),
            )
            .await;
            cancels.push(t.elapsed());
            cancel_reqs.push(count(&s.stderr, "e2b request:") - after_get);
            assert_eq!(v["state"], "cancelled", "{v}");
            ok(
                &s.client,
                "delete_task",
                json!({"sandbox_id": id, "task_id": task}),
            )
            .await;
        }
        let uploads = count(&s.stderr, "uploading the task helper");
        let log = s.stderr.lock().unwrap().clone();
        let number_after = |what: &str| {
            log.split(what)
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let upload = (
            number_after("uploading the task helper ("),
            number_after("uploaded the task helper in "),
        );
        ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
        s.close().await;
        let most = |v: &Vec<usize>| *v.iter().max().unwrap();
        results.push((
            name,
            [median(starts), median(gets), median(cancels)],
            [most(&start_reqs), most(&get_reqs), most(&cancel_reqs)],
            uploads,
            upload,
        ));
    }
    let (_, local, _, _, _) = results[0];
    let (_, e2b, reqs, uploads, upload) = results[1];
    for (i, tool) in ["start_task", "get_task", "cancel_task"].iter().enumerate() {
        println!(
            "{tool}: local {:.1} ms, e2b {:.1} ms, ratio {:.2}x; e2b HTTP requests per call: {}",
            local[i].as_secs_f64() * 1e3,
            e2b[i].as_secs_f64() * 1e3,
            e2b[i].as_secs_f64() / local[i].as_secs_f64(),
            reqs[i]
        );
        // The machine-readable line of the benches, for scripts/bench.
        let (l, e) = (local[i].as_secs_f64() * 1e3, e2b[i].as_secs_f64() * 1e3);
        // A read goes through the sandbox's resident reader: one
        // SendInput on the e2b provider, a pipe write locally.
        let target = if *tool == "get_task" {
            "<=1.5x"
        } else {
            "<=3x"
        };
        println!(
            "BENCH name=e2b_provider.{tool} value={e:.3} unit=ms baseline={l:.3} ratio={:.3} target={target}",
            e / l
        );
    }
    println!(
        "helper uploads in the e2b sandbox ({} tasks): {uploads}",
        N + 1
    );
    println!(
        "BENCH name=e2b_provider.helper_uploads value={uploads} unit=uploads baseline=- ratio=- target=<=1"
    );
    if let (Some(bytes), Some(micros)) = upload {
        println!(
            "the helper uploaded: {bytes} bytes ({:.1} MB) in {:.1} ms",
            bytes as f64 / 1e6,
            micros as f64 / 1e3
        );
    }
}

/// Issue 26's upload figure: a 100 MiB cow share (100 files of 1 MiB)
/// copied into a sandbox of a local `serve --e2b` at create, as MiB/s of
/// the create's extra time over a create without the share in the same
/// run (medians of 5). Target: ≥ 100 MiB/s.
/// `cargo test --release -p sandkeep --test e2b -- --ignored --nocapture bench_share_upload`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it explicitly"]
async fn bench_share_upload() {
    const MIB: usize = 100;
    const ROUNDS: usize = 5;
    let home = Home::with_e2b();
    let tree = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for f in 0..MIB {
        // Incompressible bytes (xorshift), so no layer gains by compressing.
        let data: Vec<u8> = (0..(1 << 20) / 8)
            .flat_map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed.to_le_bytes()
            })
            .collect();
        std::fs::write(tree.path().join(format!("f{f:03}")), data).unwrap();
    }
    let cow = format!("{}:cow", tree.path().display());
    let s = StdioServer::start_with(&home, &["--share", &cow]).await;
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (i, shares) in [json!([]), json!(null)].into_iter().enumerate() {
            let args = if shares.is_null() {
                json!({})
            } else {
                json!({ "shares": shares })
            };
            let t = Instant::now();
            let id = sid(&ok(&s.client, "create_sandbox", args).await);
            times[i].push(t.elapsed());
            ok(&s.client, "kill_sandbox", json!({ "sandbox_id": id })).await;
        }
    }
    s.close().await;
    let [without, with] = times.map(median);
    let extra = with.saturating_sub(without).as_secs_f64();
    let rate = MIB as f64 / extra;
    println!(
        "create with a {MIB} MiB cow share: {:.1} ms, without: {:.1} ms: {rate:.0} MiB/s",
        with.as_secs_f64() * 1e3,
        without.as_secs_f64() * 1e3
    );
    println!(
        "BENCH name=e2b_provider.share_upload value={rate:.0} unit=MiB/s baseline={:.1}ms ratio={:.2} target=>=100MiB/s",
        without.as_secs_f64() * 1e3,
        rate / 100.0
    );
}

/// A TCP relay to `upstream` that, once, cuts a connection whose request
/// carries `trigger` after forwarding it (the call reached envd; its answer
/// never comes back).
async fn breaking_relay(upstream: String, trigger: &'static [u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            let armed = Arc::clone(&armed);
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let cut = std::sync::atomic::AtomicBool::new(false);
                let up = async {
                    let mut seen = Vec::new();
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = cr.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        // The last bytes seen and the new ones: a trigger
                        // split across reads is still found.
                        let keep = seen.len().saturating_sub(trigger.len());
                        seen.drain(..keep);
                        seen.extend_from_slice(&buf[..n]);
                        let hit = seen.windows(trigger.len()).any(|w| w == trigger)
                            && armed.swap(false, std::sync::atomic::Ordering::SeqCst);
                        // Cut before forwarding: no answer goes back.
                        if hit {
                            cut.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        if hit {
                            // The server gets time to act on it, then both
                            // ways close.
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            return;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = sr.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        if cut.load(std::sync::atomic::Ordering::SeqCst) {
                            continue;
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = up => {}
                    () = down => {}
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_broken_after_it_reached_envd_answers_unknown_with_the_handle() {
    let mut home = Home::with_e2b();
    let endpoint = home.e2b.as_mut().unwrap();
    let upstream = endpoint.api_url.trim_start_matches("http://").to_owned();
    endpoint.sandbox_url = Some(breaking_relay(upstream, b"sandkeep-task' start").await);
    let s = StdioServer::start(&home).await;
    let id = sid(&ok(&s.client, "create_sandbox", json!({})).await);
    let r = ok(
        &s.client,
        "start_task",
        json!({"command": "echo ran; sleep 2"}),
    )
    .await;
    assert_eq!(r["state"], "unknown", "{r}");
    assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    let task = tid(&r);
    // The handle works: the start did reach the sandbox, once.
    let done = wait_terminal(&s.client, &id, &task, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout"], "ran\n");
    let listed = ok(&s.client, "list_tasks", json!({"sandbox_id": id})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "{listed}");
    ok(&s.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exposed_port_is_e2bs_host_name_and_the_endpoint_routes_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let endpoint = Endpoint::start();
    if endpoint.shared() {
        return eprintln!("skipped: a real E2B account's host names need its edge");
    }
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    sh(
        &p,
        &id,
        "mkdir -p /tmp/www && printf exposed > /tmp/www/index.html && \
         (setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www \
          </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    let port = sandkeep::provider::Port::new(8000).unwrap();
    let forward = p.expose_port(&id, port).await.expect("expose");
    let host = format!("8000-{id}.e2b.app");
    assert_eq!(forward.url, format!("https://{host}"));
    assert_eq!(p.expose_port(&id, port).await.unwrap(), forward);

    // That name, reaching the endpoint, reaches the server.
    let addr = endpoint.api_url.trim_start_matches("http://").to_owned();
    let get = || async {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request =
            format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let start = Instant::now();
    loop {
        let answer = get().await;
        if answer.starts_with("HTTP/1.1 200") {
            assert!(answer.ends_with("exposed"), "{answer}");
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server never answered: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // HTTP/2 names the host in `:authority`, with no Host header.
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .resolve(&host, sock)
        .build()
        .unwrap();
    let answer = h2
        .get(format!("http://{host}:{}/index.html", sock.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "exposed");
    p.kill(&id).await.unwrap();
    let gone = SandboxId::parse(id.as_str()).unwrap();
    assert!(matches!(
        p.expose_port(&gone, port).await,
        Err(ProviderError::NoSuchSandbox(_))
    ));
}

/// Task reads on the e2b provider go to one long-lived `sandkeep-task
/// serve` per sandbox (one envd `Start` stream), not a `Start` per read;
/// killed inside the sandbox, it is replaced and the read still answers
/// correctly within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_reads_go_through_one_long_lived_reader_over_envd() {
    use sandkeep::service::{GetTaskArgs, Service, Session, StartTaskArgs};

    let endpoint = Endpoint::start();
    let p = Arc::new(provider(&endpoint));
    let service = Service::new(p.clone(), Vec::new());
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let task = service
        .start_task(
            &Session::stateless(),
            StartTaskArgs {
                command: "printf hi; exec sleep 305".into(),
                sandbox_id: Some(id.to_string()),
                cwd: None,
                timeout: None,
            },
        )
        .await
        .expect("start_task")
        .task_id;
    let get = || {
        service.get_task(GetTaskArgs {
            sandbox_id: id.to_string(),
            task_id: task.clone(),
            stdout_offset: None,
            stderr_offset: None,
            limit: None,
        })
    };
    until(Duration::from_secs(10), "the task's output", || async {
        get().await.expect("get_task").stdout == "hi"
    })
    .await;
    let readers = || {
        sh(
            &p,
            &id,
            "ps -eo pid=,args= | grep 'sandkeep-tas[k] serve$' || true",
        )
    };
    let first = readers().await;
    assert_eq!(first.lines().count(), 1, "one reader: {first}");
    let requests = p.stats().envd_requests();
    for _ in 0..30 {
        let r = get().await.expect("get_task");
        assert_eq!(
            (r.state.to_string(), r.stdout.as_str()),
            ("running".into(), "hi")
        );
    }
    // The reads go on the reader's one StreamInput, already open: no
    // envd request of their own (a SendInput each would be 30).
    assert_eq!(
        p.stats().envd_requests() - requests,
        0,
        "envd requests for 30 reads"
    );
    assert_eq!(
        readers().await,
        first,
        "the same reader answered every read"
    );

    let pid = first.split_whitespace().next().unwrap().to_owned();
    sh(&p, &id, &format!("kill -9 {pid}")).await;
    let started = Instant::now();
    let r = get().await.expect("get_task after the reader was killed");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (r.state.to_string(), r.stdout.as_str()),
        ("running".into(), "hi")
    );
    let second = readers().await;
    assert!(
        second.lines().count() == 1 && second != first,
        "a new reader took over: {first} then {second}"
    );
    assert!(p.kill(&id).await.unwrap());
}

/// pause and resume mapped onto E2B's pause and connect (SPEC §17): the
/// state reads back, the wrong transitions are refused as on the local
/// provider, a paused sandbox is listed, and a resumed one runs commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_map_onto_e2bs_pause_and_connect() {
    if !require(
        rustix::process::geteuid().is_root(),
        "the endpoint's local sandboxes freeze as root",
    ) {
        return;
    }
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    let paused = p.pause(&id).await.expect("pause");
    assert_eq!(paused.state, sandkeep::provider::SandboxState::Paused);
    match p.pause(&id).await {
        Err(ProviderError::AlreadyInState { .. }) => {}
        other => panic!("a second pause: {other:?}"),
    }
    let listed = p.list().await.expect("list");
    let entry = listed.iter().find(|s| s.sandbox_id == id).expect("listed");
    assert_eq!(entry.state, sandkeep::provider::SandboxState::Paused);
    let resumed = p.resume(&id, Some(120)).await.expect("resume");
    assert_eq!(resumed.state, sandkeep::provider::SandboxState::Running);
    match p.resume(&id, None).await {
        Err(ProviderError::AlreadyInState { .. }) => {}
        other => panic!("a resume of a running sandbox: {other:?}"),
    }
    assert_eq!(sh(&p, &id, "echo up").await, "up\n");
    p.kill(&id).await.expect("kill");
}

/// Snapshots mapped onto E2B's snapshot API (SPEC §17): a snapshot of a
/// sandbox is listed with it, a sandbox created from it has its files,
/// and once deleted it is gone (a second delete says so); a killed
/// sandbox has no snapshot. fork_sandbox is these calls (the service's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_map_onto_e2bs_snapshot_api() {
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p.create(spec()).await.expect("create").sandbox_id;
    sh(&p, &id, "echo before > ~/state.txt").await;
    let name = format!("snap-{}", std::process::id());
    let snap = p.snapshot(&id, Some(name.clone())).await.expect("snapshot");
    assert_eq!(
        (snap.snapshot_id.as_str(), &snap.sandbox_id),
        (name.as_str(), &id)
    );
    let listed = p.list_snapshots().await.expect("list snapshots");
    assert!(
        listed
            .iter()
            .any(|s| s.snapshot_id == name && s.sandbox_id == id),
        "{listed:?}"
    );
    let copy = p
        .create(CreateSpec {
            template: name.clone(),
            ..spec()
        })
        .await
        .expect("create from the snapshot")
        .sandbox_id;
    assert_eq!(sh(&p, &copy, "cat ~/state.txt").await, "before\n");
    assert!(p.delete_snapshot(&name).await.expect("delete"));
    assert!(!p.delete_snapshot(&name).await.expect("a second delete"));
    let listed = p.list_snapshots().await.expect("list snapshots");
    assert!(listed.iter().all(|s| s.snapshot_id != name), "{listed:?}");
    p.kill(&copy).await.expect("kill the copy");

    // fork_sandbox, through the CLI on the e2b provider: the source's
    // resources are its template's, not limits asked for.
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin())
        .args(["sandbox", "fork", id.as_str(), "--json"])
        .envs(endpoint.vars())
        .env("SANDKEEP_HOME", home.path())
        .output()
        .expect("run sandkeep");
    assert!(
        out.status.success(),
        "sandbox fork: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forked: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fork's JSON");
    let fork = SandboxId::parse(forked["sandbox_id"].as_str().expect("an id")).unwrap();
    assert_eq!(sh(&p, &fork, "cat ~/state.txt").await, "before\n");
    p.kill(&fork).await.expect("kill the fork");
    p.kill(&id).await.expect("kill");
    match p.snapshot(&id, None).await {
        Err(ProviderError::NoSuchSandbox(_)) => {}
        other => panic!("a snapshot of a killed sandbox: {other:?}"),
    }
}

/// A new endpoint and an `on_timeout: pause` sandbox of it, which the e2b
/// provider creates with E2B's autoResume; `None` (skipped, loudly, or
/// failed under CI) where the endpoint's local sandboxes cannot freeze.
async fn auto_resume_sandbox() -> Option<(Endpoint, E2bProvider, SandboxId)> {
    if !require(
        rustix::process::geteuid().is_root(),
        "the endpoint's local sandboxes freeze as root",
    ) {
        return None;
    }
    let endpoint = Endpoint::start();
    let p = provider(&endpoint);
    let id = p
        .create(CreateSpec {
            on_timeout: sandkeep::provider::OnTimeout::Pause,
            ..spec()
        })
        .await
        .expect("create")
        .sandbox_id;
    Some((endpoint, p, id))
}

/// An `on_timeout: pause` sandbox is created with E2B's `autoResume`, so
/// a connection to an exposed port of it while paused resumes it first
/// (SPEC §17), as a local forward does: here through the endpoint, as
/// E2B's edge would route it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_timeout_pause_sandbox_is_resumed_by_a_request_for_its_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let Some((endpoint, p, id)) = auto_resume_sandbox().await else {
        return;
    };
    if endpoint.shared() {
        p.kill(&id).await.unwrap();
        return eprintln!("skipped: a real E2B account's host names need its edge");
    }
    sh(
        &p,
        &id,
        "mkdir -p /tmp/www && printf woken > /tmp/www/index.html && \
         (setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www \
          </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    let host = format!("8000-{id}.e2b.app");
    let addr = endpoint.api_url.trim_start_matches("http://").to_owned();
    let get = || async {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request =
            format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let start = Instant::now();
    while !get().await.starts_with("HTTP/1.1 200") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.pause(&id).await.expect("pause");
    let answer = tokio::time::timeout(Duration::from_secs(30), get())
        .await
        .expect("an answer within 30 s");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("woken"),
        "{answer}"
    );
    assert_eq!(
        p.info(&id).await.expect("info").state,
        sandkeep::provider::SandboxState::Running
    );
    p.kill(&id).await.unwrap();
}

/// E2B lists sandboxes in pages (the provider asks for 100 at a time) and
/// names the next page in `x-next-token`: with 101 sandboxes of this
/// owner, list_sandboxes must follow it, or the 101st is never listed
/// (nor found by `sandbox list`, nor ended by its reaper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_list_follows_e2bs_next_page_token() {
    const SANDBOXES: usize = 101;
    // Each commits E2B's default 2 GiB (the e2b provider sets no limits):
    // the endpoint's host ceilings must let 101 idle ones be.
    let endpoint = Endpoint::start_with(&[
        ("SANDKEEP_MAX_TOTAL_MEMORY_MIB", "262144"),
        ("SANDKEEP_MAX_SANDBOXES", "128"),
    ]);
    let p = Arc::new(provider(&endpoint));
    let mut created = std::collections::BTreeSet::new();
    // A few at a time: a loaded CI machine makes each create slower, not
    // the test flakier.
    let ids: Vec<usize> = (0..SANDBOXES).collect();
    for chunk in ids.chunks(4) {
        let creates: Vec<_> = chunk
            .iter()
            .map(|_| {
                let p = Arc::clone(&p);
                tokio::spawn(async move { p.create(spec()).await.expect("create").sandbox_id })
            })
            .collect();
        for c in creates {
            created.insert(c.await.unwrap());
        }
    }
    let listed: std::collections::BTreeSet<SandboxId> = p
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|info| info.sandbox_id)
        .collect();
    let missing: Vec<_> = created.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "{} of {SANDBOXES} sandboxes not listed (a page not followed?): {missing:?}",
        missing.len()
    );
    for id in &created {
        p.kill(id).await.expect("kill");
    }
}

/// Pausing, listing or looking at a sandbox must not wake it: an
/// `on_timeout: pause` sandbox is created with E2B's autoResume, so any
/// envd call (such as reading its retention mark) would resume it, and
/// keep it billed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_listing_and_looking_leave_a_paused_sandbox_paused() {
    use sandkeep::provider::SandboxState;

    let Some((_endpoint, p, id)) = auto_resume_sandbox().await else {
        return;
    };
    let paused = p.pause(&id).await.expect("pause");
    assert_eq!(paused.state, SandboxState::Paused);
    let listed = p.list().await.expect("list");
    let state = |infos: &[sandkeep::provider::SandboxInfo]| {
        infos
            .iter()
            .find(|i| i.sandbox_id == id)
            .map(|i| i.state)
            .expect("the sandbox is listed")
    };
    assert_eq!(state(&listed), SandboxState::Paused);
    assert_eq!(
        p.info(&id).await.expect("info").state,
        SandboxState::Paused,
        "the list resumed the sandbox"
    );
    p.kill(&id).await.unwrap();
}

/// A session's end leaves a retained paused sandbox paused, whether the
/// provider that ends it saw the retention itself or (another server
/// process) must read the mark in the sandbox, which resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_leaves_a_retained_paused_sandbox_paused() {
    use sandkeep::provider::SandboxState;

    let Some((endpoint, p, id)) = auto_resume_sandbox().await else {
        return;
    };
    p.retain(&id).await.expect("retain");
    p.pause(&id).await.expect("pause");
    for (who, p) in [
        ("the same provider", &p),
        ("another server's", &provider(&endpoint)),
    ] {
        assert_eq!(
            p.kill_unless_retained(&id).await.expect("session end"),
            Release::Retained,
            "{who}"
        );
        assert_eq!(
            p.info(&id).await.expect("info").state,
            SandboxState::Paused,
            "{who}: the session's end resumed the sandbox"
        );
    }
    p.kill(&id).await.unwrap();
}
