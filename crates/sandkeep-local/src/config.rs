//! What a local provider is configured with: its state directory
//! (`SANDKEEP_HOME`), the executable it runs as keeper and task helper, the
//! process-only switch, and the host-wide bounds of its sandboxes. Owns reading them from the environment; it must
//! not touch the disk or start anything (the provider does, on `new`).

use crate::bounds::HostBounds;
use sandkeep_proto::shell::state_base;
use std::path::PathBuf;

/// Where the provider keeps state and which executable it runs.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// `SANDKEEP_HOME`.
    pub home: PathBuf,
    /// The `sandkeep` executable: spawned as keeper and bound into every
    /// sandbox as the task helper.
    pub exe: PathBuf,
    /// Skip namespaces even where the kernel offers them: the weaker
    /// `landlock` / `process-only` level, reported as such. Hosts that
    /// refuse namespaces get it automatically, with a warning.
    pub process_only: bool,
    /// How many sandboxes, and how much memory, the state directory's
    /// sandboxes may hold together.
    pub bounds: HostBounds,
}

impl LocalConfig {
    pub fn new(home: impl Into<PathBuf>, exe: impl Into<PathBuf>) -> Self {
        Self {
            home: home.into(),
            exe: exe.into(),
            process_only: false,
            bounds: HostBounds::of_this_host(),
        }
    }

    pub fn with_bounds(self, bounds: HostBounds) -> Self {
        Self { bounds, ..self }
    }

    pub fn with_process_only(self, process_only: bool) -> Self {
        Self {
            process_only,
            ..self
        }
    }

    /// `SANDKEEP_HOME`, else `${XDG_STATE_HOME:-$HOME/.local/state}/sandkeep`;
    /// the running executable; the bounds of [`HostBounds::from_env`].
    pub fn from_env() -> std::io::Result<Self> {
        let home = match std::env::var_os("SANDKEEP_HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h),
            None => {
                let state = state_base(
                    std::env::var_os("XDG_STATE_HOME").as_deref(),
                    std::env::var_os("HOME").as_deref(),
                )
                .ok_or_else(|| {
                        std::io::Error::other(
                            "neither SANDKEEP_HOME, an absolute XDG_STATE_HOME nor HOME is set; set SANDKEEP_HOME",
                        )
                    })?;
                state.join("sandkeep")
            }
        };
        Ok(Self::new(home, std::env::current_exe()?).with_bounds(HostBounds::from_env()?))
    }
}
