//! snapshot_sandbox, list_snapshots, delete_snapshot and fork_sandbox end
//! to end (SPEC §17): a real `sandkeep serve` on the local provider. A fork
//! of a sandbox with a running task has its files but not the task's
//! process; bad names and a deleted snapshot are tool errors naming the
//! problem.

use crate::support;

use serde_json::json;
use support::mcp::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_copies_the_files_not_the_processes_and_snapshots_are_listed_and_deleted() {
    let home = Home::local();
    let server = StdioServer::start(&home).await;
    let c = &server.client;
    let id = sid(&ok(c, "create_sandbox", json!({"timeout": 300})).await);
    ok(
        c,
        "write_file",
        json!({"sandbox_id": id, "path": "work/state.txt", "content": "built"}),
    )
    .await;
    let task = ok(
        c,
        "start_task",
        json!({"sandbox_id": id, "timeout": 600,
               "command": "while :; do date +%s%N >> work/ticks; sleep 0.2; done"}),
    )
    .await;
    assert_eq!(task["state"], "running");

    // The loop is seen running in the original (the check below can fail).
    let live = ok(
        c,
        "run_command",
        json!({"sandbox_id": id, "command": "for i in 1 2 3 4 5 6 7 8 9 10; do \
            pgrep -x sleep >/dev/null && echo running && break; sleep 0.1; done"}),
    )
    .await;
    assert_eq!(live["stdout"], "running\n", "{live}");
    let fork = ok(c, "fork_sandbox", json!({"sandbox_id": id, "timeout": 120})).await;
    let copy = sid(&fork);
    assert_ne!(copy, id);
    assert!(
        fork["template"].as_str().unwrap().starts_with("snap-"),
        "{fork}"
    );
    let read = ok(
        c,
        "read_file",
        json!({"sandbox_id": copy, "path": "work/state.txt"}),
    )
    .await;
    assert_eq!(read["content"], "built");
    let tasks = ok(c, "list_tasks", json!({"sandbox_id": copy})).await;
    let listed = tasks["tasks"].as_array().unwrap();
    assert!(
        listed.iter().all(|t| t["state"] != "running"),
        "a fork runs none of the original's processes: {tasks}"
    );
    let procs = ok(
        c,
        "run_command",
        json!({"sandbox_id": copy, "command": "pgrep -x sleep || echo none"}),
    )
    .await;
    assert_eq!(procs["stdout"], "none\n", "{procs}");
    // The fork's snapshot is not kept.
    assert_eq!(
        ok(c, "list_snapshots", json!({})).await["snapshots"],
        json!([])
    );

    let snap = ok(
        c,
        "snapshot_sandbox",
        json!({"sandbox_id": id, "name": "after-build"}),
    )
    .await;
    assert_eq!(snap["template"], "after-build");
    assert!(snap["size_bytes"].as_u64().unwrap() > 0, "{snap}");
    let listed = ok(c, "list_snapshots", json!({})).await;
    assert_eq!(listed["snapshots"], json!([snap]));
    let dup = err(
        c,
        "snapshot_sandbox",
        json!({"sandbox_id": id, "name": "after-build"}),
    )
    .await;
    assert!(dup.contains("exists already"), "{dup}");
    let base = err(
        c,
        "snapshot_sandbox",
        json!({"sandbox_id": id, "name": "base"}),
    )
    .await;
    assert!(base.contains("exists already"), "{base}");
    let bad = err(
        c,
        "snapshot_sandbox",
        json!({"sandbox_id": id, "name": "../x"}),
    )
    .await;
    assert!(bad.contains("`name`"), "{bad}");
    let from = sid(&ok(c, "create_sandbox", json!({"template": "after-build"})).await);
    let read = ok(
        c,
        "read_file",
        json!({"sandbox_id": from, "path": "work/state.txt"}),
    )
    .await;
    assert_eq!(read["content"], "built");
    let deleted = ok(c, "delete_snapshot", json!({"snapshot_id": "after-build"})).await;
    assert_eq!(
        deleted,
        json!({"snapshot_id": "after-build", "deleted": true})
    );
    let again = ok(c, "delete_snapshot", json!({"snapshot_id": "after-build"})).await;
    assert_eq!(again["deleted"], false);
    // E2B's form of an id is one to name (its snapshots have it), though
    // no snapshot here has it; a path is none.
    let e2b_form = ok(
        c,
        "delete_snapshot",
        json!({"snapshot_id": "team-slug/after-build:default"}),
    )
    .await;
    assert_eq!(e2b_form["deleted"], false, "{e2b_form}");
    let path = err(
        c,
        "delete_snapshot",
        json!({"snapshot_id": "../after-build"}),
    )
    .await;
    assert!(path.contains("`snapshot_id`"), "{path}");
    let gone = err(c, "create_sandbox", json!({"template": "after-build"})).await;
    assert!(gone.contains("unknown template"), "{gone}");
    for sandbox in [&id, &copy, &from] {
        ok(c, "kill_sandbox", json!({"sandbox_id": sandbox})).await;
    }
    let dead = err(c, "snapshot_sandbox", json!({"sandbox_id": id})).await;
    assert!(dead.contains("no such sandbox"), "{dead}");
}
