//! Paging of saved logs by byte offset, decoded lossily as UTF-8.
//!
//! A page may cut a multi-byte character; the cut bytes decode as U+FFFD and
//! the next offset still counts raw bytes, so reading page after page from
//! the returned offsets yields every saved byte exactly once. The helper
//! reads only the bytes of [`page_range`] from disk and hands them to
//! [`Page::from_raw`]; [`slice`] does both for bytes already in memory.

use std::ops::Range;

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

/// The raw byte range `[offset, offset + limit)` of a log of `saved_len`
/// bytes, clipped to what is saved; empty when the offset is past the end.
pub fn page_range(saved_len: u64, offset: ByteOffset, limit: u64) -> Range<u64> {
    let start = offset.0.min(saved_len);
    let end = offset.0.saturating_add(limit).min(saved_len).max(start);
    start..end
}

impl Page {
    /// The page starting at `offset` made of `raw`, the bytes
    /// [`page_range`] named. An offset past the end keeps its value.
    pub fn from_raw(raw: &[u8], offset: ByteOffset) -> Self {
        Page {
            text: String::from_utf8_lossy(raw).into_owned(),
            next_offset: ByteOffset(offset.0 + raw.len() as u64),
        }
    }
}

/// The page `[offset, offset + limit)` of `saved`, clipped to what is saved.
/// An offset past the end gives an empty page and the same offset.
pub fn slice(saved: &[u8], offset: ByteOffset, limit: u64) -> Page {
    let range = page_range(saved.len() as u64, offset, limit);
    Page::from_raw(&saved[range.start as usize..range.end as usize], offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CUT: char = char::REPLACEMENT_CHARACTER;

    #[test]
    fn offset_past_end_is_empty_with_same_offset() {
        let p = slice(b"abc", ByteOffset(10), 5);
        assert_eq!(p.text, "");
        assert_eq!(p.next_offset, ByteOffset(10));
    }

    #[test]
    fn huge_offsets_and_limits_clip_without_overflow() {
        assert_eq!(page_range(10, ByteOffset(3), u64::MAX), 3..10);
        assert_eq!(page_range(10, ByteOffset(u64::MAX), u64::MAX), 10..10);
        let p = slice(b"abc", ByteOffset(u64::MAX), u64::MAX);
        assert_eq!((p.text.as_str(), p.next_offset), ("", ByteOffset(u64::MAX)));
    }

    /// "a€b" is 61 | e2 82 ac | 62: every cut through the euro sign.
    #[test]
    fn cuts_through_a_character_give_replacements_and_raw_offsets() {
        let saved = "a€b".as_bytes();
        for (offset, limit, text, next) in [
            (0, 2, "a\u{FFFD}", 2),
            // A lead byte with what follows of its sequence is one U+FFFD.
            (0, 3, "a\u{FFFD}", 3),
            (1, 3, "€", 4),
            // Each stray continuation byte is a U+FFFD of its own.
            (2, 1, "\u{FFFD}", 3),
            (2, 3, "\u{FFFD}\u{FFFD}b", 5),
            (3, 10, "\u{FFFD}b", 5),
            (4, 10, "b", 5),
            (5, 10, "", 5),
        ] {
            let page = slice(saved, ByteOffset(offset), limit);
            assert_eq!(page.text, text, "offset {offset} limit {limit}");
            assert_eq!(
                page.next_offset,
                ByteOffset(next),
                "offset {offset} limit {limit}"
            );
        }
    }

    /// Single characters of one to four bytes, so that cuts land inside
    /// them often.
    fn characters() -> impl Strategy<Value = Vec<&'static str>> {
        proptest::collection::vec(
            prop_oneof![
                Just("a"),
                Just("é"),
                Just("€"),
                Just("𝄞"),
                Just("\n"),
                Just("z")
            ],
            0..40,
        )
    }

    /// What the bytes `start..end` of `chars` must read, worked out from
    /// the characters instead of by decoding: a character wholly inside is
    /// itself; one cut by `end` (its lead byte and some continuation bytes)
    /// is one U+FFFD; each continuation byte of one cut by `start` is a
    /// U+FFFD of its own.
    fn reference(chars: &[&str], start: usize, end: usize) -> String {
        let mut out = String::new();
        let mut at = 0;
        for c in chars {
            let (from, to) = (at, at + c.len());
            at = to;
            let (lo, hi) = (from.max(start), to.min(end));
            if lo >= hi {
                continue;
            }
            if (lo, hi) == (from, to) {
                out.push_str(c);
            } else if lo == from {
                out.push(CUT);
            } else {
                out.extend(std::iter::repeat_n(CUT, hi - lo));
            }
        }
        out
    }

    proptest! {
        /// Walking a log page by page from the returned offsets visits
        /// every byte exactly once, whatever the page size, and each page
        /// is the lossy decoding of exactly its raw bytes.
        #[test]
        fn pages_cover_every_byte_once(
            chars in characters(),
            junk in proptest::collection::vec(any::<u8>(), 0..8),
            limit in 1u64..20,
        ) {
            let mut saved = chars.concat().into_bytes();
            saved.extend(junk);
            let mut offset = ByteOffset(0);
            let mut seen = Vec::new();
            loop {
                let page = slice(&saved, offset, limit);
                let raw = &saved[offset.0 as usize..page.next_offset.0 as usize];
                prop_assert_eq!(&page.text, &String::from_utf8_lossy(raw));
                prop_assert!(raw.len() as u64 <= limit);
                if raw.is_empty() {
                    prop_assert_eq!(page.next_offset, offset);
                    break;
                }
                seen.extend_from_slice(raw);
                offset = page.next_offset;
            }
            prop_assert_eq!(seen, saved);
        }

        /// At every offset, also past the end: the page reads what the
        /// reference says, and the next offset is the offset plus the raw
        /// bytes available up to the limit.
        #[test]
        fn every_page_matches_the_reference(chars in characters(), limit in 1u64..12) {
            let saved = chars.concat().into_bytes();
            let len = saved.len() as u64;
            for offset in 0..=len + 3 {
                let page = slice(&saved, ByteOffset(offset), limit);
                let end = len.min(offset + limit);
                let want = reference(&chars, offset as usize, end as usize);
                prop_assert_eq!(&page.text, &want, "offset {} limit {}", offset, limit);
                prop_assert_eq!(page.next_offset, ByteOffset(offset.max(end)));
            }
        }
    }
}
