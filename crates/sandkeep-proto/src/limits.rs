//! The limits docs/tools.md states, in one place.

/// Longest accepted command, in characters.
pub const COMMAND_MAX_CHARS: usize = 65_536;
/// Largest start request, JSON-encoded then shell-quoted, in bytes.
pub const START_REQUEST_MAX_BYTES: usize = 98_304;
/// Task timeout range and default, seconds.
pub const TASK_TIMEOUT_MIN: u64 = 1;
pub const TASK_TIMEOUT_MAX: u64 = 3_600;
pub const TASK_TIMEOUT_DEFAULT: u64 = 300;
/// Sandbox timeout range and default, seconds.
pub const SANDBOX_TIMEOUT_MIN: u64 = 1;
pub const SANDBOX_TIMEOUT_MAX: u64 = 86_400;
pub const SANDBOX_TIMEOUT_DEFAULT: u64 = 300;
/// run_command timeout range and default, seconds.
pub const RUN_TIMEOUT_MIN: u64 = 1;
pub const RUN_TIMEOUT_MAX: u64 = 3_600;
pub const RUN_TIMEOUT_DEFAULT: u64 = 30;
/// Sandbox resource requests (docs/tools.md): the least a sandbox may ask
/// for, and the local provider's defaults (§8). The most is the server's
/// ceiling, a server option.
pub const MEMORY_MIB_MIN: u64 = 64;
pub const MEMORY_MIB_DEFAULT: u64 = 2048;
pub const MILLI_CPUS_MIN: u32 = 100;
pub const MILLI_CPUS_DEFAULT: u32 = 2000;
pub const PIDS_MIN: u64 = 16;
pub const PIDS_DEFAULT: u64 = 1024;
pub const DISK_MIB_MIN: u64 = 64;
pub const DISK_MIB_DEFAULT: u64 = 4096;
/// `allow_hosts` takes 1 to this many names or patterns.
pub const ALLOW_HOSTS_MAX: usize = 64;
/// Port forwards one sandbox may have (each holds a host listener).
pub const PORTS_MAX: usize = 64;

/// Bytes saved per log stream; later output is read and dropped.
pub const LOG_CAP_BYTES: u64 = 1_048_576;
/// Highest accepted log offset.
pub const OFFSET_MAX: u64 = 1_048_576;
/// Page size range and default, bytes per stream.
pub const PAGE_LIMIT_MIN: u64 = 1;
pub const PAGE_LIMIT_MAX: u64 = 65_536;
pub const PAGE_LIMIT_DEFAULT: u64 = 16_384;
/// Task directories per sandbox OS user.
pub const MAX_TASK_DIRS: usize = 128;
/// How long cancel waits for the terminal record, milliseconds.
pub const CANCEL_WAIT_MS: u64 = 3_000;
/// wait_task's timeout in seconds (docs/tools.md, wait_task).
pub const WAIT_TIMEOUT_MIN: u64 = 1;
pub const WAIT_TIMEOUT_MAX: u64 = 300;
pub const WAIT_TIMEOUT_DEFAULT: u64 = 30;
/// list_tasks shows at most this many characters of a task's command.
pub const LISTED_COMMAND_MAX_CHARS: usize = 256;
/// send_input accepts at most this many bytes a call, after decoding.
pub const INPUT_MAX_BYTES: usize = 65_536;
/// At most this many bytes of input may wait in a task's directory,
/// accepted but not yet written to the task (SPEC.md §15).
pub const INPUT_BACKLOG_MAX_BYTES: u64 = 1_048_576;
/// A terminal's columns and rows (start_interactive_task, resize_terminal).
pub const TERM_SIZE_MIN: u16 = 1;
pub const TERM_SIZE_MAX: u16 = 1_000;
pub const TERM_COLS_DEFAULT: u16 = 80;
pub const TERM_ROWS_DEFAULT: u16 = 24;
/// run_command returns at most this many trailing bytes per stream.
pub const RUN_OUTPUT_MAX_BYTES: usize = 65_536;
/// Environment values shorter than this are not redacted (they would
/// destroy the log).
pub const REDACT_MIN_LEN: usize = 4;
/// Names containing one of these (any case) mark a secret value.
pub const SECRET_NAME_MARKERS: [&str; 4] = ["KEY", "TOKEN", "SECRET", "PASSWORD"];
/// What a redacted value is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// True when an environment variable of this name holds a secret to redact.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_MARKERS.iter().any(|m| upper.contains(m))
}

/// Host shares a sandbox may mount (SPEC §13).
pub const SHARES_MAX: usize = 16;
/// Entries `list_changes` returns at most, then `truncated`.
pub const CHANGES_MAX: usize = 10_000;
/// Bytes of `list_changes`'s unified diff at most, then `diff_truncated`.
pub const CHANGES_DIFF_MAX_BYTES: usize = 262_144;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_match_in_any_case() {
        assert!(is_secret_name("OPENAI_API_KEY"));
        assert!(is_secret_name("github_token"));
        assert!(is_secret_name("Db_Password"));
        assert!(is_secret_name("MY_SECRET"));
        assert!(!is_secret_name("PATH"));
        assert!(!is_secret_name("HOME"));
    }
}
