//! `sandkeep serve --e2b`, judged by the official E2B Python SDK (`e2b`
//! from PyPI, pinned in scripts/test): each test starts a real server with
//! its own SANDKEEP_HOME and runs one check of `tests/e2b/sdk.py` through
//! the SDK's public API. Raw HTTP covers what the SDK never sends: bad
//! keys and tokens, unknown routes, malformed Connect envelopes.
//!
//! The interpreter comes from `SANDKEEP_TEST_PYTHON`; without it (or
//! without the `e2b` package in it) the SDK tests are skipped with a
//! printed reason, except under `CI=true`, where they fail. The
//! JavaScript SDK (`e2b` from npm, pinned) runs `tests/e2b/sdk.mjs` the
//! same way, from the `node_modules` named by `SANDKEEP_TEST_E2B_JS`.

mod support;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::mcp::collect;
use support::*;

/// A `sandkeep serve --e2b 127.0.0.1:0` child.
struct E2bServer {
    _child: tokio::process::Child,
    url: String,
    key: String,
    stderr: Arc<Mutex<String>>,
}

impl E2bServer {
    async fn start(home: &Home) -> Self {
        let key = format!("test-key-{}", std::process::id());
        let mut child = home
            .async_command()
            .args(["serve", "--e2b", "127.0.0.1:0", "--api-key", &key])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sandkeep serve --e2b");
        let stderr = collect(child.stderr.take().unwrap());
        let mut url = String::new();
        until(
            Duration::from_secs(10),
            "the E2B endpoint to print its URL",
            || {
                if let Some(u) = stderr.lock().unwrap().lines().find_map(|l| {
                    l.split("E2B-compatible endpoint at ")
                        .nth(1)
                        .map(str::to_owned)
                }) {
                    url = u;
                }
                std::future::ready(!url.is_empty())
            },
        )
        .await;
        Self {
            _child: child,
            url,
            key,
            stderr,
        }
    }
}

fn python() -> Option<std::ffi::OsString> {
    let python = std::env::var_os("SANDKEEP_TEST_PYTHON").filter(|p| !p.is_empty());
    let has_sdk = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", "import e2b"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !has_sdk {
        skip(
            "SANDKEEP_TEST_PYTHON is not a python with the E2B SDK: run scripts/test, or `pip install e2b==2.63.0` into it",
        );
        return None;
    }
    python
}

/// Runs one check of tests/e2b/sdk.py against a fresh server.
async fn sdk_check(name: &str) {
    let Some(python) = python() else { return };
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2b/sdk.py");
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .arg(name)
        .env("E2B_API_URL", &server.url)
        .env("E2B_SANDBOX_URL", &server.url)
        .env("E2B_API_KEY", &server.key)
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .unwrap_or_else(|_| panic!("the SDK check {name} finished within 240 s"))
        .expect("run the Python interpreter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "E2B SDK check {name} failed ({}):\n{stdout}\n{stderr}\nserver:\n{}",
        out.status,
        server.stderr.lock().unwrap()
    );
    eprintln!("{}", stdout.trim());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_create_run_list_kill() {
    sdk_check("create_run_kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_background_stdin_kill() {
    sdk_check("background").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_connect_gets_no_replay_and_the_kept_end() {
    sdk_check("connect_no_replay").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_connect_timeout_kills_the_process() {
    sdk_check("connect_timeout_kills").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_send_signal_reaches_the_leader_only() {
    sdk_check("signal_leader_only").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_end_event_is_kept_30_s() {
    sdk_check("end_retention").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_files() {
    sdk_check("files").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_large_files() {
    sdk_check("large_files").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_set_timeout_and_expiry() {
    sdk_check("set_timeout_and_expiry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_runs_commands_and_files() {
    let modules = std::env::var_os("SANDKEEP_TEST_E2B_JS").filter(|p| !p.is_empty());
    let Some(modules) = modules.filter(|m| std::path::Path::new(m).join("e2b").is_dir()) else {
        return skip(
            "SANDKEEP_TEST_E2B_JS does not name a node_modules with the E2B SDK: run scripts/test",
        );
    };
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2b/sdk.mjs");
    let run = tokio::process::Command::new("node")
        .arg(script)
        .env("E2B_JS_MODULES", &modules)
        .env("E2B_API_URL", &server.url)
        .env("E2B_SANDBOX_URL", &server.url)
        .env("E2B_API_KEY", &server.key)
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the JS SDK checks finished within 240 s")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ok js_kill"),
        "E2B JS SDK checks failed ({}):\n{stdout}\n{}\nserver:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.stderr.lock().unwrap()
    );
    eprintln!("{}", stdout.trim());
}

/// What the SDKs never send, answered as E2B's API and envd answer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_envds_and_the_apis_answers() {
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", server.url);

    let r = http.get(url("/v2/sandboxes")).send().await.unwrap();
    assert_eq!(r.status(), 401, "no API key");
    let r = http
        .get(url("/v2/sandboxes"))
        .header("x-api-key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "wrong API key");
    let r = http
        .delete(url("/sandboxes/nosuchsandbox"))
        .header("x-api-key", &server.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .get(url("/no/such/route"))
        .header("x-api-key", &server.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let created: serde_json::Value = http
        .post(url("/v2/sandboxes"))
        .header("x-api-key", &server.key)
        .json(&serde_json::json!({ "templateID": "base", "timeout": 60 }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["sandboxID"]
        .as_str()
        .expect("a sandbox id")
        .to_owned();
    let token = created["envdAccessToken"].as_str().unwrap().to_owned();
    let rpc = |method: &str, token: Option<&str>| {
        let mut b = http
            .post(url(&format!("/process.Process/{method}")))
            .header("e2b-sandbox-id", &id);
        if let Some(t) = token {
            b = b.header("x-access-token", t);
        }
        b
    };

    let r = rpc("List", None)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no access token");
    let r = http
        .get(url("/health"))
        .header("e2b-sandbox-id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "/health needs no token");

    let r = rpc("List", Some(&token))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_argument", "{body}");

    let r = rpc("List", Some(&token))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 501, "wrong content type");

    let r = rpc("Nope", Some(&token))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // A truncated envelope and an oversized one: a Connect error in the
    // end-stream message, never a hang.
    for body in [
        vec![0u8, 0, 0, 0, 9, b'{'],
        vec![0u8, 0xff, 0xff, 0xff, 0xff],
    ] {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            rpc("Start", Some(&token))
                .header("content-type", "application/connect+json")
                .body(body)
                .send(),
        )
        .await
        .expect("an answer within 10 s")
        .unwrap();
        let bytes = r.bytes().await.unwrap();
        assert_eq!(bytes[0], 2, "an end-stream envelope: {bytes:?}");
        let end: serde_json::Value = serde_json::from_slice(&bytes[5..]).unwrap();
        assert_eq!(end["error"]["code"], "invalid_argument", "{end}");
    }

    let r = http
        .post(url("/process.Process/List"))
        .header("e2b-sandbox-id", "nosuchsandbox")
        .header("x-access-token", &token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        502,
        "an unknown sandbox, as E2B's proxy answers"
    );

    // The sandbox is an ordinary sandkeep sandbox: the CLI sees it.
    let listed = home
        .command(&["sandbox", "list", "--json"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&id),
        "the CLI lists the E2B sandbox"
    );
}

#[test]
fn a_non_loopback_address_needs_a_key() {
    let home = Home::new();
    let out = home
        .command(&["serve", "--e2b", "0.0.0.0:0"])
        .env_remove("SANDKEEP_E2B_API_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--api-key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
