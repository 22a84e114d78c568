//! Interoperability with a second, independent MCP client: the official
//! TypeScript SDK (`@modelcontextprotocol/sdk` from npm, pinned by
//! tests/interop/package-lock.json) runs `tests/interop/ts_client.cjs`
//! against the real `sandkeep` binary over stdio (the first server
//! SIGKILLed mid-task) and over Streamable HTTP. It checks every schema
//! with Ajv in strict mode, every structured result against its output
//! schema, progress during a 25 s run_command, and that a cancelled
//! run_command leaves no process.
//!
//! `node` comes from PATH and the SDK from `SANDKEEP_TEST_NODE_MODULES`
//! (scripts/test installs both). Without them the test is skipped with a
//! printed reason, except under `CI=true`, where it fails.

use crate::support;

use std::time::Duration;

use support::mcp::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_typescript_sdk_walks_the_acceptance_path() {
    let Some(modules) = std::env::var_os("SANDKEEP_TEST_NODE_MODULES").filter(|p| !p.is_empty())
    else {
        return skip(
            "SANDKEEP_TEST_NODE_MODULES is not set: run scripts/test, or npm ci in a copy of \
             tests/interop/package.json and point it there",
        );
    };
    let home = Home::new();
    let http = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/ts_client.cjs");
    let run = tokio::process::Command::new("node")
        .arg(script)
        .arg(bin())
        .arg(home.path())
        .arg(&http.url)
        .arg(http.token.as_deref().expect("the server printed its token"))
        .env("SANDKEEP_NODE_MODULES", &modules)
        .env("SANDKEEP_HOME", home.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the TypeScript client finished within 180 s")
        .expect("run node (is Node.js installed? scripts/test installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "TypeScript SDK client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("interop ok"), "{stdout}");
    eprintln!("{}", stdout.trim());
    http.stop().await;
}
