//! MCP server benchmark: what an agent feels through `sandkeep serve`.
//!
//! - get_task round trip on a running task, through a stdio server child
//!   and rmcp's client, against the baseline of the helper's own `status`
//!   run through the local provider in-process (the same exec the server
//!   does, without MCP and the service).
//! - start_task, against the helper's own `start` the same way.
//! - The server's idle RSS, and its RSS after 10,000 get_task calls.
//!
//! Run: `cargo bench -p sandkeep --bench mcp` (prints medians and ratios,
//! and one `BENCH` line a figure for `scripts/bench`).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{EXE, bench_line, exec_request, local_provider, median, ms, state_dir};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use sandkeep::provider::local::LocalProvider;
use sandkeep::provider::{Provider, SandboxId};
use sandkeep_proto::TaskId;
use sandkeep_proto::wire::{self, StartRequest, StatusRequest};
use serde_json::{Value, json};

const GET_SAMPLES: usize = 300;
/// Both start series together stay well under the 128 tasks per sandbox.
const START_SAMPLES: usize = 50;
const LEAK_CALLS: usize = 10_000;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("server status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Value {
    let Value::Object(map) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .expect("tools/call");
    assert_ne!(r.is_error, Some(true), "{tool}: {:?}", r.content);
    r.structured_content.expect("structuredContent")
}

fn random_task_id() -> TaskId {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("random");
    TaskId::from_bytes(b)
}

async fn helper_exec(p: &LocalProvider, id: &SandboxId, helper: &str, line: String) -> Duration {
    let t = Instant::now();
    let out = p
        .exec(id, exec_request(line, 1 << 20))
        .await
        .expect("helper exec");
    let took = t.elapsed();
    assert_eq!(
        out.exit_code,
        Some(0),
        "helper {helper}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let home = state_dir("sk-mcp-bench-");
    let mut child = tokio::process::Command::new(EXE)
        .arg("serve")
        .env("SANDKEEP_HOME", home.path())
        .env("SANDKEEP_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sandkeep serve");
    let pid = child.id().expect("pid");
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve((stdout, stdin)).await.expect("handshake");
    let idle_rss = rss_kib(pid);

    let sandbox = call(&client, "create_sandbox", json!({"timeout": 3600})).await;
    let sid = sandbox["sandbox_id"].as_str().unwrap().to_owned();
    let running = call(
        &client,
        "start_task",
        json!({"command": "echo ready; sleep 3000"}),
    )
    .await;
    let task = running["task_id"].as_str().unwrap().to_owned();

    let provider = local_provider(home.path());
    let id = SandboxId::parse(&sid).unwrap();
    let helper = provider.task_helper(&id).await.expect("helper path");
    let status = StatusRequest::first_page(TaskId::parse(&task).unwrap());

    // Interleave the two series so drift affects both alike.
    let (mut base_get, mut mcp_get) = (Vec::new(), Vec::new());
    for _ in 0..GET_SAMPLES {
        let line = wire::helper_command_line(&helper, wire::verb::STATUS, &status);
        base_get.push(helper_exec(&provider, &id, &helper, line).await);
        let t = Instant::now();
        let v = call(
            &client,
            "get_task",
            json!({"sandbox_id": sid, "task_id": task}),
        )
        .await;
        mcp_get.push(t.elapsed());
        assert_eq!(v["state"], "running");
    }
    let (mut base_start, mut mcp_start) = (Vec::new(), Vec::new());
    for _ in 0..START_SAMPLES {
        let request = StartRequest {
            task_id: random_task_id(),
            command: "true".into(),
            cwd: None,
            timeout: 60,
            input: None,
        };
        let line = wire::helper_command_line(&helper, wire::verb::START, &request);
        base_start.push(helper_exec(&provider, &id, &helper, line).await);
        let t = Instant::now();
        call(
            &client,
            "start_task",
            json!({"sandbox_id": sid, "command": "true"}),
        )
        .await;
        mcp_start.push(t.elapsed());
    }

    let before = rss_kib(pid);
    for _ in 0..LEAK_CALLS {
        call(
            &client,
            "get_task",
            json!({"sandbox_id": sid, "task_id": task}),
        )
        .await;
    }
    let after = rss_kib(pid);

    let (bg, mg, bs, msd) = (
        median(base_get),
        median(mcp_get),
        median(base_start),
        median(mcp_start),
    );
    println!("MCP server benchmark (stdio, local provider, running task)");
    println!(
        "get_task    median {:7.3} ms   helper status baseline {:7.3} ms   ratio {:.2}x   ({GET_SAMPLES} samples)",
        ms(mg),
        ms(bg),
        mg.as_secs_f64() / bg.as_secs_f64()
    );
    println!(
        "start_task  median {:7.3} ms   helper start baseline  {:7.3} ms   ratio {:.2}x   ({START_SAMPLES} samples)",
        ms(msd),
        ms(bs),
        msd.as_secs_f64() / bs.as_secs_f64()
    );
    println!("idle RSS    {:.1} MiB", idle_rss as f64 / 1024.0);
    println!(
        "RSS before/after {LEAK_CALLS} get_task calls: {:.1} MiB -> {:.1} MiB (growth {} KiB)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after as i64 - before as i64
    );
    bench_line("mcp.get_task", ms(mg), "ms", Some(ms(bg)), "<=5");
    bench_line("mcp.start_task", ms(msd), "ms", Some(ms(bs)), "<=15");
    bench_line("mcp.idle_rss", idle_rss as f64, "KiB", None, "<=30720");
    bench_line(
        "mcp.rss_growth_10k_calls",
        after as f64 - before as f64,
        "KiB",
        None,
        "-",
    );

    call(&client, "kill_sandbox", json!({"sandbox_id": sid})).await;
    let _ = client.cancel().await;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}
