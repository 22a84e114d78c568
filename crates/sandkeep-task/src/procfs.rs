//! Who is left in a process group, from `/proc` (process identity and
//! liveness are `sandkeep_proto::procfs`, shared with the host).
//!
//! Read-only; it never signals anything. Public so that the tests inspect
//! processes exactly the way the helper does.

use std::fs;
use std::io;

use sandkeep_proto::procfs::stat;

/// The pids listed in `/proc` at the moment of reading.
pub fn pids() -> io::Result<impl Iterator<Item = u32>> {
    Ok(fs::read_dir("/proc")?.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()))
}

/// True when a process other than `except` that has not finished is a
/// member of process group `pgid`.
pub fn group_has_members(pgid: u32, except: u32) -> io::Result<bool> {
    for pid in pids()? {
        if pid == except {
            continue;
        }
        // A process may vanish between listing and reading: that is fine.
        if let Ok(s) = stat(pid)
            && s.pgrp == pgid
            && s.is_running()
        {
            return Ok(true);
        }
    }
    Ok(false)
}
