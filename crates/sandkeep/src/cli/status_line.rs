//! A one-line status on stderr (state, elapsed time, bytes saved), redrawn
//! in place. It exists only when stderr is a terminal, so piped or
//! redirected output never contains it, and it is erased when dropped.

use std::io::{IsTerminal, Write};

use sandkeep_proto::TaskState;

use super::output;

pub struct StatusLine {
    enabled: bool,
    shown: bool,
}

impl StatusLine {
    /// A status line on stderr, if stderr is a terminal.
    pub fn on_stderr() -> Self {
        Self {
            enabled: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// Replaces the line with `text`.
    pub fn show(&mut self, text: &str) {
        if !self.enabled {
            return;
        }
        // Kept short rather than measured: a wrapped line could not be
        // erased with one carriage return.
        let text: String = super::output::printable(text, false)
            .chars()
            .take(76)
            .collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        self.shown = true;
    }

    /// Erases the line, leaving the cursor at the start of the row.
    pub fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `running · 12s · stdout 3.4 KiB · stderr 0 B`.
pub fn describe(
    state: TaskState,
    started_at: Option<u64>,
    finished_at: Option<u64>,
    stdout_bytes: u64,
    stderr_bytes: u64,
) -> String {
    let elapsed = started_at.map_or_else(
        || "-".to_owned(),
        |start| {
            output::duration(
                finished_at
                    .unwrap_or_else(crate::provider::unix_now)
                    .saturating_sub(start),
            )
        },
    );
    format!(
        "{state} · {elapsed} · stdout {} · stderr {}",
        output::bytes(stdout_bytes),
        output::bytes(stderr_bytes)
    )
}
