//! Every tool's name, description (written for a model) and JSON schemas.
//! The MCP layer publishes this list as is; the CLI may use it for help.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use super::*;

/// One tool as clients see it.
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The tool only reads (no side effect in any sandbox).
    pub read_only: bool,
    /// The tool may destroy or overwrite something.
    pub destructive: bool,
    /// Calling it twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// JSON Schema 2020-12 of the arguments: an object schema with
    /// `additionalProperties: false`.
    pub input_schema: fn() -> Map<String, Value>,
    /// JSON Schema 2020-12 of the result object.
    pub output_schema: fn() -> Map<String, Value>,
}

fn input<T: JsonSchema>() -> Map<String, Value> {
    schema::<T>(SchemaSettings::draft2020_12())
}

fn output<T: JsonSchema>() -> Map<String, Value> {
    schema::<T>(SchemaSettings::draft2020_12().for_serialize())
}

fn schema<T: JsonSchema>(settings: SchemaSettings) -> Map<String, Value> {
    let root = settings.into_generator().into_root_schema_for::<T>();
    let Value::Object(mut map) = serde_json::to_value(root).expect("schemas always encode") else {
        unreachable!("a root schema of a struct is an object")
    };
    // The Rust type's name and doc are noise to a model.
    map.remove("title");
    map.remove("description");
    map
}

pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "create_sandbox",
        title: "Create a sandbox",
        description: "Create an isolated Linux sandbox and make it this session's default sandbox \
(tools called without sandbox_id use it). It is destroyed at expires_at (created_at + timeout); \
run_command and the file tools push that deadline to now + timeout, the task tools do not. \
When this MCP session ends, sandboxes it created are destroyed unless a task was started in them \
(start_task retains the sandbox until its deadline or kill_sandbox). The sandbox gets a clean \
environment plus `envs`: pass secrets a command needs there; their values are redacted from task logs.",
        read_only: false,
        destructive: false,
        idempotent: false,
        input_schema: input::<CreateSandboxArgs>,
        output_schema: output::<CreateSandboxResult>,
    },
    ToolSpec {
        name: "kill_sandbox",
        title: "Destroy a sandbox",
        description: "Destroy a sandbox now: every process in it (also detached ones), its files and \
its tasks. killed is false when it was already gone. Use it when you are done with a sandbox that \
has tasks (it would otherwise live until its deadline), or to stop everything in it for sure.",
        read_only: false,
        destructive: true,
        idempotent: true,
        input_schema: input::<KillSandboxArgs>,
        output_schema: output::<KillSandboxResult>,
    },
    ToolSpec {
        name: "list_sandboxes",
        title: "List sandboxes",
        description: "List the live sandboxes this server can see (also those created by earlier \
sessions), with their deadlines and whether they are retained by a task.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<ListSandboxesArgs>,
        output_schema: output::<ListSandboxesResult>,
    },
    ToolSpec {
        name: "run_command",
        title: "Run a command and wait",
        description: "Run a short shell command (bash -c) in a sandbox and wait for it; returns exit_code \
and the last 64 KiB of stdout and stderr. At the timeout (see the timeout parameter) the command \
is killed and timed_out is true, and its output is lost if you disconnect. For anything that may \
take longer than a minute, must survive a disconnect, or produces a lot of output (builds, test \
suites, servers, downloads), use start_task instead. Renews the sandbox's deadline.",
        read_only: false,
        destructive: true,
        idempotent: false,
        input_schema: input::<RunCommandArgs>,
        output_schema: output::<RunCommandResult>,
    },
    ToolSpec {
        name: "read_file",
        title: "Read a file",
        description: "Read a text file from a sandbox (at most 1 MiB; invalid UTF-8 shows as U+FFFD). \
A relative path is taken from the sandbox user's home. Renews the sandbox's deadline.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<ReadFileArgs>,
        output_schema: output::<ReadFileResult>,
    },
    ToolSpec {
        name: "write_file",
        title: "Write a file",
        description: "Write a text file in a sandbox, replacing it atomically and creating missing \
parent directories. A relative path is taken from the sandbox user's home. Handy for scripts: \
write the script, then run it with run_command or start_task. Renews the sandbox's deadline.",
        read_only: false,
        destructive: true,
        idempotent: true,
        input_schema: input::<WriteFileArgs>,
        output_schema: output::<WriteFileResult>,
    },
    ToolSpec {
        name: "list_files",
        title: "List a directory",
        description: "List a directory in a sandbox: name, type (file, dir, symlink, other), size and \
modification time of each entry. A relative path is taken from the sandbox user's home. Renews the \
sandbox's deadline.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<ListFilesArgs>,
        output_schema: output::<ListFilesResult>,
    },
    ToolSpec {
        name: "start_task",
        title: "Start a background task",
        description: "Start a shell command (bash -c) as a durable background task in a sandbox and \
return at once with its handle: sandbox_id + task_id. Use it instead of run_command for anything \
long-running or with much output. The task keeps running after this session ends or the server \
restarts; KEEP THE HANDLE: get_task and cancel_task need both parts, from this or any later session. \
The sandbox is retained (no session end destroys it) until its own deadline or kill_sandbox; the \
deadline is not extended, so create the sandbox with a timeout long enough for the task. Without \
sandbox_id the session's default sandbox is used; no sandbox is ever created implicitly. Each \
stream's first 1 MiB is saved. If state is \"unknown\" with an error, the submission could not be \
confirmed: do NOT call start_task again with the same command (it may be running); query the \
handle with get_task, or kill_sandbox.",
        read_only: false,
        destructive: false,
        idempotent: false,
        input_schema: input::<StartTaskArgs>,
        output_schema: output::<StartTaskResult>,
    },
    ToolSpec {
        name: "get_task",
        title: "Get a task's state and logs",
        description: "Read a task's state (running, succeeded, failed, cancelled, timed_out, unknown), \
exit code and one page of its saved stdout and stderr. Page through logs by byte offsets: pass the \
returned stdout_next_offset / stderr_next_offset as stdout_offset / stderr_offset in the next call; \
when next_offset equals *_bytes you have everything saved so far (poll again while running). \
Reading the same offset again returns the same bytes. \"unknown\" means the supervisor vanished \
without a result: never treat it as success. Does not renew the sandbox's deadline.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<GetTaskArgs>,
        output_schema: output::<TaskResult>,
    },
    ToolSpec {
        name: "cancel_task",
        title: "Cancel a task",
        description: "Stop a running task: TERM, then KILL, to the task's process group, waiting at most \
3 s for the state cancelled; returns the same fields as get_task. A task already finished is \
returned unchanged. If cancellation is not confirmed in 3 s the call fails and reports the observed \
state; check again with get_task, or kill_sandbox to stop everything. Processes the task moved out \
of its process group (setsid, daemons) survive; only kill_sandbox stops them.",
        read_only: false,
        destructive: true,
        idempotent: true,
        input_schema: input::<CancelTaskArgs>,
        output_schema: output::<TaskResult>,
    },
    ToolSpec {
        name: "wait_task",
        title: "Wait for a task",
        description: "Wait until a task finishes or writes new output, then return what get_task would, \
plus waited_ms. Returns as soon as the task is in a final state, or stdout / stderr has saved bytes \
beyond stdout_offset / stderr_offset, or after timeout seconds (default 30, at most 300) with the \
task still running. Use it instead of calling get_task in a loop: pass the returned *_next_offset \
values back to follow the logs, and call again while the state is running. Does not renew the \
sandbox's deadline.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<WaitTaskArgs>,
        output_schema: output::<WaitTaskResult>,
    },
    ToolSpec {
        name: "list_tasks",
        title: "List a sandbox's tasks",
        description: "List every task in a sandbox, newest first: task_id, state, exit_code, times, the \
first 256 characters of the command (secrets redacted) and the bytes of output saved. Use it to \
find a handle you lost. A sandbox holds at most 128 tasks; delete_task frees a place.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: input::<ListTasksArgs>,
        output_schema: output::<ListTasksResult>,
    },
    ToolSpec {
        name: "delete_task",
        title: "Delete a finished task",
        description: "Delete a finished task (any state but running) with its saved logs, freeing one of the \
sandbox's 128 task places. A running task is refused: cancel it first with cancel_task. The handle \
is unknown afterwards.",
        read_only: false,
        destructive: true,
        idempotent: false,
        input_schema: input::<DeleteTaskArgs>,
        output_schema: output::<DeleteTaskResult>,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use sandkeep_proto::limits::TASK_TIMEOUT_MAX;

    #[test]
    fn every_input_schema_is_a_closed_object() {
        for t in TOOLS {
            let s = (t.input_schema)();
            assert_eq!(s["type"], "object", "{}", t.name);
            assert_eq!(s["additionalProperties"], false, "{}: {s:?}", t.name);
            let o = (t.output_schema)();
            assert_eq!(o["type"], "object", "{}", t.name);
        }
    }

    #[test]
    fn ranges_are_in_the_schema() {
        let s = input::<StartTaskArgs>();
        assert_eq!(s["properties"]["timeout"]["maximum"], TASK_TIMEOUT_MAX);
        let s = input::<GetTaskArgs>();
        assert_eq!(s["properties"]["task_id"]["pattern"], "^[0-9a-f]{32}$");
        assert_eq!(s["properties"]["limit"]["minimum"], 1);
        let o = output::<TaskResult>();
        assert_eq!(o["properties"]["state"]["enum"][4], "timed_out");
    }
}
