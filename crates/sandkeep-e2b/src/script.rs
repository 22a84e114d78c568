//! The shell scripts the provider runs in a sandbox through envd: the
//! foreground command wrapper (its own process group, killed whole at the
//! timeout, as envd cannot), the wrapper of a process that outlives the
//! call and its signals, the helper check, and the retention decision.

/// The exit status of the wrapper when the watchdog killed the command.
pub const TIMED_OUT: i32 = 124;

/// Runs `$1` with bash (sh where bash is missing) in its own process group
/// (monitor mode), with `$2` seconds to live, in `$3` (empty: home), stdin
/// from /dev/null unless `$4` is 1. At the timeout the whole group gets
/// SIGKILL and the wrapper exits [`TIMED_OUT`]; otherwise it exits with the
/// command's status (128+N for signal N). Monitor mode is left once both
/// have their groups, and the wait's own stderr is discarded, so bash's
/// job notices ("Killed", "Done") never reach the command's stderr. A
/// SIGKILL at or past the timeout is the watchdog's even when the watchdog
/// has not exited yet (bash's `SECONDS`; under sh only the watchdog's
/// exit tells).
pub const EXEC: &str = r#"set -m 2>/dev/null
if [ -n "$3" ]; then cd -- "$3" || exit 1; fi
s=sh; command -v bash >/dev/null 2>&1 && s=bash
if [ "$4" = 1 ]; then "$s" -c "$1" & else "$s" -c "$1" </dev/null & fi
p=$!
(sleep "$2"; kill -KILL -"$p" 2>/dev/null || kill -KILL "$p") >/dev/null 2>&1 </dev/null &
w=$!
set +m 2>/dev/null
{
  wait "$p"; r=$?
  if [ "$r" = 137 ] && [ "${SECONDS:-0}" -ge "$2" ]; then kill -KILL -"$w" || kill -KILL "$w"; exit 124; fi
  if kill -0 "$w"; then kill -KILL -"$w" || kill -KILL "$w"; exit "$r"; fi
  exit 124
} 2>/dev/null
"#;

/// The launcher envd runs: the wrapper under bash when there is one (its
/// monitor mode gives the command a process group), else sh.
pub const LAUNCH: &str = r#"command -v bash >/dev/null 2>&1 && exec bash -c "$0" sandkeep "$@"; exec sh -c "$0" sandkeep "$@""#;

/// The environment variable that carries a spawned command to [`SPAWN`]
/// (in an argument it would show in the wrapper's command line for the
/// process's whole life, where it is not the process).
pub const SPAWN_COMMAND: &str = "SANDKEEP_COMMAND";

/// Runs `$SANDKEEP_COMMAND` with bash (sh where bash is missing) in its
/// own process group (monitor mode), in `$1` (empty: home), and waits for
/// it, ending as it ended: with its exit code, or, when the shell's
/// 128+N says signal N killed it, by that signal (so envd reports a
/// signal, not a code; a shell cannot tell `exit 137` from SIGKILL, and
/// reads an exit of 129-159 as a death by signal too; signals whose
/// default action is not to terminate are passed on as codes). The
/// command's stdin is the wrapper's (kept through fd 3: sh without job control would give
/// a background command /dev/null). The command's first line on stdout is
/// its pid inside the sandbox (the provider reads it off before passing
/// the output on): envd reports pids of its own, and its signals reach
/// only the process it started, this wrapper.
pub const SPAWN: &str = r#"set -m 2>/dev/null
if [ -n "$1" ]; then cd -- "$1" || exit 1; fi
s=sh; command -v bash >/dev/null 2>&1 && s=bash
exec 3<&0
"$s" -c 'c=$SANDKEEP_COMMAND; unset SANDKEEP_COMMAND; echo "$$"; exec "$0" -c "$c"' "$s" <&3 3<&- &
p=$!
exec 3<&-
set +m 2>/dev/null
wait "$p" 2>/dev/null
st=$?
if [ "$st" -gt 128 ] && [ "$st" -lt 160 ]; then
  case $((st - 128)) in
    17|18|19|20|21|22|23|28) ;;
    *) kill -$((st - 128)) $$ 2>/dev/null ;;
  esac
fi
exit "$st"
"#;

/// Sends signal `$1` to process `$2`.
pub const SIGNAL: &str = r#"kill -"$1" "$2""#;

/// SIGKILLs the process group led by `$1` (the process alone when it
/// leads none).
pub const KILL_GROUP: &str = r#"kill -KILL "-$1" 2>/dev/null || kill -KILL "$1""#;

/// Where the helper lives, relative to the sandbox user's home.
pub const HELPER_DIR: &str = ".sandkeep/bin";
pub const HELPER_NAME: &str = "sandkeep-task";

/// Prints `PATH HASH` of the installed helper (HASH empty when missing).
pub fn helper_check() -> String {
    format!(
        r#"cd && p="$PWD/{HELPER_DIR}/{HELPER_NAME}"; h=$(sha256sum "$p" 2>/dev/null | cut -c1-64); printf '%s %s' "$p" "$h""#
    )
}

/// Makes the uploaded `tmp` (relative to home) the helper if its hash is
/// `hash`; prints `PATH HASH` as [`helper_check`] does.
pub fn helper_install(tmp: &str, hash: &str) -> String {
    format!(
        r#"cd && t="$PWD/{tmp}" && p="$PWD/{HELPER_DIR}/{HELPER_NAME}" && chmod 0755 "$t" && h=$(sha256sum "$t" | cut -c1-64) && if [ "$h" = {hash} ]; then mv -f "$t" "$p"; else rm -f "$t"; fi; printf '%s %s' "$p" "$h""#
    )
}

/// The retention decision: whichever of "retained" and "released" is
/// written first wins for good. `ln -s` creates the link atomically or
/// fails because it exists, so a start that retains and a session end
/// that destroys, from any server processes, agree on one winner. Prints
/// the winner.
pub fn decide(wish: Fate) -> String {
    let wish = wish.as_str();
    format!(
        r#"cd && mkdir -p .sandkeep && chmod 0700 .sandkeep && {{ ln -s {wish} .sandkeep/fate 2>/dev/null; readlink .sandkeep/fate; }}"#
    )
}

/// Prints the decision so far (nothing when there is none).
pub const READ_FATE: &str = "cd && readlink .sandkeep/fate 2>/dev/null; true";

/// What becomes of a sandbox when the session that made it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// A task was started: it lives to its deadline or an explicit kill.
    Retained,
    /// Its session ended first: it is being destroyed.
    Released,
}

impl Fate {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retained => "retained",
            Self::Released => "released",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "retained" => Some(Self::Retained),
            "released" => Some(Self::Released),
            _ => None,
        }
    }
}
