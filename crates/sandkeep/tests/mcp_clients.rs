//! The MCP clients users run, as a first-time user runs them, against the
//! real `sandkeep` binary: the MCP Inspector's CLI in its default mode
//! (stdio and Streamable HTTP), and what `sandkeep mcp-config` prints for
//! it. Each client is the pinned npm package of
//! `tests/interop/clients/package.json`, from `SANDKEEP_TEST_MCP_CLIENTS`
//! (scripts/test installs them under target/mcp-clients). Without it the
//! tests are skipped with a printed reason, except under `CI=true`, where
//! they fail.

mod support;

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

/// The blocking run_command result the Inspector printed: its structured
/// content, which must say `hi` and exit 0.
fn assert_blocking_hi(out: &Output) {
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
    assert_blocking_hi(&run(inspector(&clients, &stdio)).await);

    // Streamable HTTP, with the server's token.
    let header = format!("Authorization: Bearer {}", http.token.as_deref().unwrap());
    let mut remote = vec![http.url.as_str(), "--header", &header];
    remote.extend(call);
    assert_blocking_hi(&run(inspector(&clients, &remote)).await);

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
        Some(13),
        "{text}"
    );
}
