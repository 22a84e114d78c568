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

    /// Text rich in multi-byte characters, so that random cuts land inside
    /// them often.
    fn utf8_text() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just("a"),
                Just("é"),
                Just("€"),
                Just("𝄞"),
                Just("\n"),
                Just("z")
            ],
            0..64,
        )
        .prop_map(|parts| parts.concat().into_bytes())
    }

    proptest! {
        /// Walking a log page by page from the returned offsets visits
        /// every byte exactly once, whatever the page size, and each page
        /// is the lossy decoding of exactly its raw bytes.
        #[test]
        fn pages_cover_every_byte_once(
            mut saved in utf8_text(),
            junk in proptest::collection::vec(any::<u8>(), 0..8),
            limit in 1u64..20,
        ) {
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

        /// Every cut point: the two pages split at it decode to valid
        /// UTF-8 strings, reading again gives the same page, and an offset
        /// past the end returns itself with an empty page.
        #[test]
        fn every_cut_is_stable_and_valid(saved in utf8_text(), extra in 0u64..50, limit in 1u64..70_000) {
            for cut in 0..=saved.len() as u64 + extra {
                let a = slice(&saved, ByteOffset(cut), limit);
                let b = slice(&saved, ByteOffset(cut), limit);
                prop_assert_eq!(&a, &b);
                prop_assert!(std::str::from_utf8(a.text.as_bytes()).is_ok());
                if cut >= saved.len() as u64 {
                    prop_assert_eq!(a.text, "");
                    prop_assert_eq!(a.next_offset, ByteOffset(cut));
                } else {
                    let want = (saved.len() as u64).min(cut.saturating_add(limit));
                    prop_assert_eq!(a.next_offset, ByteOffset(want));
                }
            }
        }
    }
}
