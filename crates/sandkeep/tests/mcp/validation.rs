//! Every validation rule of docs/tools.md through a real rmcp client: each
//! bad call is a tool error (`isError: true`) whose message names the
//! parameter and what is allowed, and the provider sees no call at all
//! (nothing ran). The server runs in-process over a pipe with a provider
//! that records calls; no sandbox is needed, since none may be touched.

use crate::support;

use serde_json::{Value, json};
use support::mcp::*;

const SB: &str = "sb-1";
const TASK: &str = "0123456789abcdef0123456789abcdef";

/// (tool, arguments, words the message must contain)
fn cases() -> Vec<(&'static str, Value, Vec<&'static str>)> {
    let long = "a".repeat(65_537);
    // 65,536 characters, but JSON escaping doubles each quote: the encoded
    // request is over 96 KiB.
    let quotes = "\"".repeat(65_536);
    vec![
        // create_sandbox
        (
            "create_sandbox",
            json!({"timeout": 0}),
            vec!["`timeout`", "1 to 86400"],
        ),
        (
            "create_sandbox",
            json!({"timeout": 86_401}),
            vec!["`timeout`", "1 to 86400"],
        ),
        (
            "create_sandbox",
            json!({"timeout": "300"}),
            vec!["`timeout`", "1 to 86400"],
        ),
        (
            "create_sandbox",
            json!({"timeout": -5}),
            vec!["`timeout`", "1 to 86400"],
        ),
        (
            "create_sandbox",
            json!({"timeout": 1.5}),
            vec!["`timeout`", "integer"],
        ),
        (
            "create_sandbox",
            json!({"template": 7}),
            vec!["`template`", "string"],
        ),
        (
            "create_sandbox",
            json!({"template": ""}),
            vec!["`template`", "non-empty"],
        ),
        (
            "create_sandbox",
            json!({"envs": ["A=1"]}),
            vec!["`envs`", "object"],
        ),
        (
            "create_sandbox",
            json!({"envs": {"A": 1}}),
            vec!["`envs`", "string values"],
        ),
        (
            "create_sandbox",
            json!({"envs": {"A=B": "1"}}),
            vec!["`envs`", "A=B"],
        ),
        (
            "create_sandbox",
            json!({"image": "ubuntu"}),
            vec!["`image`", "unknown parameter"],
        ),
        (
            "create_sandbox",
            json!({"network": "host"}),
            vec!["`network`", "\"internet\" or \"none\""],
        ),
        (
            "create_sandbox",
            json!({"network": 1}),
            vec!["`network`", "\"internet\" or \"none\""],
        ),
        (
            "create_sandbox",
            json!({"allow_hosts": []}),
            vec!["`allow_hosts`", "1 to 64"],
        ),
        (
            "create_sandbox",
            json!({"allow_hosts": ["https://pypi.org"]}),
            vec!["`allow_hosts`", "https://pypi.org"],
        ),
        (
            "create_sandbox",
            json!({"allow_hosts": ["pypi.org:443"]}),
            vec!["`allow_hosts`", "no scheme, port"],
        ),
        (
            "create_sandbox",
            json!({"allow_hosts": ["169.254.169.254"]}),
            vec!["`allow_hosts`", "IP address"],
        ),
        (
            "create_sandbox",
            json!({"allow_hosts": (0..65).map(|i| format!("h{i}.example")).collect::<Vec<_>>()}),
            vec!["`allow_hosts`", "got 65 entries"],
        ),
        (
            "create_sandbox",
            json!({"memory_mib": 63}),
            vec!["`memory_mib`", "at least 64", "64 to 16384"],
        ),
        (
            "create_sandbox",
            json!({"memory_mib": 1_000_000}),
            vec!["`memory_mib`", "64 to 16384"],
        ),
        (
            "create_sandbox",
            json!({"cpus": 0.05}),
            vec!["`cpus`", "at least 0.1"],
        ),
        (
            "create_sandbox",
            json!({"cpus": "two"}),
            vec!["`cpus`", "number"],
        ),
        (
            "create_sandbox",
            json!({"pids": 15}),
            vec!["`pids`", "at least 16"],
        ),
        (
            "create_sandbox",
            json!({"disk_mib": 10_000_000}),
            vec!["`disk_mib`", "64 to 65536"],
        ),
        // kill_sandbox
        ("kill_sandbox", json!({}), vec!["`sandbox_id`", "missing"]),
        (
            "kill_sandbox",
            json!({"sandbox_id": 5}),
            vec!["`sandbox_id`", "1-64 characters"],
        ),
        (
            "kill_sandbox",
            json!({"sandbox_id": "../etc"}),
            vec!["`sandbox_id`", "1-64 characters"],
        ),
        (
            "kill_sandbox",
            json!({"sandbox_id": SB, "force": true}),
            vec!["`force`", "unknown parameter"],
        ),
        // list_sandboxes
        (
            "list_sandboxes",
            json!({"all": true}),
            vec!["`all`", "unknown parameter"],
        ),
        // run_command
        (
            "run_command",
            json!({"sandbox_id": SB}),
            vec!["`command`", "missing"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": ""}),
            vec!["`command`", "1 to 65536"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": long}),
            vec!["`command`", "1 to 65536", "65537"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": ["ls"]}),
            vec!["`command`", "string"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": "ls", "timeout": 0}),
            vec!["`timeout`", "1 to 3600"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": "ls", "timeout": 3601}),
            vec!["`timeout`", "1 to 3600"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": "ls", "cwd": ""}),
            vec!["`cwd`", "non-empty"],
        ),
        (
            "run_command",
            json!({"sandbox_id": "UPPER", "command": "ls"}),
            vec!["`sandbox_id`"],
        ),
        (
            "run_command",
            json!({"sandbox_id": SB, "command": "ls", "env": {}}),
            vec!["`env`", "unknown parameter"],
        ),
        (
            "run_command",
            json!({"command": "ls"}),
            vec!["no default sandbox", "create_sandbox", "sandbox_id"],
        ),
        // files
        (
            "read_file",
            json!({"sandbox_id": SB}),
            vec!["`path`", "missing"],
        ),
        (
            "read_file",
            json!({"sandbox_id": SB, "path": ""}),
            vec!["`path`", "non-empty"],
        ),
        (
            "read_file",
            json!({"sandbox_id": SB, "path": 3}),
            vec!["`path`", "string"],
        ),
        (
            "read_file",
            json!({"sandbox_id": SB, "path": "a", "offset": 1}),
            vec!["`offset`", "unknown parameter"],
        ),
        (
            "read_file",
            json!({"path": "a"}),
            vec!["no default sandbox"],
        ),
        (
            "write_file",
            json!({"sandbox_id": SB, "path": "a"}),
            vec!["`content`", "missing"],
        ),
        (
            "write_file",
            json!({"sandbox_id": SB, "path": "a", "content": 1}),
            vec!["`content`", "string"],
        ),
        (
            "write_file",
            json!({"sandbox_id": SB, "path": "a\u{0}b", "content": ""}),
            vec!["`path`", "NUL"],
        ),
        (
            "write_file",
            json!({"sandbox_id": SB, "path": "a", "content": "", "mode": 420}),
            vec!["`mode`"],
        ),
        (
            "list_files",
            json!({"sandbox_id": SB}),
            vec!["`path`", "missing"],
        ),
        (
            "list_files",
            json!({"sandbox_id": SB, "path": "x".repeat(4097)}),
            vec!["`path`", "4096"],
        ),
        (
            "list_files",
            json!({"sandbox_id": SB, "path": ".", "recursive": true}),
            vec!["`recursive`"],
        ),
        // start_task
        (
            "start_task",
            json!({"sandbox_id": SB}),
            vec!["`command`", "missing"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": ""}),
            vec!["`command`", "1 to 65536"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "a".repeat(65_537)}),
            vec!["`command`", "1 to 65536"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": quotes}),
            vec!["`command`", "98304"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "timeout": 0}),
            vec!["`timeout`", "1 to 3600"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "timeout": 3601}),
            vec!["`timeout`", "1 to 3600"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "timeout": "60"}),
            vec!["`timeout`", "1 to 3600"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "cwd": ""}),
            vec!["`cwd`"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "task_id": TASK}),
            vec!["`task_id`", "unknown parameter"],
        ),
        (
            "start_task",
            json!({"sandbox_id": "a/b", "command": "x"}),
            vec!["`sandbox_id`"],
        ),
        (
            "start_task",
            json!({"command": "x"}),
            vec!["no default sandbox in this session: pass sandbox_id"],
        ),
        (
            "start_task",
            json!({"sandbox_id": SB, "command": "x", "pty": true}),
            vec!["`pty`", "unknown parameter"],
        ),
        (
            "start_interactive_task",
            json!({"sandbox_id": SB, "command": "x", "pty": true, "cols": 0}),
            vec!["`cols`", "1 to 1000"],
        ),
        (
            "start_interactive_task",
            json!({"sandbox_id": SB, "command": "x", "pty": true, "rows": 1001}),
            vec!["`rows`", "1 to 1000"],
        ),
        (
            "start_interactive_task",
            json!({"sandbox_id": SB, "command": "x", "cols": 100}),
            vec!["`cols`", "only taken with pty true"],
        ),
        (
            "start_interactive_task",
            json!({"sandbox_id": SB, "command": "x", "pty": "yes"}),
            vec!["`pty`", "a boolean"],
        ),
        (
            "send_input",
            json!({"sandbox_id": SB, "task_id": TASK, "data": "x".repeat(65_537)}),
            vec!["`data`", "65536"],
        ),
        (
            "send_input",
            json!({"sandbox_id": SB, "task_id": TASK, "data": "@@", "encoding": "base64"}),
            vec!["`data`", "base64"],
        ),
        (
            "send_input",
            json!({"sandbox_id": SB, "task_id": TASK, "data": "x", "encoding": "hex"}),
            vec!["`encoding`", "\"utf8\" or \"base64\""],
        ),
        (
            "send_input",
            json!({"sandbox_id": SB, "task_id": TASK}),
            vec!["`data`", "missing"],
        ),
        (
            "resize_terminal",
            json!({"sandbox_id": SB, "task_id": TASK, "cols": 80, "rows": 0}),
            vec!["`rows`", "1 to 1000"],
        ),
    ]
    .into_iter()
    .chain(["get_task", "cancel_task"].into_iter().flat_map(|tool| {
        vec![
            (
                tool,
                json!({"task_id": TASK}),
                vec!["`sandbox_id`", "missing"],
            ),
            (
                tool,
                json!({"sandbox_id": SB}),
                vec!["`task_id`", "missing"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK.to_uppercase()}),
                vec!["`task_id`", "^[0-9a-f]{32}$"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": &TASK[1..]}),
                vec!["`task_id`", "32 lowercase"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": 12}),
                vec!["`task_id`"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "stdout_offset": 1_048_577}),
                vec!["`stdout_offset`", "0 to 1048576"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "stdout_offset": -1}),
                vec!["`stdout_offset`", "0 to 1048576"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "stderr_offset": 1_048_577}),
                vec!["`stderr_offset`", "0 to 1048576"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "limit": 0}),
                vec!["`limit`", "1 to 65536"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "limit": 65_537}),
                vec!["`limit`", "1 to 65536"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "limit": "all"}),
                vec!["`limit`", "1 to 65536"],
            ),
            (
                tool,
                json!({"sandbox_id": SB, "task_id": TASK, "pid": 1}),
                vec!["`pid`", "unknown parameter"],
            ),
        ]
    }))
    .collect()
}

#[tokio::test]
async fn every_bad_call_is_a_tool_error_naming_the_parameter_and_runs_nothing() {
    let recorder = Recorder::new(None);
    let (client, _service, _session) = in_process(recorder.clone()).await;
    // Every case is checked and every failure reported, so one broken rule
    // does not hide the others.
    let cases = cases();
    let total = cases.len();
    let mut failures = Vec::new();
    for (tool, args, words) in cases {
        let shown = args.to_string().chars().take(120).collect::<String>();
        let calls_before = recorder.calls().len();
        let result = call(&client, tool, args).await;
        if result.is_error != Some(true) {
            failures.push(format!(
                "{tool} {shown}: not a tool error: {:?}",
                result.structured_content
            ));
        }
        let message = text(&result);
        let lacking: Vec<_> = words.iter().filter(|w| !message.contains(*w)).collect();
        if !lacking.is_empty() {
            failures.push(format!(
                "{tool} {shown}: message {message:?} lacks {lacking:?}"
            ));
        }
        let calls = recorder.calls();
        if calls.len() > calls_before {
            failures.push(format!(
                "{tool} {shown}: the provider was called: {:?}",
                &calls[calls_before..]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures in {total} bad calls:\n{}",
        failures.len(),
        failures.join("\n")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tools_declare_closed_input_schemas_and_output_schemas() {
    let (client, _service, _session) = in_process(Recorder::new(None)).await;
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "apply_changes",
            "cancel_task",
            "create_sandbox",
            "delete_snapshot",
            "delete_task",
            "expose_port",
            "fork_sandbox",
            "get_task",
            "kill_sandbox",
            "list_changes",
            "list_files",
            "list_sandboxes",
            "list_snapshots",
            "list_tasks",
            "pause_sandbox",
            "read_file",
            "resize_terminal",
            "resume_sandbox",
            "run_command",
            "send_input",
            "snapshot_sandbox",
            "start_interactive_task",
            "start_task",
            "wait_task",
            "write_file"
        ]
    );
    for t in &tools {
        assert_eq!(
            t.input_schema.get("additionalProperties"),
            Some(&json!(false)),
            "{}",
            t.name
        );
        let out = t
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no outputSchema", t.name));
        assert_eq!(out.get("type"), Some(&json!("object")), "{}", t.name);
        assert!(
            t.description.as_ref().is_some_and(|d| d.len() > 80),
            "{} needs a real description",
            t.name
        );
    }
    let start = tools.iter().find(|t| t.name == "start_task").unwrap();
    let d = start.description.as_deref().unwrap();
    for w in [
        "run_command",
        "KEEP THE HANDLE",
        "do NOT call start_task again",
    ] {
        assert!(d.contains(w), "start_task description lacks {w:?}");
    }
    let get = tools.iter().find(|t| t.name == "get_task").unwrap();
    assert!(
        get.description
            .as_deref()
            .unwrap()
            .contains("stdout_next_offset")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn unknown_tool_is_a_protocol_error() {
    let (client, _service, _session) = in_process(Recorder::new(None)).await;
    let params = rmcp::model::CallToolRequestParams::new("rm_rf");
    let e = client.call_tool(params).await.unwrap_err().to_string();
    assert!(e.contains("rm_rf"), "{e}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn provider_failure_is_a_tool_error_with_advice() {
    // The recorder without a host answers Unavailable: the message reaches
    // the caller as a tool error, not as a protocol failure.
    let recorder = Recorder::new(None);
    let (client, _service, _session) = in_process(recorder.clone()).await;
    let m = err(
        &client,
        "get_task",
        json!({"sandbox_id": SB, "task_id": TASK}),
    )
    .await;
    assert!(m.contains("no sandbox host"), "{m}");
    assert_eq!(recorder.calls(), vec![format!("task_helper {SB}")]);
    client.cancel().await.unwrap();
}
