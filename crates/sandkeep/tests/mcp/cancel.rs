//! cancel_task when the cancellation cannot be confirmed (docs/tools.md): the
//! task's supervisor is frozen with SIGSTOP, so the terminal record cannot
//! appear within 3 s. The call must be a tool error that still carries the
//! observed state; once the supervisor runs again the cancel completes.
//! End to end: rmcp client, `sandkeep serve` child, real local sandbox.

use crate::support;

use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use serde_json::json;
use support::mcp::*;
use support::*;

/// Host pids of the supervisor of `task_id`.
fn supervisor_pids(task_id: &str) -> Vec<i32> {
    host_pids_where(|cmd| cmd.contains("__supervise") && cmd.contains(task_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_cancel_is_a_tool_error_carrying_the_observed_state() {
    let home = Home::new();
    let server = StdioServer::start(&home).await;
    let sandbox = ok(&server.client, "create_sandbox", json!({"timeout": 120})).await;
    let id = sid(&sandbox);
    let task = ok(
        &server.client,
        "start_task",
        json!({"command": "echo up; sleep 60"}),
    )
    .await;
    let task_id = tid(&task);
    let pids = supervisor_pids(&task_id);
    assert_eq!(pids.len(), 1, "one supervisor for the task: {pids:?}");
    let supervisor = Pid::from_raw(pids[0]).unwrap();
    kill_process(supervisor, Signal::STOP).unwrap();

    let t = Instant::now();
    let r = call(
        &server.client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": task_id}),
    )
    .await;
    let waited = t.elapsed();
    kill_process(supervisor, Signal::CONT).unwrap();
    assert_eq!(
        r.is_error,
        Some(true),
        "unconfirmed cancel must be a tool error: {}",
        text(&r)
    );
    assert!(text(&r).contains("not confirmed"), "{}", text(&r));
    let observed = r
        .structured_content
        .clone()
        .expect("the observed state is carried");
    assert_eq!(observed["state"], "running", "{observed}");
    assert_eq!(observed["task_id"], task_id.as_str());
    assert!(
        waited >= Duration::from_millis(2_900),
        "waited only {waited:?}"
    );
    assert!(waited < Duration::from_secs(6), "waited {waited:?}");

    // Thawed, the supervisor finishes the cancellation it was asked for.
    let done = wait_terminal(&server.client, &id, &task_id, Duration::from_secs(10)).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    // A terminal task is returned as is; nothing is signalled.
    let again = ok(
        &server.client,
        "cancel_task",
        json!({"sandbox_id": id, "task_id": task_id}),
    )
    .await;
    assert_eq!(again["state"], "cancelled");
    assert_eq!(again["stdout"], "up\n");
    ok(&server.client, "kill_sandbox", json!({"sandbox_id": id})).await;
    assert!(server.close().await.success());
}
