//! The secrets the server generates, kept in the state directory: the
//! HTTP bearer token (`$SANDKEEP_HOME/http-token`), made once and then
//! reused at every start and by every server on the same state directory
//! until `serve --rotate-token` replaces it, so a client registered with it
//! keeps working; and the E2B endpoint's API key (`e2b-api-key`), new at
//! every start.
//!
//! Owns creating, reading and replacing those files, and refusing one that
//! another user could have read or planted (a symbolic link, a foreign
//! owner, any access for group or others), as OpenSSH refuses such key
//! files. It does not decide which secret a server uses (`serve` does).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::provider;

/// The HTTP bearer token's file name in the state directory.
pub const HTTP_TOKEN: &str = "http-token";
/// The E2B endpoint's generated API key's file name.
pub const E2B_API_KEY: &str = "e2b-api-key";

/// A secret and the file it is kept in.
#[derive(Debug, Clone)]
pub struct Secret {
    pub value: String,
    pub file: PathBuf,
}

/// `$SANDKEEP_HOME/NAME`, as this process's configuration resolves it.
pub fn path(name: &str) -> Result<PathBuf, String> {
    provider::home_from_env()
        .map(|home| home.join(name))
        .map_err(|e| format!("cannot locate SANDKEEP_HOME for {name}: {e}"))
}

/// The secret kept in `$SANDKEEP_HOME/NAME`, or a new one written there if
/// there is none. Two servers starting at once agree on one: a new secret
/// is linked into place only where no file is.
pub fn reuse_or_create(name: &str) -> Result<Secret, String> {
    let file = path(name)?;
    if let Some(value) = read(&file)? {
        return Ok(Secret { value, file });
    }
    let value = generate()?;
    let temp = prepare_dir_and_temp(&file, &value)?;
    let linked = fs::hard_link(&temp, &file);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(Secret { value, file }),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let value = read(&file)?.ok_or_else(|| {
                format!(
                    "{} vanished while this server read it; start it again",
                    file.display()
                )
            })?;
            Ok(Secret { value, file })
        }
        Err(e) => Err(format!("cannot write {}: {e}", file.display())),
    }
}

/// A new secret replacing `$SANDKEEP_HOME/NAME` atomically: a reader sees
/// the old one or the new one, never a moment of wider permissions.
pub fn replace(name: &str) -> Result<Secret, String> {
    let file = path(name)?;
    let value = generate()?;
    let temp = prepare_dir_and_temp(&file, &value)?;
    fs::rename(&temp, &file).map_err(|e| {
        let _ = fs::remove_file(&temp);
        format!("cannot write {}: {e}", file.display())
    })?;
    Ok(Secret { value, file })
}

/// The secret in `file`; `None` when there is no such file. A file another
/// user could have read or written is refused with the path and the fix.
pub fn read(file: &Path) -> Result<Option<String>, String> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(file);
    let mut opened = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(refused(file, "is a symbolic link"));
        }
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    // The checks look at the file opened, not at whatever the path names
    // by the time they run.
    let meta = opened
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_file() {
        return Err(refused(file, "is not a regular file"));
    }
    if meta.uid() != me {
        return Err(refused(
            file,
            &format!(
                "is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refused(
            file,
            &format!(
                "is open to group or others (mode {:o})",
                meta.mode() & 0o7777
            ),
        ));
    }
    let mut text = String::new();
    opened
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let value = text.trim();
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        return Err(format!(
            "{} holds no usable secret (empty, or with whitespace inside): remove it, or run \
             `sandkeep serve --http ADDR --rotate-token` for a new one",
            file.display()
        ));
    }
    Ok(Some(value.to_owned()))
}

fn refused(file: &Path, why: &str) -> String {
    format!(
        "{} {why}: sandkeep refuses a secret another user could have read or planted; remove \
         it and run `sandkeep serve --http ADDR --rotate-token` for a new one, or make it yours \
         and private (`chmod 600`)",
        file.display()
    )
}

/// 128 bits from the OS, as hex.
fn generate() -> Result<String, String> {
    crate::provider::random_hex(16).map_err(|e| format!("cannot generate a secret: {e}"))
}

/// Creates the state directory if missing (0700), and writes `value` to a
/// new 0600 file beside `file`, synced; returns that file's path.
fn prepare_dir_and_temp(file: &Path, value: &str) -> Result<PathBuf, String> {
    if let Some(dir) = file.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let temp = file.with_extension(format!("tmp.{}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut f: File| f.write_all(value.as_bytes()).and_then(|()| f.sync_all()));
    written.map_err(|e| {
        let _ = fs::remove_file(&temp);
        format!("cannot write {}: {e}", temp.display())
    })?;
    Ok(temp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_regular_file_of_ours_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        assert_eq!(read(&file).unwrap(), None);
        fs::write(&file, "abc123\n").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read(&file).unwrap().as_deref(), Some("abc123"));
        for mode in [0o640, 0o604, 0o660] {
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
            let e = read(&file).unwrap_err();
            assert!(e.contains("open to group or others"), "{mode:o}: {e}");
        }
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read(&link).unwrap_err().contains("symbolic link"));
        fs::write(&file, "two words").unwrap();
        assert!(read(&file).unwrap_err().contains("no usable secret"));
    }
}
