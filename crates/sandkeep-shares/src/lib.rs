//! Host shares (SPEC §13), the host's side: the operator's `--share
//! PATH[:MODE]` settings, checked once at start ([`ShareConfig`]), and
//! writing a sandbox's copy-on-write changes back into a host directory
//! ([`apply`]).
//!
//! Which shares a sandbox mounts and how is the providers' business; what
//! changed in one is the in-sandbox helper's (`sandkeep-task changes`).
//! This crate never reads a sandbox's files itself: [`apply`] takes the
//! helper's export stream.

#![forbid(unsafe_code)]

mod apply;

use std::path::{Path, PathBuf};

pub use apply::{ApplyError, apply};
use sandkeep_proto::shares::{Share, ShareMode};

/// A share as the operator configured it, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareConfig {
    /// As written (without the mode): `create_sandbox` may name a share
    /// this way too.
    pub given: String,
    /// Resolved once, at start: absolute, no symlink in it.
    pub path: PathBuf,
    pub mode: ShareMode,
}

impl ShareConfig {
    /// Parses `PATH[:ro|cow|rw]` (default `ro`; any other suffix is part of
    /// the path) and checks the directory: it must exist, be a directory,
    /// and be neither `/`, a kernel filesystem, nor the state directory
    /// `state`, inside it or above it.
    pub fn parse(arg: &str, state: &Path) -> Result<Self, ConfigError> {
        let (given, mode) = match arg.rsplit_once(':') {
            Some((path, mode)) if matches!(mode, "ro" | "cow" | "rw") => {
                (path, mode.parse().expect("one of the three"))
            }
            _ => (arg, ShareMode::Ro),
        };
        let refuse = |why: String| ConfigError {
            arg: arg.to_owned(),
            why,
        };
        if given.is_empty() {
            return Err(refuse("no path given".into()));
        }
        let path = std::fs::canonicalize(given).map_err(|e| refuse(format!("{given}: {e}")))?;
        if !path.is_dir() {
            return Err(refuse(format!("{} is not a directory", path.display())));
        }
        if path == Path::new("/") {
            return Err(refuse(
                "the whole host filesystem cannot be shared; name a project directory".into(),
            ));
        }
        if ["/proc", "/sys", "/dev"]
            .iter()
            .any(|k| path.starts_with(k))
        {
            return Err(refuse(format!(
                "{} is a kernel filesystem, not a directory of files",
                path.display()
            )));
        }
        let state = std::fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
        if state.starts_with(&path) || path.starts_with(&state) {
            return Err(refuse(format!(
                "{} holds or is inside sandkeep's state directory {}; share a directory beside it",
                path.display(),
                state.display()
            )));
        }
        if path.to_str().is_none() {
            return Err(refuse(format!("{} is not valid UTF-8", path.display())));
        }
        Ok(Self {
            given: given.to_owned(),
            path,
            mode,
        })
    }

    pub fn share(&self) -> Share {
        Share {
            path: self.path.to_string_lossy().into_owned(),
            mode: self.mode,
        }
    }

    /// Whether `name` (from `create_sandbox`'s `shares`) names this share.
    pub fn is_named(&self, name: &str) -> bool {
        let name = name.trim_end_matches('/');
        name == self.given.trim_end_matches('/') || Path::new(name) == self.path
    }
}

/// A `--share` setting that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("--share {arg}: {why}")]
pub struct ConfigError {
    arg: String,
    why: String,
}

/// Checks a whole `--share` list: each setting, and no directory twice.
pub fn parse_all(args: &[String], state: &Path) -> Result<Vec<ShareConfig>, ConfigError> {
    let mut shares: Vec<ShareConfig> = Vec::new();
    for arg in args {
        let share = ShareConfig::parse(arg, state)?;
        if let Some(other) = shares
            .iter()
            .find(|s| s.path.starts_with(&share.path) || share.path.starts_with(&s.path))
        {
            return Err(ConfigError {
                arg: arg.clone(),
                why: format!(
                    "overlaps the share {}; share each directory once",
                    other.path.display()
                ),
            });
        }
        shares.push(share);
    }
    if shares.len() > sandkeep_proto::limits::SHARES_MAX {
        return Err(ConfigError {
            arg: args[sandkeep_proto::limits::SHARES_MAX].clone(),
            why: format!("at most {} shares", sandkeep_proto::limits::SHARES_MAX),
        });
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_a_known_suffix_and_anything_else_is_path() {
        let dir = tempfile::tempdir().unwrap();
        let state = Path::new("/nonexistent-state");
        let odd = dir.path().join("a:b");
        std::fs::create_dir(&odd).unwrap();
        let p = odd.to_str().unwrap();
        let s = ShareConfig::parse(p, state).unwrap();
        assert_eq!((s.path.as_path(), s.mode), (odd.as_path(), ShareMode::Ro));
        let s = ShareConfig::parse(&format!("{p}:cow"), state).unwrap();
        assert_eq!(s.mode, ShareMode::Cow);
        assert!(s.is_named(p) && s.is_named(&format!("{p}/")));
    }

    #[test]
    fn bad_shares_are_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        for (arg, why) in [
            ("/".to_owned(), "whole host"),
            ("/proc/self".to_owned(), "kernel filesystem"),
            (dir.path().display().to_string(), "state directory"),
            (state.join("x").display().to_string(), "No such file"),
            (state.display().to_string(), "state directory"),
            (file.display().to_string(), "not a directory"),
            ("/nonexistent/dir:rw".to_owned(), "No such file"),
            (":rw".to_owned(), "no path"),
        ] {
            let e = ShareConfig::parse(&arg, &state).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--share {arg}: ")), "{e}");
            assert!(e.contains(why), "{arg}: {e}");
        }
        let a = dir.path().join("a");
        std::fs::create_dir_all(a.join("b")).unwrap();
        let e = parse_all(
            &[a.display().to_string(), a.join("b").display().to_string()],
            &state,
        )
        .unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
    }
}
