//! Interoperability with a second, independent MCP client: the official
//! Python SDK (`mcp` from PyPI) runs `tests/interop/python_client.py`
//! against the real `sandkeep` binary over stdio (legacy handshake, then
//! its default negotiation) and over Streamable HTTP.
//!
//! The interpreter comes from `SANDKEEP_TEST_PYTHON` (scripts/test creates
//! a virtualenv with the pinned `mcp` and sets it). Without it the test is
//! skipped with a printed reason, except under `CI=true`, where it fails.

use crate::support;

use std::time::Duration;

use support::mcp::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_walks_the_acceptance_path() {
    let Some(python) = std::env::var_os("SANDKEEP_TEST_PYTHON").filter(|p| !p.is_empty()) else {
        return skip(
            "SANDKEEP_TEST_PYTHON is not set: run scripts/test, or point it at a python with `pip install mcp==2.3.0`",
        );
    };
    let home = Home::new();
    let http = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_client.py"
    );
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .arg(bin())
        .arg(home.path())
        .arg(&http.url)
        .arg(http.token.as_deref().expect("the server printed its token"))
        .env("SANDKEEP_HOME", home.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finished within 120 s")
        .expect("run the Python interpreter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Python SDK client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("interop ok"), "{stdout}");
    eprintln!("{}", stdout.trim());
    http.stop().await;
}
