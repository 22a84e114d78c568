//! Range and format checks of docs/tools.md, run before anything touches a
//! sandbox. Every message names the parameter and what is allowed.

use sandkeep_proto::TaskId;
use sandkeep_proto::limits::*;

use super::Ceilings;
use super::ToolError;
use crate::provider::{Limits, Network, OnTimeout, SandboxId};

/// Longest accepted path or working directory, in bytes (Linux PATH_MAX).
pub(super) const PATH_MAX_BYTES: usize = 4096;

/// The rule of a parameter, as a phrase for error messages. Used for type
/// errors too, so a wrong type names the allowed values.
pub(super) fn rule(tool: &str, param: &str) -> String {
    match allowed(tool, param) {
        Some(values) => format!("must be {values}"),
        None => "is not accepted".into(),
    }
}

/// What `param` of `tool` accepts, with its range and default, as a
/// phrase ("an integer from 1 to 3600 (seconds), default 30"): the one
/// statement of each rule, which error messages, the published parameter
/// descriptions and docs/tools.md all quote. `None` for a parameter no
/// tool takes.
pub(crate) fn allowed(tool: &str, param: &str) -> Option<String> {
    Some(match (tool, param) {
        ("create_sandbox", "timeout") => integer_rule(
            SANDBOX_TIMEOUT_MIN,
            SANDBOX_TIMEOUT_MAX,
            " (seconds)",
            SANDBOX_TIMEOUT_DEFAULT,
        ),
        ("resume_sandbox", "timeout") => format!(
            "an integer from {SANDBOX_TIMEOUT_MIN} to {SANDBOX_TIMEOUT_MAX} (seconds), default \
             the sandbox's own timeout"
        ),
        ("run_command", "timeout") => integer_rule(
            RUN_TIMEOUT_MIN,
            RUN_TIMEOUT_MAX,
            " (seconds)",
            RUN_TIMEOUT_DEFAULT,
        ),
        ("start_task" | "start_interactive_task", "timeout") => integer_rule(
            TASK_TIMEOUT_MIN,
            TASK_TIMEOUT_MAX,
            " (seconds)",
            TASK_TIMEOUT_DEFAULT,
        ),
        ("wait_task", "timeout") => integer_rule(
            WAIT_TIMEOUT_MIN,
            WAIT_TIMEOUT_MAX,
            " (seconds)",
            WAIT_TIMEOUT_DEFAULT,
        ),
        (_, "command") => format!("a string of 1 to {COMMAND_MAX_CHARS} characters"),
        (_, "template") => "a non-empty string naming a template, default \"base\"".into(),
        (_, "envs") => "an object mapping variable names (no '=' or NUL) to string values".into(),
        (_, "sandbox_id") => "a sandbox id string of 1-64 characters a-z, 0-9 and '-'".into(),
        (_, "name") => SNAPSHOT_NAME_RULE.into(),
        (_, "snapshot_id") => format!(
            "{SNAPSHOT_NAME_RULE}, or E2B's form of a snapshot id, [namespace/]name[:tag] with \
             each part such a string"
        ),
        ("fork_sandbox", "timeout") => format!(
            "an integer from {SANDBOX_TIMEOUT_MIN} to {SANDBOX_TIMEOUT_MAX} (seconds), default \
             the sandbox's own timeout"
        ),
        (_, "task_id") => "a string of 32 lowercase hexadecimal characters (^[0-9a-f]{32}$)".into(),
        (_, "stdout_offset" | "stderr_offset") => integer_rule(0, OFFSET_MAX, " (bytes)", 0),
        (_, "limit") => integer_rule(
            PAGE_LIMIT_MIN,
            PAGE_LIMIT_MAX,
            " (bytes per stream)",
            PAGE_LIMIT_DEFAULT,
        ),
        (_, "path" | "cwd") => {
            format!("a non-empty path string (1 to {PATH_MAX_BYTES} bytes, no NUL)")
        }
        (_, "content") => "a string".into(),
        ("resize_terminal", "cols" | "rows") => {
            format!("an integer from {TERM_SIZE_MIN} to {TERM_SIZE_MAX}")
        }
        (_, "cols") => term_rule(TERM_COLS_DEFAULT),
        (_, "rows") => term_rule(TERM_ROWS_DEFAULT),
        (_, "pty") => "a boolean, default false".into(),
        (_, "close") => "a boolean, default false".into(),
        (_, "data") => format!(
            "a string: the bytes to send (at most {INPUT_MAX_BYTES} after decoding); may be empty"
        ),
        (_, "encoding") => "\"utf8\" or \"base64\", default \"utf8\"".into(),
        (_, "network") => "\"internet\" or \"none\", default \"internet\"".into(),
        (_, "on_timeout") => "\"kill\" or \"pause\", default \"kill\"".into(),
        (_, "allow_hosts") => format!(
            "an array of 1 to {ALLOW_HOSTS_MAX} host names or \"*.suffix\" patterns (no \
             scheme, port, path or IP address)"
        ),
        (_, "memory_mib") => resource_rule(MEMORY_MIB_MIN, " (MiB)", MEMORY_MIB_DEFAULT),
        (_, "cpus") => format!(
            "a number of at least {CPUS_MIN}, at most the server's ceiling; default {} on the \
             local provider",
            f64::from(MILLI_CPUS_DEFAULT) / 1000.0
        ),
        (_, "pids") => resource_rule(PIDS_MIN, "", PIDS_DEFAULT),
        (_, "disk_mib") => resource_rule(DISK_MIB_MIN, " (MiB)", DISK_MIB_DEFAULT),
        (_, "shares") => format!(
            "an array of at most {SHARES_MAX} host paths, each one of the shares the operator \
             configured (`serve --share`), default all of them; [] for none"
        ),
        (_, "diff") => "a boolean, default false".into(),
        (_, "paths") => "an array of absolute paths inside the sandbox's cow shares, default \
                         every change"
            .into(),
        (_, "port") => "an integer from 1 to 65535 (a TCP port inside the sandbox)".into(),
        _ => return None,
    })
}

fn term_rule(default: u16) -> String {
    integer_rule(
        u64::from(TERM_SIZE_MIN),
        u64::from(TERM_SIZE_MAX),
        "",
        u64::from(default),
    )
}

/// A terminal's size (start_interactive_task, resize_terminal).
pub(super) fn term_size(
    tool: &str,
    cols: Option<u64>,
    rows: Option<u64>,
) -> Result<sandkeep_proto::wire::TermSize, ToolError> {
    let (min, max) = (u64::from(TERM_SIZE_MIN), u64::from(TERM_SIZE_MAX));
    let cols = range(tool, "cols", cols, min, max, u64::from(TERM_COLS_DEFAULT))?;
    let rows = range(tool, "rows", rows, min, max, u64::from(TERM_ROWS_DEFAULT))?;
    Ok(sandkeep_proto::wire::TermSize {
        cols: cols as u16,
        rows: rows as u16,
    })
}

/// The least `cpus` a sandbox may ask for.
pub(super) const CPUS_MIN: f64 = MILLI_CPUS_MIN as f64 / 1000.0;

fn integer_rule(min: u64, max: u64, unit: &str, default: u64) -> String {
    format!("an integer from {min} to {max}{unit}, default {default}")
}

/// A resource request: its least, the server's ceiling as its most, and
/// the local provider's default (other providers may refuse the request
/// altogether, so the schema declares no default a client would fill in).
fn resource_rule(min: u64, unit: &str, default: u64) -> String {
    format!(
        "an integer of at least {min}{unit}, at most the server's ceiling; default {default} on \
         the local provider"
    )
}

fn range(
    tool: &str,
    param: &str,
    value: Option<u64>,
    min: u64,
    max: u64,
    default: u64,
) -> Result<u64, ToolError> {
    let v = value.unwrap_or(default);
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ToolError::invalid(
            param,
            &rule(tool, param),
            format_args!("got {v}; nothing was run"),
        ))
    }
}

pub(super) fn sandbox_timeout(v: Option<u64>) -> Result<u64, ToolError> {
    range(
        "create_sandbox",
        "timeout",
        v,
        SANDBOX_TIMEOUT_MIN,
        SANDBOX_TIMEOUT_MAX,
        SANDBOX_TIMEOUT_DEFAULT,
    )
}

pub(super) fn run_timeout(v: Option<u64>) -> Result<u64, ToolError> {
    range(
        "run_command",
        "timeout",
        v,
        RUN_TIMEOUT_MIN,
        RUN_TIMEOUT_MAX,
        RUN_TIMEOUT_DEFAULT,
    )
}

pub(super) fn task_timeout(v: Option<u64>) -> Result<u64, ToolError> {
    range(
        "start_task",
        "timeout",
        v,
        TASK_TIMEOUT_MIN,
        TASK_TIMEOUT_MAX,
        TASK_TIMEOUT_DEFAULT,
    )
}

pub(super) fn wait_timeout(v: Option<u64>) -> Result<u64, ToolError> {
    range(
        "wait_task",
        "timeout",
        v,
        WAIT_TIMEOUT_MIN,
        WAIT_TIMEOUT_MAX,
        WAIT_TIMEOUT_DEFAULT,
    )
}

pub(super) fn offset(param: &str, v: Option<u64>) -> Result<u64, ToolError> {
    range("get_task", param, v, 0, OFFSET_MAX, 0)
}

pub(super) fn limit(v: Option<u64>) -> Result<u64, ToolError> {
    range(
        "get_task",
        "limit",
        v,
        PAGE_LIMIT_MIN,
        PAGE_LIMIT_MAX,
        PAGE_LIMIT_DEFAULT,
    )
}

pub(super) fn command(v: &str) -> Result<(), ToolError> {
    // Counting stops just past the maximum: a huge command costs nothing.
    let n = v.chars().take(COMMAND_MAX_CHARS + 1).count();
    if n == 0 || n > COMMAND_MAX_CHARS {
        let got = if n == 0 {
            "got an empty string".to_owned()
        } else {
            format!("got {} characters", v.chars().count())
        };
        return Err(ToolError::invalid(
            "command",
            &rule("", "command"),
            format_args!("{got}; nothing was run"),
        ));
    }
    Ok(())
}

/// A shell command and its optional working directory, the way
/// run_command and start_task both take them.
pub(super) fn command_and_cwd(command: &str, cwd: Option<&str>) -> Result<(), ToolError> {
    self::command(command)?;
    if let Some(cwd) = cwd {
        path("cwd", cwd)?;
    }
    Ok(())
}

pub(super) fn port(v: u64) -> Result<crate::provider::Port, ToolError> {
    u16::try_from(v)
        .ok()
        .and_then(crate::provider::Port::new)
        .ok_or_else(|| {
            ToolError::invalid(
                "port",
                &rule("expose_port", "port"),
                format_args!("got {v}; nothing was exposed"),
            )
        })
}

/// What a snapshot's name may be (it names a directory and a template).
const SNAPSHOT_NAME_RULE: &str =
    "a string of 1-64 characters A-Z, a-z, 0-9, '_', '.' and '-', starting with a letter or digit";

/// A new snapshot's name.
pub(super) fn snapshot_name(v: &str) -> Result<String, ToolError> {
    snapshot(crate::provider::snapshot_id_ok, "name", v)
}

/// An existing snapshot's id: a name, or E2B's form of an id (an e2b
/// provider's snapshots; the local provider knows none of that form).
pub(super) fn snapshot_id(v: &str) -> Result<String, ToolError> {
    snapshot(crate::provider::snapshot_ref_ok, "snapshot_id", v)
}

fn snapshot(ok: fn(&str) -> bool, field: &str, v: &str) -> Result<String, ToolError> {
    if ok(v) {
        return Ok(v.to_owned());
    }
    Err(ToolError::invalid(
        field,
        &rule("", field),
        format_args!(
            "got {:?}; call list_snapshots for the ids there are",
            v.chars().take(80).collect::<String>()
        ),
    ))
}

pub(super) fn sandbox_id(v: &str) -> Result<SandboxId, ToolError> {
    SandboxId::parse(v).map_err(|_| {
        ToolError::invalid(
            "sandbox_id",
            &rule("", "sandbox_id"),
            format_args!(
                "got {:?}; call list_sandboxes for the ids you can use",
                v.chars().take(80).collect::<String>()
            ),
        )
    })
}

pub(super) fn task_id(v: &str) -> Result<TaskId, ToolError> {
    TaskId::parse(v).map_err(|_| {
        ToolError::invalid(
            "task_id",
            &rule("", "task_id"),
            format_args!(
                "got {:?}; use the task_id start_task returned",
                v.chars().take(80).collect::<String>()
            ),
        )
    })
}

pub(super) fn path(param: &str, v: &str) -> Result<(), ToolError> {
    if v.is_empty() || v.len() > PATH_MAX_BYTES || v.contains('\0') {
        let got = if v.is_empty() {
            "got an empty string".to_owned()
        } else if v.contains('\0') {
            "it contains NUL".to_owned()
        } else {
            format!("got {} bytes", v.len())
        };
        return Err(ToolError::invalid(
            param,
            &rule("", param),
            format_args!("{got}; nothing was run"),
        ));
    }
    Ok(())
}

pub(super) fn template(v: &str) -> Result<(), ToolError> {
    if v.is_empty() || v.contains('\0') {
        return Err(ToolError::invalid(
            "template",
            &rule("", "template"),
            "got an empty string; nothing was created",
        ));
    }
    Ok(())
}

pub(super) fn envs<'a>(
    vars: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), ToolError> {
    for (name, value) in vars {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(ToolError::invalid(
                "envs",
                &rule("", "envs"),
                format_args!("variable name {name:?} is not allowed; nothing was created"),
            ));
        }
        if value.contains('\0') {
            return Err(ToolError::invalid(
                "envs",
                &rule("", "envs"),
                format_args!("the value of {name} contains NUL; nothing was created"),
            ));
        }
    }
    Ok(())
}

pub(super) fn network(value: Option<&str>) -> Result<Option<Network>, ToolError> {
    match value {
        None => Ok(None),
        Some("internet") => Ok(Some(Network::Internet)),
        Some("none") => Ok(Some(Network::None)),
        Some(other) => Err(ToolError::invalid(
            "network",
            &rule("", "network"),
            format_args!("got {other:?}; nothing was created"),
        )),
    }
}

pub(super) fn on_timeout(value: Option<&str>) -> Result<OnTimeout, ToolError> {
    match value {
        None | Some("kill") => Ok(OnTimeout::Kill),
        Some("pause") => Ok(OnTimeout::Pause),
        Some(other) => Err(ToolError::invalid(
            "on_timeout",
            &rule("", "on_timeout"),
            format_args!("got {other:?}; nothing was created"),
        )),
    }
}

/// Host names or `*.suffix` patterns, lowercased. Addresses are refused:
/// the rule names hosts, and a sandbox never reaches private addresses.
pub(super) fn allow_hosts(hosts: Option<Vec<String>>) -> Result<Vec<String>, ToolError> {
    let Some(hosts) = hosts else {
        return Ok(Vec::new());
    };
    let refuse = |detail: String| {
        Err(ToolError::invalid(
            "allow_hosts",
            &rule("", "allow_hosts"),
            format_args!("{detail}; nothing was created"),
        ))
    };
    if hosts.is_empty() || hosts.len() > ALLOW_HOSTS_MAX {
        return refuse(format!("got {} entries", hosts.len()));
    }
    let mut out = Vec::with_capacity(hosts.len());
    for host in hosts {
        match sandkeep_provider::host_pattern(&host) {
            Some(name) => out.push(name),
            None => return refuse(format!("{host:?} is not a host name or *.suffix pattern")),
        }
    }
    Ok(out)
}

/// Each requested limit within its minimum and the server's ceiling.
pub(super) fn limits(
    ceilings: &Ceilings,
    memory_mib: Option<u64>,
    cpus: Option<f64>,
    pids: Option<u64>,
    disk_mib: Option<u64>,
) -> Result<Limits, ToolError> {
    let bounded = |param: &str, v: Option<u64>, min: u64, max: u64| match v {
        Some(v) if !(min..=max).contains(&v) => Err(ToolError::invalid(
            param,
            &rule("", param),
            format_args!("got {v}; this server allows {min} to {max}; nothing was created"),
        )),
        v => Ok(v),
    };
    let milli_cpus = match cpus {
        None => None,
        Some(c) => {
            let max = f64::from(ceilings.milli_cpus) / 1000.0;
            if !(CPUS_MIN..=max).contains(&c) {
                return Err(ToolError::invalid(
                    "cpus",
                    &rule("", "cpus"),
                    format_args!(
                        "got {c}; this server allows {CPUS_MIN} to {max}; nothing was created"
                    ),
                ));
            }
            Some((c * 1000.0).round() as u32)
        }
    };
    Ok(Limits {
        memory_mib: bounded(
            "memory_mib",
            memory_mib,
            MEMORY_MIB_MIN,
            ceilings.memory_mib,
        )?,
        milli_cpus,
        pids: bounded("pids", pids, PIDS_MIN, ceilings.pids)?,
        disk_mib: bounded("disk_mib", disk_mib, DISK_MIB_MIN, ceilings.disk_mib)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_hosts_takes_names_and_suffix_patterns_only() {
        let ok = allow_hosts(Some(vec!["PyPI.org".into(), "*.github.com".into()])).unwrap();
        assert_eq!(ok, ["pypi.org", "*.github.com"]);
        for bad in [
            "",
            "https://pypi.org",
            "pypi.org:443",
            "10.0.0.1",
            "::1",
            "a/b",
            "*.",
            "-a.com",
            "1.2.3.4",
        ] {
            let e = allow_hosts(Some(vec![bad.into()])).unwrap_err().to_string();
            assert!(e.contains("`allow_hosts`"), "{bad}: {e}");
        }
        let e = allow_hosts(Some(Vec::new())).unwrap_err().to_string();
        assert!(e.contains("got 0 entries"), "{e}");
        let many = (0..=ALLOW_HOSTS_MAX)
            .map(|i| format!("h{i}.example"))
            .collect();
        assert!(allow_hosts(Some(many)).is_err());
    }

    #[test]
    fn limits_are_bounded_by_minimum_and_ceiling() {
        let c = Ceilings {
            memory_mib: 4096,
            milli_cpus: 2000,
            pids: 2048,
            disk_mib: 8192,
        };
        let l = limits(&c, Some(64), Some(1.5), Some(16), Some(8192)).unwrap();
        assert_eq!(
            (l.memory_mib, l.milli_cpus, l.pids, l.disk_mib),
            (Some(64), Some(1500), Some(16), Some(8192))
        );
        let e = limits(&c, Some(4097), None, None, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`memory_mib`") && e.contains("64 to 4096"),
            "{e}"
        );
        let e = limits(&c, None, Some(2.5), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cpus`") && e.contains("0.1 to 2"), "{e}");
        let e = limits(&c, None, None, Some(15), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`pids`"), "{e}");
        assert_eq!(
            limits(&c, None, None, None, None).unwrap(),
            Limits::default()
        );
    }

    #[test]
    fn network_is_one_of_two_words() {
        assert_eq!(network(Some("none")).unwrap(), Some(Network::None));
        assert_eq!(network(None).unwrap(), None);
        let e = network(Some("host")).unwrap_err().to_string();
        assert!(e.contains("`network`") && e.contains("\"host\""), "{e}");
    }

    #[test]
    fn ranges_name_parameter_and_bounds() {
        let e = task_timeout(Some(3601)).unwrap_err().to_string();
        assert!(
            e.contains("`timeout`") && e.contains("1 to 3600") && e.contains("3601"),
            "{e}"
        );
        let e = sandbox_timeout(Some(0)).unwrap_err().to_string();
        assert!(e.contains("1 to 86400"), "{e}");
        assert_eq!(task_timeout(None).unwrap(), 300);
        assert_eq!(run_timeout(None).unwrap(), 30);
        assert_eq!(limit(None).unwrap(), 16384);
        assert!(limit(Some(0)).is_err());
        assert!(
            offset("stdout_offset", Some(1_048_577))
                .unwrap_err()
                .to_string()
                .contains("stdout_offset")
        );
        assert_eq!(offset("stderr_offset", Some(1_048_576)).unwrap(), 1_048_576);
    }

    #[test]
    fn command_length_counts_characters() {
        assert!(command(&"é".repeat(65_536)).is_ok());
        let e = command(&"a".repeat(65_537)).unwrap_err().to_string();
        assert!(e.contains("`command`") && e.contains("65537"), "{e}");
        assert!(command("").unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn ids_and_paths() {
        assert!(
            sandbox_id("../etc")
                .unwrap_err()
                .to_string()
                .contains("`sandbox_id`")
        );
        assert!(
            task_id("ABC")
                .unwrap_err()
                .to_string()
                .contains("`task_id`")
        );
        assert!(path("path", "").is_err());
        assert!(
            path("cwd", "a\0b")
                .unwrap_err()
                .to_string()
                .contains("`cwd`")
        );
        assert!(path("path", "/tmp").is_ok());
    }
}
