//! The `input` and `resize` verbs (SPEC.md §15): take a caller's input for
//! an interactive task into its queue, or record a pty task's new size,
//! then wake the task's supervisor, which does the rest.
//!
//! Every refusal happens before anything is queued: input is taken whole
//! or not at all.

use std::io::Write;

use sandkeep_proto::TaskState;
use sandkeep_proto::limits::{INPUT_BACKLOG_MAX_BYTES, INPUT_MAX_BYTES};
use sandkeep_proto::wire::{InputReply, InputRequest, ResizeReply, ResizeRequest};

use crate::error::{HelperError, IoContext};
use crate::input::InputQueue;
use crate::status::{observe, open_task};
use crate::supervisor::control;
use crate::taskdir::TaskDir;

/// Queues `data` (and the end of input, with `close`) for the task.
pub fn input(req: InputRequest, data: Vec<u8>) -> Result<InputReply, HelperError> {
    if data.len() > INPUT_MAX_BYTES {
        return Err(HelperError::BadRequest(format!(
            "data: at most {INPUT_MAX_BYTES} bytes a call, got {}",
            data.len()
        )));
    }
    let dir = open_task(&req.task_id)?;
    let queue = open_queue(&dir, &req)?;
    let context = || format!("queueing input for task {}", req.task_id);
    let lock = queue.lock().context(context)?;
    if queue.is_closed().context(context)? {
        return Err(HelperError::StdinClosed(req.task_id));
    }
    check_running(&dir, &req.task_id)?;
    let waiting = queue.backlog(&lock).context(context)?;
    if waiting + data.len() as u64 > INPUT_BACKLOG_MAX_BYTES {
        return Err(HelperError::InputBacklogFull {
            task_id: req.task_id,
            waiting,
            offered: data.len(),
        });
    }
    if !data.is_empty() {
        queue.push(&lock, &data).context(context)?;
    }
    if req.close {
        queue.close(&lock).context(context)?;
    }
    drop(lock);
    wake(&dir, control::INPUT);
    Ok(InputReply {
        task_id: req.task_id,
        bytes_accepted: data.len() as u64,
    })
}

/// Records the new size of a pty task's terminal.
pub fn resize(req: ResizeRequest) -> Result<ResizeReply, HelperError> {
    let size = req.size();
    size.validate()?;
    let dir = open_task(&req.task_id)?;
    let context = || format!("resizing the terminal of task {}", req.task_id);
    let is_pty = dir.read_winsize().context(context)?.is_some();
    let queue = InputQueue::open(&dir).context(context)?;
    let (true, Some(queue)) = (is_pty, queue) else {
        return Err(HelperError::NoTerminal(req.task_id));
    };
    check_running(&dir, &req.task_id)?;
    let lock = queue.lock().context(context)?;
    dir.write_winsize(size).context(context)?;
    drop(lock);
    wake(&dir, control::RESIZE);
    Ok(ResizeReply {
        task_id: req.task_id,
        size,
    })
}

fn open_queue(dir: &TaskDir, req: &InputRequest) -> Result<InputQueue, HelperError> {
    InputQueue::open(dir)
        .context(|| format!("opening the input queue of task {}", req.task_id))?
        .ok_or_else(|| HelperError::NotInteractive(req.task_id.clone()))
}

fn check_running(dir: &TaskDir, id: &sandkeep_proto::TaskId) -> Result<(), HelperError> {
    match observe(dir)?.state {
        TaskState::Running => Ok(()),
        state => Err(HelperError::TaskEnded(id.clone(), state)),
    }
}

/// Tells the supervisor to look. A full FIFO already holds a wake-up, and
/// a missing reader is a supervisor gone since `check_running`: either
/// way there is nothing more to do.
fn wake(dir: &TaskDir, request: u8) {
    if let Ok(Some(fifo)) = dir.open_control_for_writing() {
        let _ = std::fs::File::from(fifo).write(&[request]);
    }
}
