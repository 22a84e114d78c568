//! pause_sandbox and resume_sandbox end to end (SPEC §17): a real
//! `sandkeep serve` on the local provider. The task tools read a paused
//! sandbox as usual, run_command resumes it first, the wrong transitions
//! and a bad `on_timeout` are tool errors, and a server restart keeps it
//! paused. (crates/sandkeep-local/tests/local_limits checks the freezing
//! itself.)

use crate::support;

use serde_json::json;
use support::mcp::*;
use support::*;

fn state_in(listed: &serde_json::Value, id: &str) -> String {
    listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox_id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"))["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_reads_as_usual_resumes_on_use_and_outlives_the_server() {
    if !require(
        rustix::process::geteuid().is_root(),
        "cgroup freezing is set up as root",
    ) {
        return;
    }
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let bad = err(c, "create_sandbox", json!({"on_timeout": "sleep"})).await;
    assert!(
        bad.contains("on_timeout") && bad.contains("\"pause\""),
        "{bad}"
    );
    let created = ok(
        c,
        "create_sandbox",
        json!({"timeout": 300, "on_timeout": "kill"}),
    )
    .await;
    let id = sid(&created);
    let task = ok(
        c,
        "start_task",
        json!({"sandbox_id": id, "timeout": 600, "command": "sleep 1000"}),
    )
    .await;
    let task_id = tid(&task);
    // A read now starts the sandbox's resident reader before the pause.
    let got = ok(c, "get_task", json!({"sandbox_id": id, "task_id": task_id})).await;
    assert_eq!(got["state"], "running", "{got}");
    let running = err(c, "resume_sandbox", json!({"sandbox_id": id})).await;
    assert!(running.contains("already running"), "{running}");

    let paused = ok(c, "pause_sandbox", json!({"sandbox_id": id})).await;
    assert_eq!(paused, json!({"sandbox_id": id, "state": "paused"}));
    let again = err(c, "pause_sandbox", json!({"sandbox_id": id})).await;
    assert!(again.contains("already paused"), "{again}");
    let listed = ok(c, "list_sandboxes", json!({})).await;
    assert_eq!(state_in(&listed, &id), "paused");
    // Not held up by a reader frozen with the sandbox (whose answer a read
    // would wait 1 s for before going without it).
    let asked = std::time::Instant::now();
    let got = ok(c, "get_task", json!({"sandbox_id": id, "task_id": task_id})).await;
    assert_eq!(got["state"], "running", "{got}");
    assert!(
        asked.elapsed() < std::time::Duration::from_millis(900),
        "get_task of a paused sandbox took {:?}",
        asked.elapsed()
    );
    let tasks = ok(c, "list_tasks", json!({"sandbox_id": id})).await;
    assert_eq!(tasks["tasks"][0]["state"], "running", "{tasks}");
    assert_eq!(
        state_in(&ok(c, "list_sandboxes", json!({})).await, &id),
        "paused",
        "a task read resumed the sandbox"
    );

    // A restart of the server: the sandbox is still paused.
    drop(server);
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    assert_eq!(
        state_in(&ok(c, "list_sandboxes", json!({})).await, &id),
        "paused"
    );

    // run_command resumes it first.
    let out = ok(
        c,
        "run_command",
        json!({"sandbox_id": id, "command": "echo up"}),
    )
    .await;
    assert_eq!(out["stdout"], "up\n", "{out}");
    assert_eq!(
        state_in(&ok(c, "list_sandboxes", json!({})).await, &id),
        "running"
    );

    ok(c, "pause_sandbox", json!({"sandbox_id": id})).await;
    let resumed = ok(
        c,
        "resume_sandbox",
        json!({"sandbox_id": id, "timeout": 120}),
    )
    .await;
    assert_eq!(resumed["state"], "running");
    let expires_at = resumed["expires_at"].as_u64().unwrap();
    let now = sandkeep::provider::unix_now();
    assert!((now + 115..=now + 121).contains(&expires_at), "{resumed}");
    ok(c, "kill_sandbox", json!({"sandbox_id": id})).await;
    let gone = err(c, "pause_sandbox", json!({"sandbox_id": id})).await;
    assert!(gone.contains("no such sandbox"), "{gone}");
}
