//! CLI test support: running `sandkeep` commands on a [`Home`], reading
//! their JSON, checking it against the MCP output schemas, and a
//! pseudo-terminal for the interactive output.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Home, bin};

/// How long one CLI command may take before the test fails.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(30);

impl Home {
    /// Runs `sandkeep ARGS` to its end (bounded by [`COMMAND_DEADLINE`]).
    pub fn run(&self, args: &[&str]) -> Output {
        assert_cmd::Command::new(bin())
            .env("SANDKEEP_HOME", self.path())
            .args(args)
            .timeout(COMMAND_DEADLINE)
            .output()
            .unwrap_or_else(|e| panic!("sandkeep {args:?}: {e}"))
    }

    /// Runs a command that must exit 0; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "sandkeep {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8(out.stdout).expect("UTF-8 stdout")
    }

    /// Runs a `--json` command that must exit 0; returns its one object.
    pub fn json(&self, args: &[&str]) -> Value {
        let stdout = self.ok(args);
        parse_one(&stdout, args)
    }

    /// Creates a sandbox and returns its id.
    pub fn sandbox(&self) -> String {
        let created = self.json(&["sandbox", "create", "--json"]);
        created["sandbox_id"]
            .as_str()
            .expect("sandbox_id")
            .to_owned()
    }

    /// Starts a task and returns its task id.
    pub fn start(&self, sandbox: &str, command: &str) -> String {
        let started = self.json(&[
            "task",
            "start",
            "--sandbox",
            sandbox,
            "--json",
            "--",
            command,
        ]);
        started["task_id"].as_str().expect("task_id").to_owned()
    }
}

/// Exit code, stdout and stderr, for failure messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The single JSON object of a `--json` output line.
pub fn parse_one(stdout: &str, args: &[&str]) -> Value {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "sandkeep {args:?} should print one JSON line, got {stdout:?}"
    );
    let value: Value = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("sandkeep {args:?} printed invalid JSON ({e}): {stdout}"));
    assert!(
        value.is_object(),
        "sandkeep {args:?} printed a non-object: {value}"
    );
    value
}

/// Asserts that `value` has exactly the shape of the MCP tool's result: every
/// required property present, nothing the output schema does not declare,
/// and each value of the declared JSON type.
pub fn assert_mcp_shape(tool: &str, value: &Value) {
    let spec = sandkeep::service::catalog::TOOLS
        .iter()
        .find(|t| t.name == tool)
        .unwrap_or_else(|| panic!("no MCP tool {tool}"));
    assert_schema(tool, &Value::Object((spec.output_schema)()), value);
}

/// Asserts that `value` fits the JSON schema `schema` (as schemars emits it).
pub fn assert_schema(what: &str, schema: &Value, value: &Value) {
    if let Err(e) = check(what, schema, schema, value) {
        panic!("{e}");
    }
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => &root["$defs"][r.rsplit('/').next().unwrap_or_default()],
        None => schema,
    }
}

/// Checks `value` against the subset of JSON Schema that schemars emits for
/// the service's result types.
fn check(what: &str, root: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    let schema = resolve(root, schema);
    if let Some(options) = schema["anyOf"].as_array().or(schema["oneOf"].as_array()) {
        return if options.iter().any(|o| check(what, root, o, value).is_ok()) {
            Ok(())
        } else {
            Err(format!("{what}: {value} matches none of {schema}"))
        };
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return Err(format!("{what}: {value} is not one of {allowed:?}"));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let fits = types.is_empty()
        || types.iter().any(|t| match *t {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        });
    if !fits {
        return Err(format!("{what}: {value} is not of type {types:?}"));
    }
    if let (Some(props), Some(object)) = (schema["properties"].as_object(), value.as_object()) {
        for key in object.keys() {
            if !props.contains_key(key) {
                return Err(format!(
                    "{what}: `{key}` is not in the MCP result schema ({value})"
                ));
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let key = required.as_str().unwrap_or_default();
            if !object.contains_key(key) {
                return Err(format!("{what}: `{key}` is missing ({value})"));
            }
        }
        for (key, v) in object {
            check(&format!("{what}.{key}"), root, &props[key], v)?;
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for item in array {
            check(what, root, items, item)?;
        }
    }
    Ok(())
}

/// A pseudo-terminal: the child gets the terminal side, the test reads
/// everything written to it.
pub struct Pty {
    pub terminal: std::fs::File,
    output: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Pty {
    pub fn open() -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let controller =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
        grantpt(&controller).expect("grantpt");
        unlockpt(&controller).expect("unlockpt");
        let name = ptsname(&controller, Vec::new()).expect("ptsname");
        let terminal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("pty name"))
            .expect("open the terminal side");
        let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = output.clone();
        let mut controller = std::fs::File::from(controller);
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            // Ends with EIO once every terminal-side descriptor is closed.
            while let Ok(n @ 1..) = controller.read(&mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self { terminal, output }
    }

    /// Everything written to the terminal so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// A handle for a child's stdio.
    pub fn stdio(&self) -> Stdio {
        Stdio::from(self.terminal.try_clone().expect("dup terminal"))
    }
}
