//! Host shares in a remote sandbox (SPEC §13): a remote sandbox cannot
//! mount a host directory, so `ro` and `cow` shares are copied in at
//! create, all of them in one tar stream, and `rw` is refused (its writes
//! could never reach the host at once).
//!
//! In the sandbox, as root, the stream is unpacked into
//! `SHARES_DIR/INDEX/lower`; each share is copied from there to its own
//! path (`cp -a`: modes and mtimes kept) and given to the sandbox's user.
//! A `cow` share keeps its pristine copy, which the helper's `changes`
//! and `export` compare the share with ([`LayerKind::Copy`]); an `ro`
//! share drops it and is bind-mounted read-only on itself, or, where the
//! sandbox's root may not mount (a sandbox of `serve --e2b`), given to
//! root and made read-only by its modes: then only a root process can
//! still change that copy. The host directory is never written either
//! way. Which shares a
//! sandbox has, and since when, is in its E2B metadata, so another server
//! process finds them.
//!
//! Only directories, regular files and symlinks (as links, never
//! followed) are copied; sockets, fifos and devices are left out. This
//! module packs and describes; it sends nothing itself.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sandkeep_provider::{LayerKind, Layers, ProviderError, Result, Share, ShareMode};
use tokio::sync::mpsc;

/// The most a sandbox's shares may hold together (file bytes).
pub const UPLOAD_MAX: u64 = 1 << 30;
/// Where the stream is unpacked and the pristine copies stay.
const SHARES_DIR: &str = "/.sandkeep-shares";
/// The chunk the tar stream is sent in.
const CHUNK: usize = 256 * 1024;

/// The metadata keys of a sandbox's shares and of when they were read.
pub const META_SHARES: &str = "sandkeep_shares";
pub const META_SHARES_SINCE: &str = "sandkeep_shares_since_ns";

/// Refuses what a remote sandbox cannot have: an `rw` share.
pub fn refuse_rw(shares: &[Share]) -> Result<()> {
    match shares.iter().find(|s| s.mode == ShareMode::Rw) {
        Some(s) => Err(ProviderError::Unsupported(format!(
            "the share {} is rw, and a remote sandbox's writes cannot reach the host directory: \
             configure it as {0}:cow (then apply_changes writes them back) or {0}:ro, or use the \
             local provider. Nothing was created",
            s.path
        ))),
        None => Ok(()),
    }
}

/// One entry of the stream: the host path and its name in the archive.
struct Entry {
    host: PathBuf,
    name: PathBuf,
}

/// What the stream of a sandbox's shares will hold.
pub struct Packing {
    entries: Vec<Entry>,
    /// File bytes in all.
    pub bytes: u64,
}

/// Lists what the shares hold, refusing more than [`UPLOAD_MAX`] bytes
/// before anything is sent or created.
pub fn pack(shares: &[Share]) -> Result<Packing> {
    let mut packing = Packing {
        entries: Vec::new(),
        bytes: 0,
    };
    for (index, share) in shares.iter().enumerate() {
        let root = Path::new(&share.path);
        packing.entries.push(Entry {
            host: root.to_owned(),
            name: PathBuf::from(index.to_string()),
        });
        walk(root, &PathBuf::from(index.to_string()), &mut packing).map_err(|e| {
            ProviderError::Io {
                context: format!("cannot read the share {} to upload it", share.path),
                source: e,
            }
        })?;
        if packing.bytes > UPLOAD_MAX {
            return Err(ProviderError::Unsupported(format!(
                "the shares hold more than {} MiB (past {}), the most the e2b provider uploads \
                 into a sandbox: share a smaller directory, or use the local provider, which \
                 mounts shares instead of copying them. Nothing was created",
                UPLOAD_MAX >> 20,
                share.path
            )));
        }
    }
    Ok(packing)
}

fn walk(dir: &Path, name: &Path, packing: &mut Packing) -> io::Result<()> {
    let mut children: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    children.sort_by_key(|e| e.file_name());
    for child in children {
        let host = child.path();
        let name = name.join(child.file_name());
        let md = std::fs::symlink_metadata(&host)?;
        let kind = md.file_type();
        if !(kind.is_dir() || kind.is_file() || kind.is_symlink()) {
            continue;
        }
        if kind.is_file() {
            packing.bytes += md.len();
        }
        packing.entries.push(Entry {
            host: host.clone(),
            name: name.clone(),
        });
        if kind.is_dir() {
            walk(&host, &name, packing)?;
        }
    }
    Ok(())
}

/// The tar stream of `packing` as a request body, built on a blocking
/// thread while it is sent; the thread's result says why a cut stream
/// was cut.
pub fn stream(packing: Packing) -> (reqwest::Body, tokio::task::JoinHandle<io::Result<()>>) {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    let writer = tokio::task::spawn_blocking(move || {
        let mut chunks = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let built = write_tar(packing, &mut chunks).and_then(|()| chunks.flush());
        if let Err(e) = &built {
            // The request ends with an error, not as a short archive.
            let _ = tx.blocking_send(Err(io::Error::new(e.kind(), e.to_string())));
        }
        built
    });
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (body, writer)
}

fn write_tar(packing: Packing, out: impl Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    for entry in &packing.entries {
        builder
            .append_path_with_name(&entry.host, &entry.name)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", entry.host.display())))?;
    }
    builder.finish()
}

/// The stream's bytes, in [`CHUNK`]s, to the request.
struct Chunks {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }
}

/// Run as the sandbox's root: unpacks the uploaded stream `$1` and puts
/// each share (`$3 MODE PATH` pairs, in index order) in place, owned by
/// `$2` (`UID:GID`, the sandbox user's).
pub const SETUP: &str = r#"set -e
t=$1; o=$2; shift 2
d=/.sandkeep-shares
rm -rf "$d"; mkdir -p "$d"; chmod 755 "$d"
tar -xf "$t" -C "$d" --no-same-owner
rm -f "$t"
n=0
while [ $# -gt 0 ]; do
  m=$1; p=$2; shift 2
  l=$d/$n/lower
  mv "$d/$n" "$d/.$n"; mkdir -p "$d/$n"; mv "$d/.$n" "$l"
  chown -R "$o" "$l"
  mkdir -p "$p"
  cp -a "$l/." "$p/"
  if [ "$m" = ro ]; then
    rm -rf "$d/$n"
    if ! { mount --bind "$p" "$p" && mount -o remount,bind,ro "$p"; } 2>/dev/null; then
      umount "$p" 2>/dev/null || true
      chown -R 0:0 "$p"; chmod -R a+rX,a-w "$p"
    fi
  fi
  n=$((n + 1))
done
"#;

/// The arguments of [`SETUP`] after the archive and the owner.
pub fn setup_args(shares: &[Share]) -> Vec<String> {
    shares
        .iter()
        .flat_map(|s| [s.mode.to_string(), s.path.clone()])
        .collect()
}

/// Where the helper finds each cow share and its pristine copy.
pub fn layers(shares: &[Share]) -> Vec<Layers> {
    shares
        .iter()
        .enumerate()
        .filter(|(_, s)| s.mode == ShareMode::Cow)
        .map(|(index, s)| Layers {
            path: s.path.clone(),
            upper: s.path.clone(),
            lower: format!("{SHARES_DIR}/{index}/lower"),
            kind: LayerKind::Copy,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(path: &Path, mode: ShareMode) -> Share {
        Share {
            path: path.to_str().unwrap().to_owned(),
            mode,
        }
    }

    #[test]
    fn rw_is_refused_with_what_to_do() {
        let e = refuse_rw(&[share(Path::new("/p"), ShareMode::Rw)]).unwrap_err();
        assert!(e.to_string().contains("/p:cow"), "{e}");
        refuse_rw(&[share(Path::new("/p"), ShareMode::Cow)]).unwrap();
    }

    #[test]
    fn the_stream_holds_files_dirs_and_links_under_each_index() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a"), "abc").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let packing = pack(&[share(dir.path(), ShareMode::Cow)]).unwrap();
        assert_eq!(packing.bytes, 3);
        let names: Vec<String> = packing
            .entries
            .iter()
            .map(|e| e.name.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["0", "0/link", "0/src", "0/src/a"]);
        let mut out = Vec::new();
        write_tar(packing, &mut out).unwrap();
        let mut archive = tar::Archive::new(&out[..]);
        let link = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap())
            .find(|e| e.path().unwrap() == Path::new("0/link"))
            .unwrap();
        assert_eq!(
            link.link_name().unwrap().unwrap(),
            Path::new("/etc/passwd"),
            "a link goes as a link, never followed"
        );
    }

    #[test]
    fn more_than_the_cap_is_refused_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let big = std::fs::File::create(dir.path().join("big")).unwrap();
        big.set_len(UPLOAD_MAX + 1).unwrap();
        let e = pack(&[share(dir.path(), ShareMode::Ro)]).err().unwrap();
        assert!(e.to_string().contains("1024 MiB"), "{e}");
    }
}
