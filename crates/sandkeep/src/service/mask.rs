//! Host-side masking of the server's own secret values (SPEC.md §6) in the
//! output pages it returns. A secret split across two pages is not caught:
//! each page is masked on its own.

use aho_corasick::{AhoCorasick, MatchKind};
use sandkeep_proto::limits::{REDACT_MIN_LEN, REDACTED};

/// The values of sandkeep's own secret configuration in this process's
/// environment: `SANDKEEP_*` and `E2B_*` variables whose names mark a secret
/// (KEY, TOKEN, SECRET, PASSWORD). Front ends pass these (plus any secret
/// given on their command line) to [`super::Service::new`].
pub fn configured_secrets() -> Vec<String> {
    // Not `env::vars`, which panics on any variable that is not UTF-8.
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.to_str()?;
            ((name.starts_with("SANDKEEP_") || name.starts_with("E2B_"))
                && sandkeep_proto::limits::is_secret_name(name))
            .then(|| value.to_string_lossy().into_owned())
        })
        .collect()
}

pub(super) struct Masker {
    matcher: Option<AhoCorasick>,
}

impl Masker {
    /// Values shorter than [`REDACT_MIN_LEN`] are ignored, as in the
    /// supervisor: masking them would destroy the output.
    pub(super) fn new(secrets: Vec<String>) -> Self {
        let mut values: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= REDACT_MIN_LEN)
            .collect();
        values.sort();
        values.dedup();
        let matcher = (!values.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&values)
                .expect("literal patterns always build")
        });
        Self { matcher }
    }

    pub(super) fn mask(&self, text: String) -> String {
        match &self.matcher {
            Some(m) if m.is_match(&text) => m.replace_all(&text, &vec![REDACTED; m.patterns_len()]),
            _ => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_occurrence_longest_first() {
        let m = Masker::new(vec!["tok3n".into(), "tok3n-long".into(), "abc".into()]);
        assert_eq!(
            m.mask("a tok3n-long b tok3n abc".into()),
            "a [REDACTED] b [REDACTED] abc"
        );
    }

    #[test]
    fn no_secrets_is_identity() {
        let m = Masker::new(vec![]);
        assert_eq!(m.mask("x".into()), "x");
    }
}
