//! The JSON entry point: a tool name and a JSON object of arguments in, the
//! result object out. Parsing names the offending parameter for every kind
//! of mistake (unknown, missing, wrong type), which plain serde does not.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Service, Session, ToolError, validate};

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
        let inner = e.into_inner();
        let inner_text = inner.to_string();
        match param {
            Some(p) if inner_text.starts_with("unknown field") => {
                ToolError::InvalidArgument(format!(
                    "unknown parameter `{p}` for {tool}: {}; nothing was run",
                    inner_text
                        .replace("unknown field", "parameter")
                        .replace("expected", "expected parameters are")
                ))
            }
            Some(p) => ToolError::invalid(
                &p,
                validate::rule(tool, &p),
                format_args!("{inner}; nothing was run"),
            ),
            // Unknown and missing parameters are reported at the root; serde
            // names them in its message ("unknown field `x`, expected one
            // of ...", "missing field `command`").
            None => ToolError::InvalidArgument(format!(
                "invalid arguments for {tool}: {}; nothing was run",
                inner_text.replace("field", "parameter")
            )),
        }
    })
}

fn to_json<T: Serialize>(result: T) -> Value {
    serde_json::to_value(result).expect("tool results always encode")
}

impl Service {
    /// Runs tool `tool` with JSON `args` (an absent object means no
    /// arguments) and returns its result object. Used by MCP.
    pub async fn call_json(
        &self,
        session: &Session,
        tool: &str,
        args: Option<Map<String, Value>>,
    ) -> Result<Value, ToolError> {
        Ok(match tool {
            "create_sandbox" => to_json(self.create_sandbox(session, parse(tool, args)?).await?),
            "kill_sandbox" => to_json(self.kill_sandbox(session, parse(tool, args)?).await?),
            "list_sandboxes" => to_json(self.list_sandboxes(parse(tool, args)?).await?),
            "run_command" => to_json(self.run_command(session, parse(tool, args)?).await?),
            "read_file" => to_json(self.read_file(session, parse(tool, args)?).await?),
            "write_file" => to_json(self.write_file(session, parse(tool, args)?).await?),
            "list_files" => to_json(self.list_files(session, parse(tool, args)?).await?),
            "start_task" => to_json(self.start_task(session, parse(tool, args)?).await?),
            "get_task" => to_json(self.get_task(parse(tool, args)?).await?),
            "cancel_task" => to_json(self.cancel_task(parse(tool, args)?).await?),
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
    }

    #[test]
    fn unknown_and_missing_parameters_are_named() {
        let e = parse::<StartTaskArgs>("start_task", obj(json!({"command": "x", "priority": 1})))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`priority`") && e.contains("unknown parameter"),
            "{e}"
        );
        let e = parse::<StartTaskArgs>("start_task", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`command`") && e.contains("missing parameter"),
            "{e}"
        );
    }
}
