//! Root's table of uid blocks: which 65536-id block of host uids (and
//! gids) each of root's sandboxes maps, across every state directory on
//! the host, and the egress proxy's uid that goes with each block.
//!
//! A slot is a file under [`UID_SLOTS`] named by its number and naming
//! the sandbox directory that holds it. The keeper claims one before it
//! makes anything and releases it last; whoever cleans up after a dead
//! keeper releases it by the directory's name; the root filesystem reads
//! the table to mask other state directories. It only reads and writes
//! slot files: it never starts, signals or enters a process.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandkeep_provider::SandboxId;

use crate::state::{self, Home, Lock};
use crate::step::{Step, StepError};

/// Why no uid block could be claimed.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error(transparent)]
    Step(#[from] StepError),
    #[error("all {SLOTS} uid blocks are in use; kill some sandboxes")]
    Exhausted,
}

/// Size of each root-mode sandbox's uid/gid block.
pub const BLOCK: u32 = 65536;
/// First host uid handed to sandboxes: far above any real account.
const FIRST_BLOCK: u32 = 1 << 30;
const SLOTS: u32 = 16384;

/// The host uid (and gid) root's egress proxy of the sandbox whose block
/// starts at `base` runs as: one per slot, just below the first block, so
/// that no sandbox maps it, no two proxies share it and no host account
/// (`nobody` included) can signal it.
pub fn proxy_uid(base: u32) -> u32 {
    FIRST_BLOCK - SLOTS + (base - FIRST_BLOCK) / BLOCK
}

/// Where root's uid blocks are claimed, for every state directory on the
/// host: two servers with different `SANDKEEP_HOME`s must never hand out
/// the same block. Under /run, so it starts empty with the machine, as do
/// the sandboxes.
pub const UID_SLOTS: &str = "/run/sandkeep/uid-slots";

/// Claims a free uid block for the sandbox: a slot file naming its
/// directory, reclaimed once that directory is gone. Returns the block's
/// first host uid.
pub fn allocate_slot(home: &Home, id: &SandboxId) -> Result<u32, SlotError> {
    let slots = Path::new(UID_SLOTS);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(slots)
        .step(|| format!("create {UID_SLOTS}"))?;
    state::check_trusted(slots).step(|| format!("trust {UID_SLOTS}"))?;
    // Root's alone (also where an older sandkeep made them 0755): the
    // slots name the sandbox directories of every state directory.
    for dir in [slots.parent().expect("UID_SLOTS has a parent"), slots] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .step(|| format!("chmod {}", dir.display()))?;
    }
    let _lock = Lock::acquire(&slots.join(".lock")).step(|| "lock the uid slots".into())?;
    let n = free_slot(slots)?;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(slots.join(n.to_string()))
        .and_then(|mut f| f.write_all(home.sandbox(id).path.as_os_str().as_encoded_bytes()))
        .step(|| format!("claim uid slot {n}"))?;
    Ok(FIRST_BLOCK + n * BLOCK)
}

/// The lowest slot number without a file, from one read of the directory:
/// reading every live sandbox's slot made a create with 200 live sandboxes
/// a millisecond slower. Only when every number has a file is a stale one
/// (its sandbox's directory gone, its keeper killed) taken over.
fn free_slot(slots: &Path) -> Result<u32, SlotError> {
    let mut taken = vec![false; SLOTS as usize];
    let entries = fs::read_dir(slots).step(|| format!("read {}", slots.display()))?;
    for entry in entries.flatten() {
        let number = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(n) = number.filter(|&n| n < SLOTS) {
            taken[n as usize] = true;
        }
    }
    if let Some(n) = taken.iter().position(|&t| !t) {
        return Ok(n as u32);
    }
    for n in 0..SLOTS {
        let path = slots.join(n.to_string());
        let holder = match fs::read_to_string(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(n),
            read => read.step(|| format!("read {}", path.display()))?,
        };
        if !Path::new(holder.trim()).exists() {
            return Ok(n);
        }
    }
    Err(SlotError::Exhausted)
}

/// Removes the slot of the sandbox whose directory is `owner`: the one of
/// `uid_base` when known, else whichever names that directory. A dead
/// keeper's slot is removed so by whoever cleans up after it
/// (`presence::clean_stale`); should nobody, a create takes it over only
/// once every number has a slot.
pub fn release_slot(owner: &Path, uid_base: Option<u32>) {
    let slots = Path::new(UID_SLOTS);
    let Ok(_lock) = Lock::acquire(&slots.join(".lock")) else {
        return;
    };
    let held = |slot: &Path| fs::read_to_string(slot).is_ok_and(|o| Path::new(o.trim()) == owner);
    let candidates: Vec<PathBuf> = match uid_base {
        Some(base) => vec![slots.join(((base - FIRST_BLOCK) / BLOCK).to_string())],
        None => match fs::read_dir(slots) {
            Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
            Err(_) => return,
        },
    };
    for slot in candidates.iter().filter(|s| held(s)) {
        let _ = fs::remove_file(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_number_without_a_slot_file_is_free() {
        let slots = tempfile::tempdir().unwrap();
        assert_eq!(free_slot(slots.path()).unwrap(), 0);
        for name in ["0", "1", "3", ".lock", "not-a-slot"] {
            fs::write(slots.path().join(name), "/somewhere/sb/sb-0").unwrap();
        }
        assert_eq!(free_slot(slots.path()).unwrap(), 2);
    }

    /// With every number claimed, a slot whose sandbox directory is gone
    /// is taken over; one that names a live directory never is.
    #[test]
    fn a_full_table_gives_up_only_stale_slots() {
        let slots = tempfile::tempdir().unwrap();
        let live = slots.path().to_str().unwrap();
        for n in 0..SLOTS {
            fs::write(slots.path().join(n.to_string()), live).unwrap();
        }
        let e = free_slot(slots.path()).unwrap_err();
        assert!(matches!(e, SlotError::Exhausted), "{e:?}");
        assert!(
            e.to_string().contains("all 16384 uid blocks are in use"),
            "{e}"
        );
        fs::write(slots.path().join("9000"), "/gone/sb/sb-0\n").unwrap();
        assert_eq!(free_slot(slots.path()).unwrap(), 9000);
    }
}
