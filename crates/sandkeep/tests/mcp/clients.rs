//! The MCP clients users run, as a first-time user runs them, against the
//! real `sandkeep` binary: the MCP Inspector's CLI in its default mode
//! (stdio and Streamable HTTP), and what `sandkeep mcp-config` prints for
//! it. Each client is the pinned npm package of
//! `tests/interop/clients/package.json`, from `SANDKEEP_TEST_MCP_CLIENTS`
//! (scripts/test installs them under target/mcp-clients). Without it the
//! tests are skipped with a printed reason, except under `CI=true`, where
//! they fail.

use crate::support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::*;
use support::*;

/// How long one client command may take.
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);

/// The installed clients' `node_modules/.bin`, or `None` after a skip.
fn clients() -> Option<PathBuf> {
    let dir = std::env::var_os("SANDKEEP_TEST_MCP_CLIENTS").filter(|p| !p.is_empty());
    let Some(dir) = dir else {
        skip(
            "SANDKEEP_TEST_MCP_CLIENTS is not set: run scripts/test, or npm ci in a copy of \
             tests/interop/clients/ and point it there",
        );
        return None;
    };
    let bin = PathBuf::from(dir).join("node_modules/.bin");
    assert!(
        bin.join("mcp-inspector").exists(),
        "SANDKEEP_TEST_MCP_CLIENTS={} has no node_modules/.bin/mcp-inspector: run scripts/test",
        bin.display()
    );
    Some(bin)
}

/// Runs a client to its end, bounded by [`CLIENT_DEADLINE`].
async fn run(mut command: tokio::process::Command) -> Output {
    let what = format!("{command:?}");
    let run = command.kill_on_drop(true).output();
    tokio::time::timeout(CLIENT_DEADLINE, run)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {CLIENT_DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e} (is Node.js installed? scripts/test installs it)"))
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The Inspector's CLI (`mcp-inspector --cli ARGS`) in its default mode.
fn inspector(bin: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bin.join("mcp-inspector"));
    c.arg("--cli").args(args);
    c
}

/// `-e NAME=VALUE` for every variable a stdio server of `home` needs: the
/// Inspector passes a server only the variables it is given.
fn server_env(home: &Home) -> Vec<String> {
    let mut vars = vec![("SANDKEEP_HOME", home.path().display().to_string())];
    vars.extend(home.provider_vars());
    vars.into_iter()
        .flat_map(|(k, v)| ["-e".to_owned(), format!("{k}={v}")])
        .collect()
}

/// The one JSON object a `--format json` Inspector run prints.
fn printed(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "the Inspector failed: {}",
        describe(out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", describe(out)))
}

/// The run_command result the Inspector printed: its structured content,
/// which must say `hi` and exit 0.
fn assert_ran_hi(out: &Output) {
    let printed = printed(out);
    let result = &printed["result"];
    let content = &result["structuredContent"];
    assert_eq!(content["stdout"], "hi\n", "{printed}");
    assert_eq!(content["exit_code"], 0, "{printed}");
    assert_eq!(result["isError"], false, "{printed}");
}

async fn task_count(client: &Client, sandbox: &str) -> usize {
    ok(client, "list_tasks", json!({"sandbox_id": sandbox})).await["tasks"]
        .as_array()
        .expect("tasks")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_cli_default_mode_runs_run_command_over_stdio_and_http() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let http = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let observer = http.modern().await;
    let sandbox = sid(&ok(&observer, "create_sandbox", json!({"timeout": 600})).await);
    let args = json!({"sandbox_id": sandbox, "command": "echo hi"}).to_string();
    let call = [
        "--format",
        "json",
        "--method",
        "tools/call",
        "--tool-name",
        "run_command",
        "--tool-args-json",
        &args,
    ];

    // stdio: the Inspector starts `sandkeep serve` itself.
    let mut stdio: Vec<String> = server_env(&home);
    stdio.extend([bin().to_owned(), "serve".to_owned()]);
    stdio.extend(call.iter().map(|s| s.to_string()));
    let stdio: Vec<&str> = stdio.iter().map(String::as_str).collect();
    assert_ran_hi(&run(inspector(&clients, &stdio)).await);

    // Streamable HTTP, with the server's token.
    let header = format!("Authorization: Bearer {}", http.token.as_deref().unwrap());
    let mut remote = vec![http.url.as_str(), "--header", &header];
    remote.extend(call);
    assert_ran_hi(&run(inspector(&clients, &remote)).await);

    // Both ran blocking: no durable task was made behind the client's back.
    assert_eq!(task_count(&observer, &sandbox).await, 0);
    ok(&observer, "kill_sandbox", json!({"sandbox_id": sandbox})).await;
    observer.cancel().await.unwrap();
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_strict_finds_no_schema_to_warn_about() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let mut args = server_env(&home);
    args.extend(
        [
            bin(),
            "serve",
            "--format",
            "json",
            "--method",
            "tools/list",
            "--strict",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(inspector(&clients, &args)).await;
    let tools = printed(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Warning") && !stderr.contains("Error:"),
        "the Inspector's --strict found problems:\n{stderr}"
    );
    // A client that fills in defaults gets none it would have to send as
    // null.
    let text = tools.to_string();
    assert!(!text.contains(r#""default":null"#), "{text}");
    assert_eq!(
        tools["result"]["tools"].as_array().map(Vec::len),
        Some(25),
        "{text}"
    );
}

/// `line`, as a user pastes it into bash, with the pinned clients first on
/// PATH (and `npx` finding them in their own directory), `HOME` and
/// `CODEX_HOME` private to the test.
fn pasted(
    clients: &std::path::Path,
    user_home: &std::path::Path,
    line: &str,
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("bash");
    let path = format!(
        "{}:{}",
        clients.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.arg("-c")
        .arg(line)
        .current_dir(clients.parent().and_then(std::path::Path::parent).unwrap())
        .env("PATH", path)
        .env("HOME", user_home)
        .env("CODEX_HOME", user_home.join(".codex"))
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    c
}

/// A port free on loopback now, for a server that must come back on the
/// same address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `claude mcp get sandkeep` (it connects to the server to say whether it
/// works): must show the user scope and a working connection.
async fn assert_claude_connected(
    clients: &std::path::Path,
    user_home: &std::path::Path,
    when: &str,
) {
    let out = run(pasted(clients, user_home, "claude mcp get sandkeep")).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{when}: {}", describe(&out));
    assert!(text.contains("Scope: User config"), "{when}: {text}");
    assert!(text.contains("Connected"), "{when}: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_takes_the_printed_lines_and_its_http_registration_survives_a_restart() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let user = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let server = HttpServer::start(&home, &["--http", &addr]).await;
    let stderr = server.stderr.lock().unwrap().clone();
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("sandkeep: Claude Code: "))
        .unwrap_or_else(|| panic!("no Claude Code line: {stderr}"));
    let added = run(pasted(&clients, user.path(), line)).await;
    assert!(added.status.success(), "{}", describe(&added));
    assert_claude_connected(&clients, user.path(), "registered").await;
    server.stop().await;

    // The same address after a restart: the registered token still works.
    let again = HttpServer::start(&home, &["--http", &addr]).await;
    assert_claude_connected(&clients, user.path(), "after a restart").await;
    again.stop().await;

    // The stdio registration, as `mcp-config claude-code` prints it.
    let user = tempfile::tempdir().unwrap();
    let line = home.ok(&["mcp-config", "claude-code"]);
    let added = run(pasted(&clients, user.path(), line.trim())).await;
    assert!(added.status.success(), "{}", describe(&added));
    assert_claude_connected(&clients, user.path(), "stdio").await;
}

/// Writes `config` as Codex's config.toml and reads it back through
/// `codex mcp get sandkeep --json`, which refuses a value it does not know.
async fn codex_reads(clients: &std::path::Path, config: &str) -> Value {
    let user = tempfile::tempdir().unwrap();
    std::fs::create_dir(user.path().join(".codex")).unwrap();
    std::fs::write(user.path().join(".codex/config.toml"), config).unwrap();
    let out = run(pasted(
        clients,
        user.path(),
        "codex mcp get sandkeep --json",
    ))
    .await;
    assert!(out.status.success(), "{config}\n{}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reads_both_printed_configurations() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let stdio = home.ok(&["mcp-config", "codex"]);
    assert!(
        stdio.contains("\ndefault_tools_approval_mode = \"approve\"\n"),
        "{stdio}"
    );
    let got = codex_reads(&clients, &stdio).await;
    assert_eq!(got["transport"]["type"], "stdio", "{got}");
    assert_eq!(got["transport"]["command"], bin(), "{got}");
    assert_eq!(
        got["transport"]["env"]["SANDKEEP_HOME"],
        home.path().display().to_string(),
        "{got}"
    );
    assert_eq!(got["tool_timeout_sec"], 3600.0, "{got}");

    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let http = home.ok(&["mcp-config", "codex", "--http", &server.url]);
    assert!(
        http.contains("\ndefault_tools_approval_mode = \"approve\"\n"),
        "{http}"
    );
    let got = codex_reads(&clients, &http).await;
    assert_eq!(got["transport"]["type"], "streamable_http", "{got}");
    assert_eq!(got["transport"]["url"], server.url, "{got}");
    let bearer = format!("Bearer {}", server.token.as_deref().unwrap());
    assert_eq!(
        got["transport"]["http_headers"]["Authorization"], bearer,
        "{got}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_inspector_lines_work_with_cli_added() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let user = tempfile::tempdir().unwrap();
    for line in [
        home.ok(&["mcp-config", "inspector"]),
        home.ok(&["mcp-config", "inspector", "--http", &server.url]),
    ] {
        let line = line.trim().replacen(
            "npx @modelcontextprotocol/inspector ",
            "npx @modelcontextprotocol/inspector --cli ",
            1,
        );
        let out = run(pasted(
            &clients,
            user.path(),
            &format!("{line} --format json --method tools/list"),
        ))
        .await;
        let listed = printed(&out);
        assert_eq!(
            listed["result"]["tools"].as_array().map(Vec::len),
            Some(25),
            "{line}: {listed}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_cli_modern_mode_gets_run_commands_result_through_a_task() {
    let Some(clients) = clients() else { return };
    let home = Home::new();
    let http = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let observer = http.modern().await;
    let sandbox = sid(&ok(&observer, "create_sandbox", json!({"timeout": 600})).await);
    let args = json!({"sandbox_id": sandbox, "command": "sleep 0.2; echo hi"}).to_string();
    let mut stdio = server_env(&home);
    stdio.extend([bin().to_owned(), "serve".to_owned()]);
    stdio.extend(
        [
            "--protocol-era",
            "modern",
            "--format",
            "json",
            "--method",
            "tools/call",
            "--tool-name",
            "run_command",
            "--tool-args-json",
            &args,
        ]
        .map(str::to_owned),
    );
    let stdio: Vec<&str> = stdio.iter().map(String::as_str).collect();
    assert_ran_hi(&run(inspector(&clients, &stdio)).await);
    // It came through the extension: the command ran as a durable task.
    assert_eq!(task_count(&observer, &sandbox).await, 1);
    ok(&observer, "kill_sandbox", json!({"sandbox_id": sandbox})).await;
    observer.cancel().await.unwrap();
    http.stop().await;
}
