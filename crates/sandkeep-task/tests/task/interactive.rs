//! Interactive tasks against real processes (SPEC.md §15): input through
//! a pipe and through a terminal, each call its own helper process (as
//! each server process would be), end of input, resize, ^C, the backlog
//! bound, redaction of what a terminal echoes, and every refusal.

use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::{User, assert_state, new_id};
use sandkeep_proto::limits::{INPUT_BACKLOG_MAX_BYTES, INPUT_MAX_BYTES};
use sandkeep_proto::wire::{ErrorKind, ErrorReply, InputReply, TaskSummary};
use sandkeep_proto::{TaskId, TaskState};
use serde_json::json;

const SOON: Duration = Duration::from_secs(10);

fn start(user: &User, id: &TaskId, command: &str, input: serde_json::Value) -> TaskSummary {
    let req = json!({"task_id": id, "command": command, "timeout": 60, "input": input});
    user.ok(&["start", &req.to_string()])
}

fn pty(cols: u16, rows: u16) -> serde_json::Value {
    json!({"pty": {"cols": cols, "rows": rows}})
}

/// Runs `input` with `data` on the helper's stdin: the reply, or the
/// refusal.
fn send(user: &User, id: &TaskId, data: &[u8], close: bool) -> Result<InputReply, ErrorReply> {
    let req = json!({"task_id": id, "close": close}).to_string();
    let mut child = user
        .command()
        .args(["input", &req])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the helper");
    let mut stdin = child.stdin.take().expect("piped");
    // A refusal may come before everything is read: the pipe then breaks.
    let _ = stdin.write_all(data);
    drop(stdin);
    let out = child.wait_with_output().expect("waiting for the helper");
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        Ok(serde_json::from_str(&text).unwrap_or_else(|e| panic!("reply {text:?}: {e}")))
    } else {
        Err(serde_json::from_str(&text).unwrap_or_else(|e| panic!("refusal {text:?}: {e}")))
    }
}

fn accepted(user: &User, id: &TaskId, data: &[u8], close: bool) {
    let reply = send(user, id, data, close).unwrap_or_else(|e| panic!("input refused: {e:?}"));
    assert_eq!(reply.bytes_accepted, data.len() as u64);
}

fn refused(user: &User, id: &TaskId, data: &[u8], close: bool, kind: ErrorKind) -> String {
    let e = send(user, id, data, close).expect_err("input should be refused");
    assert_eq!(e.error.kind, kind, "{}", e.error.message);
    e.error.message
}

fn resize(user: &User, id: &TaskId, cols: u16, rows: u16) -> std::process::Output {
    let req = json!({"task_id": id, "cols": cols, "rows": rows}).to_string();
    user.run(&["resize", &req])
}

fn wait_stdout(user: &User, id: &TaskId, what: &str) -> String {
    user.wait_for(id, SOON, &format!("showing {what:?}"), |s| {
        s.stdout.contains(what)
    })
    .stdout
}

#[test]
fn a_reader_is_answered_line_by_line_through_a_pipe() {
    let user = User::new();
    let id = new_id();
    let cmd = "read a; echo \"got $a\"; read b; echo \"got $b\" >&2";
    assert_eq!(
        start(&user, &id, cmd, json!("pipe")).state,
        TaskState::Running
    );
    accepted(&user, &id, b"one\n", false);
    wait_stdout(&user, &id, "got one");
    accepted(&user, &id, b"two\n", false);
    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Succeeded, Some(0));
    assert_eq!(done.stdout, "got one\n");
    assert_eq!(done.stderr, "got two\n");
}

#[test]
fn close_ends_the_input_after_the_data_and_nothing_is_taken_after_it() {
    let user = User::new();
    let id = new_id();
    start(&user, &id, "cat; echo END", json!("pipe"));
    accepted(&user, &id, b"abc", false);
    accepted(&user, &id, b"def", true);
    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Succeeded, Some(0));
    assert_eq!(done.stdout, "abcdefEND\n");
    refused(&user, &id, b"x", false, ErrorKind::StdinClosed);
}

#[test]
fn a_pty_task_has_a_terminal_of_its_size_that_follows_resizes() {
    let user = User::new();
    let id = new_id();
    let cmd = "tty; echo \"TERM=$TERM\"; stty size; read x; stty size; echo \"x=$x\"";
    start(&user, &id, cmd, pty(100, 30));
    let first = wait_stdout(&user, &id, "30 100");
    assert!(
        first.contains("/dev/pts/"),
        "tty names a terminal: {first:?}"
    );
    assert!(first.contains("TERM=xterm-256color"), "{first:?}");
    let out = resize(&user, &id, 120, 40);
    assert!(out.status.success(), "{out:?}");
    accepted(&user, &id, b"typed\n", false);
    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Succeeded, Some(0));
    // The terminal echoes what was typed, and joins both streams.
    assert!(done.stdout.contains("40 120"), "{:?}", done.stdout);
    assert!(done.stdout.contains("typed\r\n"), "{:?}", done.stdout);
    assert!(done.stdout.contains("x=typed"), "{:?}", done.stdout);
    assert_eq!(done.stderr, "");
}

#[test]
fn control_c_reaches_the_foreground_job_and_control_d_ends_a_line_reader() {
    let user = User::new();
    let id = new_id();
    let cmd = "trap 'echo INTERRUPTED; exit 7' INT; echo READY; while :; do sleep 0.05; done";
    start(&user, &id, cmd, pty(80, 24));
    wait_stdout(&user, &id, "READY");
    accepted(&user, &id, b"\x03", false);
    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Failed, Some(7));
    assert!(done.stdout.contains("INTERRUPTED"), "{:?}", done.stdout);

    let id = new_id();
    start(&user, &id, "cat; echo EOF-SEEN", pty(80, 24));
    accepted(&user, &id, b"line\n", true);
    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Succeeded, Some(0));
    assert!(done.stdout.contains("EOF-SEEN"), "{:?}", done.stdout);
}

#[test]
fn secrets_a_terminal_echoes_are_redacted() {
    let user = User::with_env(&[("DB_PASSWORD", "hunter2-is-secret")]);
    let id = new_id();
    start(&user, &id, "read x; echo done", pty(80, 24));
    accepted(&user, &id, b"hunter2-is-secret\n", false);
    let done = user.wait_terminal(&id, SOON);
    assert!(done.stdout.contains("[REDACTED]"), "{:?}", done.stdout);
    assert!(!done.stdout.contains("hunter2"), "{:?}", done.stdout);
}

#[test]
fn at_most_a_mib_waits_and_a_refused_input_leaves_nothing_behind() {
    let user = User::new();
    let id = new_id();
    // Reads nothing until told to by a file, then counts every byte.
    let cmd = "while [ ! -e go ]; do sleep 0.02; done; wc -c";
    start(&user, &id, cmd, json!("pipe"));
    let chunk = vec![b'x'; INPUT_MAX_BYTES];
    let mut taken = 0u64;
    let message = loop {
        match send(&user, &id, &chunk, false) {
            Ok(r) => taken += r.bytes_accepted,
            Err(e) => {
                assert_eq!(e.error.kind, ErrorKind::InputBacklogFull, "{e:?}");
                break e.error.message;
            }
        }
        assert!(taken <= 4 * INPUT_BACKLOG_MAX_BYTES, "never refused");
    };
    assert!(message.contains("input backlog full"), "{message}");
    assert!(
        taken >= INPUT_BACKLOG_MAX_BYTES,
        "refused after {taken} bytes"
    );
    std::fs::write(user.home().join("go"), "").unwrap();
    accepted(&user, &id, b"", true);
    let done = user.wait_terminal(&id, SOON);
    assert_eq!(
        done.stdout.trim(),
        taken.to_string(),
        "every accepted byte, once"
    );
}

#[test]
fn input_is_refused_with_the_reason() {
    let user = User::new();
    let plain = new_id();
    user.start(&plain, "sleep 30", 60);
    let m = refused(&user, &plain, b"x", false, ErrorKind::NotInteractive);
    assert!(m.contains("start_task"), "{m}");
    let out = resize(&user, &plain, 80, 24);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    let pipe = new_id();
    start(&user, &pipe, "sleep 30", json!("pipe"));
    let too_much = vec![b'x'; INPUT_MAX_BYTES + 1];
    let m = refused(&user, &pipe, &too_much, false, ErrorKind::BadRequest);
    assert!(m.contains("data"), "{m}");
    let m = String::from_utf8_lossy(&resize(&user, &pipe, 80, 24).stdout).into_owned();
    assert!(m.contains("not_interactive"), "{m}");

    let term = new_id();
    start(&user, &term, "sleep 30", pty(80, 24));
    let m = String::from_utf8_lossy(&resize(&user, &term, 0, 24).stdout).into_owned();
    assert!(m.contains("cols"), "{m}");

    let ended = new_id();
    start(&user, &ended, "true", json!("pipe"));
    user.wait_terminal(&ended, SOON);
    let m = refused(&user, &ended, b"x", false, ErrorKind::TaskEnded);
    assert!(m.contains("ended"), "{m}");

    let bad_size = json!({"task_id": new_id(), "command": "true", "timeout": 5,
                          "input": pty(1001, 24)});
    let m = user.refused(&["start", &bad_size.to_string()], ErrorKind::BadRequest);
    assert!(m.contains("cols"), "{m}");
    for id in [plain, pipe, term] {
        user.cancel(&id);
    }
}

#[test]
fn input_waiting_for_a_killed_supervisor_is_not_delivered_anywhere() {
    let user = User::new();
    let id = new_id();
    let cmd = "while [ ! -e go ]; do sleep 0.02; done; cat > got";
    start(&user, &id, cmd, json!("pipe"));
    // More than the pipe holds, so some of it still waits in the queue.
    accepted(&user, &id, &vec![b'y'; INPUT_MAX_BYTES], false);
    accepted(&user, &id, &vec![b'y'; INPUT_MAX_BYTES], false);
    let supervisor = user.record(&id).supervisor.pid;
    let pid = rustix::process::Pid::from_raw(supervisor as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let s = user.wait_for(&id, SOON, "unknown", |s| {
        s.summary.state == TaskState::Unknown
    });
    assert_eq!(s.summary.exit_code, None);
    std::fs::write(user.home().join("go"), "").unwrap();
    let m = refused(&user, &id, b"z", false, ErrorKind::TaskEnded);
    assert!(m.contains("unknown"), "{m}");
}
