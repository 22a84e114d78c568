//! `sandkeep task logs`: a task's saved log, page after page through
//! get_task, and with `--follow` new bytes as they are saved, like
//! `tail -f`, until the task ends; between pages it sleeps in wait_task.
//!
//! It owns only the reading loop and how pages are joined back into the
//! byte stream; offsets, limits and states are the service's.

use std::io::{IsTerminal, Write};

use clap::Args;
use sandkeep_proto::limits::{OFFSET_MAX, PAGE_LIMIT_MAX};

use crate::cli::Outcome;
use crate::cli::context::{CliError, SessionKind, with_context};
use crate::cli::exit;
use crate::cli::output;
use crate::cli::status_line::{self, StatusLine};
use crate::service::{TaskQueryArgs, TaskResult};

use super::handle::{HandleArgs, long_poll_limit};

/// Print a task's saved stdout (or stderr); --follow streams it live.
#[derive(Debug, Args)]
#[command(
    long_about = "Print a task's saved stdout (or, with --stderr, its saved stderr) on stdout.\n\n\
        With --follow it keeps printing new bytes as the task saves them, like `tail -f`, until \
        the task ends, and then exits with the task's exit status. On a terminal a one-line \
        status (state, elapsed time, bytes saved) is shown on stderr; it never mixes into \
        piped or redirected output.\n\n\
        With --json every page read is printed as one line of JSON: the get_task result that \
        carried it.",
    after_help = "Examples:\n  sandkeep task logs \"$SB\" \"$TASK\" > stdout.log\n  \
        sandkeep task logs \"$SB\" \"$TASK\" --follow --stderr",
    after_long_help = exit::TABLE
)]
pub struct LogsArgs {
    #[command(flatten)]
    pub handle: HandleArgs,
    /// Keep printing new output until the task ends, then exit with its
    /// status.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print the task's stderr log instead of its stdout log.
    #[arg(long)]
    pub stderr: bool,
}

/// Which log is read, and the other one kept out of the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }

    fn request(self, handle: &HandleArgs, offset: u64) -> TaskQueryArgs {
        let (stdout_offset, stderr_offset) = match self {
            Self::Stdout => (offset, OFFSET_MAX),
            Self::Stderr => (OFFSET_MAX, offset),
        };
        TaskQueryArgs {
            stdout_offset: Some(stdout_offset),
            stderr_offset: Some(stderr_offset),
            limit: Some(PAGE_LIMIT_MAX),
            ..handle.query()
        }
    }

    /// (text, next offset, bytes saved, truncated) of this stream.
    fn of(self, t: &TaskResult) -> (&str, u64, u64, bool) {
        match self {
            Self::Stdout => (
                &t.stdout,
                t.stdout_next_offset,
                t.stdout_bytes,
                t.stdout_truncated,
            ),
            Self::Stderr => (
                &t.stderr,
                t.stderr_next_offset,
                t.stderr_bytes,
                t.stderr_truncated,
            ),
        }
    }
}

pub async fn run(args: LogsArgs) -> Outcome {
    let follow = args.follow;
    let outcome = with_context(SessionKind::Ordinary, async |ctx| {
        let stream = if args.stderr { Stream::Stderr } else { Stream::Stdout };
        let json = args.handle.output.json;
        let mut out = LogWriter::new();
        let mut status = StatusLine::on_stderr();
        let mut offset = 0;
        let mut first = true;
        loop {
            let page = ctx.service.get_task(stream.request(&args.handle, offset)).await?;
            let (text, next, saved, truncated) = stream.of(&page);
            let done = page.state.is_settled();
            let ending = next >= saved && (done || !follow);
            let start = offset;
            if json {
                if (next > offset || first || ending)
                    && output::emit(&output::json_line(&page)).is_err()
                {
                    return Ok(exit::STDOUT_CLOSED);
                }
                offset = next;
            } else {
                // The end of what is saved may cut a character the task
                // is still writing; it is read whole on the next page.
                let (whole, consumed) = whole_characters(text, next - offset, ending);
                if !whole.is_empty() {
                    status.clear();
                    if out.write(whole).is_err() {
                        return Ok(exit::STDOUT_CLOSED);
                    }
                }
                offset += consumed;
            }
            first = false;
            if offset < saved && offset > start {
                continue;
            }
            if ending {
                status.clear();
                if truncated {
                    eprintln!(
                        "sandkeep: the task wrote more than 1 MiB to {}; only the first 1 MiB was saved",
                        stream.name()
                    );
                }
                if !follow {
                    return Ok(exit::OK);
                }
                return Ok(exit::for_task(page.state, page.exit_code)
                    .unwrap_or(exit::OWN_FAILURE_FORWARDING));
            }
            // Redrawn only at the start of a row, so a partial line of
            // output on the same terminal is never overwritten.
            if out.at_line_start() {
                status.show(&status_line::describe(
                    page.state,
                    page.started_at,
                    page.finished_at,
                    page.stdout_bytes,
                    page.stderr_bytes,
                ));
            }
            // Until bytes past everything seen so far are saved (a
            // character held back above is read again with them).
            args.handle
                .wait_past(
                    &ctx.service,
                    &stream.request(&args.handle, saved),
                    long_poll_limit(),
                )
                .await?;
        }
    })
    .await;
    if follow {
        outcome.map_err(CliError::forwarding)
    } else {
        outcome
    }
}

/// Stdout, flushed after every page, tracking whether the cursor of a
/// terminal would be at the start of a row.
struct LogWriter {
    terminal: bool,
    at_line_start: bool,
}

impl LogWriter {
    fn new() -> Self {
        Self {
            terminal: std::io::stdout().is_terminal(),
            at_line_start: true,
        }
    }

    fn write(&mut self, text: &str) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    /// When stdout is not a terminal, the status line on stderr cannot
    /// land inside the output.
    fn at_line_start(&self) -> bool {
        !self.terminal || self.at_line_start
    }
}

/// The part of a page that ends on a whole character, and how many raw
/// bytes of the log it covers.
///
/// A page is decoded lossily, so a character cut by the end of the page
/// arrives as one U+FFFD standing for 1-3 raw bytes. Unless these are the
/// final bytes of the log, that U+FFFD is held back and its raw bytes are
/// read again with the next page. The count is exact when the trailing
/// U+FFFD is the page's only one; otherwise the page is passed on as it is.
fn whole_characters(text: &str, raw_len: u64, final_bytes: bool) -> (&str, u64) {
    const CUT: char = char::REPLACEMENT_CHARACTER;
    let Some(head) = text.strip_suffix(CUT) else {
        return (text, raw_len);
    };
    if final_bytes || head.contains(CUT) {
        return (text, raw_len);
    }
    match raw_len.checked_sub(head.len() as u64) {
        Some(cut @ 1..=3) => (head, raw_len - cut),
        _ => (text, raw_len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandkeep_proto::page::{ByteOffset, slice};

    /// Joins pages of `limit` bytes the way `run` does.
    fn join(saved: &[u8], limit: u64) -> String {
        let mut out = String::new();
        let mut offset = 0u64;
        while offset < saved.len() as u64 {
            let page = slice(saved, ByteOffset(offset), limit);
            let next = page.next_offset.0;
            let (whole, consumed) =
                whole_characters(&page.text, next - offset, next >= saved.len() as u64);
            out.push_str(whole);
            offset += consumed;
        }
        out
    }

    #[test]
    fn characters_cut_by_page_ends_are_read_whole() {
        let text = "aé€😀 ünïcödé ✓ 😀😀😀 end";
        for limit in 4..20 {
            assert_eq!(join(text.as_bytes(), limit), text, "limit {limit}");
        }
    }

    #[test]
    fn really_broken_bytes_stay_replacement_characters() {
        let mut saved = b"ok ".to_vec();
        saved.extend_from_slice(&[0xff, b'x', 0xe2, 0x82]);
        assert_eq!(join(&saved, 5), "ok \u{FFFD}x\u{FFFD}");
        assert_eq!(join(&saved, 100), "ok \u{FFFD}x\u{FFFD}");
    }

    #[test]
    fn an_unfinished_character_waits_for_its_bytes() {
        let bytes = "x€".as_bytes();
        let page = slice(&bytes[..3], ByteOffset(0), 100);
        assert_eq!(whole_characters(&page.text, 3, false), ("x", 1));
        assert_eq!(whole_characters(&page.text, 3, true), ("x\u{FFFD}", 3));
    }
}
