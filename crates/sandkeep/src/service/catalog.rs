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
    /// What the tool does, true with or without a session: one paragraph,
    /// no line breaks. See [`ToolSpec::description`].
    pub about: &'static str,
    /// Appended where calls share a session (stdio, legacy HTTP): how the
    /// session's default sandbox and destruction set apply. Empty if none do.
    pub session_note: &'static str,
    /// Appended where every request stands alone (2026-07-28 HTTP): no
    /// default sandbox exists, so `sandbox_id` is required. Empty if the
    /// tool does not care.
    pub sessionless_note: &'static str,
    pub annotations: Annotations,
    /// JSON Schema 2020-12 of the arguments: an object schema with
    /// `additionalProperties: false`.
    pub input_schema: fn() -> Map<String, Value>,
    /// JSON Schema 2020-12 of the result object.
    pub output_schema: fn() -> Map<String, Value>,
}

/// The MCP tool annotations (hints a client uses to decide what needs the
/// user's approval). They must agree with the README's table; a test
/// checks that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotations {
    /// The tool changes nothing in any sandbox.
    pub read_only: bool,
    /// The tool may destroy or overwrite something (killing processes,
    /// replacing files, running arbitrary commands).
    pub destructive: bool,
    /// Calling it twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool may reach the world outside the sandbox (the network).
    pub open_world: bool,
}

/// Whether the caller has a session (a default sandbox, a destruction set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// stdio, or a legacy (initialize) HTTP session.
    Session,
    /// A 2026-07-28 HTTP request: no session, so no default sandbox.
    Sessionless,
}

/// What a sessionless caller is told wherever a default would apply (in
/// create_sandbox's `next` and in the missing-sandbox error).
pub const PASS_SANDBOX_ID: &str = "pass this sandbox_id to every call: requests on this \
connection have no session, so there is no default sandbox";

/// The error of a sessionless call without `sandbox_id`: where an id comes
/// from, since the request carried none.
pub const NO_SESSION: &str = "no default sandbox: requests on this connection have no session, \
so pass sandbox_id to every call: the sandbox_id of create_sandbox's result, or one that \
list_sandboxes lists";

impl ToolSpec {
    /// The description a model reads in `era`.
    pub fn description(&self, era: Era) -> String {
        let note = match era {
            Era::Session => self.session_note,
            Era::Sessionless => self.sessionless_note,
        };
        let text = if note.is_empty() {
            self.about.to_owned()
        } else {
            format!("{} {note}", self.about)
        };
        prose(&text)
    }

    /// The input schema in `era`: without a session an optional
    /// `sandbox_id` becomes required, its description saying why. Every
    /// parameter's description ends with what it accepts, its range and
    /// default ([`ToolSpec::allowed`]): some clients (Codex) strip
    /// `minimum`, `maximum` and `default` from the schema, and a model
    /// should not learn a range from a failed call.
    pub fn input_schema(&self, era: Era) -> Map<String, Value> {
        let mut schema = (self.input_schema)();
        if era == Era::Sessionless
            && let Some(Value::Object(p)) = schema
                .get_mut("properties")
                .and_then(|p| p.get_mut("sandbox_id"))
        {
            p.insert(
                "description".into(),
                "The sandbox to use: the sandbox_id create_sandbox returned (required: this \
                 connection has no session, so there is no default sandbox)."
                    .into(),
            );
            let required = schema
                .entry("required")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(r) = required
                && !r.iter().any(|v| v == "sandbox_id")
            {
                r.push("sandbox_id".into());
            }
        }
        if let Some(Value::Object(properties)) = schema.get_mut("properties") {
            for (name, property) in properties.iter_mut() {
                let Some(allowed) = self.allowed(name) else {
                    continue;
                };
                let text = property["description"].as_str().unwrap_or_default();
                let text = format!("{text} Allowed: {allowed}.");
                property["description"] = text.trim_start().into();
            }
        }
        schema
    }

    /// What parameter `param` accepts, with its range and default: the
    /// same phrase the call's error names when a value is refused.
    pub fn allowed(&self, param: &str) -> Option<String> {
        super::validate::allowed(self.name, param)
    }
}

/// `text` with each `{NAME}` replaced by the limit of that name: tool
/// descriptions quote the limits from their constants, never by hand.
///
/// Panics on a name it does not know; the catalogue's tests expand every
/// description, so that cannot ship.
pub(super) fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .unwrap_or_else(|| panic!("an unclosed {{ in a tool description: {text}"));
        let name = &rest[open + 1..open + close];
        out.push_str(
            &limit(name).unwrap_or_else(|| panic!("no limit {name:?} for a tool description")),
        );
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// The limits tool descriptions quote, as they read in prose.
fn limit(name: &str) -> Option<String> {
    use sandkeep_proto::limits::*;
    Some(match name {
        "RUN_TIMEOUT_DEFAULT" => RUN_TIMEOUT_DEFAULT.to_string(),
        "RUN_OUTPUT_MAX" => bytes(RUN_OUTPUT_MAX_BYTES as u64),
        "READ_FILE_MAX" => bytes(super::handlers::READ_FILE_MAX_BYTES),
        "LOG_CAP" => bytes(LOG_CAP_BYTES),
        "WAIT_TIMEOUT_DEFAULT" => WAIT_TIMEOUT_DEFAULT.to_string(),
        "WAIT_TIMEOUT_MAX" => WAIT_TIMEOUT_MAX.to_string(),
        "CANCEL_WAIT" => (CANCEL_WAIT_MS / 1000).to_string(),
        "LISTED_COMMAND_MAX" => LISTED_COMMAND_MAX_CHARS.to_string(),
        "MAX_TASKS" => MAX_TASK_DIRS.to_string(),
        "INPUT_MAX" => bytes(INPUT_MAX_BYTES as u64),
        "INPUT_BACKLOG" => bytes(INPUT_BACKLOG_MAX_BYTES),
        _ => return None,
    })
}

/// A whole number of KiB or MiB, as prose says sizes ("64 KiB", "1 MiB").
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

fn input<T: JsonSchema>() -> Map<String, Value> {
    let mut map = schema::<T>(SchemaSettings::draft2020_12());
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for p in props.values_mut() {
            not_null(p);
        }
    }
    map
}

fn output<T: JsonSchema>() -> Map<String, Value> {
    let mut map = schema::<T>(SchemaSettings::draft2020_12().for_serialize());
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(nullable_as_any_of);
    }
    map
}

fn schema<T: JsonSchema>(mut settings: SchemaSettings) -> Map<String, Value> {
    // Some clients do not resolve `$ref`; every schema is small enough to
    // inline.
    settings.inline_subschemas = true;
    let root = settings.into_generator().into_root_schema_for::<T>();
    let Value::Object(mut map) = serde_json::to_value(root).expect("schemas always encode") else {
        unreachable!("a root schema of a struct is an object")
    };
    // The Rust type's name and doc are noise to a model.
    map.remove("title");
    map.remove("description");
    let mut value = Value::Object(map);
    portable(&mut value);
    let Value::Object(map) = value else {
        unreachable!("still an object")
    };
    map
}

/// Removes what strict validators reject or warn about: schemars' Rust
/// integer formats ("uint64", "int32", "double"...) are not JSON Schema
/// formats, and Ajv in strict mode refuses a schema with an unknown one.
/// Descriptions lose the line breaks of the doc comments they come from.
fn portable(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("format").and_then(Value::as_str).is_some_and(|f| {
                !matches!(
                    f,
                    "date-time" | "date" | "time" | "duration" | "email" | "hostname" | "uri"
                )
            }) {
                map.remove("format");
            }
            if let Some(Value::String(d)) = map.get_mut("description") {
                *d = d.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            map.values_mut().for_each(portable);
        }
        Value::Array(items) => items.iter_mut().for_each(portable),
        _ => {}
    }
}

/// An optional parameter is simply left out; it is published as its plain
/// type, not `["T", "null"]`, which form-building clients (the Inspector)
/// warn about, and without schemars' `"default": null`, which a client
/// that fills in defaults (Ajv's `useDefaults`, form UIs) would send and
/// then fail its own validation of. The service still accepts an explicit
/// null.
fn not_null(property: &mut Value) {
    if let Some(Value::Array(types)) = property.get_mut("type") {
        types.retain(|t| t != "null");
        if let [single] = types.as_slice() {
            let single = single.clone();
            property["type"] = single;
        }
    }
    if let Value::Object(map) = property
        && map.get("default") == Some(&Value::Null)
    {
        map.remove("default");
    }
}

/// A result field that may be null, `{"type": ["T", "null"], ...}`, as
/// `{"anyOf": [{"type": "T", ...}, {"type": "null"}]}`: the same values,
/// in the form clients that map schemas onto a single-`type` dialect
/// (Gemini's function declarations) accept, and that the Inspector's
/// `--strict` does not warn about. Nested objects are rewritten too.
fn nullable_as_any_of(property: &mut Value) {
    let Value::Object(map) = property else {
        return;
    };
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(nullable_as_any_of);
    }
    if let Some(items) = map.get_mut("items") {
        nullable_as_any_of(items);
    }
    let Some(Value::Array(types)) = map.get("type") else {
        return;
    };
    let others: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
    let [single] = others.as_slice() else {
        return;
    };
    if others.len() == types.len() {
        return;
    }
    let mut branch = std::mem::take(map);
    branch.insert("type".into(), single.clone());
    for keep in ["description", "title"] {
        if let Some(v) = branch.remove(keep) {
            map.insert(keep.into(), v);
        }
    }
    map.insert(
        "anyOf".into(),
        serde_json::json!([Value::Object(branch), {"type": "null"}]),
    );
}

const fn annotations(
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
) -> Annotations {
    Annotations {
        read_only,
        destructive,
        idempotent,
        open_world,
    }
}

/// Reads only: changes nothing, safe to repeat, stays on this host.
const READS: Annotations = annotations(true, false, true, false);
/// Runs an arbitrary command: it may delete anything in the sandbox and
/// reach the network, and running it twice does it twice.
const RUNS_ANYTHING: Annotations = annotations(false, true, false, true);

const DEFAULT_SANDBOX: &str =
    "Without sandbox_id the sandbox from this session's last create_sandbox is used.";
const SANDBOX_ID_REQUIRED: &str = "sandbox_id is required: pass the sandbox_id create_sandbox \
returned (requests on this connection have no session, so there is no default sandbox).";

pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "create_sandbox",
        title: "Create a sandbox",
        about: "Create an isolated Linux sandbox and return its sandbox_id. It is destroyed at \
expires_at (created_at + timeout); run_command and the file tools push that deadline to now + \
timeout, the task tools do not. The sandbox gets a clean environment plus `envs`: pass secrets a \
command needs there; their values are redacted from task logs.",
        session_note: "It becomes this session's default sandbox (tools called without sandbox_id \
use it). When this MCP session ends, sandboxes it created are destroyed unless a task was started \
in them (start_task retains the sandbox until its deadline or kill_sandbox).",
        sessionless_note: "Pass the returned sandbox_id to every call: requests on this connection \
have no session, so there is no default sandbox, and nothing destroys the sandbox before its \
deadline except kill_sandbox. Create one sandbox and reuse it; kill_sandbox when done.",
        annotations: annotations(false, false, false, false),
        input_schema: input::<CreateSandboxArgs>,
        output_schema: output::<CreateSandboxResult>,
    },
    ToolSpec {
        name: "kill_sandbox",
        title: "Destroy a sandbox",
        about: "Destroy a sandbox now: every process in it (also detached ones), its files and its \
tasks. killed is false when it was already gone. Use it when you are done with a sandbox that has \
tasks (it would otherwise live until its deadline), or to stop everything in it for sure.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, true, true, false),
        input_schema: input::<KillSandboxArgs>,
        output_schema: output::<KillSandboxResult>,
    },
    ToolSpec {
        name: "list_sandboxes",
        title: "List sandboxes",
        about: "List the live sandboxes this server can see (also those created by earlier \
sessions and by the sandkeep CLI on the same state directory), with their deadlines and whether \
they are retained by a task.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<ListSandboxesArgs>,
        output_schema: output::<ListSandboxesResult>,
    },
    ToolSpec {
        name: "pause_sandbox",
        title: "Pause a sandbox",
        about: "Freeze every process of a sandbox (they use no CPU) and stop its deadline, keeping \
its files, processes and tasks as they are. get_task, list_tasks and wait_task read it as usual (a \
task stays running; its own timeout counts wall time, pauses included); run_command, the file tools, \
start_task and a connection to one of its exposed ports resume it first. A paused sandbox survives a server restart, not a host reboot. \
Pausing a paused sandbox is an error.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, false, false, false),
        input_schema: input::<PauseSandboxArgs>,
        output_schema: output::<PauseSandboxResult>,
    },
    ToolSpec {
        name: "resume_sandbox",
        title: "Resume a paused sandbox",
        about: "Thaw a paused sandbox: its processes go on where they were, and its deadline is \
now + timeout (default its own timeout). Resuming a running sandbox is an error.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, false, false, false),
        input_schema: input::<ResumeSandboxArgs>,
        output_schema: output::<ResumeSandboxResult>,
    },
    ToolSpec {
        name: "snapshot_sandbox",
        title: "Save a sandbox's files as a template",
        about: "Save the files a sandbox wrote (its home, /etc, /tmp, /var/tmp and its own \
top-level directories; not its processes, not its shares) as a snapshot under the server's state \
directory. Pass the returned template to create_sandbox for a new sandbox with those files. \
Snapshots survive server restarts and host reboots; list_snapshots, delete_snapshot.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, false, false, false),
        input_schema: input::<SnapshotSandboxArgs>,
        output_schema: output::<SnapshotResult>,
    },
    ToolSpec {
        name: "list_snapshots",
        title: "List sandbox snapshots",
        about: "List the snapshots of this state directory (saved sandbox files usable as \
create_sandbox templates), oldest first, with their sizes and the sandbox each was taken of.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<ListSnapshotsArgs>,
        output_schema: output::<ListSnapshotsResult>,
    },
    ToolSpec {
        name: "delete_snapshot",
        title: "Delete a sandbox snapshot",
        about: "Delete a snapshot; sandboxes made from it keep their files. deleted is false when \
there was no such snapshot.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, true, true, false),
        input_schema: input::<DeleteSnapshotArgs>,
        output_schema: output::<DeleteSnapshotResult>,
    },
    ToolSpec {
        name: "fork_sandbox",
        title: "Copy a sandbox",
        about: "Create a new sandbox from a snapshot of a running one, in one call: the new \
sandbox has the files the given one wrote (not its processes, tasks or envs) and its network, \
limits and shares. Returns what create_sandbox returns.",
        session_note: "It becomes this session's default sandbox.",
        sessionless_note: "Pass the returned sandbox_id to every call.",
        annotations: annotations(false, false, false, false),
        input_schema: input::<ForkSandboxArgs>,
        output_schema: output::<CreateSandboxResult>,
    },
    ToolSpec {
        name: "run_command",
        title: "Run a command in a sandbox and wait",
        about: "Run a short shell command (bash -c) in a sandbox and wait for it; returns exit_code \
and the last {RUN_OUTPUT_MAX} of stdout and stderr. At the timeout (default {RUN_TIMEOUT_DEFAULT} s) the command is killed and \
timed_out is true; if the client cancels the call, the command is killed too. For anything that \
may take longer than a minute, must survive a disconnect, or produces a lot of output (builds, \
test suites, servers, downloads), use start_task instead. Renews the sandbox's deadline.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: RUNS_ANYTHING,
        input_schema: input::<RunCommandArgs>,
        output_schema: output::<RunCommandResult>,
    },
    ToolSpec {
        name: "read_file",
        title: "Read a file in a sandbox",
        about: "Read a text file from a sandbox (at most {READ_FILE_MAX}; invalid UTF-8 shows as U+FFFD). A \
relative path is taken from the sandbox user's home. Renews the sandbox's deadline.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: READS,
        input_schema: input::<ReadFileArgs>,
        output_schema: output::<ReadFileResult>,
    },
    ToolSpec {
        name: "write_file",
        title: "Write a file in a sandbox",
        about: "Write a text file in a sandbox, replacing it atomically and creating missing parent \
directories. A relative path is taken from the sandbox user's home. Handy for scripts: write the \
script, then run it with run_command or start_task. Renews the sandbox's deadline.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: annotations(false, true, true, false),
        input_schema: input::<WriteFileArgs>,
        output_schema: output::<WriteFileResult>,
    },
    ToolSpec {
        name: "list_files",
        title: "List a directory in a sandbox",
        about: "List a directory in a sandbox: name, type (file, dir, symlink, other), size and \
modification time of each entry. A relative path is taken from the sandbox user's home. Renews the \
sandbox's deadline.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: READS,
        input_schema: input::<ListFilesArgs>,
        output_schema: output::<ListFilesResult>,
    },
    ToolSpec {
        name: "start_task",
        title: "Start a long-running background task in a sandbox",
        about: "Start a shell command (bash -c) as a durable background task in a sandbox and return \
at once with its handle: sandbox_id + task_id. Use it instead of run_command for anything \
long-running or with much output. The task keeps running after this call's connection ends or \
the server restarts; KEEP THE HANDLE: get_task and cancel_task need both parts, from this or any \
later session. The sandbox is retained (no session end destroys it) until its own deadline or \
kill_sandbox; the deadline is not extended, so create the sandbox with a timeout long enough for \
the task. No sandbox is ever created implicitly. Each stream's first {LOG_CAP} is saved. If state is \
\"unknown\" with an error, the submission could not be confirmed: do NOT call start_task again \
with the same command (it may be running); query the handle with get_task, or kill_sandbox.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: RUNS_ANYTHING,
        input_schema: input::<StartTaskArgs>,
        output_schema: output::<StartTaskResult>,
    },
    ToolSpec {
        name: "get_task",
        title: "Get a task's state and logs",
        about: "Read a task's state (running, succeeded, failed, cancelled, timed_out, unknown), exit \
code and one page of its saved stdout and stderr. Page through logs by byte offsets: pass the \
returned stdout_next_offset / stderr_next_offset as stdout_offset / stderr_offset in the next \
call; when next_offset equals *_bytes you have everything saved so far (poll again while \
running). Reading the same offset again returns the same bytes. \"unknown\" means the supervisor \
vanished without a result: never treat it as success. Does not renew the sandbox's deadline.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<GetTaskArgs>,
        output_schema: output::<TaskResult>,
    },
    ToolSpec {
        name: "cancel_task",
        title: "Cancel a task",
        about: "Stop a running task: TERM, then KILL, to the task's process group, waiting at most \
{CANCEL_WAIT} s for the state cancelled; returns the same fields as get_task. A task already finished is \
returned unchanged. If cancellation is not confirmed in {CANCEL_WAIT} s the call fails and reports the \
observed state; check again with get_task, or kill_sandbox to stop everything. Processes the task \
moved out of its process group (setsid, daemons) survive; only kill_sandbox stops them.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, true, true, false),
        input_schema: input::<CancelTaskArgs>,
        output_schema: output::<TaskResult>,
    },
    ToolSpec {
        name: "wait_task",
        title: "Wait for a task",
        about: "Wait until a task finishes or writes new output, then return what get_task would, \
plus waited_ms. Returns as soon as the task is in a final state, or stdout / stderr has saved bytes \
beyond stdout_offset / stderr_offset, or after timeout seconds (default {WAIT_TIMEOUT_DEFAULT}, at most {WAIT_TIMEOUT_MAX}) with the \
task still running. Use it instead of calling get_task in a loop: pass the returned *_next_offset \
values back to follow the logs, and call again while the state is running. Does not renew the \
sandbox's deadline.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<WaitTaskArgs>,
        output_schema: output::<WaitTaskResult>,
    },
    ToolSpec {
        name: "list_tasks",
        title: "List a sandbox's tasks",
        about: "List every task in a sandbox, newest first: task_id, state, exit_code, times, the \
first {LISTED_COMMAND_MAX} characters of the command (secrets redacted) and the bytes of output saved. Use it to \
find a handle you lost. A sandbox holds at most {MAX_TASKS} tasks; delete_task frees a place.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<ListTasksArgs>,
        output_schema: output::<ListTasksResult>,
    },
    ToolSpec {
        name: "delete_task",
        title: "Delete a finished task",
        about: "Delete a finished task (any state but running) with its saved logs, freeing one of the \
sandbox's {MAX_TASKS} task places. A running task is refused: cancel it first with cancel_task. The handle \
is unknown afterwards.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, true, true, false),
        input_schema: input::<DeleteTaskArgs>,
        output_schema: output::<DeleteTaskResult>,
    },
    ToolSpec {
        name: "list_changes",
        title: "List a sandbox's changes to shared host directories",
        about: "List what the sandbox changed in its copy-on-write shares (host directories the \
operator shared as cow, mounted at their own paths): each path added, modified or deleted, sorted, \
compared with the host directory; with diff: true also a unified diff of the text files. Nothing \
reaches the host until apply_changes.",
        session_note: "",
        sessionless_note: "",
        annotations: READS,
        input_schema: input::<ListChangesArgs>,
        output_schema: output::<ListChangesResult>,
    },
    ToolSpec {
        name: "apply_changes",
        title: "Write a sandbox's changes to the shared host directories",
        about: "Write the sandbox's changes to its copy-on-write shares into the host directories \
(all, or those at or below `paths`): files replaced atomically, deletions applied, symlinks made \
as symlinks. A host path that changed after the sandbox was created is a conflict: left alone and \
reported. Review list_changes first: this changes the user's files.",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, true, false, false),
        input_schema: input::<ApplyChangesArgs>,
        output_schema: output::<ApplyChangesResult>,
    },
    ToolSpec {
        name: "expose_port",
        title: "Reach a server in a sandbox",
        about: "Make a TCP port that a server listens on inside a sandbox (a dev server, a \
notebook, a database) reachable from outside it, and return its url (on the local provider \
http://127.0.0.1:HOSTPORT on this host). Any TCP protocol passes: HTTP, websockets, databases. The \
same port again returns the same url. The forward lasts as long as the sandbox, whatever becomes \
of this server; a connection while nothing listens on the port is refused. It gives the sandbox \
no way out: only what listens inside becomes reachable, also in a sandbox with network \"none\". \
create_sandbox and list_sandboxes show a sandbox's ports.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: annotations(false, false, true, false),
        input_schema: input::<ExposePortArgs>,
        output_schema: output::<ExposePortResult>,
    },
    ToolSpec {
        name: "start_interactive_task",
        title: "Start a background task that takes input",
        about: "Start a shell command (bash -c) as a durable background task whose input you send with \
send_input: REPLs (python3 -i, psql, node), prompts (y/N, passwords, apt), anything that asks. \
Returns the same handle as start_task, and every task tool works on it (get_task, wait_task, \
cancel_task, list_tasks, delete_task). With pty true the command runs on a terminal of cols x \
rows (for programs that need one; its output, stdout and stderr together, is the task's stdout, \
with the terminal's echo of what you type; resize it with resize_terminal); otherwise stdin is a \
pipe. Typical loop: send_input, then wait_task from the last stdout_next_offset to read the \
answer. KEEP THE HANDLE. If state is \"unknown\" with an error, do NOT start it again; query the \
handle with get_task.",
        session_note: DEFAULT_SANDBOX,
        sessionless_note: SANDBOX_ID_REQUIRED,
        annotations: RUNS_ANYTHING,
        input_schema: input::<StartInteractiveTaskArgs>,
        output_schema: output::<StartTaskResult>,
    },
    ToolSpec {
        name: "send_input",
        title: "Send input to an interactive task",
        about: "Type data into the stdin (or terminal) of a task started with start_interactive_task; end a line \
with \\n. Input is kept in the sandbox until the task reads it and arrives in order, exactly \
once, even if this server restarts. At most {INPUT_MAX} a call and {INPUT_BACKLOG} waiting \
unread (then \"input backlog full\": nothing of the call is taken, wait for the task to read and \
retry). close true ends the input after data (end-of-file; ^D on a terminal). Refused for \
start_task tasks, ended tasks and closed input.",
        session_note: "",
        sessionless_note: "",
        annotations: RUNS_ANYTHING,
        input_schema: input::<SendInputArgs>,
        output_schema: output::<SendInputResult>,
    },
    ToolSpec {
        name: "resize_terminal",
        title: "Resize an interactive task's terminal",
        about: "Set the size of the terminal of a task started with start_interactive_task and pty true; the program is told (SIGWINCH).",
        session_note: "",
        sessionless_note: "",
        annotations: annotations(false, false, true, false),
        input_schema: input::<ResizeTerminalArgs>,
        output_schema: output::<ResizeTerminalResult>,
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
    fn schemas_are_portable() {
        for t in TOOLS {
            for (kind, s) in [
                ("input", (t.input_schema)()),
                ("output", (t.output_schema)()),
            ] {
                let text = serde_json::to_string(&s).unwrap();
                assert!(!text.contains("\"format\""), "{} {kind}: {text}", t.name);
                assert!(!text.contains("$ref"), "{} {kind}: {text}", t.name);
                assert!(
                    !text.contains("\\n"),
                    "{} {kind}: line break in {text}",
                    t.name
                );
            }
            let input = serde_json::to_string(&(t.input_schema)()).unwrap();
            assert!(!input.contains("\"null\""), "{} input: {input}", t.name);
            assert!(!t.about.contains('\n'), "{}", t.name);
        }
        // Outputs keep null where a value may be absent, as an `anyOf`.
        let o = output::<TaskResult>();
        assert_eq!(
            o["properties"]["exit_code"]["anyOf"],
            serde_json::json!([{"type": "integer"}, {"type": "null"}])
        );
    }

    /// Every published schema, input and output, in both eras.
    fn published() -> Vec<(String, Value)> {
        let mut all = Vec::new();
        for t in TOOLS {
            for era in [Era::Session, Era::Sessionless] {
                all.push((
                    format!("{} input ({era:?})", t.name),
                    Value::Object(t.input_schema(era)),
                ));
            }
            all.push((
                format!("{} output", t.name),
                Value::Object((t.output_schema)()),
            ));
        }
        all
    }

    /// Calls `f` on every subschema of `value` with its path.
    fn walk(path: &str, value: &Value, f: &mut impl FnMut(&str, &Map<String, Value>)) {
        match value {
            Value::Object(map) => {
                f(path, map);
                for (k, v) in map {
                    walk(&format!("{path}.{k}"), v, f);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(&format!("{path}[{i}]"), v, f);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn no_null_defaults_and_no_type_arrays_anywhere() {
        for (what, schema) in published() {
            walk(&what, &schema, &mut |path, map| {
                assert_ne!(map.get("default"), Some(&Value::Null), "{path}");
                assert!(
                    !map.get("type").is_some_and(Value::is_array),
                    "{path}: {map:?}"
                );
            });
        }
    }

    /// The published description of `param` of `tool` (with a session).
    fn param_description(tool: &str, param: &str) -> String {
        let t = TOOLS.iter().find(|t| t.name == tool).unwrap();
        t.input_schema(Era::Session)["properties"][param]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}.{param} has no description"))
            .to_owned()
    }

    #[test]
    fn descriptions_state_each_range_and_default_from_the_limits() {
        use sandkeep_proto::limits::*;
        let ranged = [
            (
                "create_sandbox",
                "timeout",
                SANDBOX_TIMEOUT_MIN,
                SANDBOX_TIMEOUT_MAX,
                SANDBOX_TIMEOUT_DEFAULT,
            ),
            (
                "run_command",
                "timeout",
                RUN_TIMEOUT_MIN,
                RUN_TIMEOUT_MAX,
                RUN_TIMEOUT_DEFAULT,
            ),
            (
                "start_task",
                "timeout",
                TASK_TIMEOUT_MIN,
                TASK_TIMEOUT_MAX,
                TASK_TIMEOUT_DEFAULT,
            ),
            (
                "wait_task",
                "timeout",
                WAIT_TIMEOUT_MIN,
                WAIT_TIMEOUT_MAX,
                WAIT_TIMEOUT_DEFAULT,
            ),
            (
                "get_task",
                "limit",
                PAGE_LIMIT_MIN,
                PAGE_LIMIT_MAX,
                PAGE_LIMIT_DEFAULT,
            ),
            (
                "cancel_task",
                "limit",
                PAGE_LIMIT_MIN,
                PAGE_LIMIT_MAX,
                PAGE_LIMIT_DEFAULT,
            ),
            (
                "wait_task",
                "limit",
                PAGE_LIMIT_MIN,
                PAGE_LIMIT_MAX,
                PAGE_LIMIT_DEFAULT,
            ),
            ("get_task", "stdout_offset", 0, OFFSET_MAX, 0),
            ("wait_task", "stderr_offset", 0, OFFSET_MAX, 0),
        ];
        for (tool, param, min, max, default) in ranged {
            let d = param_description(tool, param);
            assert!(
                d.contains(&format!("from {min} to {max}")),
                "{tool}.{param}: {d}"
            );
            assert!(
                d.contains(&format!("default {default}")),
                "{tool}.{param}: {d}"
            );
        }
        let resources = [
            ("memory_mib", MEMORY_MIB_MIN, MEMORY_MIB_DEFAULT.to_string()),
            ("pids", PIDS_MIN, PIDS_DEFAULT.to_string()),
            ("disk_mib", DISK_MIB_MIN, DISK_MIB_DEFAULT.to_string()),
        ];
        for (param, min, default) in resources {
            let d = param_description("create_sandbox", param);
            assert!(d.contains(&format!("at least {min}")), "{param}: {d}");
            assert!(
                d.contains(&format!("default {default} on the local provider")),
                "{param}: {d}"
            );
        }
        let cpus = param_description("create_sandbox", "cpus");
        let least = f64::from(MILLI_CPUS_MIN) / 1000.0;
        let default = f64::from(MILLI_CPUS_DEFAULT) / 1000.0;
        assert!(cpus.contains(&format!("at least {least}")), "{cpus}");
        assert!(cpus.contains(&format!("default {default} ")), "{cpus}");
        let command = param_description("run_command", "command");
        assert!(
            command.contains(&format!("1 to {COMMAND_MAX_CHARS} characters")),
            "{command}"
        );
        let hosts = param_description("create_sandbox", "allow_hosts");
        assert!(
            hosts.contains(&format!("1 to {ALLOW_HOSTS_MAX}")),
            "{hosts}"
        );
    }

    #[test]
    fn every_schema_bound_is_in_its_description() {
        for t in TOOLS {
            let schema = t.input_schema(Era::Session);
            let Some(Value::Object(props)) = schema.get("properties") else {
                continue;
            };
            for (name, p) in props {
                let d = p["description"].as_str().unwrap_or_default();
                for key in [
                    "minimum",
                    "maximum",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                    "default",
                ] {
                    if let Some(v) = p.get(key) {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        assert!(
                            d.contains(&v),
                            "{}.{name}: {key} {v} is not in {d:?}",
                            t.name
                        );
                    }
                }
                assert!(d.contains("Allowed: "), "{}.{name}: {d:?}", t.name);
            }
        }
    }

    #[test]
    fn tool_descriptions_quote_the_limits() {
        use sandkeep_proto::limits::*;
        for t in TOOLS {
            for era in [Era::Session, Era::Sessionless] {
                let d = t.description(era);
                assert!(!d.contains('{') && !d.contains('}'), "{}: {d}", t.name);
            }
        }
        let of = |name: &str| {
            TOOLS
                .iter()
                .find(|t| t.name == name)
                .unwrap()
                .description(Era::Session)
        };
        assert!(of("run_command").contains(&format!("(default {RUN_TIMEOUT_DEFAULT} s)")));
        assert!(of("run_command").contains("the last 64 KiB"));
        assert!(of("wait_task").contains(&format!("at most {WAIT_TIMEOUT_MAX})")));
        assert!(of("list_tasks").contains(&format!("at most {MAX_TASK_DIRS} tasks")));
        assert_eq!(bytes(RUN_OUTPUT_MAX_BYTES as u64), "64 KiB");
        assert_eq!(bytes(LOG_CAP_BYTES), "1 MiB");
        assert_eq!(bytes(1000), "1000 bytes");
    }

    #[test]
    fn without_a_session_sandbox_id_is_required_and_said_so() {
        let run = TOOLS.iter().find(|t| t.name == "run_command").unwrap();
        let s = run.input_schema(Era::Sessionless);
        assert!(
            s["required"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "sandbox_id")
        );
        assert!(
            run.description(Era::Sessionless)
                .contains("sandbox_id is required")
        );
        assert!(!run.description(Era::Sessionless).contains("this session"));
        let s = run.input_schema(Era::Session);
        assert!(
            !s["required"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "sandbox_id")
        );
        assert!(
            run.description(Era::Session)
                .contains("this session's last create_sandbox")
        );
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
