//! Where a command runs and where a user's state lives: the rules the
//! in-sandbox helper, the local provider's fork server and the host share.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The shells that run a command as `SHELL -c COMMAND`, in order of
/// preference: bash, or sh where bash is missing (docs/tools.md, run_command). Tasks
/// and `run_command` run the same way, so `[[ … ]]` works in both.
pub const SHELLS: [&str; 2] = ["/bin/bash", "/bin/sh"];

/// The `oom_score_adj` of a sandbox's user processes: the most, so that
/// under the sandbox's memory limit, or the host's, the OOM killer takes
/// them before the helper's processes (a supervisor's loss would leave its
/// task `unknown` instead of `failed` with its OOM error) and before
/// anything of the host's. Among themselves the largest goes first, as
/// without it. The local init sets it for itself and so for everything it
/// forks; the helper sets 0 again for itself (lowering down to the
/// inherited minimum, 0, takes no privilege) and this for a task's
/// processes.
pub const USER_OOM_SCORE_ADJ: &str = "1000";

/// `${XDG_STATE_HOME:-$HOME/.local/state}` from the values of those two
/// variables. The XDG specification says a relative `XDG_STATE_HOME` is
/// invalid and is to be ignored, and so is an empty one; `None` when
/// neither gives an absolute base.
pub fn state_base(xdg_state_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    match (xdg_state_home, home) {
        (Some(x), _) if Path::new(x).is_absolute() => Some(PathBuf::from(x)),
        (_, Some(h)) if !h.is_empty() => Some(Path::new(h).join(".local/state")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(x: Option<&str>, h: Option<&str>) -> Option<PathBuf> {
        state_base(x.map(OsStr::new), h.map(OsStr::new))
    }

    #[test]
    fn an_absolute_xdg_state_home_wins() {
        assert_eq!(
            base(Some("/x/state"), Some("/home/u")),
            Some("/x/state".into())
        );
    }

    #[test]
    fn a_relative_or_empty_xdg_state_home_is_ignored() {
        let want = Some(PathBuf::from("/home/u/.local/state"));
        assert_eq!(base(Some("rel/state"), Some("/home/u")), want);
        assert_eq!(base(Some(""), Some("/home/u")), want);
        assert_eq!(base(None, Some("/home/u")), want);
    }

    #[test]
    fn nothing_usable_is_none() {
        assert_eq!(base(Some("rel"), None), None);
        assert_eq!(base(None, Some("")), None);
        assert_eq!(base(None, None), None);
    }
}
