//! The end of a process-only sandbox: without a pid namespace whose pid
//! 1's death ends every process, the keeper (their subreaper) finds and
//! kills the sandbox's whole process tree itself, never a process that
//! only reused one of its pids.

use std::fs;

use rustix::process::{Pid, PidfdFlags, Signal};
use sandkeep_proto::procfs;
use sandkeep_proto::record::ProcessIdentity;

use crate::sys;

/// Process-only mode: SIGKILLs every process below the keeper (a
/// subreaper, so setsid and double forks cannot leave the tree), the init
/// included, until none is left. Killed processes cannot fork any more, so the
/// loop ends.
pub fn kill_descendants() {
    let me = std::process::id();
    for _ in 0..1000 {
        let victims = descendants(me);
        if victims.is_empty() {
            return;
        }
        kill_all(&victims);
        while sys::reap_any().is_some() {}
        std::thread::yield_now();
    }
}

/// SIGKILLs each process of `victims` that is still the very one found.
/// A victim may exit and be reaped by its own parent after the scan, and
/// its pid go to a host process: the pidfd pins whatever process holds the
/// pid now, and the start time, read after opening it, tells whether that
/// is still ours.
fn kill_all(victims: &[ProcessIdentity]) {
    for victim in victims {
        let Some(pid) = Pid::from_raw(victim.pid as i32) else {
            continue;
        };
        let Ok(fd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) else {
            continue;
        };
        if victim.is_alive() {
            let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
        }
    }
}

/// Live (non-zombie) processes whose ancestry leads to `root`, each with
/// the start time read in the same look at its `/proc/PID/stat`.
fn descendants(root: u32) -> Vec<ProcessIdentity> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = procfs::stat(pid) else {
                continue;
            };
            let id = ProcessIdentity {
                pid,
                start_time: stat.start_time,
            };
            parent_of.push((id, stat.ppid, !stat.is_running()));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, pp, _)| *pp == p)
                .map(|(c, _, _)| c.pid),
        );
        i += 1;
    }
    parent_of
        .into_iter()
        .filter(|(c, _, zombie)| !zombie && c.pid != root && found.contains(&c.pid))
        .map(|(c, _, _)| c)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    use super::*;

    /// A pid found by the scan may be recycled before the kill: only the
    /// very process found (pid and start time) may be signalled.
    #[test]
    fn a_recycled_pid_is_never_killed() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let found = ProcessIdentity::of(child.id()).unwrap();
        let recycled = ProcessIdentity {
            start_time: found.start_time + 1,
            ..found
        };
        kill_all(&[recycled]);
        // A SIGKILL is pending before kill(2) returns, so a process that
        // was hit cannot echo this line back.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"alive\n").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line, "alive\n",
            "another process with the same pid was killed"
        );
        kill_all(&[found]);
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}
