//! What the helper learns from `/proc`: a process's identity across pid
//! reuse, whether it is alive, and who is left in a process group.
//!
//! Read-only; it never signals anything. Public so that the tests inspect
//! processes exactly the way the helper does.

use std::fs;
use std::io;

use sandkeep_proto::record::ProcessIdentity;

/// The fields of `/proc/PID/stat` the helper uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: u8,
    pub pgrp: u32,
    /// Field 22: clock ticks since boot when the process started.
    pub start_time: u64,
}

impl Stat {
    /// Zombies and dead entries have finished running.
    pub fn is_running(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses one `/proc/PID/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 is the 20th after the state (field 3).
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        pgrp,
        start_time,
    })
}

pub fn stat(pid: u32) -> io::Result<Stat> {
    let line = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&line).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected format of /proc/{pid}/stat"),
        )
    })
}

/// This process's identity, as a reader will check it later.
pub fn own_identity() -> io::Result<ProcessIdentity> {
    let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
    Ok(ProcessIdentity {
        pid,
        start_time: stat(pid)?.start_time,
    })
}

/// True when the process `id` names still runs: same pid, same start time,
/// not a zombie. A recycled pid has another start time.
pub fn is_alive(id: ProcessIdentity) -> bool {
    stat(id.pid).is_ok_and(|s| s.start_time == id.start_time && s.is_running())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "1234 (we ird) (x)) S 1 1230 1230 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, b'S');
        assert_eq!(s.pgrp, 1230);
        assert_eq!(s.start_time, 987654);
    }

    #[test]
    fn own_identity_is_alive_and_a_changed_start_time_is_not() {
        let me = own_identity().unwrap();
        assert!(is_alive(me));
        assert!(!is_alive(ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        }));
    }
}
