//! A sandbox's resource use, read from the host: memory from its memory
//! cgroup (v2 `memory.current`/`memory.max`/`memory.stat` `file`, v1
//! `memory.usage_in_bytes`/`memory.limit_in_bytes`/`memory.stat`
//! `cache`), CPU time from its processes (the memory cgroup's
//! `cgroup.procs`), disk from its root file system (`statvfs` through
//! `/proc/PID/root` of one of them in the sandbox's pid namespace).
//!
//! CPU time is summed over the live processes, each with its reaped
//! children's (`utime + stime + cutime + cstime`): every process of the
//! sandbox descends from its init, which reaps what its parents leave, so
//! a finished process's time is in its reaper's children's time and no
//! live process is counted twice. It needs no cpu accounting cgroup,
//! which a sandbox without a cpu limit does not get.

use std::fs;
use std::path::{Path, PathBuf};

use sandkeep_provider::Usage;

use super::cgroup::RECORD;

/// The sandbox's memory cgroup directory, from the record of its cgroups.
fn memory_dir(sandbox_dir: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string(sandbox_dir.join(RECORD)).ok()?;
    text.lines().map(PathBuf::from).find(|dir| {
        dir.join("memory.current").exists() || dir.join("memory.usage_in_bytes").exists()
    })
}

fn number(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `KEY N` of a `memory.stat`.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
}

/// `utime + stime + cutime + cstime` of a `/proc/PID/stat`, in ticks.
fn ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: the
    // fields counted start after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime is field 14 overall, the 12th after the name and state.
    fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Whether process `pid` lives in a pid namespace below this one (its
/// `NSpid` line names more than one pid).
fn in_child_pid_namespace(pid: &str) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|l| l.split_whitespace().count() > 1)
        })
        .unwrap_or(false)
}

/// The host's memory in bytes (`MemTotal` of `/proc/meminfo`).
fn host_memory() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// The resource use of the sandbox whose directory is `sandbox_dir`;
/// `None` without a memory cgroup (a sandbox of the process-only level).
pub fn read(sandbox_dir: &Path, cpu_count: u32) -> Option<Usage> {
    let dir = memory_dir(sandbox_dir)?;
    let v2 = dir.join("memory.current").exists();
    let (used, limit, cache_key) = if v2 {
        ("memory.current", "memory.max", "file")
    } else {
        ("memory.usage_in_bytes", "memory.limit_in_bytes", "cache")
    };
    let host = host_memory().unwrap_or(u64::MAX);
    let mem_used = number(&dir.join(used)).unwrap_or(0);
    // "max" (v2) or a huge number (v1) is no limit: the host's memory.
    let mem_total = number(&dir.join(limit)).map_or(host, |l| l.min(host));
    let mem_cache = fs::read_to_string(dir.join("memory.stat"))
        .ok()
        .and_then(|t| stat_field(&t, cache_key))
        .unwrap_or(0);
    let pids: Vec<String> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let hz = rustix::param::clock_ticks_per_second();
    let cpu_ticks: u64 = pids
        .iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|s| ticks(&s))
        .sum();
    // The cgroup also holds host-side helpers (the egress proxy, in the
    // host's mount namespace): the root measured is that of a process in
    // the sandbox's own pid namespace.
    let (disk_used, disk_total) = pids
        .iter()
        .filter(|pid| in_child_pid_namespace(pid))
        .find_map(|pid| rustix::fs::statvfs(format!("/proc/{pid}/root")).ok())
        .map_or((0, 0), |fs| {
            let block = fs.f_frsize;
            ((fs.f_blocks - fs.f_bfree) * block, fs.f_blocks * block)
        });
    Some(Usage {
        cpu_usec: cpu_ticks * 1_000_000 / hz.max(1),
        cpu_count,
        mem_used,
        mem_total,
        mem_cache,
        disk_used,
        disk_total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_past_an_odd_command_name() {
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 0 0";
        assert_eq!(ticks(stat), Some(13));
        assert_eq!(ticks("garbage"), None);
    }

    #[test]
    fn memory_stat_fields_are_found_by_whole_key() {
        let text = "cache 4096\ntotal_cache 8192\nfile_mapped 1\nfile 12\n";
        assert_eq!(stat_field(text, "cache"), Some(4096));
        assert_eq!(stat_field(text, "file"), Some(12));
        assert_eq!(stat_field(text, "nope"), None);
    }
}
