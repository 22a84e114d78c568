//! The JSON entry point: a tool name and a JSON object of arguments in, the
//! result object out. Parsing names the offending parameter for every kind
//! of mistake (unknown, missing, wrong type), which plain serde does not.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Service, Session, ToolError, catalog, validate};

pub(super) fn parse<T: DeserializeOwned>(
    tool: &str,
    args: Option<Map<String, Value>>,
) -> Result<T, ToolError> {
    let value = Value::Object(args.unwrap_or_default());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let param = e.path().iter().next().and_then(|seg| match seg {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            _ => None,
        });
        let detail = plain_words(&e.into_inner().to_string());
        if detail.starts_with("unknown field") {
            let name = param.unwrap_or_default();
            return ToolError::InvalidArgument(format!(
                "unknown parameter `{name}` for {tool}: {}; nothing was run",
                accepted(tool)
            ));
        }
        match param {
            Some(p) => ToolError::invalid(
                &p,
                &validate::rule(tool, &p),
                format_args!("{detail}; nothing was run"),
            ),
            // A missing parameter is reported at the root; serde names it
            // ("missing field `command`").
            None => ToolError::InvalidArgument(format!(
                "invalid arguments for {tool}: {}; nothing was run",
                detail.replace("missing field", "missing required parameter")
            )),
        }
    })
}

/// serde's "invalid type: string \"10\", expected u64" in the caller's
/// words ("got string \"10\""): the rule beside it already says what is
/// expected, and Rust type names mean nothing to a model.
fn plain_words(detail: &str) -> String {
    let Some(what) = detail
        .strip_prefix("invalid type: ")
        .or_else(|| detail.strip_prefix("invalid value: "))
    else {
        return detail.to_owned();
    };
    let what = what.split_once(", expected").map_or(what, |(w, _)| w);
    format!("got {}", what.replace('`', ""))
}

/// "the parameters are `a`, `b`" (or "it takes no parameters"), from the
/// tool's published input schema.
fn accepted(tool: &str) -> String {
    let names: Vec<String> = catalog::TOOLS
        .iter()
        .find(|t| t.name == tool)
        .and_then(|t| {
            (t.input_schema)()
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().map(|k| format!("`{k}`")).collect())
        })
        .unwrap_or_default();
    if names.is_empty() {
        "it takes no parameters".to_owned()
    } else {
        format!("the parameters are {}", names.join(", "))
    }
}

fn to_json<T: Serialize>(result: T) -> Value {
    serde_json::to_value(result).expect("tool results always encode")
}

impl Service {
    /// Runs tool `tool` with JSON `args` (an absent object means no
    /// arguments) and returns its result object. Used by MCP.
    ///
    /// Each tool's future is boxed on its own: unboxed, every call would
    /// carry the largest tool's state, and an idle wait_task (a server may
    /// hold thousands) would pay for run_command's.
    pub async fn call_json(
        &self,
        session: &Session,
        tool: &str,
        args: Option<Map<String, Value>>,
    ) -> Result<Value, ToolError> {
        Ok(match tool {
            "create_sandbox" => {
                to_json(Box::pin(self.create_sandbox(session, parse(tool, args)?)).await?)
            }
            "kill_sandbox" => {
                to_json(Box::pin(self.kill_sandbox(session, parse(tool, args)?)).await?)
            }
            "list_sandboxes" => to_json(Box::pin(self.list_sandboxes(parse(tool, args)?)).await?),
            "snapshot_sandbox" => {
                to_json(Box::pin(self.snapshot_sandbox(parse(tool, args)?)).await?)
            }
            "list_snapshots" => to_json(Box::pin(self.list_snapshots(parse(tool, args)?)).await?),
            "delete_snapshot" => to_json(Box::pin(self.delete_snapshot(parse(tool, args)?)).await?),
            "fork_sandbox" => {
                to_json(Box::pin(self.fork_sandbox(session, parse(tool, args)?)).await?)
            }
            "pause_sandbox" => to_json(Box::pin(self.pause_sandbox(parse(tool, args)?)).await?),
            "resume_sandbox" => to_json(Box::pin(self.resume_sandbox(parse(tool, args)?)).await?),
            "run_command" => {
                to_json(Box::pin(self.run_command(session, parse(tool, args)?)).await?)
            }
            "read_file" => to_json(Box::pin(self.read_file(session, parse(tool, args)?)).await?),
            "write_file" => to_json(Box::pin(self.write_file(session, parse(tool, args)?)).await?),
            "list_files" => to_json(Box::pin(self.list_files(session, parse(tool, args)?)).await?),
            "start_task" => to_json(Box::pin(self.start_task(session, parse(tool, args)?)).await?),
            "get_task" => to_json(Box::pin(self.get_task(parse(tool, args)?)).await?),
            "cancel_task" => to_json(Box::pin(self.cancel_task(parse(tool, args)?)).await?),
            "wait_task" => to_json(Box::pin(self.wait_task(parse(tool, args)?)).await?),
            "list_tasks" => to_json(Box::pin(self.list_tasks(parse(tool, args)?)).await?),
            "delete_task" => to_json(Box::pin(self.delete_task(parse(tool, args)?)).await?),
            "list_changes" => to_json(Box::pin(self.list_changes(parse(tool, args)?)).await?),
            "apply_changes" => to_json(Box::pin(self.apply_changes(parse(tool, args)?)).await?),
            "expose_port" => {
                to_json(Box::pin(self.expose_port(session, parse(tool, args)?)).await?)
            }
            "start_interactive_task" => {
                to_json(Box::pin(self.start_interactive_task(session, parse(tool, args)?)).await?)
            }
            "send_input" => to_json(Box::pin(self.send_input(parse(tool, args)?)).await?),
            "resize_terminal" => to_json(Box::pin(self.resize_terminal(parse(tool, args)?)).await?),
            other => return Err(ToolError::UnknownTool(other.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{StartTaskArgs, TaskQueryArgs};
    use serde_json::json;

    fn obj(v: Value) -> Option<Map<String, Value>> {
        v.as_object().cloned()
    }

    #[test]
    fn wrong_type_names_parameter_and_rule() {
        let e = parse::<StartTaskArgs>("start_task", obj(json!({"command": "x", "timeout": "10"})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`timeout`") && e.contains("1 to 3600"), "{e}");
        let e = parse::<TaskQueryArgs>(
            "get_task",
            obj(json!({"sandbox_id": "a", "task_id": "0123456789abcdef0123456789abcdef", "limit": -1})),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`limit`") && e.contains("1 to 65536"), "{e}");
        assert!(e.contains("got integer -1") && !e.contains("u64"), "{e}");
    }

    #[test]
    fn unknown_and_missing_parameters_are_named() {
        let e = parse::<StartTaskArgs>("start_task", obj(json!({"command": "x", "priority": 1})))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown parameter `priority`") && e.contains("`cwd`"),
            "{e}"
        );
        let e = parse::<StartTaskArgs>("start_task", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing required parameter `command`"), "{e}");
    }
}
