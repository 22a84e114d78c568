//! Interactive task benchmark (SPEC.md §15), through a real server:
//! send_input → the echoed output visible to wait_task, for a pipe task
//! (`cat`) and a pty task (`cat` on a terminal, which echoes too). Median
//! and max over samples; target: median ≤ 10 ms on the local provider,
//! and ≤ 3× that on the e2b provider against a local `serve --e2b`,
//! measured in the same run.
//!
//! Run: `cargo bench -p sandkeep --bench interactive`. Prints one `BENCH`
//! line a figure for `scripts/bench`.

mod common;

use std::time::{Duration, Instant};

use common::{Client, bench_line, call, e2b_endpoint, median, ms, state_dir, stdio_server};
use serde_json::json;

const SAMPLES: usize = 30;

/// send_input, then wait_task until the line is back: one sample each.
async fn round_trips(client: &Client, sid: &str, pty: bool) -> Vec<Duration> {
    let started = call(
        client,
        "start_interactive_task",
        json!({"sandbox_id": sid, "command": "cat", "pty": pty, "timeout": 600}),
    )
    .await;
    let tid = started["task_id"].as_str().unwrap().to_owned();
    let mut offset = 0u64;
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let line = format!("line {i}\n");
        let t0 = Instant::now();
        call(
            client,
            "send_input",
            json!({"sandbox_id": sid, "task_id": tid, "data": line}),
        )
        .await;
        let mut seen = String::new();
        // A pty echoes the line and cat prints it again: both are awaited.
        let want = if pty { 2 } else { 1 };
        while seen.matches(&format!("line {i}")).count() < want {
            let v = call(
                client,
                "wait_task",
                json!({"sandbox_id": sid, "task_id": tid, "stdout_offset": offset, "timeout": 10}),
            )
            .await;
            assert_eq!(v["state"], "running", "{v}");
            seen.push_str(v["stdout"].as_str().unwrap());
            offset = v["stdout_next_offset"].as_u64().unwrap();
        }
        samples.push(t0.elapsed());
    }
    call(
        client,
        "send_input",
        json!({"sandbox_id": sid, "task_id": tid, "data": "", "close": true}),
    )
    .await;
    samples
}

/// The medians of a pipe and a pty task's round trips on one server.
async fn medians(client: &Client) -> Vec<(&'static str, Duration)> {
    let sandbox = call(client, "create_sandbox", json!({"timeout": 3600})).await;
    let sid = sandbox["sandbox_id"].as_str().unwrap().to_owned();
    let mut out = Vec::new();
    for (name, pty) in [("pipe", false), ("pty", true)] {
        let samples = round_trips(client, &sid, pty).await;
        let max = *samples.iter().max().unwrap();
        let med = median(samples);
        println!(
            "send_input → echo visible to wait_task ({name}): median {:.2} ms, max {:.2} ms over {SAMPLES}",
            ms(med),
            ms(max)
        );
        out.push((name, med));
    }
    call(client, "kill_sandbox", json!({"sandbox_id": sid})).await;
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let home = state_dir("sk-interactive-bench-");
    let (_server, client) = stdio_server(home.path(), &[]).await;
    println!("local provider:");
    let local = medians(&client).await;
    drop(client);
    for (name, med) in &local {
        bench_line(
            &format!("interactive.input_to_output_{name}"),
            ms(*med),
            "ms",
            None,
            "<=10",
        );
    }

    let endpoint_home = state_dir("sk-interactive-bench-e2b-");
    let (mut endpoint, env) = e2b_endpoint(endpoint_home.path());
    let e2b_home = state_dir("sk-interactive-bench-provider-");
    let (_server, client) = stdio_server(e2b_home.path(), &env).await;
    println!("e2b provider against a local `serve --e2b`:");
    let e2b = medians(&client).await;
    drop(client);
    for ((name, local), (_, e2b)) in local.iter().zip(&e2b) {
        bench_line(
            &format!("interactive.e2b_input_to_output_{name}"),
            ms(*e2b),
            "ms",
            Some(ms(*local)),
            "<=3x",
        );
    }
    let _ = endpoint.kill();
    let _ = endpoint.wait();
}
