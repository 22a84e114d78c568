//! `docs/tools.md`, the tool reference a user reads, rendered from the
//! catalogue: every tool's description, parameters (type, what each
//! accepts with its range and default, from the rule the call's own error
//! quotes), result fields, errors (their real messages) and an example. A
//! test renders it and compares it with the file, so the page cannot drift
//! from what `tools/list` publishes; `SANDKEEP_WRITE_DOCS=1 cargo test -p
//! sandkeep --lib tools_md` rewrites the file.
//!
//! Adding a tool to [`catalog::TOOLS`] needs one more [`example`] here
//! (the test names a tool without one) and, if it can fail in its own
//! ways, a line in [`own_errors`]; the rest comes from its schemas.
//!
//! Test-only: nothing here is in the binary.

use std::fmt::Write;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::catalog::{self, Era, ToolSpec};
use super::*;
use crate::provider::{ProviderError, SandboxId};
use sandkeep_proto::wire::ErrorKind;

const SB: &str = "sb-3f2a9c1e5b7d4a60";
const TASK: &str = "9b1c0d6e2f3a4b5c8d7e6f5a4b3c2d1e";

/// The whole page.
pub(super) fn tools_md() -> String {
    let mut out = String::from(
        "<!-- Generated from crates/sandkeep/src/service/catalog.rs by \
         crates/sandkeep/src/service/reference.rs: do not edit by hand; run \
         `SANDKEEP_WRITE_DOCS=1 cargo test -p sandkeep --lib tools_md` after changing a tool. -->\n\n\
         # sandkeep's tools\n\n\
         What an MCP client sees in `tools/list`, and what the CLI's `--json` output prints \
         (the same objects). Every tool answers a JSON object (`structuredContent`, and the \
         same JSON as text); a refused call is a tool error (`isError: true`) whose message \
         names the parameter or the state and says what to do next, and nothing was run. \
         Over stdio and legacy (initialize) HTTP sessions, tools called without `sandbox_id` \
         use the session's default sandbox; a 2026-07-28 request over HTTP has no session, so \
         `sandbox_id` is required there (the schema says so).\n\n",
    );
    for t in catalog::TOOLS {
        let _ = writeln!(out, "- [`{}`](#{}): {}", t.name, t.name, t.title);
    }
    for t in catalog::TOOLS {
        tool(&mut out, t);
    }
    out.push_str(
        "\n## The MCP Tasks extension\n\n\
         A client on protocol 2026-07-28 that declares the `io.modelcontextprotocol/tasks` \
         extension in its request gets a task from `run_command` instead of the blocking \
         answer: the command runs as a durable task (as `start_task` would, in the same \
         sandbox), and the task id is `SANDBOX_ID/TASK_ID`. `tasks/get` waits for the task to \
         end (a long-poll, like `wait_task`) and answers `working` after a while; the \
         completed task's result is exactly the blocking `run_command` result. `tasks/cancel` \
         stops it as `cancel_task` does. Both work from any server on the same state \
         directory, also after the one that made the task is gone. Every other client, and any \
         client on a 2025-era session (initialize), gets the blocking `run_command`.\n",
    );
    out
}

fn tool(out: &mut String, t: &ToolSpec) {
    let a = t.annotations;
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = write!(
        out,
        "\n## {}\n\n**{}.** {}\n\n",
        t.name,
        t.title,
        t.description(Era::Session)
    );
    if !t.sessionless_note.is_empty() {
        let _ = write!(
            out,
            "Without a session (2026-07-28 over HTTP): {}\n\n",
            catalog::prose(t.sessionless_note)
        );
    }
    let _ = write!(
        out,
        "Annotations: read-only {}, destructive {}, idempotent {}, open-world {}.\n\n",
        yes(a.read_only),
        yes(a.destructive),
        yes(a.idempotent),
        yes(a.open_world)
    );
    parameters(out, t);
    results(out, t);
    errors(out, t);
    let (args, result) = example(t.name).unwrap_or_else(|| {
        panic!(
            "no example for tool {}: add one to reference::example",
            t.name
        )
    });
    let (args, result) = typed(t.name, &args, &result);
    let _ = write!(
        out,
        "### Example\n\n```json\n{}\n```\n\nanswers\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(&json!({"name": t.name, "arguments": args})).unwrap(),
        serde_json::to_string_pretty(&result).unwrap()
    );
}

fn parameters(out: &mut String, t: &ToolSpec) {
    let raw = (t.input_schema)();
    let sessionless = t.input_schema(Era::Sessionless);
    let required = |schema: &Map<String, Value>, name: &str| {
        schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|v| v == name))
    };
    let Some(Value::Object(props)) = raw.get("properties") else {
        out.push_str("### Parameters\n\nNone.\n\n");
        return;
    };
    out.push_str(
        "### Parameters\n\n| parameter | type | required | accepts | meaning |\n| --- | --- | --- | --- | --- |\n",
    );
    for (name, p) in props {
        let req = match (required(&raw, name), required(&sessionless, name)) {
            (true, _) => "yes",
            (false, true) => "without a session",
            (false, false) => "no",
        };
        let accepts = t
            .allowed(name)
            .unwrap_or_else(|| panic!("{}.{name}: no rule in validate::allowed", t.name));
        let _ = writeln!(
            out,
            "| `{name}` | {} | {req} | {} | {} |",
            type_of(p),
            cell(&accepts),
            cell(p["description"].as_str().unwrap_or_default())
        );
    }
    out.push('\n');
}

fn results(out: &mut String, t: &ToolSpec) {
    out.push_str("### Result\n\n| field | type | meaning |\n| --- | --- | --- |\n");
    let schema = Value::Object((t.output_schema)());
    fields(out, "", &schema);
    out.push('\n');
}

/// One row per field, nested objects and array items as `a.b` / `a[].b`.
fn fields(out: &mut String, prefix: &str, schema: &Value) {
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, p) in props {
        let path = format!("{prefix}{name}");
        let mut meaning = p["description"].as_str().unwrap_or_default().to_owned();
        if !required.contains(&name.as_str()) {
            meaning = format!("{meaning} (present only when it applies)")
                .trim_start()
                .to_owned();
        }
        let _ = writeln!(out, "| `{path}` | {} | {} |", type_of(p), cell(&meaning));
        fields(out, &format!("{path}."), p);
        if p["items"]["properties"].is_object() {
            fields(out, &format!("{path}[]."), &p["items"]);
        }
    }
}

/// A schema's type as a reader says it: `integer or null`, `array of
/// string`, one of `"a"`, `"b"`.
fn type_of(p: &Value) -> String {
    if let Some(branches) = p["anyOf"].as_array() {
        return branches
            .iter()
            .map(type_of)
            .collect::<Vec<_>>()
            .join(" or ");
    }
    if let Some(values) = p["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    match p["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&p["items"])),
        Some("object") if p["additionalProperties"].is_object() => {
            format!("object of {}", type_of(&p["additionalProperties"]))
        }
        Some(t) => t.to_owned(),
        None => "any".to_owned(),
    }
}

/// Text for a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn errors(out: &mut String, t: &ToolSpec) {
    let raw = (t.input_schema)();
    let props = raw
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let optional_sandbox = props.contains_key("sandbox_id")
        && !raw
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|v| v == "sandbox_id"));
    let sandbox = SandboxId::parse(SB).expect("an example id");
    let mut list: Vec<(String, String)> = Vec::new();
    if let Some((name, _)) = props.iter().find(|(name, _)| t.allowed(name).is_some()) {
        let e = ToolError::invalid(
            name,
            &validate::rule(t.name, name),
            "got …; nothing was run",
        );
        list.push((
            "A parameter of the wrong type or out of range, or an unknown one".into(),
            e.to_string(),
        ));
    }
    if optional_sandbox {
        list.push((
            "No `sandbox_id`, and the session has no sandbox yet".into(),
            ToolError::NoDefaultSandbox.to_string(),
        ));
        list.push((
            "No `sandbox_id` without a session".into(),
            catalog::NO_SESSION.into(),
        ));
    }
    if props.contains_key("sandbox_id") && t.name != "kill_sandbox" {
        list.push((
            "The sandbox does not exist (destroyed, expired, or another state directory)".into(),
            ProviderError::NoSuchSandbox(sandbox.clone()).to_string(),
        ));
    }
    if props.contains_key("task_id") {
        list.push((
            "The task is not in that sandbox".into(),
            helper(ErrorKind::NoSuchTask),
        ));
    }
    list.extend(own_errors(t.name));
    if list.is_empty() {
        return;
    }
    out.push_str("### Errors\n\n");
    for (when, message) in list {
        let _ = writeln!(out, "- **{when}**: {message}");
    }
    out.push('\n');
}

/// The message the service gives for a helper's refusal of `kind`.
fn helper(kind: ErrorKind) -> String {
    let sandbox = SandboxId::parse(SB).expect("an example id");
    let task = sandkeep_proto::TaskId::parse(TASK).expect("an example id");
    let refused = helper::HelperError::Refused {
        kind,
        message: String::new(),
    };
    handlers::helper_error(refused, &sandbox, &task)
        .to_string()
        .trim_end_matches(" ()")
        .to_owned()
}

/// The failures particular to one tool, with their messages.
fn own_errors(tool: &str) -> Vec<(String, String)> {
    let pair = |when: &str, message: String| (when.to_owned(), message);
    let sandbox = || SandboxId::parse(SB).expect("an example id");
    match tool {
        "pause_sandbox" => vec![
            pair(
                "The sandbox is paused already",
                ProviderError::AlreadyInState {
                    sandbox: sandbox(),
                    state: crate::provider::SandboxState::Paused,
                }
                .to_string(),
            ),
            pair(
                "The host cannot freeze the sandbox's processes (no cgroup freezer)",
                "sandbox … cannot be paused: this host gave it no cgroup freezer …; run \
                 `sandkeep doctor`"
                    .into(),
            ),
        ],
        "snapshot_sandbox" => vec![pair(
            "`name` names a template or snapshot already",
            ProviderError::SnapshotExists("deps-installed".into()).to_string(),
        )],
        "resume_sandbox" => vec![pair(
            "The sandbox is running",
            ProviderError::AlreadyInState {
                sandbox: sandbox(),
                state: crate::provider::SandboxState::Running,
            }
            .to_string(),
        )],
        "create_sandbox" => vec![
            pair(
                "The template does not exist",
                ProviderError::UnknownTemplate {
                    name: "nope".into(),
                    available: vec!["base".into()],
                }
                .to_string(),
            ),
            pair(
                "A request this provider or host cannot enforce (allow_hosts on e2b, network on a host without namespaces)",
                "the message names the parameter and what to use instead; nothing was created"
                    .into(),
            ),
            pair(
                "A share in `shares` that the operator did not configure",
                "invalid parameter `shares`: … is not one of them: the configured shares are \
                 /home/me/project (cow); nothing was created"
                    .into(),
            ),
        ],
        "list_changes" | "apply_changes" => vec![pair(
            "The sandbox has no copy-on-write share",
            "sandbox sb-… has no copy-on-write share (…), so it has no changes to list or \
                 apply: create the sandbox with a share the operator configured as PATH:cow"
                .into(),
        )],
        "read_file" => vec![pair(
            "The file is too large",
            ProviderError::FileTooLarge {
                path: "big.log".into(),
                size: 5_000_000,
                limit: handlers::READ_FILE_MAX_BYTES,
            }
            .to_string(),
        )],
        "start_task" => vec![
            pair(
                "The sandbox holds the most tasks it may",
                helper(ErrorKind::TooManyTasks),
            ),
            pair("`cwd` does not exist", helper(ErrorKind::NoSuchCwd)),
            pair(
                "The command is too long once encoded for the sandbox",
                handlers::start_request_too_large(100_000).to_string(),
            ),
            pair(
                "The start cannot be confirmed (not an error: the result has state `unknown` and `error`)",
                "do not start the command again; query the handle with get_task".into(),
            ),
        ],
        "cancel_task" => {
            let (_, observed) = example("get_task").expect("get_task's example");
            let observed: TaskResult = serde_json::from_value(observed).expect("a task result");
            vec![pair(
                "The task did not reach a final state in time (the error carries the observed state)",
                ToolError::CancelNotConfirmed(Box::new(observed)).to_string(),
            )]
        }
        "delete_task" => vec![pair(
            "The task is still running",
            helper(ErrorKind::TaskRunning),
        )],
        "send_input" => {
            use sandkeep_task::HelperError as Refusal;
            let task = sandkeep_proto::TaskId::parse(TASK).expect("an example id");
            vec![
                pair(
                    "More than 1 MiB would wait unread",
                    Refusal::InputBacklogFull {
                        task_id: task.clone(),
                        waiting: 1_040_000,
                        offered: 65_536,
                    }
                    .to_string(),
                ),
                pair(
                    "The task was started with start_task",
                    Refusal::NotInteractive(task.clone()).to_string(),
                ),
                pair(
                    "The task has ended",
                    Refusal::TaskEnded(task.clone(), sandkeep_proto::TaskState::Succeeded)
                        .to_string(),
                ),
                pair(
                    "Its stdin was closed",
                    Refusal::StdinClosed(task).to_string(),
                ),
                pair(
                    "The call broke after the input may have been queued",
                    ToolError::InputUnconfirmed("connection reset".into()).to_string(),
                ),
            ]
        }
        "resize_terminal" => vec![pair(
            "The task has no terminal",
            sandkeep_task::HelperError::NoTerminal(
                sandkeep_proto::TaskId::parse(TASK).expect("an example id"),
            )
            .to_string(),
        )],
        _ => vec![],
    }
}

/// The example of `tool`: its arguments and its result.
fn example(tool: &str) -> Option<(Value, Value)> {
    let limits = json!({"memory_mib": 2048, "cpus": 2.0, "pids": 1024, "disk_mib": 4096});
    let task = |state: &str, exit: Value, finished: Value, out: &str| {
        json!({
            "state": state, "exit_code": exit,
            "stdout_next_offset": out.len(), "stderr_next_offset": 0,
            "stdout_bytes": out.len(), "stderr_bytes": 0,
            "stdout_truncated": false, "stderr_truncated": false,
            "sandbox_id": SB, "task_id": TASK,
            "started_at": 1_796_290_100, "finished_at": finished,
            "stdout": out, "stderr": "",
        })
    };
    Some(match tool {
        "create_sandbox" => (
            json!({"timeout": 3600, "network": "internet"}),
            json!({
                "sandbox_id": SB, "template": "base",
                "created_at": 1_796_290_000, "expires_at": 1_796_293_600,
                "isolation": "userns-idmap", "network": "internet", "allow_hosts": [],
                "limits": limits, "shares": [{"path": "/home/me/project", "mode": "cow"}],
                "limits": limits, "ports": [],
            }),
        ),
        "kill_sandbox" => (
            json!({"sandbox_id": SB}),
            json!({"sandbox_id": SB, "killed": true}),
        ),
        "list_sandboxes" => (
            json!({}),
            json!({"sandboxes": [{
                "sandbox_id": SB, "template": "base",
                "created_at": 1_796_290_000, "expires_at": 1_796_293_600, "retained": true,
                "isolation": "userns-idmap", "network": "internet", "allow_hosts": [],
                "limits": limits, "shares": [{"path": "/home/me/project", "mode": "cow"}],
                "limits": limits,
                "ports": [{"port": 3000, "url": "http://127.0.0.1:40123"}],
                "state": "running", "on_timeout": "kill",
            }]}),
        ),
        "snapshot_sandbox" => (
            json!({"sandbox_id": SB, "name": "deps-installed"}),
            json!({"snapshot_id": "deps-installed", "template": "deps-installed",
                   "sandbox_id": SB, "size_bytes": 104_857_600, "created_at": 1_796_291_000}),
        ),
        "list_snapshots" => (
            json!({}),
            json!({"snapshots": [{"snapshot_id": "deps-installed", "template": "deps-installed",
                   "sandbox_id": SB, "size_bytes": 104_857_600, "created_at": 1_796_291_000}]}),
        ),
        "delete_snapshot" => (
            json!({"snapshot_id": "deps-installed"}),
            json!({"snapshot_id": "deps-installed", "deleted": true}),
        ),
        "fork_sandbox" => (
            json!({"sandbox_id": SB, "timeout": 3600}),
            json!({
                "sandbox_id": "sb-5e2a9c0d71f3b864", "template": "snap-5e2a9c0d71f3b864",
                "created_at": 1_796_291_000, "expires_at": 1_796_294_600,
                "isolation": "userns-idmap", "network": "internet", "allow_hosts": [],
                "limits": limits, "shares": [], "ports": [],
            }),
        ),
        "pause_sandbox" => (
            json!({"sandbox_id": SB}),
            json!({"sandbox_id": SB, "state": "paused"}),
        ),
        "resume_sandbox" => (
            json!({"sandbox_id": SB, "timeout": 3600}),
            json!({"sandbox_id": SB, "state": "running", "expires_at": 1_796_297_200}),
        ),
        "run_command" => (
            json!({"sandbox_id": SB, "command": "uname -sr", "timeout": 60}),
            json!({
                "exit_code": 0, "timed_out": false,
                "stdout_truncated": false, "stderr_truncated": false,
                "sandbox_id": SB, "stdout": "Linux 6.12.0\n", "stderr": "",
            }),
        ),
        "list_changes" => (
            json!({"sandbox_id": SB, "diff": true}),
            json!({
                "sandbox_id": SB,
                "changes": [
                    {"path": "/home/me/project/NOTES", "kind": "added", "type": "file", "size": 5},
                    {"path": "/home/me/project/old.txt", "kind": "deleted", "type": "file", "size": 4},
                ],
                "truncated": false,
                "diff": "diff --git a/home/me/project/NOTES b/home/me/project/NOTES\nnew file mode 100644\n\
                         --- /dev/null\n+++ b/home/me/project/NOTES\n@@ -0,0 +1 @@\n+todo\n\
                         diff --git a/home/me/project/old.txt b/home/me/project/old.txt\n\
                         deleted file mode 100644\n--- a/home/me/project/old.txt\n+++ /dev/null\n\
                         @@ -1 +0,0 @@\n-old\n",
                "diff_truncated": false,
            }),
        ),
        "apply_changes" => (
            json!({"sandbox_id": SB, "paths": ["/home/me/project/NOTES"]}),
            json!({
                "sandbox_id": SB,
                "applied": ["/home/me/project/NOTES"],
                "conflicts": [],
            }),
        ),
        "read_file" => (
            json!({"sandbox_id": SB, "path": "notes.txt"}),
            json!({"path": "notes.txt", "content": "hello\n", "size": 6}),
        ),
        "write_file" => (
            json!({"sandbox_id": SB, "path": "run.sh", "content": "#!/bin/sh\nmake test\n"}),
            json!({"path": "run.sh", "bytes_written": 20}),
        ),
        "list_files" => (
            json!({"sandbox_id": SB, "path": "."}),
            json!({"path": ".", "entries": [
                {"name": "run.sh", "type": "file", "size": 20, "modified_at": 1_796_290_050},
                {"name": "src", "type": "dir", "size": 4096, "modified_at": 1_796_290_020},
            ]}),
        ),
        "start_task" => (
            json!({"sandbox_id": SB, "command": "make test", "timeout": 1800}),
            json!({
                "sandbox_id": SB, "task_id": TASK, "state": "running",
                "exit_code": null, "started_at": 1_796_290_100, "finished_at": null,
            }),
        ),
        "get_task" => (
            json!({"sandbox_id": SB, "task_id": TASK, "stdout_offset": 0, "limit": 4096}),
            task("running", Value::Null, Value::Null, "building...\n"),
        ),
        "cancel_task" => (
            json!({"sandbox_id": SB, "task_id": TASK}),
            task(
                "cancelled",
                json!(143),
                json!(1_796_290_160),
                "building...\n",
            ),
        ),
        "wait_task" => {
            let mut result = task(
                "succeeded",
                json!(0),
                json!(1_796_290_200),
                "building...\nok\n",
            );
            result["waited_ms"] = json!(41_250);
            (
                json!({"sandbox_id": SB, "task_id": TASK, "stdout_offset": 12, "timeout": 60}),
                result,
            )
        }
        "list_tasks" => (
            json!({"sandbox_id": SB}),
            json!({"sandbox_id": SB, "tasks": [{
                "task_id": TASK, "state": "succeeded", "exit_code": 0,
                "started_at": 1_796_290_100, "finished_at": 1_796_290_200,
                "command": "make test", "stdout_bytes": 15, "stderr_bytes": 0,
            }]}),
        ),
        "delete_task" => (
            json!({"sandbox_id": SB, "task_id": TASK}),
            json!({"sandbox_id": SB, "task_id": TASK, "deleted": true}),
        ),
        "expose_port" => (
            json!({"sandbox_id": SB, "port": 3000}),
            json!({"sandbox_id": SB, "port": 3000, "url": "http://127.0.0.1:40123"}),
        ),
        "start_interactive_task" => (
            json!({"sandbox_id": SB, "command": "python3 -i", "pty": true, "cols": 120, "rows": 40}),
            json!({
                "sandbox_id": SB, "task_id": TASK, "state": "running",
                "exit_code": null, "started_at": 1_796_290_100, "finished_at": null,
            }),
        ),
        "send_input" => (
            json!({"sandbox_id": SB, "task_id": TASK, "data": "print(6 * 7)\n"}),
            json!({"sandbox_id": SB, "task_id": TASK, "bytes_accepted": 13}),
        ),
        "resize_terminal" => (
            json!({"sandbox_id": SB, "task_id": TASK, "cols": 160, "rows": 48}),
            json!({"sandbox_id": SB, "task_id": TASK, "cols": 160, "rows": 48}),
        ),
        _ => return None,
    })
}

/// The example through the tool's own types: arguments its parser takes
/// (unknown or mistyped fields fail), a result that is exactly its result
/// type (every field, nothing else), printed in the order the server
/// prints it.
fn typed(tool: &str, args: &Value, result: &Value) -> (Value, Value) {
    fn fits<A: DeserializeOwned, R: Serialize + DeserializeOwned>(
        tool: &str,
        args: &Value,
        result: &Value,
    ) -> (Value, Value) {
        let Value::Object(map) = args else {
            panic!("{tool}: example arguments are an object")
        };
        if let Err(e) = json::parse::<A>(tool, Some(map.clone())) {
            panic!("{tool}: the example's arguments are refused: {e}");
        }
        let typed: R = serde_json::from_value(result.clone())
            .unwrap_or_else(|e| panic!("{tool}: the example's result is no result: {e}"));
        let printed = serde_json::to_value(&typed).unwrap();
        assert_eq!(
            &printed, result,
            "{tool}: the example's result has other fields"
        );
        (args.clone(), printed)
    }
    match tool {
        "create_sandbox" => fits::<CreateSandboxArgs, CreateSandboxResult>(tool, args, result),
        "kill_sandbox" => fits::<KillSandboxArgs, KillSandboxResult>(tool, args, result),
        "list_sandboxes" => fits::<ListSandboxesArgs, ListSandboxesResult>(tool, args, result),
        "pause_sandbox" => fits::<PauseSandboxArgs, PauseSandboxResult>(tool, args, result),
        "snapshot_sandbox" => fits::<SnapshotSandboxArgs, SnapshotResult>(tool, args, result),
        "list_snapshots" => fits::<ListSnapshotsArgs, ListSnapshotsResult>(tool, args, result),
        "delete_snapshot" => fits::<DeleteSnapshotArgs, DeleteSnapshotResult>(tool, args, result),
        "fork_sandbox" => fits::<ForkSandboxArgs, CreateSandboxResult>(tool, args, result),
        "resume_sandbox" => fits::<ResumeSandboxArgs, ResumeSandboxResult>(tool, args, result),
        "run_command" => fits::<RunCommandArgs, RunCommandResult>(tool, args, result),
        "read_file" => fits::<ReadFileArgs, ReadFileResult>(tool, args, result),
        "write_file" => fits::<WriteFileArgs, WriteFileResult>(tool, args, result),
        "list_files" => fits::<ListFilesArgs, ListFilesResult>(tool, args, result),
        "start_task" => fits::<StartTaskArgs, StartTaskResult>(tool, args, result),
        "get_task" => fits::<GetTaskArgs, TaskResult>(tool, args, result),
        "cancel_task" => fits::<CancelTaskArgs, TaskResult>(tool, args, result),
        "wait_task" => fits::<WaitTaskArgs, WaitTaskResult>(tool, args, result),
        "list_tasks" => fits::<ListTasksArgs, ListTasksResult>(tool, args, result),
        "delete_task" => fits::<DeleteTaskArgs, DeleteTaskResult>(tool, args, result),
        "list_changes" => fits::<ListChangesArgs, ListChangesResult>(tool, args, result),
        "apply_changes" => fits::<ApplyChangesArgs, ApplyChangesResult>(tool, args, result),
        "expose_port" => fits::<ExposePortArgs, ExposePortResult>(tool, args, result),
        "start_interactive_task" => {
            fits::<StartInteractiveTaskArgs, StartTaskResult>(tool, args, result)
        }
        "send_input" => fits::<SendInputArgs, SendInputResult>(tool, args, result),
        "resize_terminal" => fits::<ResizeTerminalArgs, ResizeTerminalResult>(tool, args, result),
        _ => panic!("{tool}: add its argument and result types to reference::typed"),
    }
}

mod tests {
    use super::*;

    fn path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/tools.md")
    }

    #[test]
    fn tools_md_is_the_catalogue() {
        let page = tools_md();
        if std::env::var_os("SANDKEEP_WRITE_DOCS").is_some() {
            std::fs::write(path(), &page).unwrap();
            return;
        }
        let file = std::fs::read_to_string(path()).unwrap_or_default();
        assert!(
            file == page,
            "docs/tools.md is not what the tool catalogue says: run \
             `SANDKEEP_WRITE_DOCS=1 cargo test -p sandkeep --lib tools_md` and commit the file"
        );
    }

    #[test]
    fn every_tool_has_an_example_and_every_field_a_meaning() {
        for t in catalog::TOOLS {
            assert!(example(t.name).is_some(), "{}: no example", t.name);
            let mut page = String::new();
            tool(&mut page, t);
            assert!(
                !page.contains("|  |"),
                "{}: a row without a meaning:\n{page}",
                t.name
            );
        }
    }
}
