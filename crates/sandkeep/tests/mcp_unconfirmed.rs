//! start_task when the submission cannot be confirmed (SPEC.md §4 rule 5).
//!
//! The provider here wraps the real local provider and reports the helper's
//! `start` exec as broken *after* forwarding it, as a connection lost after
//! sending looks. This is not an end-to-end test: it checks the service's
//! answer to that fault, and that the handle it returns is the real one.
//! The same wrapper pauses a retention to show that a session end waits
//! for it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::mcp::*;
use support::*;
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_start_answers_unknown_with_the_handle_and_retains_the_sandbox() {
    let home = Home::new();
    let recorder = Recorder::breaking_exec(local_provider(&home), " start ");
    let (client, service, session) = in_process(recorder.clone()).await;
    let id = ok(&client, "create_sandbox", json!({"timeout": 120})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let r = call(
        &client,
        "start_task",
        json!({"command": "printf ran; sleep 30"}),
    )
    .await;
    assert_ne!(
        r.is_error,
        Some(true),
        "an unconfirmed start is not a tool error: {}",
        text(&r)
    );
    let v = r.structured_content.clone().unwrap();
    assert_eq!(v["state"], "unknown", "{v}");
    assert_eq!(v["sandbox_id"], id.as_str());
    assert_eq!(v["exit_code"], serde_json::Value::Null);
    let error = v["error"]
        .as_str()
        .expect("an error explains the unknown state");
    for w in ["Do NOT call start_task again", "get_task", "kill_sandbox"] {
        assert!(error.contains(w), "{error:?} lacks {w:?}");
    }
    let task = tid(&v);

    // The sandbox was retained before the submission went out.
    let calls = recorder.calls();
    let retain = calls
        .iter()
        .position(|c| c.starts_with("retain"))
        .expect("retained");
    let start = calls
        .iter()
        .position(|c| c.contains(" start "))
        .expect("submitted");
    assert!(retain < start, "{calls:?}");
    assert!(session.destruction_set().is_empty());

    // The handle is the real one: the submission did reach the sandbox.
    until(Duration::from_secs(5), "the task's output", || async {
        ok(
            &client,
            "get_task",
            json!({"sandbox_id": id, "task_id": task}),
        )
        .await["stdout"]
            == "ran"
    })
    .await;

    // Ending the session keeps the retained sandbox.
    let end = service.end_session(&session).await;
    assert!(end.destroyed.is_empty(), "{end:?}");
    let listed = ok(&client, "list_sandboxes", json!({})).await;
    assert_eq!(listed["sandboxes"][0]["retained"], true, "{listed}");
    ok(&client, "kill_sandbox", json!({"sandbox_id": id})).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_the_server_are_masked_in_returned_output() {
    let home = Home::new();
    let (client, _service, _session) = in_process(local_provider(&home)).await;
    ok(&client, "create_sandbox", json!({"timeout": 60})).await;
    // in_process configures "host-secret-value" as the server's secret.
    let run = ok(
        &client,
        "run_command",
        json!({"command": "echo host-secret-value; echo host-secret-value >&2"}),
    )
    .await;
    assert_eq!(run["stdout"], "[REDACTED]\n");
    assert_eq!(run["stderr"], "[REDACTED]\n");
    let task = ok(
        &client,
        "start_task",
        json!({"command": "echo a-host-secret-value-b"}),
    )
    .await;
    let (sb, t) = (
        task["sandbox_id"].as_str().unwrap(),
        task["task_id"].as_str().unwrap(),
    );
    let done = wait_terminal(&client, sb, t, Duration::from_secs(10)).await;
    assert_eq!(done["stdout"], "a-[REDACTED]-b\n");
    // Offsets still count the saved (unmasked) bytes.
    assert_eq!(done["stdout_next_offset"], "a-host-secret-value-b\n".len());
    ok(&client, "kill_sandbox", json!({"sandbox_id": sb})).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_waits_for_a_start_that_is_retaining() {
    let home = Home::new();
    let (entered, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let recorder = Recorder::gating_retain(local_provider(&home), entered.clone(), go.clone());
    let (client, service, session) = in_process(recorder.clone()).await;
    let id = ok(&client, "create_sandbox", json!({"timeout": 60})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let starter = tokio::spawn(async move {
        let v = ok(&client, "start_task", json!({"command": "echo kept"})).await;
        (client, v)
    });
    entered.notified().await;
    // The start is inside retain. An end now must not judge the sandbox
    // unretained: it waits (here: at least the half second we give it).
    let mut ender = {
        let (service, session) = (service.clone(), session.clone());
        tokio::spawn(async move { service.end_session(&session).await })
    };
    let early = tokio::time::timeout(Duration::from_millis(500), &mut ender).await;
    assert!(
        early.is_err(),
        "the session ended while a start was retaining its sandbox: {early:?}"
    );
    go.notify_one();
    let (client, started) = starter.await.unwrap();
    let end = ender.await.unwrap();
    assert!(end.destroyed.is_empty(), "{end:?}");
    let done = wait_terminal(
        &client,
        &id,
        started["task_id"].as_str().unwrap(),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done["stdout"], "kept\n");
    ok(&client, "kill_sandbox", json!({"sandbox_id": id})).await;
    client.cancel().await.unwrap();
}
