//! Presentation: `--json` printing, aligned tables, durations and sizes for
//! people. Nothing here decides what a result means.

use std::io::Write;

use serde::Serialize;

/// `--json`, shared by every command that prints a result.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct OutputArgs {
    /// Print the result as JSON: exactly the object the MCP tool returns
    /// (its structuredContent), on one line.
    #[arg(long, display_order = 100)]
    pub json: bool,
}

/// Writes `text` to stdout and flushes it. For a command that only
/// prints, a reader that went away (`| head`) is not worth an error, so
/// most callers ignore the result (through [`outln!`]); streaming callers
/// stop on it.
pub fn emit(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// `println!` that does not panic when stdout is closed.
macro_rules! outln {
    () => {{
        let _ = $crate::cli::output::emit("\n");
    }};
    ($($arg:tt)*) => {{
        let _ = $crate::cli::output::emit(&format!("{}\n", format_args!($($arg)*)));
    }};
}
pub(crate) use outln;

/// One result object as a line of JSON.
pub fn json_line<T: Serialize>(value: &T) -> String {
    // Serializing the service's plain data structs cannot fail.
    let line = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    format!("{line}\n")
}

/// Prints one result object as a line of JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) {
    let _ = emit(&json_line(value));
}

/// Sandbox data made safe for a terminal: control characters (escape
/// sequences, carriage returns, bells, C1 controls) are shown escaped, as
/// `\u{1b}`, so a task's output cannot move the cursor, retitle the window
/// or hide text. Line breaks and tabs are kept where `lines` says so.
/// Raw bytes are `task logs`' job, never a table's.
pub fn printable(text: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let escape = |c: char| c.is_control() && !(lines && matches!(c, '\n' | '\t'));
    if !text.chars().any(escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A table with a header row and left-aligned columns separated by two
/// spaces.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Cells are shown with control characters escaped ([`printable`]).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| printable(&c, false).into_owned())
                .collect(),
        );
    }

    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[c] - cell.chars().count();
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        let _ = emit(&self.render());
    }
}

/// Total width [`print_fields`] wraps long values to.
const LINE_WIDTH: usize = 100;

/// Prints `label  value` lines with the labels aligned; long values wrap
/// at spaces and continue under the first line of the value.
pub fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in fields {
        let value = printable(value, false);
        for (i, line) in wrap(&value, LINE_WIDTH.saturating_sub(width + 2))
            .iter()
            .enumerate()
        {
            let label = if i == 0 { label } else { "" };
            out.push_str(&format!("{label:<width$}  {line}\n"));
        }
    }
    let _ = emit(&out);
}

/// Greedy word wrap; a word longer than `width` gets a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let line = lines.last_mut().expect("never empty");
        if line.is_empty() || line.chars().count() + 1 + word.chars().count() <= width {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        } else {
            lines.push(word.to_owned());
        }
    }
    lines
}

/// A duration in seconds as `1h 2m`, `3m 4s` or `5s`.
pub fn duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if secs >= 86_400 {
        format!("{}d {}h", secs / 86_400, h % 24)
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// A moment relative to now: `3m 4s ago`, `in 5m 0s`, `just now`.
pub fn relative(at: u64, now: u64) -> String {
    match at.cmp(&now) {
        std::cmp::Ordering::Equal => "just now".to_owned(),
        std::cmp::Ordering::Less => format!("{} ago", duration(now - at)),
        std::cmp::Ordering::Greater => format!("in {}", duration(at - now)),
    }
}

/// An optional moment, `-` when absent.
pub fn relative_opt(at: Option<u64>, now: u64) -> String {
    at.map_or_else(|| "-".to_owned(), |t| relative(t, now))
}

/// A byte count for people: `512 B`, `3.4 KiB`, `1.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `yes` / `no`.
pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_text_is_kept() {
        assert_eq!(printable("plain ünïcode", false), "plain ünïcode");
        assert_eq!(
            printable("a\x1b]0;pwned\x07b\rc\u{9b}31m", false),
            "a\\u{1b}]0;pwned\\u{7}b\\rc\\u{9b}31m"
        );
        assert_eq!(printable("l1\n\tl2\x1b[2J", true), "l1\n\tl2\\u{1b}[2J");
        assert_eq!(printable("l1\nl2", false), "l1\\nl2");
        let mut t = Table::new(&["A"]);
        t.row(vec!["x\x1b[31my".into()]);
        assert_eq!(t.render(), "A\nx\\u{1b}[31my\n");
    }

    #[test]
    fn tables_align_columns_and_trim_the_last() {
        let mut t = Table::new(&["ID", "STATE", "NOTE"]);
        t.row(vec!["a".into(), "running".into(), String::new()]);
        t.row(vec!["long-id".into(), "ok".into(), "x".into()]);
        assert_eq!(
            t.render(),
            "ID       STATE    NOTE\na        running\nlong-id  ok       x\n"
        );
    }

    #[test]
    fn long_values_wrap_at_spaces() {
        assert_eq!(wrap("short", 10), vec!["short"]);
        assert_eq!(wrap("aaa bbb ccc ddd", 7), vec!["aaa bbb", "ccc ddd"]);
        assert_eq!(
            wrap("x averyveryverylongword y", 5),
            vec!["x", "averyveryverylongword", "y"]
        );
        assert_eq!(wrap("", 5), vec![""]);
    }

    #[test]
    fn durations_and_sizes_read_well() {
        assert_eq!(duration(5), "5s");
        assert_eq!(duration(64), "1m 4s");
        assert_eq!(duration(3_720), "1h 2m");
        assert_eq!(duration(90_000), "1d 1h");
        assert_eq!(relative(100, 100), "just now");
        assert_eq!(relative(40, 100), "1m 0s ago");
        assert_eq!(relative(400, 100), "in 5m 0s");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(3_500), "3.4 KiB");
        assert_eq!(bytes(1_048_576), "1.0 MiB");
    }
}
