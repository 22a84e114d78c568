//! Whether the sandbox's memory limit killed a task: the OOM-kill counter
//! of the sandbox's memory cgroup, read before the task and after it.
//!
//! The local provider binds the sandbox's own memory cgroup read-only at
//! `/sys/fs/cgroup` (cgroup v2) or `/sys/fs/cgroup/memory` (v1); without
//! one there is no memory limit to report. A limit so large that it is no
//! limit (say the host's own root cgroup, seen by a process-only sandbox)
//! reports nothing.
//!
//! It also sets who the OOM killer takes first: a task's processes, not
//! the helper's (`USER_OOM_SCORE_ADJ`).

use sandkeep_proto::shell::USER_OOM_SCORE_ADJ;

/// Where the counter and the limit are, for v2 then v1.
const PLACES: [(&str, &str); 2] = [
    ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory.max"),
    (
        "/sys/fs/cgroup/memory/memory.oom_control",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ),
];

/// Limits at or above this are the kernel's "unlimited" (v1 reads
/// 9223372036854771712 then), not a limit anyone set.
const UNLIMITED_BYTES: u64 = 1 << 50;

/// The sandbox's memory cgroup: where its kill counter is, and its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    counter: &'static str,
    limit_mib: u64,
}

impl MemoryCgroup {
    /// The sandbox's memory cgroup, when it has a limit.
    pub fn find() -> Option<Self> {
        PLACES.into_iter().find_map(|(counter, limit)| {
            let bytes = limit_bytes(&std::fs::read_to_string(limit).ok()?)?;
            Some(Self {
                counter,
                limit_mib: bytes >> 20,
            })
        })
    }

    /// How many processes the limit has killed so far.
    pub fn kills(&self) -> Option<u64> {
        oom_kills(&std::fs::read_to_string(self.counter).ok()?)
    }

    /// The task's `error` when the limit killed it (SPEC.md §10).
    pub fn error(&self) -> String {
        format!("out of memory (limit {} MiB)", self.limit_mib)
    }
}

/// Makes this process, and whatever it forks from now on, the OOM killer's
/// first choice: a task's processes, not its supervisor.
pub fn volunteer() {
    set_score_adj(USER_OOM_SCORE_ADJ.as_bytes());
}

/// Undoes [`volunteer`] for the helper's own processes, which the local
/// fork server starts as commands.
pub fn stand_back() {
    set_score_adj(b"0");
}

/// Best effort: where `/proc` is not this sandbox's own or not writable (a
/// process-only level under Landlock), nothing changes. Safe between fork
/// and exec: an open, a write and a close, no allocation.
fn set_score_adj(value: &[u8]) {
    if let Ok(fd) = rustix::fs::open(
        c"/proc/self/oom_score_adj",
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        let _ = rustix::io::write(&fd, value);
    }
}

/// A limit file's value in bytes; `None` for no limit ("max" in v2).
fn limit_bytes(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|b| *b < UNLIMITED_BYTES)
}

/// The `oom_kill N` line of v2's `memory.events` or v1's
/// `memory.oom_control` (Linux 4.13+).
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_counter_formats() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kills(v2), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n";
        assert_eq!(oom_kills(v1), Some(5));
        assert_eq!(oom_kills("oom_kill_disable 0\nunder_oom 0\n"), None);
    }

    #[test]
    fn unlimited_is_no_limit() {
        assert_eq!(limit_bytes("67108864\n"), Some(64 << 20));
        assert_eq!(limit_bytes("max\n"), None);
        assert_eq!(limit_bytes("9223372036854771712\n"), None);
    }
}
