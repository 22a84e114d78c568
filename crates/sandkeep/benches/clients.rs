//! Round trips through the two independent MCP clients the interop tests
//! use, in the same run: the official Python SDK and the official
//! TypeScript SDK, each driving its own `sandkeep serve` over stdio. Each
//! reports the median `tools/list` and `get_task` (running task) round
//! trip as its client sees it, SDK overhead included.
//!
//! Run: `scripts/test` once (it installs both SDKs), then
//! `SANDKEEP_TEST_PYTHON=target/py-venv/bin/python
//! SANDKEEP_TEST_NODE_MODULES=$PWD/target/node-interop cargo bench -p sandkeep --bench clients`
//! (or `scripts/bench clients`). Prints one `BENCH` line a figure.

mod common;

use common::{EXE, bench_line, state_dir};
use serde_json::Value;

const SAMPLES: &str = "200";
const INTEROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop");

fn run(label: &str, mut command: std::process::Command) -> Value {
    let out = command.output().unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(
        out.status.success(),
        "{label} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{label}: {e}: {stdout}"))
}

fn main() {
    let python = std::env::var("SANDKEEP_TEST_PYTHON")
        .expect("SANDKEEP_TEST_PYTHON: a python with the pinned mcp (scripts/test makes one)");
    let modules = std::env::var("SANDKEEP_TEST_NODE_MODULES")
        .expect("SANDKEEP_TEST_NODE_MODULES: the pinned TypeScript SDK (scripts/test installs it)");

    let home = state_dir("sk-clients-bench-");
    let mut py = std::process::Command::new(python);
    py.arg(format!("{INTEROP}/python_bench.py"))
        .args([SAMPLES, EXE])
        .arg(home.path())
        .env("SANDKEEP_HOME", home.path());
    let py = run("Python SDK", py);

    let mut ts = std::process::Command::new("node");
    ts.arg(format!("{INTEROP}/ts_client.cjs"))
        .args(["--bench", SAMPLES, EXE])
        .arg(home.path())
        .env("SANDKEEP_NODE_MODULES", modules)
        .env("SANDKEEP_HOME", home.path());
    let ts = run("TypeScript SDK", ts);

    println!("MCP clients over stdio (medians of {SAMPLES}, as the client sees them)");
    for (name, v) in [("Python SDK", &py), ("TypeScript SDK", &ts)] {
        println!(
            "{name:15} tools/list {:7.3} ms   get_task {:7.3} ms",
            v["tools_list_ms"].as_f64().unwrap_or(f64::NAN),
            v["get_task_ms"].as_f64().unwrap_or(f64::NAN)
        );
    }
    for (key, v) in [("python", &py), ("ts", &ts)] {
        for field in ["tools_list", "get_task"] {
            let value = v[format!("{field}_ms")].as_f64().unwrap_or(f64::NAN);
            bench_line(&format!("clients.{key}.{field}"), value, "ms", None, "-");
        }
    }
}
