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

use crate::support;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::mcp::collect;
use support::*;

/// A `sandkeep serve --e2b 127.0.0.1:0` child.
struct E2bServer {
    child: tokio::process::Child,
    url: String,
    key: String,
    stderr: Arc<Mutex<String>>,
}

impl E2bServer {
    async fn start(home: &Home) -> Self {
        let key = format!("test-key-{}", std::process::id());
        Self::launch(home, &["--api-key", &key], key.clone()).await
    }

    /// `serve --e2b 127.0.0.1:0 ARGS…`; `key` is what clients will send.
    async fn launch(home: &Home, args: &[&str], key: String) -> Self {
        let mut child = home
            .async_command()
            .args(["serve", "--e2b", "127.0.0.1:0"])
            .args(args)
            .env_remove("SANDKEEP_E2B_API_KEY")
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
            child,
            url,
            key,
            stderr,
        }
    }

    /// The server's pid.
    fn pid(&self) -> u32 {
        self.child.id().expect("the server runs")
    }

    /// `host:port` of the listener.
    fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// A sandbox made over REST (`POST /v2/sandboxes`).
    async fn sandbox(&self, http: &reqwest::Client) -> Sandbox {
        let created: serde_json::Value = http
            .post(format!("{}/v2/sandboxes", self.url))
            .header("x-api-key", &self.key)
            .json(&serde_json::json!({ "templateID": "base", "timeout": 60 }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let field = |name: &str| {
            created[name]
                .as_str()
                .unwrap_or_else(|| panic!("{name} in the create answer: {created}"))
                .to_owned()
        };
        Sandbox {
            id: field("sandboxID"),
            token: field("envdAccessToken"),
        }
    }
}

/// A sandbox of the endpoint: its id and envd access token.
struct Sandbox {
    id: String,
    token: String,
}

impl Sandbox {
    /// `request` routed to this sandbox's envd with its token.
    fn envd(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        request
            .header("e2b-sandbox-id", &self.id)
            .header("x-access-token", &self.token)
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
    sdk_check_on(name, &[]).await;
}

/// Runs one check of tests/e2b/sdk.py against a fresh server started
/// with `args` too.
async fn sdk_check_on(name: &str, args: &[&str]) {
    sdk_check_with(&Home::new(), name, args, &[]).await;
}

/// [`sdk_check_on`] on `home`, with `envs` for the script; its stdout
/// (`None` when the SDK is missing and the check was skipped).
async fn sdk_check_with(
    home: &Home,
    name: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Option<String> {
    let python = python()?;
    let key = format!("test-key-{}", std::process::id());
    let server = E2bServer::launch(home, &[&["--api-key", &key], args].concat(), key.clone()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2b/sdk.py");
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .arg(name)
        .envs(envs.iter().copied())
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
    Some(stdout.into_owned())
}

/// `serve --e2b --share`: a sandbox made through the E2B API mounts the
/// share, and the MCP tools (here the CLI on the same state directory) see
/// and apply what it changed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sandboxes_mount_the_servers_shares() {
    let project = tempfile::Builder::new()
        .prefix("sandkeep-project")
        .tempdir()
        .unwrap();
    std::fs::write(project.path().join("README"), "hello\n").unwrap();
    let p = std::fs::canonicalize(project.path()).unwrap();
    let p = p.to_str().unwrap();
    let home = Home::new();
    let cow = format!("{p}:cow");
    let Some(stdout) = sdk_check_with(&home, "share", &["--share", &cow], &[("SK_SHARE", p)]).await
    else {
        return;
    };
    let sb = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sandbox "))
        .expect("the check prints its sandbox");
    let changed = home.json(&["sandbox", "changes", sb, "--json"]);
    assert_eq!(
        changed["changes"][0]["path"],
        format!("{p}/README"),
        "{changed}"
    );
    home.ok(&["sandbox", "apply", sb]);
    assert_eq!(
        std::fs::read_to_string(project.path().join("README")).unwrap(),
        "hello\nsdk\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_create_run_list_kill() {
    sdk_check("create_run_kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_get_host_reaches_the_sandboxs_servers() {
    sdk_check("get_host").await;
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
async fn sdk_slow_reader_gets_every_byte_in_order() {
    sdk_check("slow_reader").await;
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
async fn sdk_no_internet_access_is_network_none() {
    sdk_check("no_internet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_gzip_upload_is_stored_decoded() {
    sdk_check("gzip_upload").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_listdir_walk_order_and_symlinks_as_envd() {
    sdk_check("listdir_order_and_symlinks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_list_order_pages_and_filters() {
    sdk_check("list_order_and_filters").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_network_rules_enforced_or_refused() {
    sdk_check("network_rules").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_pause_connect_resumes_and_auto_pause() {
    sdk_check("pause_resume").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_network_update_is_unsupported_not_not_found() {
    sdk_check("network_update_unsupported").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_auto_resume_wakes_on_traffic_and_only_with_it() {
    sdk_check("auto_resume").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_pause_filesystem_only_ends_the_processes_and_keeps_the_files() {
    sdk_check("pause_filesystem_only").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_a_filesystem_only_auto_pause_ends_the_processes_at_the_deadline() {
    sdk_check("auto_pause_filesystem_only").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_snapshots_and_fork() {
    sdk_check("snapshots_and_fork").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_exit_codes_above_128_and_signals_as_envd() {
    sdk_check("exit_codes_and_signals").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sandbox_killed_while_streaming_is_not_running() {
    sdk_check("killed_while_streaming").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_default_user_is_e2bs_user_and_root_on_request() {
    sdk_check("default_user").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_signed_file_urls_open_one_path_until_they_expire() {
    sdk_check("signed_urls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_metrics_are_measured_from_the_sandbox() {
    sdk_check("metrics").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_file_metadata_lives_in_xattrs() {
    sdk_check("file_metadata").await;
}

/// The sync SDK's `watch_dir` (CreateWatcher, GetWatcherEvents polls):
/// envd's events for uploads, the filesystem calls and programs' changes,
/// recursive with entries, the user's rights, ended with its sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_watch_dir_polled() {
    sdk_check("watch_dir_polled").await;
}

/// The async SDK's `watch_dir` (the WatchDir stream): events as they
/// happen, `stop`, and the stream broken off when its sandbox is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_watch_dir_stream() {
    sdk_check("watch_dir_stream").await;
}

/// `sandbox.pty`: a shell on a terminal of the asked size (`tty`,
/// `stty size`), typed on, resized, reconnected to, `^C` reaching the
/// foreground job, killed; terminal and plain input kept apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_pty() {
    sdk_check("pty").await;
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

    let Sandbox { id, token } = server.sandbox(&http).await;
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

/// A sandbox's access token opens that sandbox's envd only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sandboxs_access_token_is_refused() {
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let http = reqwest::Client::new();
    let Sandbox {
        id: a,
        token: a_token,
    } = server.sandbox(&http).await;
    let Sandbox { token: b_token, .. } = server.sandbox(&http).await;
    assert_ne!(a_token, b_token);
    let list = |token: &str| {
        http.post(format!("{}/process.Process/List", server.url))
            .header("e2b-sandbox-id", &a)
            .header("x-access-token", token)
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    assert_eq!(list(&a_token).await.unwrap().status(), 200, "its own token");
    let r = list(&b_token).await.unwrap();
    assert_eq!(r.status(), 401, "another sandbox's token on an RPC");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "unauthenticated", "{body}");
    let r = http
        .get(format!("{}/files?path=/etc/hostname", server.url))
        .header("e2b-sandbox-id", &a)
        .header("x-access-token", &b_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "another sandbox's token on /files");
    // StreamInput has a route of its own (its body is read as it comes).
    let r = http
        .post(format!("{}/process.Process/StreamInput", server.url))
        .header("e2b-sandbox-id", &a)
        .header("x-access-token", &b_token)
        .header("content-type", "application/connect+json")
        .body(Vec::new())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "another sandbox's token on StreamInput");
    // The same token by host-name routing (`49983-ID.…`).
    let r = http
        .post(format!("{}/process.Process/List", server.url))
        .header("host", format!("49983-{a}.localhost"))
        .header("x-access-token", &b_token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "another sandbox's token by host name");
}

/// The generated API key is written 0600 and another user cannot read it
/// (a real second uid: a child that drops to `nobody`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_api_key_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let home = Home::new();
    let server = E2bServer::launch(&home, &[], String::new()).await;
    let file = home.path().join("e2b-api-key");
    let key = std::fs::read_to_string(&file).expect("the generated key file");
    assert!(
        server.stderr.lock().unwrap().contains(&key),
        "the key is printed for clients"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file's mode");

    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !require(
        is_root,
        "reading the key as another user needs root (to setuid a child)",
    ) {
        return;
    }
    // Only the file's own mode may stand in the way: the directory is
    // open to everyone for the check, and a control file beside it with
    // mode 0644 must be readable by the same child.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let control = home.path().join("control");
    std::fs::write(&control, "readable").unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o644)).unwrap();
    let read_as_nobody = |path: &std::path::Path| {
        std::process::Command::new("cat")
            .arg(path)
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run cat as uid 65534")
    };
    let out = read_as_nobody(&control);
    assert!(
        out.status.success() && out.stdout == b"readable",
        "the control file is readable by uid 65534: {out:?}"
    );
    let out = read_as_nobody(&file);
    assert!(
        !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&key),
        "uid 65534 read the key: {out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{out:?}"
    );
}

/// The E2B listener holds clients as the MCP edge does: connections
/// without a key that hold no request (three times as many as there are
/// places, from other peers and the clients' own address) keep no client
/// with the key out and are cut within 20 s; a client that never finishes
/// its request head is cut at the header read timeout (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_key_cannot_lock_a_client_out() {
    let home = Home::new();
    let key = "test-key".to_owned();
    let server = E2bServer::launch(
        &home,
        &["--api-key", &key, "--max-connections", "8"],
        key.clone(),
    )
    .await;
    // From a peer of its own, the least crowded: not the one to make room.
    let slow = (
        http::send_from(
            "127.0.0.4",
            server.addr(),
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
        )
        .await,
        std::time::Instant::now(),
    );
    let held = http::hold_idle(server.addr(), 8).await;
    for _ in 0..3 {
        let r = reqwest::Client::new()
            .get(format!("{}/v2/sandboxes", server.url))
            .header("x-api-key", &key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    tokio::join!(http::assert_cut_off(slow), http::assert_all_cut(held));
}

/// Past `--max-connections`, with every place taken by a request in flight
/// (an upload whose body is still on its way), a connection is told 503;
/// once the upload is gone its place is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_every_place_busy_gets_503() {
    let home = Home::new();
    let key = "test-key".to_owned();
    let server = E2bServer::launch(
        &home,
        &["--api-key", &key, "--max-connections", "1"],
        key.clone(),
    )
    .await;
    let sandbox = server.sandbox(&reqwest::Client::new()).await;
    let holder = http::request_in_flight(
        server.addr(),
        &format!(
            "POST /files?path=up/held.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             e2b-sandbox-id: {}\r\nx-access-token: {}\r\n\
             content-type: application/octet-stream\r\ncontent-length: 1000\r\n",
            sandbox.id, sandbox.token
        ),
    )
    .await;
    http::assert_busy(server.addr(), "/health").await;
    drop(holder);
    until(
        Duration::from_secs(10),
        "a freed connection place",
        || async {
            reqwest::get(format!("{}/health", server.url))
                .await
                .is_ok_and(|r| r.status() == 204)
        },
    )
    .await;
}

/// `/files` streams both ways: an octet-stream upload, a whole download,
/// ranges (206, suffix, 416), a missing file (404), a directory (400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_stream_with_ranges() {
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let http = reqwest::Client::new();
    let sandbox = server.sandbox(&http).await;
    let files = |path: &str| format!("{}/files?path={path}", server.url);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let r = sandbox
        .envd(http.post(files("up/big.bin")))
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let written: serde_json::Value = r.json().await.unwrap();
    assert_eq!(written[0]["path"], "/home/user/up/big.bin", "{written}");
    let get = |path: &str, range: Option<&str>| {
        let mut b = sandbox.envd(http.get(files(path)));
        if let Some(r) = range {
            b = b.header("range", r);
        }
        b.send()
    };
    let r = get("up/big.bin", None).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap() == data, "the whole file back");
    let r = get("/home/user/up/big.bin", Some("bytes=10-19"))
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 10-19/3000000");
    assert_eq!(r.bytes().await.unwrap(), &data[10..20]);
    let r = get("up/big.bin", Some("bytes=-5")).await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.bytes().await.unwrap(), &data[data.len() - 5..]);
    let r = get("up/big.bin", Some("bytes=2999990-")).await.unwrap();
    assert_eq!(r.bytes().await.unwrap(), &data[2_999_990..]);
    let r = get("up/big.bin", Some("bytes=3000000-")).await.unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(r.headers()["content-range"], "bytes */3000000");
    assert_eq!(get("up/none", None).await.unwrap().status(), 404);
    assert_eq!(
        get("up/none", Some("bytes=0-1")).await.unwrap().status(),
        404
    );
    assert_eq!(get("up", None).await.unwrap().status(), 400);
    let r = sandbox
        .envd(http.post(files("")))
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "an octet-stream upload without a path");
}

/// The e2b provider's `network: "none"` through this endpoint: the
/// provider asks for `allow_internet_access: false` and sees it confirmed,
/// the local sandbox behind it is `network: "none"`, and its commands get
/// no egress proxy.
#[test]
fn the_e2b_providers_network_none_is_a_local_network_none_sandbox() {
    let home = Home::with_e2b();
    let run = |args: &[&str]| {
        let out = home.command(args).output().expect("run sandkeep");
        assert!(
            out.status.success(),
            "sandkeep {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 stdout")
    };
    let created: serde_json::Value =
        serde_json::from_str(&run(&["sandbox", "create", "--network", "none", "--json"]))
            .expect("create's JSON");
    assert_eq!(created["network"], "none", "{created}");
    let id = created["sandbox_id"].as_str().expect("sandbox_id");
    let probe = run(&[
        "exec",
        "--sandbox",
        id,
        "--",
        r#"printf 'proxy=%s' "$HTTPS_PROXY""#,
    ]);
    assert_eq!(
        probe, "proxy=",
        "a network none sandbox has no egress proxy"
    );

    let endpoint_home = home
        .e2b
        .as_ref()
        .and_then(|e| e.home())
        .expect("a local endpoint");
    let local = std::process::Command::new(bin())
        .args(["sandbox", "list", "--json"])
        .env("SANDKEEP_HOME", endpoint_home)
        .env_remove("SANDKEEP_PROVIDER")
        .output()
        .expect("list the endpoint's local sandboxes");
    let local: serde_json::Value = serde_json::from_slice(&local.stdout).expect("list's JSON");
    let sandboxes = local["sandboxes"].as_array().expect("sandboxes");
    assert_eq!(sandboxes.len(), 1, "{local}");
    assert_eq!(sandboxes[0]["network"], "none", "{local}");
}

/// An upload that breaks midway (the client goes away with half the body
/// sent, an octet-stream one or one inside a multipart part) leaves
/// neither the target nor the temporary file beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_upload_leaves_no_file() {
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let sandbox = server.sandbox(&reqwest::Client::new()).await;
    let listing = || {
        let out = home
            .command(&[
                "exec",
                "--sandbox",
                &sandbox.id,
                "--",
                // The upload (as E2B's `user`) makes the directory.
                "ls -A /home/user/up 2>/dev/null; true",
            ])
            .output()
            .expect("list the upload directory");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let head = |content_type: &str| {
        format!(
            "POST /files?path=up/broken.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             e2b-sandbox-id: {}\r\nx-access-token: {}\r\n\
             content-type: {content_type}\r\ncontent-length: 100000000\r\n\r\n",
            sandbox.id, sandbox.token
        )
    };
    let part = "--b\r\ncontent-disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n";
    for (what, request) in [
        ("octet-stream", head("application/octet-stream")),
        (
            "multipart",
            format!("{}{part}", head("multipart/form-data; boundary=b")),
        ),
    ] {
        let mut request = request.into_bytes();
        request.extend(vec![b'x'; 1 << 20]);
        let client = http::send(server.addr(), &request).await;
        until(
            Duration::from_secs(10),
            &format!("the {what} upload's temporary file"),
            || std::future::ready(listing().contains(".sandkeep-upload.")),
        )
        .await;
        drop(client);
        until(
            Duration::from_secs(10),
            &format!("nothing left of the broken {what} upload"),
            || std::future::ready(listing().is_empty()),
        )
        .await;
    }
}

/// The most resident memory the process ever had (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// How much one test may raise the server's peak memory: its buffers (a
/// 4 MiB message cap, a connection's read buffers), never a body.
const BODY_PEAK_KIB: u64 = 32 * 1024;

/// A raw request head and the whole answer.
async fn answer(addr: &str, head: String) -> String {
    http::read_answer(&mut http::send(addr, head.as_bytes()).await).await
}

/// Sends `total` bytes as a chunked body after `head`, ignoring a
/// server that stops reading (it refused the body), then waits for it to
/// close the connection or answer.
async fn send_chunked(addr: &str, head: &str, total: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = http::send(addr, head.as_bytes()).await;
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < total {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        if stream.write_all(&framed).await.is_err() {
            return;
        }
        sent += chunk.len();
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut rest = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut rest)).await;
}

/// What the endpoint must hold whole (a Connect message, a REST JSON body)
/// is capped at a few MiB: a body announced larger is refused before any of
/// it is read, with an error naming the limit; one sent without a length is
/// cut at the limit. Uploads stream into the sandbox instead. The server's
/// peak memory stays within a few buffers of where it was, through 256 MiB
/// of refused bodies and 512 MiB of uploads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_capped_and_uploads_stream_in_bounded_memory() {
    let home = Home::new();
    let server = E2bServer::start(&home).await;
    let http = reqwest::Client::new();
    let sandbox = server.sandbox(&http).await;
    let addr = server.addr().to_owned();
    let envd = format!(
        "Host: 127.0.0.1\r\ne2b-sandbox-id: {}\r\nx-access-token: {}\r\n",
        sandbox.id, sandbox.token
    );
    let before = peak_rss_kib(server.pid());

    let rpc = answer(
        &addr,
        format!(
            "POST /process.Process/Start HTTP/1.1\r\n{envd}content-type: application/connect+json\r\n\
             content-length: 400000000\r\nexpect: 100-continue\r\n\r\n"
        ),
    )
    .await;
    // Start is a server stream: its error is the end-stream message.
    assert!(
        !rpc.contains("100 Continue") && rpc.contains("invalid_argument") && rpc.contains("limit"),
        "{rpc}"
    );
    let rest = answer(
        &addr,
        format!(
            "POST /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {}\r\n\
             content-type: application/json\r\ncontent-length: 400000000\r\n\
             expect: 100-continue\r\n\r\n",
            server.key
        ),
    )
    .await;
    assert!(
        rest.starts_with("HTTP/1.1 413") && rest.contains("\"code\":413") && rest.contains("limit"),
        "{rest}"
    );
    for path in ["/process.Process/Start", "/filesystem.Filesystem/ListDir"] {
        send_chunked(
            &addr,
            &format!(
                "POST {path} HTTP/1.1\r\n{envd}content-type: application/json\r\n\
                 transfer-encoding: chunked\r\n\r\n"
            ),
            128 << 20,
        )
        .await;
    }

    let size: usize = 256 << 20;
    send_chunked(
        &addr,
        &format!(
            "POST /files?path=up/stream.bin HTTP/1.1\r\n{envd}\
             content-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        ),
        size,
    )
    .await;
    let mut multipart = b"--b\r\ncontent-disposition: form-data; name=\"file\"; filename=\"x\"\r\n\
        content-type: application/octet-stream\r\n\r\n"
        .to_vec();
    multipart.resize(multipart.len() + size, b'y');
    multipart.extend_from_slice(b"\r\n--b--\r\n");
    let r = sandbox
        .envd(http.post(format!("{}/files?path=up/part.bin", server.url)))
        .header("content-type", "multipart/form-data; boundary=b")
        .body(multipart)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let sizes = home
        .command(&[
            "exec",
            "--sandbox",
            &sandbox.id,
            "--",
            "stat -c %s /home/user/up/stream.bin /home/user/up/part.bin",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sizes.stdout),
        format!("{size}\n{size}\n"),
        "{sizes:?}"
    );

    let after = peak_rss_kib(server.pid());
    eprintln!("server peak RSS: {before} KiB before, {after} KiB after");
    assert!(
        after < before + BODY_PEAK_KIB,
        "the server's peak memory rose from {before} to {after} KiB"
    );
    let r = sandbox
        .envd(http.post(format!("{}/filesystem.Filesystem/Stat", server.url)))
        .header("content-type", "application/json")
        .body(r#"{"path": "up/part.bin"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "the server serves on: {:?}",
        r.text().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_host_bound_is_a_rate_limit_error() {
    sdk_check_on("host_bound", &["--max-sandboxes", "2"]).await;
}

/// The host-wide bounds over REST: past them a create is 429 (E2B's
/// rate limit answer, marked not to be retried) naming the bound and the
/// flag that raises it; the memory ceiling counts every live sandbox's
/// memory, the CLI's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_past_a_host_bound_are_told_429() {
    let home = Home::new();
    let key = "test-key".to_owned();
    let server = E2bServer::launch(
        &home,
        &["--api-key", &key, "--max-sandboxes", "1"],
        key.clone(),
    )
    .await;
    let http = reqwest::Client::new();
    let first = server.sandbox(&http).await;
    let create = || {
        http.post(format!("{}/v2/sandboxes", server.url))
            .header("x-api-key", &key)
            .json(&serde_json::json!({ "templateID": "base", "timeout": 60 }))
            .send()
    };
    let r = create().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["should-retry"], "false");
    let body: serde_json::Value = r.json().await.unwrap();
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        body["code"] == 429 && message.contains("--max-sandboxes") && message.contains('1'),
        "{body}"
    );
    let r = http
        .delete(format!("{}/sandboxes/{}", server.url, first.id))
        .header("x-api-key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    drop(server);

    // A default sandbox commits 2048 MiB: a ceiling of 3000 holds one.
    let cli = home.json(&["sandbox", "create", "--json", "--memory-mib", "1024"]);
    let server = E2bServer::launch(
        &home,
        &["--api-key", &key, "--max-total-memory-mib", "3000"],
        key.clone(),
    )
    .await;
    let r = reqwest::Client::new()
        .post(format!("{}/v2/sandboxes", server.url))
        .header("x-api-key", &key)
        .json(&serde_json::json!({ "templateID": "base", "timeout": 60 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let message = r.text().await.unwrap();
    assert!(
        message.contains("--max-total-memory-mib") && message.contains("3000"),
        "{message}"
    );
    // Room again once the CLI's sandbox is gone.
    home.ok(&["sandbox", "kill", cli["sandbox_id"].as_str().unwrap()]);
    server.sandbox(&http).await;
}
