//! The host-wide bounds of one state directory: how many sandboxes may
//! live at once and how much memory (`memory_mib`, the default for a
//! sandbox that asked for none) they may commit together. A create counts
//! the sandboxes already there under the state directory's create lock and
//! keeps it until its own record is written, so the creates of every
//! process on the directory (servers of both kinds, the CLI) are bounded
//! together, however many run at once. It decides nothing else about a
//! sandbox and never starts or signals a process.

use std::io;

use serde::Deserialize;

use crate::presence::{Presence, inspect};
use crate::state::{Home, Lock};
use sandkeep_proto::limits::MEMORY_MIB_DEFAULT;
use sandkeep_provider::{Limits, ProviderError, Result, SandboxId};

/// Sandboxes per CPU of the host, by default.
const SANDBOXES_PER_CPU: u32 = 16;
/// The share of the host's RAM the sandboxes may commit, by default.
const MEMORY_PERCENT: u64 = 80;

/// How much the live sandboxes of one state directory may hold together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostBounds {
    /// Sandboxes alive (or being created) at once.
    pub sandboxes: u32,
    /// The sum of their `memory_mib`, in MiB.
    pub memory_mib: u64,
}

impl HostBounds {
    /// Sized to this host: 16 sandboxes per CPU, 80% of its RAM.
    pub fn of_this_host() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let info = rustix::system::sysinfo();
        let ram_mib = (info.totalram as u64).saturating_mul(u64::from(info.mem_unit)) >> 20;
        Self {
            sandboxes: cpus.saturating_mul(SANDBOXES_PER_CPU),
            memory_mib: ram_mib * MEMORY_PERCENT / 100,
        }
    }

    /// This host's defaults, with `SANDKEEP_MAX_SANDBOXES` and
    /// `SANDKEEP_MAX_TOTAL_MEMORY_MIB` where they are set (the CLI reads
    /// them; `serve`'s flags override them).
    pub fn from_env() -> io::Result<Self> {
        let host = Self::of_this_host();
        Ok(Self {
            sandboxes: positive("SANDKEEP_MAX_SANDBOXES")?.unwrap_or(host.sandboxes),
            memory_mib: positive("SANDKEEP_MAX_TOTAL_MEMORY_MIB")?.unwrap_or(host.memory_mib),
        })
    }
}

/// A positive integer from the environment variable `name`, if set.
fn positive<T: std::str::FromStr + PartialOrd + Default>(name: &str) -> io::Result<Option<T>> {
    let Some(text) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match text.to_str().and_then(|t| t.trim().parse::<T>().ok()) {
        Some(n) if n > T::default() => Ok(Some(n)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name}={text:?} is not a positive whole number; set it to one, or unset it"),
        )),
    }
}

/// What a sandbox's `spec.json` says it asked for (the rest is not read).
#[derive(Deserialize)]
struct Asked {
    #[serde(default)]
    limits: Limits,
}

/// What the state directory's sandboxes hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    sandboxes: u32,
    memory_mib: u64,
}

/// Counts every sandbox directory, `exact`ly (each one's presence checked,
/// a dead keeper's left-overs cleaned up and not counted) or quickly (every
/// directory counts, as a create ahead of its keeper does).
fn held(home: &Home, exact: bool) -> Result<Held> {
    let root = home.sandboxes();
    let entries =
        std::fs::read_dir(&root).map_err(crate::io_err(format!("read {}", root.display())))?;
    let mut held = Held::default();
    for entry in entries.flatten() {
        let Ok(id) = SandboxId::parse(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        let dir = home.sandbox(&id);
        if exact && matches!(inspect(&dir), Presence::Gone) {
            continue;
        }
        // A directory without a readable spec is half removed, or another
        // user's to refuse: counted as a default sandbox until it is gone.
        let memory = crate::state::read_json::<Asked>(&dir.spec())
            .ok()
            .and_then(|a| a.limits.memory_mib)
            .unwrap_or(MEMORY_MIB_DEFAULT);
        held.sandboxes += 1;
        held.memory_mib = held.memory_mib.saturating_add(memory);
    }
    Ok(held)
}

/// Why one more sandbox of `memory_mib` does not fit, if it does not.
fn refusal(held: Held, bounds: HostBounds, memory_mib: u64) -> Option<String> {
    if held.sandboxes >= bounds.sandboxes {
        return Some(format!(
            "this state directory already holds {} sandboxes, the most it may hold at once \
             (--max-sandboxes; default {SANDBOXES_PER_CPU} per CPU of this host): kill a \
             sandbox you no longer need (list_sandboxes or `sandkeep sandbox list` shows them), \
             or raise the bound with `sandkeep serve --max-sandboxes N` or \
             SANDKEEP_MAX_SANDBOXES=N (for every sandkeep on this state directory, the CLI \
             too); no sandbox was created",
            held.sandboxes
        ));
    }
    if held.memory_mib.saturating_add(memory_mib) > bounds.memory_mib {
        return Some(format!(
            "the live sandboxes of this state directory commit {} MiB of memory and this one \
             would add {memory_mib} MiB, over the ceiling of {} MiB (--max-total-memory-mib; \
             default {MEMORY_PERCENT}% of this host's RAM): ask for less memory_mib, kill a \
             sandbox you no longer need, or raise the ceiling with `sandkeep serve \
             --max-total-memory-mib MIB` or SANDKEEP_MAX_TOTAL_MEMORY_MIB=MIB (for every \
             sandkeep on this state directory, the CLI too); no sandbox was created",
            held.memory_mib, bounds.memory_mib
        ));
    }
    None
}

/// Room for one more sandbox asking for `memory_mib`: the create lock,
/// which the caller keeps until the sandbox's directory and `spec.json`
/// exist (from then on every other create counts it).
pub fn reserve(home: &Home, bounds: HostBounds, memory_mib: u64) -> Result<Lock> {
    let path = home.create_lock();
    let lock =
        Lock::acquire(&path).map_err(crate::io_err(format!("take the lock {}", path.display())))?;
    // The quick count is exact but for dead keepers' left-overs: only a
    // create it would refuse pays for looking at each sandbox.
    if refusal(held(home, false)?, bounds, memory_mib).is_some()
        && let Some(why) = refusal(held(home, true)?, bounds, memory_mib)
    {
        return Err(ProviderError::LimitReached(why));
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: HostBounds = HostBounds {
        sandboxes: 3,
        memory_mib: 4096,
    };

    fn held(sandboxes: u32, memory_mib: u64) -> Held {
        Held {
            sandboxes,
            memory_mib,
        }
    }

    #[test]
    fn each_bound_is_named_with_its_flag() {
        assert_eq!(refusal(held(2, 2048), BOUNDS, 2048), None);
        let count = refusal(held(3, 0), BOUNDS, 64).unwrap();
        assert!(count.contains("3 sandboxes") && count.contains("--max-sandboxes"));
        let memory = refusal(held(1, 3000), BOUNDS, 1097).unwrap();
        assert!(
            memory.contains("3000 MiB")
                && memory.contains("1097 MiB")
                && memory.contains("4096 MiB")
                && memory.contains("--max-total-memory-mib"),
            "{memory}"
        );
    }

    #[test]
    fn the_defaults_are_sized_to_this_host() {
        let host = HostBounds::of_this_host();
        assert!(host.sandboxes >= SANDBOXES_PER_CPU, "{host:?}");
        let ram = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kib: u64 = ram
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert_eq!(host.memory_mib, (kib >> 10) * MEMORY_PERCENT / 100);
    }
}
