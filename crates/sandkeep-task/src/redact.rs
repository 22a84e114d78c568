//! Streaming redaction of secret environment values (SPEC.md §5).
//!
//! Owns the matching rule only: which values are secrets, and how a stream
//! cut into arbitrary reads is rewritten exactly as if it had been redacted
//! in one piece (leftmost-longest, every match replaced by `[REDACTED]`).
//! It must not do I/O or know about log caps.
//!
//! Holding back: after each read, bytes that could still be the start of a
//! secret stay pending, and nothing else does. A byte is released as soon
//! as the bytes after it rule out every secret starting there, so ordinary
//! output reaches the log immediately; only a run that looks like the
//! beginning of a secret waits for the next read (or the end of the stream).

use std::ffi::OsString;

use aho_corasick::{AhoCorasick, MatchKind};
use sandkeep_proto::limits::{REDACT_MIN_LEN, REDACTED, is_secret_name};

/// The secret values of an environment: values of variables whose names
/// mark a secret, at least [`REDACT_MIN_LEN`] bytes long, without
/// duplicates.
pub fn secrets_of_env(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStringExt;
    let mut values: Vec<Vec<u8>> = vars
        .into_iter()
        .filter(|(name, _)| is_secret_name(&name.to_string_lossy()))
        .map(|(_, value)| value.into_vec())
        .filter(|v| v.len() >= REDACT_MIN_LEN)
        .collect();
    values.sort();
    values.dedup();
    values
}

struct Matcher {
    automaton: AhoCorasick,
    secrets: Vec<Vec<u8>>,
    longest: usize,
    /// First bytes of the secrets: a quick filter before comparing.
    first_byte: [bool; 256],
}

impl Matcher {
    /// True when a secret could start at the first byte of `tail`: the
    /// tail and some secret agree on their common length.
    fn could_start(&self, tail: &[u8]) -> bool {
        self.first_byte[usize::from(tail[0])]
            && self.secrets.iter().any(|s| {
                let n = s.len().min(tail.len());
                s[..n] == tail[..n]
            })
    }
}

/// A redacting filter for one output stream.
pub struct Redactor {
    matcher: Option<Matcher>,
    pending: Vec<u8>,
}

impl Redactor {
    /// A filter replacing each of `secrets` (values shorter than
    /// [`REDACT_MIN_LEN`] are ignored).
    pub fn new(secrets: Vec<Vec<u8>>) -> Self {
        let secrets: Vec<Vec<u8>> = secrets
            .into_iter()
            .filter(|s| s.len() >= REDACT_MIN_LEN)
            .collect();
        if secrets.is_empty() {
            return Self {
                matcher: None,
                pending: Vec::new(),
            };
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&secrets)
            .expect("a few secret values always fit the automaton");
        let mut first_byte = [false; 256];
        for s in &secrets {
            first_byte[usize::from(s[0])] = true;
        }
        let longest = secrets.iter().map(Vec::len).max().unwrap_or(0);
        Self {
            matcher: Some(Matcher {
                automaton,
                secrets,
                longest,
                first_byte,
            }),
            pending: Vec::new(),
        }
    }

    /// Bytes currently held back.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Feeds the next bytes of the stream; appends to `out` every byte
    /// whose redaction is now decided.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let Some(m) = &self.matcher else {
            out.extend_from_slice(input);
            return;
        };
        self.pending.extend_from_slice(input);
        let buf = &self.pending;
        // A match starting before `cut` ends inside `buf`, and no match
        // still unseen can start before it: those matches are final.
        let cut = buf.len().saturating_sub(m.longest - 1);
        let mut pos = 0;
        for found in m.automaton.find_iter(buf.as_slice()) {
            if found.start() >= cut {
                break;
            }
            out.extend_from_slice(&buf[pos..found.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            pos = found.end();
        }
        let mut keep = pos.max(cut);
        out.extend_from_slice(&buf[pos.min(keep)..keep]);
        let released = keep;
        while keep < buf.len() && !m.could_start(&buf[keep..]) {
            keep += 1;
        }
        out.extend_from_slice(&buf[released..keep]);
        self.pending.drain(..keep);
    }

    /// Ends the stream: appends the redaction of what was held back.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let Some(m) = &self.matcher else { return };
        let mut pos = 0;
        for found in m.automaton.find_iter(self.pending.as_slice()) {
            out.extend_from_slice(&self.pending[pos..found.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            pos = found.end();
        }
        out.extend_from_slice(&self.pending[pos..]);
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule written the slow, obvious way: at each position take the
    /// longest secret that starts there, else copy the byte.
    fn reference(text: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < text.len() {
            let longest = secrets
                .iter()
                .filter(|s| s.len() >= REDACT_MIN_LEN && text[i..].starts_with(s))
                .map(Vec::len)
                .max();
            match longest {
                Some(n) => {
                    out.extend_from_slice(REDACTED.as_bytes());
                    i += n;
                }
                None => {
                    out.push(text[i]);
                    i += 1;
                }
            }
        }
        out
    }

    fn redact_in_chunks(text: &[u8], secrets: &[Vec<u8>], cuts: &[usize]) -> Vec<u8> {
        let mut r = Redactor::new(secrets.to_vec());
        let mut out = Vec::new();
        let mut start = 0;
        for &c in cuts {
            let end = c.clamp(start, text.len());
            r.push(&text[start..end], &mut out);
            start = end;
        }
        r.push(&text[start..], &mut out);
        r.finish(&mut out);
        out
    }

    #[test]
    fn value_split_across_reads_is_caught() {
        let secrets = vec![b"hunter22".to_vec()];
        let out = redact_in_chunks(b"pw=hunter22!", &secrets, &[5, 7, 9]);
        assert_eq!(out, b"pw=[REDACTED]!");
    }

    #[test]
    fn short_values_are_left_alone() {
        let secrets = secrets_of_env([
            (OsString::from("API_KEY"), OsString::from("abc")),
            (OsString::from("PATH"), OsString::from("/usr/bin")),
            (OsString::from("db_password"), OsString::from("s3cret!")),
            (OsString::from("MY_TOKEN"), OsString::from("s3cret!")),
        ]);
        assert_eq!(secrets, vec![b"s3cret!".to_vec()]);
    }

    #[test]
    fn only_possible_secret_starts_are_held_back() {
        let mut r = Redactor::new(vec![b"topsecretvalue".to_vec()]);
        let mut out = Vec::new();
        r.push(b"BEFORE", &mut out);
        assert_eq!(out, b"BEFORE", "plain output must not wait for more input");
        out.clear();
        r.push(b"xx tops", &mut out);
        assert_eq!(out, b"xx ");
        assert_eq!(r.pending(), 4);
        r.push(b"oil", &mut out);
        assert_eq!(out, b"xx topsoil");
        assert_eq!(r.pending(), 0);
    }

    /// Text and secrets over a tiny alphabet, so that secrets overlap,
    /// nest and share prefixes with the text all the time.
    fn alphabet_bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], len)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any chunking gives exactly the reference output: no secret
        /// reaches the output and no other byte changes.
        #[test]
        fn chunked_equals_reference(
            secrets in proptest::collection::vec(alphabet_bytes(1..9), 1..5),
            pieces in proptest::collection::vec((alphabet_bytes(0..12), any::<prop::sample::Index>()), 0..10),
            cuts in proptest::collection::vec(0usize..200, 0..12),
        ) {
            let mut text = Vec::new();
            for (noise, pick) in &pieces {
                text.extend_from_slice(noise);
                let secret: &Vec<u8> = pick.get(&secrets);
                text.extend_from_slice(secret);
            }
            let mut cuts = cuts;
            cuts.sort_unstable();
            let expected = reference(&text, &secrets);
            let got = redact_in_chunks(&text, &secrets, &cuts);
            prop_assert_eq!(&got, &expected);
            for s in secrets.iter().filter(|s| s.len() >= REDACT_MIN_LEN) {
                prop_assert!(!got.windows(s.len()).any(|w| w == s.as_slice()));
            }
        }

        /// Without secrets the filter is the identity and holds nothing.
        #[test]
        fn no_secrets_is_identity(text in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..200) {
            let got = redact_in_chunks(&text, &[], &[cut]);
            prop_assert_eq!(got, text);
        }
    }
}
