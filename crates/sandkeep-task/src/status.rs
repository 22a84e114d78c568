//! The `status` and `list` verbs, and the one rule for what state a task
//! is in: the record, checked against the liveness of its supervisor.
//!
//! Read-only: it never writes a record nor signals anything.

use sandkeep_proto::TaskState;
use sandkeep_proto::wire::{ListReply, ListedTask, StatusRequest, TaskStatus, TaskSummary};
use sandkeep_proto::{StateRecord, TaskId};

use crate::error::{HelperError, IoContext};
use crate::taskdir::{STDERR_LOG, STDOUT_LOG, TaskDir, TaskRoot};

/// A task's record and the state a reader reports for it.
pub struct Observation {
    pub record: Option<StateRecord>,
    pub state: TaskState,
}

impl Observation {
    pub fn summary(&self, id: &TaskId) -> TaskSummary {
        let r = self.record.as_ref();
        let terminal = self.state.is_terminal();
        TaskSummary {
            task_id: id.clone(),
            state: self.state,
            exit_code: r.and_then(StateRecord::exit_code).filter(|_| terminal),
            started_at: r.and_then(|r| r.started_at),
            finished_at: r.and_then(StateRecord::finished_at).filter(|_| terminal),
        }
    }
}

/// Reads the record and judges it: a `running` record whose supervisor is
/// gone (or was replaced by a recycled pid) is `unknown`, as is a task
/// without a readable record.
pub fn observe(dir: &TaskDir) -> Result<Observation, HelperError> {
    let read = || {
        dir.read_record()
            .context(|| format!("reading the state of {}", dir.path().display()))
    };
    let Some(record) = read()? else {
        return Ok(Observation {
            record: None,
            state: TaskState::Unknown,
        });
    };
    if record.outcome.is_some() || record.supervisor.is_alive() {
        let state = record.state_given(true);
        return Ok(Observation {
            record: Some(record),
            state,
        });
    }
    // The supervisor may have recorded its ending and exited between the
    // two looks: only a record still `running` now means it was lost.
    let record = read()?;
    let state = record
        .as_ref()
        .map_or(TaskState::Unknown, |r| r.state_given(false));
    Ok(Observation { record, state })
}

pub fn open_task(id: &TaskId) -> Result<TaskDir, HelperError> {
    TaskRoot::open_existing()?
        .map(|root| root.open_task_dir(id))
        .transpose()?
        .flatten()
        .ok_or_else(|| HelperError::NoSuchTask(id.clone()))
}

pub fn status(req: StatusRequest) -> Result<TaskStatus, HelperError> {
    status_of(&open_checked(&req)?, &req)
}

/// Validates a status or cancel request and opens its task directory.
pub fn open_checked(req: &StatusRequest) -> Result<TaskDir, HelperError> {
    req.validate()?;
    open_task(&req.task_id)
}

/// The state, then one page of each log. The logs are read after the
/// record, so a terminal state always comes with its complete logs.
pub fn status_of(dir: &TaskDir, req: &StatusRequest) -> Result<TaskStatus, HelperError> {
    status_seen(dir, &observe(dir)?, req)
}

/// The status of a task whose record was just observed: that observation
/// and one page of each log, read now (after it).
pub fn status_seen(
    dir: &TaskDir,
    observation: &Observation,
    req: &StatusRequest,
) -> Result<TaskStatus, HelperError> {
    let page = |name: &str, offset: u64| {
        dir.read_log_page(name, offset, req.limit)
            .context(|| format!("reading {name} of task {}", req.task_id))
    };
    let (out, out_bytes) = page(STDOUT_LOG, req.stdout_offset)?;
    let (err, err_bytes) = page(STDERR_LOG, req.stderr_offset)?;
    let r = observation.record.as_ref();
    Ok(TaskStatus {
        summary: observation.summary(&req.task_id),
        stdout: out.text,
        stderr: err.text,
        stdout_next_offset: out.next_offset.0,
        stderr_next_offset: err.next_offset.0,
        stdout_bytes: out_bytes,
        stderr_bytes: err_bytes,
        stdout_truncated: r.is_some_and(|r| r.stdout_truncated),
        stderr_truncated: r.is_some_and(|r| r.stderr_truncated),
        error: r
            .and_then(|r| r.error.clone())
            .filter(|_| observation.state.is_terminal()),
    })
}

/// Every task of this user with its state, newest start first.
pub fn list() -> Result<ListReply, HelperError> {
    let Some(root) = TaskRoot::open_existing()? else {
        return Ok(ListReply { tasks: Vec::new() });
    };
    let mut tasks = Vec::new();
    for id in root.task_ids()? {
        // A directory removed while listing is simply not listed.
        if let Some(dir) = root.open_task_dir(&id)? {
            let context = |what: &str| format!("reading the {what} of task {id}");
            tasks.push(ListedTask {
                summary: observe(&dir)?.summary(&id),
                command: dir.read_command().context(|| context("command"))?,
                stdout_bytes: dir.log_len(STDOUT_LOG).context(|| context("stdout log"))?,
                stderr_bytes: dir.log_len(STDERR_LOG).context(|| context("stderr log"))?,
            });
        }
    }
    tasks.sort_by(|a, b| {
        let key = |t: &ListedTask| (t.summary.started_at, t.summary.task_id.clone());
        key(b).cmp(&key(a))
    });
    Ok(ListReply { tasks })
}
