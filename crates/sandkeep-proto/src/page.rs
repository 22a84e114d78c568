//! Paging of saved logs by byte offset, decoded lossily as UTF-8.
//!
//! A page may cut a multi-byte character; the cut bytes decode as U+FFFD and
//! the next offset still counts raw bytes, so reading page after page from
//! the returned offsets yields every saved byte exactly once.

/// A byte position in a saved log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteOffset(pub u64);

/// One page of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The raw bytes decoded as UTF-8, broken sequences as U+FFFD.
    pub text: String,
    /// Offset + number of raw bytes returned.
    pub next_offset: ByteOffset,
}

/// The page `[offset, offset + limit)` of `saved`, clipped to what is saved.
/// An offset past the end gives an empty page and the same offset.
pub fn slice(saved: &[u8], offset: ByteOffset, limit: u64) -> Page {
    let len = saved.len() as u64;
    let start = offset.0.min(len);
    let end = offset.0.saturating_add(limit).min(len).max(start);
    let raw = &saved[start as usize..end as usize];
    Page {
        text: String::from_utf8_lossy(raw).into_owned(),
        next_offset: ByteOffset(if offset.0 > len { offset.0 } else { end }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_past_end_is_empty_with_same_offset() {
        let p = slice(b"abc", ByteOffset(10), 5);
        assert_eq!(p.text, "");
        assert_eq!(p.next_offset, ByteOffset(10));
    }

    #[test]
    fn cut_character_becomes_replacement() {
        let s = "é".as_bytes(); // two bytes
        let p = slice(s, ByteOffset(0), 1);
        assert_eq!(p.text, "\u{FFFD}");
        assert_eq!(p.next_offset, ByteOffset(1));
    }
}
