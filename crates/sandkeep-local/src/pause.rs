//! Pausing and resuming a sandbox (SPEC §17): freezing or thawing its
//! work cgroup (see `cgroup::WorkDoor`) and recording the state in its
//! `meta.json`, both under the sandbox's lock, so that the record and the
//! kernel agree for every server process and across their restarts. Used
//! by the provider (pause_sandbox, resume_sandbox) and by the keeper (the
//! deadline of a sandbox created with `on_timeout: pause`, and a
//! connection to one of its port forwards, which resumes it). A paused
//! sandbox has no deadline; its keeper reads the record again when told
//! (SIGUSR1) or at its next look.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandkeep_provider::{ProviderError, Result, SandboxInfo, SandboxState};

use crate::cgroup::{RECORD, WORK};
use crate::client;
use crate::io_err;
use crate::presence::{Presence, inspect, lock_sandbox};
use crate::state::{self, SandboxDir};

/// How long freezing may take before it is given up (and undone).
const FREEZE_WITHIN: Duration = Duration::from_secs(5);
/// How often a v1 freeze that has not completed is asked for again.
const ASK_AGAIN: Duration = Duration::from_millis(100);

/// A sandbox's work cgroup, seen from the host.
struct Work {
    dir: PathBuf,
    v2: bool,
}

impl Work {
    /// The work cgroup recorded in a sandbox directory (written by its
    /// keeper in a directory the sandbox cannot write), if it has one.
    fn of(sandbox_dir: &Path) -> Option<Self> {
        let text = fs::read_to_string(sandbox_dir.join(RECORD)).ok()?;
        let dir = text
            .lines()
            .map(PathBuf::from)
            .find(|p| p.file_name() == Some(WORK.as_ref()))?;
        let v2 = dir.join("cgroup.freeze").exists();
        (v2 || dir.join("freezer.state").exists()).then_some(Self { dir, v2 })
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        fs::write(self.dir.join(file), value)
            .map_err(|e| io::Error::new(e.kind(), format!("write {value} to {file}: {e}")))
    }

    /// Freezes every process below it and waits until the kernel says
    /// they are (a task stopped in a system call takes a moment).
    fn freeze(&self) -> io::Result<()> {
        let (file, value, done) = if self.v2 {
            ("cgroup.freeze", "1", "frozen 1")
        } else {
            ("freezer.state", "FROZEN", "FROZEN")
        };
        self.write(file, value)?;
        let status = if self.v2 {
            "cgroup.events"
        } else {
            "freezer.state"
        };
        // v1 asks each task to freeze once per write of FROZEN (the kernel
        // walks the cgroup then). Under load a v1 cgroup was once seen
        // FREEZING for the whole wait, the cause unknown: while waiting,
        // the request is made again, which costs nothing if all is frozen.
        let again = (!self.v2).then_some((file, value));
        if let Err(now) =
            self.wait_for(status, again, |now| now.lines().any(|l| l.trim() == done))?
        {
            let left = self.left();
            let _ = self.thaw();
            return Err(io::Error::other(format!(
                "its processes did not freeze within {} s ({status}: {}; its processes, with \
                 their state and what they wait in: {left})",
                FREEZE_WITHIN.as_secs(),
                now.trim()
            )));
        }
        Ok(())
    }

    /// Its processes as `pid state wchan`, for a message.
    fn left(&self) -> String {
        let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        let described: Vec<String> = procs
            .split_whitespace()
            .map(|pid| {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = stat.rsplit_once(") ").map_or("?", |(_, rest)| &rest[..1]);
                let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
                format!("{pid} {state} {wchan}")
            })
            .collect();
        described.join(", ")
    }

    /// Reads its `file` until `done` says so, writing `again` (a file
    /// and its value) anew every [`ASK_AGAIN`]; what it read last when
    /// that takes longer than [`FREEZE_WITHIN`].
    fn wait_for(
        &self,
        file: &str,
        again: Option<(&str, &str)>,
        done: impl Fn(&str) -> bool,
    ) -> io::Result<std::result::Result<(), String>> {
        let start = Instant::now();
        let mut asked = start;
        let mut pause = Duration::from_micros(50);
        loop {
            let now = fs::read_to_string(self.dir.join(file))?;
            if done(&now) {
                return Ok(Ok(()));
            }
            if start.elapsed() > FREEZE_WITHIN {
                return Ok(Err(now));
            }
            if let Some((file, value)) = again
                && asked.elapsed() >= ASK_AGAIN
            {
                self.write(file, value)?;
                asked = Instant::now();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Kills every process in it and waits until none is left: frozen
    /// first, so that none forks, or exits and frees its pid, between the
    /// list and the kill; thawed for them to die (v1 frozen processes do
    /// not).
    fn empty(&self) -> io::Result<()> {
        self.freeze()?;
        let procs = fs::read_to_string(self.dir.join("cgroup.procs"))?;
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        self.thaw()?;
        if let Err(left) = self.wait_for("cgroup.procs", None, |now| now.trim().is_empty())? {
            return Err(io::Error::other(format!(
                "its processes did not end within {} s (left: {})",
                FREEZE_WITHIN.as_secs(),
                left.split_whitespace().collect::<Vec<_>>().join(" ")
            )));
        }
        Ok(())
    }

    fn thaw(&self) -> io::Result<()> {
        if self.v2 {
            self.write("cgroup.freeze", "0")
        } else {
            self.write("freezer.state", "THAWED")
        }
    }
}

/// Thaws a sandbox's processes whatever its record says, given its
/// cgroup directories (the keeper's own list: the sandbox's directory,
/// with the record, may be gone by then): before they are killed, since a
/// v1 frozen process does not die until thawed.
pub fn thaw_for_destruction(cgroup_dirs: &[PathBuf]) {
    for dir in cgroup_dirs
        .iter()
        .filter(|d| d.file_name() == Some(WORK.as_ref()))
    {
        let work = Work {
            v2: dir.join("cgroup.freeze").exists(),
            dir: dir.clone(),
        };
        let _ = work.thaw();
    }
}

/// [`thaw_for_destruction`] by the cgroups recorded in a sandbox's
/// directory: for whoever cleans up after a dead keeper.
pub fn thaw_recorded(sandbox_dir: &Path) {
    if let Some(work) = Work::of(sandbox_dir) {
        let _ = work.thaw();
    }
}

/// Pauses the sandbox of `dir`: [`ProviderError::AlreadyInState`] when it
/// is paused, [`ProviderError::Unsupported`] where it cannot freeze.
pub fn pause(dir: &SandboxDir) -> Result<SandboxInfo> {
    transition(dir, SandboxState::Paused, |work, _| {
        work.freeze()
            .map_err(|e| ProviderError::Unavailable(format!("cannot pause the sandbox: {e}")))
    })
}

/// Pauses the sandbox of `dir` keeping its files only (E2B's
/// filesystem-only pause): its processes are killed and the empty work
/// cgroup frozen, so a resume starts with none of them, as a cold boot
/// would, and with a new kernel boot id (a namespaced sandbox's own, see
/// `boot_id`; a process-only one shows the host's).
pub fn pause_files_only(dir: &SandboxDir) -> Result<SandboxInfo> {
    transition(dir, SandboxState::Paused, |work, info| {
        let unavailable =
            |e: String| ProviderError::Unavailable(format!("cannot pause the sandbox: {e}"));
        // First, so that a failure leaves the sandbox as it was (its
        // processes see the new id for the moment before they die). Only
        // namespaced isolations ("userns-…") have a /proc, and so a boot
        // id, of their own.
        if info.isolation.starts_with("userns") {
            client::new_boot_id(&dir.socket(), FREEZE_WITHIN)
                .map_err(|e| unavailable(format!("give it a new boot id: {e}")))?;
        }
        work.empty()
            .and_then(|()| work.freeze())
            .map_err(|e| unavailable(e.to_string()))
    })
}

/// Resumes the sandbox of `dir` with a deadline `timeout` seconds (its own
/// timeout when `None`) from now.
pub fn resume(dir: &SandboxDir, timeout: Option<u64>) -> Result<SandboxInfo> {
    transition(dir, SandboxState::Running, |work, info| {
        work.thaw()
            .map_err(io_err("resume the sandbox: thaw its processes"))?;
        if let Some(timeout) = timeout {
            info.timeout = timeout;
        }
        info.expires_at = sandkeep_provider::unix_now() + info.timeout;
        Ok(())
    })
}

/// Resumes the sandbox of `dir` if it is paused, as a resume_sandbox
/// without a timeout does: for a connection accepted on one of its port
/// forwards (SPEC §17: connections resume it first, as E2B's connect
/// does), before it is relayed. Another resume may win the race: fine.
/// The record is read without the lock first, so that a running
/// sandbox's connections cost one small read.
pub fn wake(dir: &SandboxDir) {
    let paused = state::read_json::<state::Meta>(&dir.meta())
        .is_ok_and(|m| m.info.state == SandboxState::Paused);
    if !paused {
        return;
    }
    match resume(dir, None) {
        Ok(_) | Err(ProviderError::AlreadyInState { .. }) => {}
        Err(e) => eprintln!("sandkeep keeper: resume for a connection to a port forward: {e}"),
    }
}

/// Moves the sandbox of `dir` to state `to` under its lock, with `act`
/// done to its processes and record before the record is written.
fn transition(
    dir: &SandboxDir,
    to: SandboxState,
    act: impl FnOnce(&Work, &mut SandboxInfo) -> Result<()>,
) -> Result<SandboxInfo> {
    let gone = || {
        let id = dir
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        match id.as_deref().map(sandkeep_provider::SandboxId::parse) {
            Some(Ok(id)) => ProviderError::NoSuchSandbox(id),
            _ => ProviderError::Internal(format!("no sandbox at {}", dir.path.display())),
        }
    };
    let Some(_lock) = lock_sandbox(dir)? else {
        return Err(gone());
    };
    let Presence::Live(meta) = inspect(dir) else {
        return Err(gone());
    };
    let mut meta = *meta;
    if meta.info.state == to {
        return Err(ProviderError::AlreadyInState {
            sandbox: meta.info.sandbox_id,
            state: to,
        });
    }
    let Some(work) = Work::of(&dir.path) else {
        return Err(ProviderError::Unsupported(format!(
            "sandbox {} cannot be paused: this host gave it no cgroup freezer (cgroup v2's \
             cgroup.freeze, Linux 5.2+, or the v1 freezer hierarchy); run `sandkeep doctor`",
            meta.info.sandbox_id
        )));
    };
    act(&work, &mut meta.info)?;
    meta.info.state = to;
    state::write_json(&dir.meta(), &meta).map_err(io_err("update meta.json"))?;
    if to == SandboxState::Running {
        tell_keeper(&meta.keeper);
    }
    Ok(meta.info)
}

/// Tells a sandbox's keeper that its record has a new deadline (else it
/// reads it within a minute, see `keeper::watch`). Signalled through a
/// pidfd opened before the identity is checked, so that a recycled pid is
/// never signalled.
pub fn tell_keeper(keeper: &sandkeep_proto::record::ProcessIdentity) {
    let Some(pid) = rustix::process::Pid::from_raw(keeper.pid as i32) else {
        return;
    };
    let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return;
    };
    if keeper.is_alive() {
        let signal = rustix::process::Signal::from_named_raw(crate::keeper::RECORD_CHANGED);
        if let Some(signal) = signal {
            let _ = rustix::process::pidfd_send_signal(&fd, signal);
        }
    }
}
