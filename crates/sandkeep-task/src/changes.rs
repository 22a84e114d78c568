//! The `changes` and `export` verbs: what the sandbox changed in its
//! copy-on-write shares, found by walking each share's upper layer (what
//! the sandbox wrote) and comparing it with the lower one (the host
//! directory). The cost grows with what was written, not with the share.
//! A share copied into a remote sandbox has no layers: its "upper layer"
//! is the share itself, walked whole against the pristine copy.
//!
//! Overlay internals (whiteouts, opaque directories, whose xattrs the
//! sandbox may not read) are never interpreted: a deletion is a name of a
//! lower directory that the merged view (the share's own path) no longer
//! shows, checked only in the directories the upper layer holds, the
//! only ones where the sandbox can have deleted anything. A path whose
//! type, permission bits and content equal the host's is no change.
//!
//! This module reads; it never writes anywhere.

use std::fs::{self, File, Metadata};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use sandkeep_proto::limits::{CHANGES_DIFF_MAX_BYTES, CHANGES_MAX};
use sandkeep_proto::shares::{
    Change, ChangeKind, ChangesReply, ChangesRequest, EntryType, ExportHeader, ExportRequest,
    LayerKind, Layers, is_under,
};

use crate::HelperError;

/// Bytes of a file read to tell text from binary, as git does.
const BINARY_PROBE: usize = 8_000;

pub fn changes(request: ChangesRequest) -> Result<ChangesReply, HelperError> {
    let mut all = Vec::new();
    for layers in &request.shares {
        all.extend(walk(layers)?);
    }
    all.sort_by(|a, b| a.change.path.cmp(&b.change.path));
    let truncated = all.len() > CHANGES_MAX;
    all.truncate(CHANGES_MAX);
    let (diff, diff_truncated) = if request.diff {
        let (text, cut) = unified_diff(&all);
        (Some(text), cut)
    } else {
        (None, false)
    };
    Ok(ChangesReply {
        changes: all.into_iter().map(|f| f.change).collect(),
        truncated,
        diff,
        diff_truncated,
    })
}

/// Writes the changes under `request.paths` to `out` as the export
/// stream: a header line each, then a file's bytes.
pub fn export(request: ExportRequest, out: &mut impl Write) -> Result<(), HelperError> {
    let mut all = Vec::new();
    for layers in &request.shares {
        all.extend(walk(layers)?);
    }
    all.sort_by(|a, b| a.change.path.cmp(&b.change.path));
    for found in all.into_iter().filter(|f| {
        request.paths.is_empty() || request.paths.iter().any(|p| is_under(&f.change.path, p))
    }) {
        write_entry(&found, out).map_err(io_error(format!("export {}", found.change.path)))?;
    }
    out.flush().map_err(io_error("export"))
}

fn write_entry(found: &Found, out: &mut impl Write) -> io::Result<()> {
    let deleted = found.change.kind == ChangeKind::Deleted;
    let merged = Path::new(&found.change.path);
    let target = (!deleted && found.change.entry == EntryType::Symlink)
        .then(|| fs::read_link(merged).map(|t| t.to_string_lossy().into_owned()))
        .transpose()?;
    // Opened before the header: its size is the one announced, and what
    // follows is exactly that many bytes.
    let file = (!deleted && found.change.entry == EntryType::File)
        .then(|| File::open(merged))
        .transpose()?;
    let mut change = found.change.clone();
    if let Some(f) = &file {
        change.size = f.metadata()?.len();
    }
    let header = ExportHeader {
        change,
        mode: if deleted { 0 } else { found.mode },
        target,
    };
    let mut line = serde_json::to_vec(&header).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    if let Some(f) = file {
        let copied = io::copy(&mut f.take(header.change.size), out)?;
        if copied != header.change.size {
            return Err(io::Error::other(format!(
                "{} shrank while it was read",
                header.change.path
            )));
        }
    }
    Ok(())
}

/// A change and what its export and diff need.
struct Found {
    change: Change,
    /// Permission bits in the sandbox.
    mode: u32,
    /// The host's version, for the diff (`None`: added).
    lower: Option<PathBuf>,
}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> HelperError {
    let context = context.into();
    move |source| HelperError::Io { context, source }
}

fn entry_type(md: &Metadata) -> EntryType {
    let t = md.file_type();
    if t.is_file() {
        EntryType::File
    } else if t.is_dir() {
        EntryType::Dir
    } else if t.is_symlink() {
        EntryType::Symlink
    } else {
        EntryType::Other
    }
}

fn is_whiteout(md: &Metadata) -> bool {
    md.file_type().is_char_device() && md.rdev() == 0
}

/// The names in `dir`, sorted; nothing when it is not a readable directory.
fn names(dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    Ok(names)
}

fn walk(layers: &Layers) -> Result<Vec<Found>, HelperError> {
    let mut found = Vec::new();
    let root = Walk {
        merged: PathBuf::from(&layers.path),
        upper: PathBuf::from(&layers.upper),
        lower: PathBuf::from(&layers.lower),
        kind: layers.kind,
    };
    root.dir(Path::new(""), &mut found)
        .map_err(io_error(format!("compare {} with the host", layers.path)))?;
    Ok(found)
}

struct Walk {
    merged: PathBuf,
    upper: PathBuf,
    lower: PathBuf,
    kind: LayerKind,
}

impl Walk {
    fn found(&self, rel: &Path, kind: ChangeKind, md: &Metadata, lower: bool) -> Found {
        Found {
            change: Change {
                path: self.merged.join(rel).to_string_lossy().into_owned(),
                kind,
                entry: entry_type(md),
                size: if md.is_file() { md.len() } else { 0 },
            },
            mode: md.mode() & 0o7777,
            lower: lower.then(|| self.lower.join(rel)),
        }
    }

    /// A directory that the upper layer holds and the host has too.
    fn dir(&self, rel: &Path, out: &mut Vec<Found>) -> io::Result<()> {
        for name in names(&self.upper.join(rel))? {
            self.entry(&rel.join(&name), out)?;
        }
        // Deletions: host names the sandbox's view no longer shows.
        let Ok(host_names) = names(&self.lower.join(rel)) else {
            return Ok(());
        };
        // One listing of the merged directory, not a lookup per name.
        let seen = names(&self.merged.join(rel))?;
        for name in host_names {
            if seen.binary_search(&name).is_err() {
                let rel = rel.join(&name);
                let md = fs::symlink_metadata(self.lower.join(&rel))?;
                out.push(self.found(&rel, ChangeKind::Deleted, &md, true));
            }
        }
        Ok(())
    }

    fn entry(&self, rel: &Path, out: &mut Vec<Found>) -> io::Result<()> {
        let up = fs::symlink_metadata(self.upper.join(rel))?;
        if is_whiteout(&up) {
            return Ok(()); // a deletion, found from the lower side
        }
        // The merged view is what the sandbox sees (the upper entry, with
        // the mode and content it ends up with).
        let Ok(now) = fs::symlink_metadata(self.merged.join(rel)) else {
            return Ok(());
        };
        let host = fs::symlink_metadata(self.lower.join(rel)).ok();
        match host {
            None => {
                out.push(self.found(rel, ChangeKind::Added, &now, false));
                if now.is_dir() {
                    self.all_added(rel, out)?;
                }
            }
            Some(host) if entry_type(&host) != entry_type(&now) => {
                out.push(self.found(rel, ChangeKind::Modified, &now, true));
                if now.is_dir() {
                    self.all_added(rel, out)?;
                }
            }
            Some(host) => {
                if !self.same(rel, &now, &host)? {
                    out.push(self.found(rel, ChangeKind::Modified, &now, true));
                }
                if now.is_dir() {
                    self.dir(rel, out)?;
                }
            }
        }
        Ok(())
    }

    /// Everything below a directory the host does not have (as one).
    fn all_added(&self, rel: &Path, out: &mut Vec<Found>) -> io::Result<()> {
        for name in names(&self.merged.join(rel))? {
            let rel = rel.join(name);
            let md = fs::symlink_metadata(self.merged.join(&rel))?;
            out.push(self.found(&rel, ChangeKind::Added, &md, false));
            if md.is_dir() {
                self.all_added(&rel, out)?;
            }
        }
        Ok(())
    }

    /// Same type (checked by the caller), permission bits and content.
    fn same(&self, rel: &Path, now: &Metadata, host: &Metadata) -> io::Result<bool> {
        if now.mode() & 0o7777 != host.mode() & 0o7777 && !now.file_type().is_symlink() {
            return Ok(false);
        }
        let t = now.file_type();
        if t.is_symlink() {
            return Ok(
                fs::read_link(self.merged.join(rel))? == fs::read_link(self.lower.join(rel))?
            );
        }
        if t.is_file() {
            if now.len() != host.len() {
                return Ok(false);
            }
            // A copy walks every file of the share: one untouched since it
            // was copied (cp -a keeps the mtime) is not read.
            if self.kind == LayerKind::Copy
                && (now.mtime(), now.mtime_nsec()) == (host.mtime(), host.mtime_nsec())
            {
                return Ok(true);
            }
            return same_bytes(&self.merged.join(rel), &self.lower.join(rel));
        }
        Ok(true)
    }
}

fn same_bytes(a: &Path, b: &Path) -> io::Result<bool> {
    let (mut a, mut b) = (File::open(a)?, File::open(b)?);
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The text files among `found` as `git diff` prints them, paths
/// relative to `/` (`a/home/me/project/src/main.rs`); binary files named.
/// Cut whole at [`CHANGES_DIFF_MAX_BYTES`]: no file's diff is half there.
fn unified_diff(found: &[Found]) -> (String, bool) {
    let mut text = String::new();
    for f in found.iter().filter(|f| f.change.entry == EntryType::File) {
        let name = f.change.path.trim_start_matches('/');
        let deleted = f.change.kind == ChangeKind::Deleted;
        let old = f
            .lower
            .as_deref()
            .map(read_text)
            .unwrap_or(Some(Vec::new()));
        let new = if deleted {
            Some(Vec::new())
        } else {
            read_text(Path::new(&f.change.path))
        };
        let mut part = format!("diff --git a/{name} b/{name}\n");
        match f.change.kind {
            ChangeKind::Added => part.push_str(&format!("new file mode 100{:o}\n", f.mode & 0o777)),
            ChangeKind::Deleted => part.push_str("deleted file mode 100644\n"),
            ChangeKind::Modified => {}
        }
        let (from, to) = (
            if f.change.kind == ChangeKind::Added {
                "/dev/null".to_owned()
            } else {
                format!("a/{name}")
            },
            if deleted {
                "/dev/null".to_owned()
            } else {
                format!("b/{name}")
            },
        );
        match (old, new) {
            (Some(old), Some(new)) => {
                let (old, new) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(&new));
                let diff = similar::TextDiff::from_lines(old.as_ref(), new.as_ref());
                part.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(3)
                        .header(&from, &to)
                        .to_string(),
                );
            }
            _ => part.push_str(&format!("Binary files {from} and {to} differ\n")),
        }
        if text.len() + part.len() > CHANGES_DIFF_MAX_BYTES {
            return (text, true);
        }
        text.push_str(&part);
    }
    (text, false)
}

/// A file's bytes when they look like text (no NUL near the start, UTF-8);
/// `None` for binary or unreadable files.
fn read_text(path: &Path) -> Option<Vec<u8>> {
    let bytes = fs::read(path).ok()?;
    let probe = &bytes[..bytes.len().min(BINARY_PROBE)];
    (!probe.contains(&0) && std::str::from_utf8(&bytes).is_ok()).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `cp -a` as the e2b provider's setup does it: content, modes and
    /// mtimes kept.
    fn copy_tree(from: &Path, to: &Path) {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn a_copy_is_compared_whole_with_its_pristine_copy() {
        let root = tempfile::tempdir().unwrap();
        let (share, lower) = (root.path().join("share"), root.path().join("lower"));
        fs::create_dir_all(lower.join("src")).unwrap();
        fs::write(lower.join("README"), "hello\n").unwrap();
        fs::write(lower.join("same"), "same\n").unwrap();
        fs::write(lower.join("src/gone.rs"), "fn f() {}\n").unwrap();
        fs::write(lower.join("src/mode"), "x\n").unwrap();
        fs::create_dir(&share).unwrap();
        copy_tree(&lower, &share);

        fs::write(share.join("README"), "hello\nmore\n").unwrap();
        // Rewritten with the same bytes (a new mtime): no change.
        fs::write(share.join("same"), "same\n").unwrap();
        fs::remove_file(share.join("src/gone.rs")).unwrap();
        fs::set_permissions(share.join("src/mode"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(share.join("new")).unwrap();
        fs::write(share.join("new/file"), "n\n").unwrap();

        let layers = Layers {
            path: share.to_str().unwrap().to_owned(),
            upper: share.to_str().unwrap().to_owned(),
            lower: lower.to_str().unwrap().to_owned(),
            kind: LayerKind::Copy,
        };
        let reply = changes(ChangesRequest {
            shares: vec![layers],
            diff: true,
        })
        .unwrap();
        let listed: Vec<(String, ChangeKind)> = reply
            .changes
            .iter()
            .map(|c| {
                let rel = c.path.strip_prefix(share.to_str().unwrap()).unwrap();
                (rel.to_owned(), c.kind)
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                ("/README".to_owned(), ChangeKind::Modified),
                ("/new".to_owned(), ChangeKind::Added),
                ("/new/file".to_owned(), ChangeKind::Added),
                ("/src/gone.rs".to_owned(), ChangeKind::Deleted),
                ("/src/mode".to_owned(), ChangeKind::Modified),
            ]
        );
        assert!(reply.diff.unwrap().contains("+more\n"));
    }
}
