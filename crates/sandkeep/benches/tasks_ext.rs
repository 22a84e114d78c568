//! The MCP Tasks extension's round trip against the blocking call, in the
//! same run: a 0.4 s command (`sleep 0.4; echo done`) through
//! `run_command`, once blocking (a client that does not declare the
//! extension) and once as a task, by a 2026-07-28 client that declares it,
//! two ways: following the advertised poll interval (sleep it, then
//! `tasks/get`, as the extension asks), and calling `tasks/get` at once
//! (the long-poll alone). Each from the call to the result in hand, over
//! stdio with rmcp's client, the three series interleaved so drift hits
//! them alike. Target: the task's result within 1.2x the blocking call.
//!
//! Run: `cargo bench -p sandkeep --bench tasks_ext` (prints medians and
//! ratios to the blocking call, and one `BENCH` line a figure for
//! `scripts/bench`).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{EXE, bench_line, median, ms, state_dir};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, ProtocolVersion, TaskPayload,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};

const ROUNDS: usize = 30;
const COMMAND: &str = "sleep 0.4; echo done";

fn serve(home: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(EXE)
        .arg("serve")
        .env("SANDKEEP_HOME", home)
        .env("SANDKEEP_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sandkeep serve")
}

fn request(args: Value) -> CallToolRequestParams {
    let Value::Object(map) = args else {
        unreachable!()
    };
    CallToolRequestParams::new("run_command").with_arguments(map)
}

/// A task's result by `client`: after the advertised interval each time
/// when `follow`, else with `tasks/get` at once.
async fn through_a_task(
    client: &RunningService<rmcp::RoleClient, ClientConfig>,
    args: &Value,
    follow: bool,
) -> Duration {
    let t = Instant::now();
    let CallToolResponse::Task(created) = client
        .call_tool_once(request(args.clone()))
        .await
        .expect("tools/call")
    else {
        panic!("run_command should answer a task")
    };
    let mut interval = created.task.poll_interval_ms;
    loop {
        if follow {
            let ms = interval.expect("an advertised poll interval");
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let got = client
            .get_task(GetTaskParams::new(&created.task.task_id))
            .await
            .expect("tasks/get");
        if let TaskPayload::Completed { result } = &got.task.payload {
            assert_eq!(result["structuredContent"]["stdout"], "done\n");
            return t.elapsed();
        }
        interval = got.task.task.poll_interval_ms;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let home = state_dir("sk-tasks-bench-");
    let mut plain_child = serve(home.path());
    let (out, inp) = (
        plain_child.stdout.take().unwrap(),
        plain_child.stdin.take().unwrap(),
    );
    let plain = ().serve((out, inp)).await.expect("handshake");
    let mut tasks_child = serve(home.path());
    let (out, inp) = (
        tasks_child.stdout.take().unwrap(),
        tasks_child.stdin.take().unwrap(),
    );
    let tasks = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-bench", "0"),
    )
    .serve_with_lifecycle(
        (out, inp),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("2026-07-28 discover");

    let created = plain
        .call_tool(
            CallToolRequestParams::new("create_sandbox")
                .with_arguments(json!({"timeout": 3600}).as_object().unwrap().clone()),
        )
        .await
        .expect("create_sandbox");
    let sandbox = created.structured_content.expect("structured")["sandbox_id"].clone();
    let args = json!({"sandbox_id": sandbox, "command": COMMAND});

    let (mut blocking, mut followed, mut at_once) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let r = plain
            .call_tool(request(args.clone()))
            .await
            .expect("run_command");
        blocking.push(t.elapsed());
        assert_eq!(r.structured_content.unwrap()["stdout"], "done\n");
        followed.push(through_a_task(&tasks, &args, true).await);
        at_once.push(through_a_task(&tasks, &args, false).await);
    }
    let (b, f, a) = (median(blocking), median(followed), median(at_once));
    println!("MCP Tasks extension, `{COMMAND}` over stdio (medians of {ROUNDS})");
    println!("blocking run_command              {:7.1} ms", ms(b));
    println!(
        "task, client follows the interval {:7.1} ms   ratio {:.2}x",
        ms(f),
        f.as_secs_f64() / b.as_secs_f64()
    );
    println!(
        "task, tasks/get at once            {:7.1} ms   ratio {:.2}x",
        ms(a),
        a.as_secs_f64() / b.as_secs_f64()
    );
    bench_line("tasks_ext.followed", ms(f), "ms", Some(ms(b)), "<=1.2x");
    bench_line("tasks_ext.at_once", ms(a), "ms", Some(ms(b)), "<=1.2x");

    let _ = plain
        .call_tool(
            CallToolRequestParams::new("kill_sandbox")
                .with_arguments(json!({"sandbox_id": sandbox}).as_object().unwrap().clone()),
        )
        .await;
    let _ = plain.cancel().await;
    let _ = tasks.cancel().await;
    for mut child in [plain_child, tasks_child] {
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    }
}
