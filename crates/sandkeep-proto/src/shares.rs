//! Host shares (SPEC §13) as both sides see them: a share's mode, the
//! changes a copy-on-write share holds, and the helper's `changes` and
//! `export` requests with the stream `export` writes.
//!
//! The helper finds a cow share's changes by comparing its upper layer
//! (what the sandbox wrote) with its lower layer (the host directory),
//! both shown read-only inside the sandbox at the paths [`Layers`] names;
//! or, where the share is a copy uploaded into a remote sandbox, by
//! comparing the share with a pristine copy of what was uploaded.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a sandbox sees a host directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShareMode {
    /// Read-only: writes fail with EROFS.
    Ro,
    /// Copy-on-write: writes stay in the sandbox until applied.
    Cow,
    /// Read-write: writes reach the host directory at once.
    Rw,
}

impl ShareMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ShareMode::Ro => "ro",
            ShareMode::Cow => "cow",
            ShareMode::Rw => "rw",
        }
    }
}

impl fmt::Display for ShareMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ShareMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ro" => Ok(ShareMode::Ro),
            "cow" => Ok(ShareMode::Cow),
            "rw" => Ok(ShareMode::Rw),
            other => Err(format!("unknown share mode {other:?}: ro, cow or rw")),
        }
    }
}

/// A share as a sandbox's record and its results carry it: the host
/// path (resolved, absolute; the same path inside) and the mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Share {
    pub path: String,
    pub mode: ShareMode,
}

/// What happened to a path of a cow share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// What a changed path is (in the sandbox; the host's for a deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Absolute, as inside the sandbox and on the host.
    pub path: String,
    pub kind: ChangeKind,
    #[serde(rename = "type")]
    pub entry: EntryType,
    /// Bytes (the sandbox's file; the host's for a deletion).
    pub size: u64,
}

/// A cow share's layers as the helper finds them inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layers {
    /// The share's path (the merged view).
    pub path: String,
    /// Its upper layer: what the sandbox wrote, whiteouts included; for a
    /// [`LayerKind::Copy`], the share's path itself.
    pub upper: String,
    /// Its lower layer: the host directory, read-only; for a
    /// [`LayerKind::Copy`], the pristine copy of what was uploaded.
    pub lower: String,
    #[serde(default)]
    pub kind: LayerKind,
}

/// How a cow share was made, so how its changes are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerKind {
    /// An overlay mount (the local provider): the upper layer holds
    /// exactly what the sandbox wrote, so only it is walked.
    #[default]
    Overlay,
    /// A plain copy (a remote sandbox): the whole share is walked and
    /// compared with the pristine copy; a file whose size and mtime are
    /// the copy's is taken as unchanged without reading it, as `git
    /// status` does.
    Copy,
}

/// `sandkeep-task changes JSON`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesRequest {
    pub shares: Vec<Layers>,
    #[serde(default)]
    pub diff: bool,
}

/// Its reply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChangesReply {
    /// Sorted by path, at most [`crate::limits::CHANGES_MAX`].
    pub changes: Vec<Change>,
    pub truncated: bool,
    /// A unified diff of the text files among the changes, when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(default)]
    pub diff_truncated: bool,
}

/// `sandkeep-task export JSON`: the changes under `paths` (all when
/// empty), as a stream of [`ExportHeader`] lines, each followed by
/// `size` bytes of content for a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportRequest {
    pub shares: Vec<Layers>,
    #[serde(default)]
    pub paths: Vec<String>,
}

/// One entry of the export stream: a JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportHeader {
    #[serde(flatten)]
    pub change: Change,
    /// Permission bits of the sandbox's entry (0 for a deletion).
    pub mode: u32,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A change left alone by `apply_changes`, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub path: String,
    pub reason: String,
}

/// What `apply_changes` did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Applied {
    pub applied: Vec<String>,
    pub conflicts: Vec<Conflict>,
}

/// Whether `path` is `prefix` or lies below it (by whole components).
pub fn is_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_means_whole_components() {
        assert!(is_under("/p/a", "/p"));
        assert!(is_under("/p", "/p"));
        assert!(is_under("/p/a", "/p/"));
        assert!(!is_under("/pa", "/p"));
        assert!(is_under("/x", "/"));
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [ShareMode::Ro, ShareMode::Cow, ShareMode::Rw] {
            assert_eq!(m.as_str().parse::<ShareMode>(), Ok(m));
        }
        assert!("RW".parse::<ShareMode>().is_err());
    }
}
