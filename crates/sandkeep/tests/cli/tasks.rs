//! The command line against real sandboxes and tasks: what it starts an
//! MCP server sees and the other way round, `task logs --follow` streaming,
//! exit codes that carry the task's status, and `--json` in the MCP shapes.

use crate::support;

use std::io::Read;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cli::{assert_mcp_shape, assert_schema, describe, parse_one};
use support::mcp::StdioServer;
use support::{Home, poll, send_signal};

/// Waits (bounded) until the task has left `running`, through the CLI.
fn settled(home: &Home, sandbox: &str, task: &str) -> Value {
    poll(Duration::from_secs(30), "the task ending", || {
        let v = home.json(&["task", "get", sandbox, task, "--json"]);
        (v["state"] != "running").then_some(v)
    })
}

/// A task that prints FIRST, then waits inside the sandbox for the file
/// `go` (see [`open_gate`]) before it prints SECOND and runs `then`.
fn start_gated(home: &Home, sandbox: &str, then: &str) -> String {
    home.start(
        sandbox,
        &format!("echo FIRST; while [ ! -e go ]; do sleep 0.05; done; echo SECOND{then}"),
    )
}

/// Lets a [`start_gated`] task go on.
fn open_gate(home: &Home, sandbox: &str) {
    home.ok(&["exec", "--sandbox", sandbox, "--", "touch go"]);
}

/// `task logs --follow` with piped stdout and `stderr`.
fn spawn_follow(home: &Home, sandbox: &str, task: &str, stderr: Stdio) -> Child {
    home.command(&["task", "logs", sandbox, task, "--follow"])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn task logs --follow")
}

/// Waits (bounded) until `child` has exited, described as `what`.
fn exited(child: &mut Child, what: &str) -> ExitStatus {
    poll(Duration::from_secs(30), what, || child.try_wait().unwrap())
}

/// Everything `child` wrote to its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_and_mcp_server_see_the_same_sandboxes_and_tasks() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let from_cli = home.start(&sandbox, "echo from-cli");

    let server = StdioServer::start(&home).await;
    let listed = server.ok("list_sandboxes", json!({})).await;
    let entry = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox_id"] == sandbox.as_str())
        .unwrap_or_else(|| panic!("the MCP server does not list the CLI's sandbox: {listed}"));
    assert_eq!(
        entry["retained"], true,
        "starting a task retains the sandbox: {entry}"
    );

    let seen = poll(
        Duration::from_secs(30),
        "the CLI's task ending, seen over MCP",
        || {
            let v = futures_block(server.ok(
                "get_task",
                json!({"sandbox_id": sandbox, "task_id": from_cli}),
            ));
            (v["state"] != "running").then_some(v)
        },
    );
    assert_eq!(seen["state"], "succeeded", "{seen}");
    assert_eq!(seen["stdout"], "from-cli\n", "{seen}");

    let started = server
        .ok(
            "start_task",
            json!({"sandbox_id": sandbox, "command": "echo from-mcp; echo oops >&2; exit 5"}),
        )
        .await;
    let from_mcp = started["task_id"].as_str().unwrap().to_owned();
    let out = home.run(&["task", "wait", &sandbox, &from_mcp]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "task wait exits with the task's status: {}",
        describe(&out)
    );

    // The same read gives the same object through both front ends.
    let by_cli = home.json(&["task", "get", &sandbox, &from_mcp, "--json"]);
    let by_mcp = server
        .ok(
            "get_task",
            json!({"sandbox_id": sandbox, "task_id": from_mcp}),
        )
        .await;
    assert_eq!(by_cli, by_mcp);
    assert_eq!(by_cli["stdout"], "from-mcp\n");
    assert_eq!(by_cli["stderr"], "oops\n");
    assert_eq!(by_cli["exit_code"], 5);

    let tasks = home.json(&["task", "list", &sandbox, "--json"]);
    let mut ids: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected = vec![from_cli.as_str(), from_mcp.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected, "task list shows both tasks: {tasks}");

    // Ending the MCP session leaves the retained sandbox to the CLI.
    server.close().await;
    let killed = home.json(&["sandbox", "kill", &sandbox, "--json"]);
    assert_eq!(killed, json!({"sandbox_id": sandbox, "killed": true}));
}

/// Runs a future to completion from synchronous code inside a multi-thread
/// runtime (the poll helper is synchronous).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

#[test]
fn logs_follow_streams_output_as_it_is_saved_and_exits_with_the_tasks_code() {
    let home = Home::new();
    let sandbox = home.sandbox();
    // The task waits inside the sandbox for a file the test creates only
    // after it has seen FIRST arrive through `--follow`.
    let task = start_gated(&home, &sandbox, "; echo late-err >&2; exit 3");
    let mut child = spawn_follow(&home, &sandbox, &task, Stdio::piped());
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(&seen).contains("FIRST\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend(chunk),
            Err(_) => panic!("FIRST did not arrive through --follow within 30 s; got {seen:?}"),
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&seen),
        "FIRST\n",
        "nothing after FIRST may exist yet"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "--follow ended while the task was still running"
    );
    let task_now = home.json(&["task", "get", &sandbox, &task, "--json"]);
    assert_eq!(task_now["state"], "running", "{task_now}");

    open_gate(&home, &sandbox);
    let status = exited(&mut child, "task logs --follow exiting");
    reader.join().unwrap();
    seen.extend(rx.try_iter().flatten());
    assert_eq!(String::from_utf8_lossy(&seen), "FIRST\nSECOND\n");
    assert_eq!(
        status.code(),
        Some(3),
        "--follow exits with the task's status"
    );
    let stderr = stderr_of(&mut child);
    assert!(
        stderr.is_empty(),
        "no status line when stderr is not a terminal: {stderr:?}"
    );

    // The stderr log, and the whole log again without --follow.
    assert_eq!(
        home.ok(&["task", "logs", &sandbox, &task, "--stderr"]),
        "late-err\n"
    );
    assert_eq!(
        home.ok(&["task", "logs", &sandbox, &task]),
        "FIRST\nSECOND\n"
    );
}

#[test]
fn escape_sequences_from_a_sandbox_are_shown_escaped_but_logs_stay_exact() {
    let home = Home::new();
    let sandbox = home.sandbox();
    // Its output: a window-title sequence, a bell and a screen clear.
    let task = home.start(&sandbox, "printf '\\033]0;pwned\\007hi\\033[2J\\n'");
    settled(&home, &sandbox, &task);
    let raw = "\x1b]0;pwned\x07hi\x1b[2J\n";
    assert_eq!(home.ok(&["task", "logs", &sandbox, &task]), raw);
    let get = home.ok(&["task", "get", &sandbox, &task]);
    assert!(!get.contains('\x1b') && !get.contains('\x07'), "{get:?}");
    assert!(get.contains("\\u{1b}]0;pwned\\u{7}hi\\u{1b}[2J"), "{get:?}");
}

#[test]
fn logs_put_characters_cut_by_page_ends_back_together() {
    let home = Home::new();
    let sandbox = home.sandbox();
    // 5 bytes per repetition: 64 KiB pages end inside a character.
    let task = home.start(
        &sandbox,
        "for i in $(seq 30000); do printf 'é€'; done; printf end",
    );
    settled(&home, &sandbox, &task);
    let expected = format!("{}end", "é€".repeat(30_000));
    let printed = home.ok(&["task", "logs", &sandbox, &task]);
    assert!(
        printed == expected,
        "logs changed the bytes: {} vs {} bytes",
        printed.len(),
        expected.len()
    );
    let out = home.run(&["task", "logs", &sandbox, &task, "--follow"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stdout == expected.as_bytes(),
        "--follow changed the bytes"
    );
}

#[test]
fn exit_codes_carry_the_command_status_and_the_documented_codes() {
    let home = Home::new();
    let sandbox = home.sandbox();

    let out = home.run(&[
        "exec",
        "--sandbox",
        &sandbox,
        "--",
        "echo out; echo err >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");

    let out = home.run(&["exec", "--sandbox", &sandbox, "--", "kill -TERM $$"]);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "a signal gives 128+N: {}",
        describe(&out)
    );

    let out = home.run(&[
        "exec",
        "--sandbox",
        &sandbox,
        "--timeout",
        "1",
        "--",
        "sleep 30",
    ]);
    let code = out.status.code();
    assert!(
        matches!(code, Some(124 | 137 | 143)),
        "timed out: {}",
        describe(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timeout"),
        "{}",
        describe(&out)
    );

    // The supervisor killed without a record: the task's state is unknown.
    // The task kills it only once its start has been confirmed.
    let lost = home.start(
        &sandbox,
        "while [ ! -e kill-now ]; do sleep 0.05; done; kill -KILL $PPID; sleep 30",
    );
    home.ok(&["exec", "--sandbox", &sandbox, "--", "touch kill-now"]);
    let out = home.run(&["task", "wait", &sandbox, &lost]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "unknown has its own code: {}",
        describe(&out)
    );

    let slow = home.start(&sandbox, "sleep 30");
    let begun = Instant::now();
    let out = home.run(&["task", "wait", &sandbox, &slow, "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(76), "{}", describe(&out));
    assert!(begun.elapsed() < Duration::from_secs(10));
    assert!(String::from_utf8_lossy(&out.stderr).contains("still running"));

    let cancelled = home.json(&["task", "cancel", &sandbox, &slow, "--json"]);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let out = home.run(&["task", "wait", &sandbox, &slow]);
    let expected = cancelled["exit_code"].as_u64().map_or(1, |c| c as i32);
    assert_eq!(out.status.code(), Some(expected), "{}", describe(&out));
}

#[test]
fn exec_without_a_sandbox_runs_in_a_fresh_one_that_is_gone_afterwards() {
    let home = Home::new();
    let kept = home.sandbox();
    let out = home.run(&["exec", "--", "echo", "hello", "world"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(out.stdout, b"hello world\n");
    let listed = home.json(&["sandbox", "list", "--json"]);
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![kept.as_str()],
        "exec's own sandbox must be destroyed, `sandbox create`'s kept"
    );
}

#[test]
fn sandbox_json_outputs_have_the_mcp_result_shapes() {
    let home = Home::new();
    let created = home.json(&["sandbox", "create", "--timeout", "600", "--json"]);
    assert_mcp_shape("create_sandbox", &created);
    let sandbox = created["sandbox_id"].as_str().unwrap().to_owned();

    let listed = home.json(&["sandbox", "list", "--json"]);
    assert_mcp_shape("list_sandboxes", &listed);
    assert_eq!(listed["sandboxes"][0]["sandbox_id"], sandbox.as_str());

    let killed = home.json(&["sandbox", "kill", &sandbox, "--json"]);
    assert_mcp_shape("kill_sandbox", &killed);
    let again = home.json(&["sandbox", "kill", &sandbox, "--json"]);
    assert_eq!(again["killed"], false);
}

#[test]
fn exec_json_has_the_run_command_shape_and_keeps_the_exit_code() {
    let home = Home::new();
    let created = home.json(&["sandbox", "create", "--env", "GREETING=hi", "--json"]);
    let sandbox = created["sandbox_id"].as_str().unwrap();
    let out = home.run(&[
        "exec",
        "--sandbox",
        sandbox,
        "--json",
        "--",
        "echo $GREETING; exit 4",
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "--json keeps the exit code: {}",
        describe(&out)
    );
    let ran = parse_one(&String::from_utf8_lossy(&out.stdout), &["exec"]);
    assert_mcp_shape("run_command", &ran);
    assert_eq!(ran["stdout"], "hi\n");
    assert_eq!(ran["exit_code"], 4);
}

#[test]
fn task_json_outputs_have_the_mcp_result_shapes() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let started = home.json(&[
        "task",
        "start",
        "--sandbox",
        &sandbox,
        "--json",
        "--",
        "echo task-out",
    ]);
    assert_mcp_shape("start_task", &started);
    let task = started["task_id"].as_str().unwrap().to_owned();
    let got = settled(&home, &sandbox, &task);
    assert_mcp_shape("get_task", &got);

    let waited = parse_one(
        &home.ok(&["task", "wait", &sandbox, &task, "--json"]),
        &["task", "wait"],
    );
    assert_mcp_shape("get_task", &waited);
    assert_eq!(waited, got, "wait --json prints what get --json prints");

    let cancelled = home.json(&["task", "cancel", &sandbox, &task, "--json"]);
    assert_mcp_shape("cancel_task", &cancelled);
    assert_eq!(
        cancelled["state"], "succeeded",
        "cancelling a finished task leaves it alone"
    );

    let pages = home.ok(&["task", "logs", &sandbox, &task, "--json"]);
    let mut text = String::new();
    for line in pages.lines() {
        let page: Value = serde_json::from_str(line).expect("each logs --json line is JSON");
        assert_mcp_shape("get_task", &page);
        text.push_str(page["stdout"].as_str().unwrap());
    }
    assert_eq!(text, "task-out\n");

    let tasks = home.json(&["task", "list", &sandbox, "--json"]);
    let schema =
        serde_json::to_value(schemars::schema_for!(sandkeep::service::ListTasksResult)).unwrap();
    assert_schema("list_tasks", &schema, &tasks);
    assert_eq!(tasks["tasks"][0]["task_id"], task.as_str());
}

#[test]
fn on_a_terminal_a_status_line_shows_on_stderr_and_never_in_the_output() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let task = start_gated(&home, &sandbox, "");
    let pty = support::cli::Pty::open();
    let mut child = spawn_follow(&home, &sandbox, &task, pty.stdio());
    // Redrawn at every poll, it comes to count FIRST's 6 saved bytes.
    poll(
        Duration::from_secs(30),
        "a status line on the terminal",
        || pty.text().contains("running · ").then_some(()),
    );
    poll(
        Duration::from_secs(30),
        "the status line counting saved bytes",
        || pty.text().contains("stdout 6 B · stderr 0 B").then_some(()),
    );

    let waiter_pty = support::cli::Pty::open();
    let mut waiter = home
        .command(&["task", "wait", &sandbox, &task])
        .stdout(Stdio::piped())
        .stderr(waiter_pty.stdio())
        .spawn()
        .expect("spawn task wait");
    poll(
        Duration::from_secs(30),
        "task wait showing the elapsed time",
        || waiter_pty.text().contains("running · ").then_some(()),
    );

    open_gate(&home, &sandbox);
    let code = exited(&mut child, "--follow exiting");
    assert_eq!(code.code(), Some(0));
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "FIRST\nSECOND\n",
        "the status line stays out of the log"
    );
    assert!(
        pty.text().ends_with("\r\x1b[2K"),
        "the status line is erased at the end: {:?}",
        pty.text()
    );

    let code = exited(&mut waiter, "task wait exiting");
    assert_eq!(code.code(), Some(0));
    let mut out = Vec::new();
    waiter.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(
        out.is_empty(),
        "task wait prints nothing on stdout without --json"
    );
}

#[test]
fn ctrl_c_ends_the_session_and_destroys_execs_fresh_sandbox() {
    let home = Home::new();
    let mut child = home
        .command(&["exec", "--", "sleep 60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn exec");
    let fresh = poll(Duration::from_secs(30), "exec's sandbox appearing", || {
        let listed = home.json(&["sandbox", "list", "--json"]);
        listed["sandboxes"][0]["sandbox_id"]
            .as_str()
            .map(str::to_owned)
    });
    // The command runs once the sandbox exists; interrupt it mid-run.
    send_signal(child.id() as i32, rustix::process::Signal::INT);
    let code = exited(&mut child, "exec exiting after SIGINT");
    assert_eq!(code.code(), Some(130), "Ctrl-C exits 130");
    let listed = home.json(&["sandbox", "list", "--json"]);
    assert_eq!(
        listed["sandboxes"],
        json!([]),
        "sandbox {fresh} outlived the interrupted exec"
    );
}

#[test]
fn logs_mask_the_configuration_secrets_serve_would_mask() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let task = home.start(&sandbox, "echo token=s3cr3t-value-42");
    settled(&home, &sandbox, &task);
    let masked = home
        .command(&["task", "logs", &sandbox, &task])
        .env("SANDKEEP_AUTH_TOKEN", "s3cr3t-value-42")
        .output()
        .expect("run task logs");
    assert_eq!(
        String::from_utf8_lossy(&masked.stdout),
        "token=[REDACTED]\n"
    );
    assert_eq!(
        home.ok(&["task", "logs", &sandbox, &task]),
        "token=s3cr3t-value-42\n"
    );
}

#[test]
fn follow_stops_when_its_reader_goes_away() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let task = start_gated(&home, &sandbox, "; sleep 60");
    let mut child = spawn_follow(&home, &sandbox, &task, Stdio::piped());
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 6];
    stdout
        .read_exact(&mut first)
        .expect("FIRST through --follow");
    assert_eq!(&first, b"FIRST\n");
    drop(stdout);
    open_gate(&home, &sandbox);
    let status = exited(&mut child, "--follow noticing its reader is gone");
    assert_eq!(status.code(), Some(141), "as a process ended by SIGPIPE");
    let stderr = stderr_of(&mut child);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let still = home.json(&["task", "get", &sandbox, &task, "--json"]);
    assert_eq!(still["state"], "running", "the task is untouched: {still}");
}

#[test]
fn human_output_is_tables_and_fields_with_handles_on_stdout() {
    let home = Home::new();
    let out = home.run(&["sandbox", "create"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let sandbox = String::from_utf8(out.stdout).unwrap().trim_end().to_owned();
    assert!(
        !sandbox.is_empty() && !sandbox.contains(char::is_whitespace),
        "only the id on stdout: {sandbox:?}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("sandkeep sandbox kill"));

    let out = home.run(&[
        "task",
        "start",
        "--sandbox",
        &sandbox,
        "--",
        "printf",
        "'a\\nb\\n'",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let handle = String::from_utf8(out.stdout).unwrap();
    let parts: Vec<&str> = handle.split_whitespace().collect();
    assert_eq!(
        parts.len(),
        2,
        "task start prints `SANDBOX TASK`: {handle:?}"
    );
    assert_eq!(parts[0], sandbox);
    settled(&home, &sandbox, parts[1]);

    let shown = home.ok(&["task", "get", parts[0], parts[1]]);
    for line in [
        "state      succeeded",
        "exit code  0",
        "stdout     4 B saved",
        "--- stdout",
        "a\nb\n",
    ] {
        assert!(
            shown.contains(line),
            "task get should show {line:?}:\n{shown}"
        );
    }
    let listed = home.ok(&["sandbox", "list"]);
    assert!(listed.starts_with("SANDBOX "), "{listed}");
    assert!(
        listed.contains(&sandbox) && listed.contains(" yes "),
        "retained after a task: {listed}"
    );
    let tasks = home.ok(&["task", "list", &sandbox]);
    assert!(
        tasks.starts_with("TASK ") && tasks.contains("succeeded"),
        "{tasks}"
    );
}

#[test]
fn logs_of_a_flood_print_the_saved_mebibyte_and_say_the_rest_was_dropped() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let task = home.start(&sandbox, "head -c 1500000 /dev/zero | tr '\\0' x");
    settled(&home, &sandbox, &task);
    let out = home.run(&["task", "logs", &sandbox, &task, "--follow"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        describe(&out).chars().take(500).collect::<String>()
    );
    assert_eq!(out.stdout.len(), 1_048_576, "exactly the saved first MiB");
    assert!(out.stdout.iter().all(|&b| b == b'x'));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("more than 1 MiB") && stderr.contains("stdout"),
        "{stderr}"
    );
}

/// Run by `nothing_a_cli_starts_outlives_it_for_long` in a child process
/// that is the subreaper of everything its CLIs leave.
#[test]
#[ignore = "helper process of nothing_a_cli_starts_outlives_it_for_long"]
fn nothing_outlives_inner() {
    if std::env::var_os("SK_OUTLIVES").is_none() {
        return;
    }
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    // The local provider, and no e2b endpoint: that would be a child too.
    let home = Home {
        dir: tempfile::tempdir().unwrap(),
        e2b: None,
    };
    // The CLI starts a keeper ahead of the create (a standby); the create
    // is then refused and the standby never gets a sandbox.
    let out = home.run(&["sandbox", "create", "--timeout", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    // A fresh sandbox through the standby, used and destroyed.
    assert_eq!(home.ok(&["exec", "--", "echo", "works"]), "works\n");
    // Whatever the two CLIs started is now this process's: it must end.
    poll(
        Duration::from_secs(10),
        "every process the CLIs started to end",
        || match rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
            Err(rustix::io::Errno::CHILD) => Some(()),
            _ => None,
        },
    );
    println!("NOTHING OUTLIVED");
}

#[test]
fn nothing_a_cli_starts_outlives_it_for_long() {
    let stdout = support::run_ignored_test("tasks::nothing_outlives_inner", "SK_OUTLIVES");
    assert!(stdout.contains("NOTHING OUTLIVED"), "{stdout}");
}

/// Runs `sandkeep exec -- echo works` through `sandkeep` (set up by the
/// caller) on the local provider in a fresh state directory `home`, and
/// checks that it printed `works` and exited 0.
fn fresh_exec_works(mut sandkeep: assert_cmd::Command, home: &std::path::Path) {
    let out = sandkeep
        .env("SANDKEEP_HOME", home)
        .env_remove("SANDKEEP_PROVIDER")
        .args(["exec", "--", "echo", "works"])
        .timeout(support::cli::COMMAND_DEADLINE)
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "works\n"),
        "{}",
        describe(&out)
    );
}

/// A copy of sandkeep with a stale keeper beside it (one that refuses
/// this build's arguments, as an older build would): the keeper the CLI
/// starts ahead is refused, and sandkeep itself keeps the sandbox.
#[test]
fn a_stale_keeper_beside_the_cli_is_passed_over() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("sandkeep");
    std::fs::copy(support::bin(), &exe).unwrap();
    let stale = bin.path().join("sandkeep-keeper");
    std::fs::write(
        &stale,
        "#!/bin/sh\necho 'usage: an older keeper' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = tempfile::tempdir().unwrap();
    fresh_exec_works(assert_cmd::Command::new(&exe), home.path());
}

/// A state directory whose path has a tab (the standby keeper gets it over
/// a pipe, not as an argument) and an environment with a variable that is
/// not UTF-8: a fresh exec still works.
#[test]
fn odd_paths_and_environments_do_not_stop_a_fresh_exec() {
    use std::os::unix::ffi::OsStrExt;
    let base = tempfile::tempdir().unwrap();
    let mut sandkeep = assert_cmd::Command::new(support::bin());
    sandkeep.env("SK_NOT_UTF8", std::ffi::OsStr::from_bytes(b"caf\xe9"));
    fresh_exec_works(sandkeep, &base.path().join("state\tdir"));
}
