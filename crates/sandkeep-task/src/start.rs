//! The `start` verb: checks the request, creates the task directory and
//! launches a detached supervisor, returning once the first state record is
//! on disk.
//!
//! Every refusal happens before anything is created. It must not run the
//! command itself: only the supervisor does.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandkeep_proto::TaskState;
use sandkeep_proto::limits::{LISTED_COMMAND_MAX_CHARS, MAX_TASK_DIRS};
use sandkeep_proto::wire::{StartRequest, TaskSummary};

use crate::error::{HelperError, IoContext};
use crate::nullio::discarding_output;
use crate::redact::{Redactor, secrets_of_env};
use crate::status::observe;
use crate::supervisor::{READY, SUPERVISE_VERB};
use crate::taskdir::{TaskDir, TaskRoot};

pub fn start(req: StartRequest) -> Result<TaskSummary, HelperError> {
    req.validate()?;
    let cwd = resolve_cwd(req.cwd.as_deref())?;
    let root = TaskRoot::open_or_create()?;
    let dir = {
        let _lock = root.lock()?;
        if root.open_task_dir(&req.task_id)?.is_some() {
            return Err(HelperError::TaskExists(req.task_id));
        }
        if root.task_ids()?.len() >= MAX_TASK_DIRS {
            return Err(HelperError::TooManyTasks(root.path().to_owned()));
        }
        root.create_task_dir(&req.task_id)?
    };
    if let Err(e) = dir.write_command(&listed_command(&req.command)) {
        dir.remove();
        return Err(e).context(|| format!("saving the command of task {}", req.task_id));
    }
    let order = StartRequest {
        cwd: Some(cwd),
        ..req
    };
    if let Err(e) = launch_supervisor(&dir, &order) {
        // A record on disk means the command was spawned after all (the
        // supervisor died right after writing it): report what is known.
        if !matches!(dir.read_record(), Ok(Some(_))) {
            // Nothing ran: leave no trace, so the id can be submitted again.
            dir.remove();
            return Err(e);
        }
    }
    // From here on the task runs: a failure to read it back must not look
    // like a refusal, or the caller could submit the command again.
    Ok(match observe(&dir) {
        Ok(observation) => observation.summary(&order.task_id),
        Err(_) => TaskSummary {
            task_id: order.task_id,
            state: TaskState::Unknown,
            exit_code: None,
            started_at: None,
            finished_at: None,
        },
    })
}

/// The first characters of the command as `list` shows them, redacted
/// like the logs (docs/tools.md, list_tasks).
fn listed_command(command: &str) -> String {
    // Redacted in full before cutting, so a secret crossing the cut is
    // still recognised.
    let mut redactor = Redactor::new(secrets_of_env(std::env::vars_os()));
    let mut out = Vec::with_capacity(command.len());
    redactor.push(command.as_bytes(), &mut out);
    redactor.finish(&mut out);
    let redacted = String::from_utf8_lossy(&out);
    redacted.chars().take(LISTED_COMMAND_MAX_CHARS).collect()
}

/// The directory the command runs in: `cwd` (relative to the home
/// directory), or the home directory itself. It must exist.
fn resolve_cwd(cwd: Option<&str>) -> Result<String, HelperError> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    let path = match (cwd, home) {
        (Some(c), _) if Path::new(c).is_absolute() => PathBuf::from(c),
        (Some(c), Some(h)) => Path::new(&h).join(c),
        (None, Some(h)) => PathBuf::from(h),
        (_, None) => {
            return Err(HelperError::BadRequest(
                "HOME is not set, so there is no default or base working directory: pass an \
                 absolute cwd"
                    .into(),
            ));
        }
    };
    if !path.is_dir() {
        return Err(HelperError::NoSuchCwd(path));
    }
    path.into_os_string().into_string().map_err(|_| {
        HelperError::BadRequest("the working directory (from HOME) is not valid UTF-8".into())
    })
}

/// Starts `sandkeep-task __supervise DIR` from this very executable and
/// waits for its readiness byte.
fn launch_supervisor(dir: &TaskDir, order: &StartRequest) -> Result<(), HelperError> {
    // By /proc/self/exe, never by name: under the multi-call `sandkeep`
    // binary there may be no `sandkeep-task` file at all.
    let mut child = Command::new("/proc/self/exe")
        .arg0("sandkeep-task")
        .arg(SUPERVISE_VERB)
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(discarding_output().context(|| "opening /dev/null".to_owned())?)
        .spawn()
        .context(|| "starting the supervisor from /proc/self/exe".to_owned())?;
    let order = serde_json::to_vec(order).expect("a start request always encodes");
    let sent = child
        .stdin
        .take()
        .expect("stdin was requested as a pipe")
        .write_all(&order);
    let mut ready = child.stdout.take().expect("stdout was requested as a pipe");
    let mut first = [0u8; 1];
    if sent.is_ok() && ready.read_exact(&mut first).is_ok() && first[0] == READY {
        // The supervisor lives on, detached; it is not waited for.
        return Ok(());
    }
    let mut message = String::from_utf8_lossy(&first).into_owned();
    let _ = ready.read_to_string(&mut message);
    let _ = child.wait();
    let message = message.trim_matches('\0').trim();
    Err(HelperError::Internal(if message.is_empty() {
        "the supervisor exited before recording the task; nothing was started".into()
    } else {
        format!("the supervisor could not start the task ({message}); nothing was started")
    }))
}
