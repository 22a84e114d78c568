//! The `delete` verb (docs/tools.md, delete_task): removes a settled task's
//! directory with its logs, freeing one of the user's task places.
//!
//! A running task is refused and left untouched. Runs under the root's
//! lock, so it cannot interleave with a start counting the places.

use sandkeep_proto::wire::{DeleteReply, DeleteRequest};

use crate::error::{HelperError, IoContext};
use crate::status::observe;
use crate::taskdir::TaskRoot;

/// A directory without a record younger than this may belong to a start
/// still launching its supervisor: it counts as running.
const STARTING_GRACE_SECS: u64 = 10;

pub fn delete(req: DeleteRequest) -> Result<DeleteReply, HelperError> {
    let missing = || HelperError::NoSuchTask(req.task_id.clone());
    let root = TaskRoot::open_existing()?.ok_or_else(missing)?;
    let _lock = root.lock()?;
    let dir = root.open_task_dir(&req.task_id)?.ok_or_else(missing)?;
    let observation = observe(&dir)?;
    let starting = observation.record.is_none()
        && dir
            .age_secs()
            .context(|| format!("reading the age of task {}", req.task_id))?
            < STARTING_GRACE_SECS;
    if !observation.state.is_settled() || starting {
        return Err(HelperError::TaskRunning(req.task_id));
    }
    dir.delete()
        .context(|| format!("deleting the directory of task {}", req.task_id))?;
    Ok(DeleteReply {
        task_id: req.task_id,
        deleted: true,
    })
}
