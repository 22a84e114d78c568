//! File operations, run inside the sandbox by a child of the init with the
//! sandbox user's identity and view (so symlinks resolve inside the
//! sandbox, never on the host). Results go to stdout; failures go to stderr
//! as a JSON [`FileOpError`] with exit status [`FILE_OP_FAILED`].

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::wire::{FILE_OP_FAILED, FileOpError, Request};
use sandkeep_provider::{FileEntry, FileKind};

/// Runs one operation in the current process; returns the exit status.
pub fn run(request: Request) -> i32 {
    let result = match request {
        Request::ReadFile { path, limit } => read(&path, limit),
        Request::WriteFile { path } => write(&path),
        Request::ListFiles { path } => list(&path),
        Request::Exec { .. } | Request::Run { .. } | Request::NewBootId => {
            Err(FileOpError::Other {
                message: "not a file operation".into(),
            })
        }
    };
    // The caller leaves with _exit, which flushes nothing.
    let result = result.and_then(|()| io::stdout().flush().map_err(classify));
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = io::stderr().write_all(&serde_json::to_vec(&e).unwrap_or_default());
            FILE_OP_FAILED
        }
    }
}

fn classify(e: io::Error) -> FileOpError {
    match e.kind() {
        io::ErrorKind::NotFound => FileOpError::NotFound,
        _ => FileOpError::Other {
            message: e.to_string(),
        },
    }
}

fn read(path: &str, limit: u64) -> Result<(), FileOpError> {
    let file = fs::File::open(path).map_err(classify)?;
    let md = file.metadata().map_err(classify)?;
    if md.is_dir() {
        return Err(FileOpError::Other {
            message: "is a directory; use list_files".into(),
        });
    }
    if md.len() > limit {
        return Err(FileOpError::TooLarge { size: md.len() });
    }
    // Files in /proc report size 0: bound the read itself too.
    let mut content = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut content)
        .map_err(classify)?;
    if content.len() as u64 > limit {
        return Err(FileOpError::TooLarge {
            size: content.len() as u64,
        });
    }
    io::stdout().write_all(&content).map_err(classify)
}

fn write(path: &str) -> Result<(), FileOpError> {
    let mut content = Vec::new();
    io::stdin().read_to_end(&mut content).map_err(classify)?;
    let target = Path::new(path);
    let name = target.file_name().ok_or_else(|| FileOpError::Other {
        message: "names no file".into(),
    })?;
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(classify)?;
    let tmp = parent.join(format!(
        ".{}.sandkeep-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = fs::write(&tmp, &content)
        .and_then(|()| fs::rename(&tmp, target))
        .map_err(classify);
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    io::stdout()
        .write_all(content.len().to_string().as_bytes())
        .map_err(classify)
}

fn list(path: &str) -> Result<(), FileOpError> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(path).map_err(classify)? {
        let entry = entry.map_err(classify)?;
        let Ok(md) = entry.path().symlink_metadata() else {
            continue;
        };
        let ft = md.file_type();
        let kind = if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Dir
        } else if ft.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        };
        entries.push(FileEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind,
            size: md.len(),
            modified_at: md.mtime().max(0) as u64,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let json = serde_json::to_vec(&entries).map_err(|e| FileOpError::Other {
        message: e.to_string(),
    })?;
    io::stdout().write_all(&json).map_err(classify)
}
