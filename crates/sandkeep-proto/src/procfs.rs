//! Process liveness, the one rule both sides apply to a recorded process
//! (a task's supervisor, a sandbox's keeper or init): the same pid with the
//! same start time, and not finished. A recycled pid has another start
//! time; a zombie or dead entry has finished.
//!
//! Reads `/proc/PID/stat` and nothing else; never signals.

use std::io;

use crate::record::ProcessIdentity;

/// The fields of `/proc/PID/stat` sandkeep uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: u8,
    pub ppid: u32,
    pub pgrp: u32,
    /// Field 22: clock ticks since boot when the process started.
    pub start_time: u64,
}

impl Stat {
    /// Zombies (`Z`) and dead entries (`X`, and `x` on older kernels) have
    /// finished running.
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
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 is the 17th after the process group (field 5).
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        start_time,
    })
}

/// The current `/proc/PID/stat` of `pid`.
pub fn stat(pid: u32) -> io::Result<Stat> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&line).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected format of /proc/{pid}/stat"),
        )
    })
}

impl ProcessIdentity {
    /// The identity of the process `pid` names now.
    pub fn of(pid: u32) -> io::Result<Self> {
        Ok(Self {
            pid,
            start_time: stat(pid)?.start_time,
        })
    }

    /// This process's identity, as a reader will check it later.
    pub fn own() -> io::Result<Self> {
        Self::of(std::process::id())
    }

    /// True while that very process runs: same pid, same start time, not
    /// finished.
    pub fn is_alive(&self) -> bool {
        stat(self.pid).is_ok_and(|s| s.start_time == self.start_time && s.is_running())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "1234 (we ird) (x)) S 1 1230 1230 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, b'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.pgrp, 1230);
        assert_eq!(s.start_time, 987654);
    }

    #[test]
    fn zombies_and_dead_entries_are_not_running() {
        for (state, running) in [
            ('R', true),
            ('S', true),
            ('D', true),
            ('T', true),
            ('Z', false),
            ('X', false),
            ('x', false),
        ] {
            let line = format!("7 (a) {state} 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0");
            assert_eq!(
                parse_stat(&line).unwrap().is_running(),
                running,
                "state {state}"
            );
        }
    }

    #[test]
    fn own_identity_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessIdentity::own().unwrap();
        assert!(me.is_alive());
        assert!(
            !ProcessIdentity {
                start_time: me.start_time + 1,
                ..me
            }
            .is_alive()
        );
    }

    #[test]
    fn a_reaped_child_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcessIdentity::of(child.id()).unwrap();
        child.wait().unwrap();
        assert!(!id.is_alive());
    }
}
