//! Who is left in a process group, and this process's own children, from
//! `/proc` (process identity and liveness are `sandkeep_proto::procfs`,
//! shared with the host).
//!
//! Read-only; it never signals anything. Public so that the tests inspect
//! processes exactly the way the helper does.

use std::fs;
use std::io;

use nix::errno::Errno;
use nix::unistd::{Pid, getpgid};

use sandkeep_proto::procfs::stat;

/// The pids listed in `/proc` at the moment of reading.
pub fn pids() -> io::Result<impl Iterator<Item = u32>> {
    Ok(fs::read_dir("/proc")?.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()))
}

/// The children of this single-threaded process (its one thread's id is
/// its pid), zombies too; `None` where the kernel does not list them
/// (`CONFIG_PROC_CHILDREN`).
pub fn own_children() -> Option<Vec<u32>> {
    let pid = std::process::id();
    let listed = fs::read_to_string(format!("/proc/self/task/{pid}/children")).ok()?;
    Some(
        listed
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

/// True when a process other than `except` that has not finished is a
/// member of process group `pgid`.
///
/// Each process's group is asked of the kernel (`getpgid`: one system
/// call, nothing formatted) and only a member's `stat` is read. When many
/// tasks end at once, each supervisor looks at every process of the
/// sandbox: reading every `stat` made that quadratic work most of the time
/// from a task's end to its terminal record (docs/benchmarks-log.md).
pub fn group_has_members(pgid: u32, except: u32) -> io::Result<bool> {
    for pid in pids()? {
        if pid == except {
            continue;
        }
        let Ok(process) = i32::try_from(pid) else {
            continue;
        };
        match getpgid(Some(Pid::from_raw(process))) {
            Ok(group) if i64::from(group.as_raw()) != i64::from(pgid) => continue,
            Err(Errno::ESRCH) => continue,
            // A member, or a process the kernel would not say: its `stat`
            // decides.
            _ => {}
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use super::group_has_members;

    #[test]
    fn a_live_member_is_found_and_a_zombie_or_a_reaped_one_is_not() {
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let pgid = child.id();
        assert!(group_has_members(pgid, 0).unwrap(), "the live member");
        assert!(
            !group_has_members(pgid, pgid).unwrap(),
            "the member left out"
        );
        child.kill().unwrap();
        // Dead but not reaped: a zombie is no member.
        let pid = rustix::process::Pid::from_raw(pgid as i32).unwrap();
        rustix::process::waitid(
            rustix::process::WaitId::Pid(pid),
            rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
        )
        .unwrap();
        assert!(!group_has_members(pgid, 0).unwrap(), "the zombie");
        child.wait().unwrap();
        assert!(!group_has_members(pgid, 0).unwrap(), "the reaped member");
    }
}
