//! Decoding a file operation's answer from the fork server (exit status,
//! the result on stdout, a JSON [`FileOpError`] on stderr) into the
//! provider's result and errors for one path. Pure: it must not do I/O nor
//! know how the answer was obtained.

use crate::client::Outcome;
use crate::wire::{self, FileOpError};
use sandkeep_provider::{ProviderError, Result};

/// A confirmed success's stdout, or the operation's error for `path`
/// (`size_limit` is reported with a file that was too large).
pub fn decode(outcome: Outcome, path: &str, size_limit: u64) -> Result<Vec<u8>> {
    let (stdout, _) = outcome.stdout.finish();
    let (stderr, _) = outcome.stderr.finish();
    match outcome.exit_code {
        Some(0) => Ok(stdout),
        Some(wire::FILE_OP_FAILED) => match serde_json::from_slice::<FileOpError>(&stderr) {
            Ok(FileOpError::NotFound) => Err(ProviderError::NoSuchPath { path: path.into() }),
            Ok(FileOpError::TooLarge { size }) => Err(ProviderError::FileTooLarge {
                path: path.into(),
                size,
                limit: size_limit,
            }),
            Ok(FileOpError::Other { message }) => Err(ProviderError::FileError {
                path: path.into(),
                message,
            }),
            Err(_) => Err(ProviderError::FileError {
                path: path.into(),
                message: String::from_utf8_lossy(&stderr).into_owned(),
            }),
        },
        other => Err(ProviderError::FileError {
            path: path.into(),
            message: format!(
                "the file operation ended with {other:?}: {}",
                String::from_utf8_lossy(&stderr)
            ),
        }),
    }
}
