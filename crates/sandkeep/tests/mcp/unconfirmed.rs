//! start_task when the submission cannot be confirmed (docs/tools.md, start_task).
//!
//! The provider here wraps the real local provider and spoils the helper's
//! `start` exec *after* forwarding it: as a connection lost after sending,
//! or as an exec that timed out without an answer. This is not an
//! end-to-end test: it checks the service's answer to those faults, and
//! that the handle it returns is the real one.
//! The same wrapper pauses a retention or a creation to show what a
//! session end does meanwhile.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::mcp::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_connection_breaks_answers_unknown_and_retains_the_sandbox() {
    unconfirmed_start(ExecFault::ConnectionLost).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_helper_times_out_answers_unknown_and_retains_the_sandbox() {
    unconfirmed_start(ExecFault::TimedOut).await;
}

async fn unconfirmed_start(fault: ExecFault) {
    let home = Home::new();
    let recorder = Recorder::breaking_exec(local_provider(&home), " start ", fault);
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
    assert_eq!(v["state"], "unknown", "{fault:?}: {v}");
    assert_eq!(v["sandbox_id"], id.as_str());
    assert_eq!(v["exit_code"], serde_json::Value::Null);
    let error = v["error"]
        .as_str()
        .expect("an error explains the unknown state");
    let cause = match fault {
        ExecFault::ConnectionLost => "connection reset",
        ExecFault::TimedOut => "did not answer within",
    };
    for w in [
        "Do NOT call start_task again",
        "get_task",
        "kill_sandbox",
        cause,
    ] {
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

/// The end of a session while one of its starts is about to retain the
/// sandbox (paused in the wrapper, before the provider's own exclusion):
/// the end does not wait for it, destroys the still unretained sandbox,
/// and the start then fails plainly without ever reaching the helper. The
/// opposite order (retained first, kept) is raced across two providers in
/// crates/sandkeep-local/tests/sandbox/lifecycle.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_before_the_retain_fails_the_start_and_runs_nothing() {
    let home = Home::new();
    let gate = Gate::new("retain");
    let (entered, go) = (gate.entered.clone(), gate.go.clone());
    let recorder = Recorder::gating(local_provider(&home), gate);
    let (client, service, session) = in_process(recorder.clone()).await;
    let id = ok(&client, "create_sandbox", json!({"timeout": 60})).await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let starter = tokio::spawn(async move {
        let e = err(&client, "start_task", json!({"command": "echo ran"})).await;
        (client, e)
    });
    entered.notified().await;
    let end = tokio::time::timeout(Duration::from_secs(10), service.end_session(&session))
        .await
        .expect("the session end waited for a paused start");
    assert_eq!(
        end.destroyed
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
        vec![id.clone()],
        "{end:?}"
    );
    go.notify_one();
    let (client, error) = starter.await.unwrap();
    assert!(error.contains("no such sandbox"), "{error}");
    let calls = recorder.calls();
    assert!(
        !calls.iter().any(|c| c.contains(" start ")),
        "the helper was asked to start: {calls:?}"
    );
    client.cancel().await.unwrap();
}

/// A sandbox whose creation finishes after its session ended is destroyed
/// at once (with an error saying so), not left alive to its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_created_while_its_session_ends_is_destroyed() {
    let home = Home::new();
    let gate = Gate::new("create");
    let (entered, go) = (gate.entered.clone(), gate.go.clone());
    let recorder = Recorder::gating(local_provider(&home), gate);
    let (client, service, session) = in_process(recorder.clone()).await;
    let creator = tokio::spawn(async move {
        let e = err(&client, "create_sandbox", json!({"timeout": 60})).await;
        (client, e)
    });
    entered.notified().await;
    let end = tokio::time::timeout(Duration::from_secs(10), service.end_session(&session))
        .await
        .expect("the session end waited for a paused create");
    assert!(end.destroyed.is_empty(), "{end:?}");
    go.notify_one();
    let (client, error) = creator.await.unwrap();
    assert!(error.contains("the session ended while sandbox"), "{error}");
    let left = recorder.inner.as_ref().unwrap().list().await.unwrap();
    assert!(left.is_empty(), "left alive: {left:?}");
    client.cancel().await.unwrap();
}
