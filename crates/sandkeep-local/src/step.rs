//! A setup step the OS refused: what was being done, in words a user can
//! act on, with the OS's error as its source. Modules whose steps can
//! also fail for reasons of their own (no uid block left, user namespaces
//! disabled) have error types of their own that hold this one.

use std::io;

/// A failed step and the OS's error.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct StepError {
    step: String,
    #[source]
    source: io::Error,
}

/// `.step(|| "what was being done".into())` on an OS call's result.
pub trait Step<T> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, StepError>;
}

impl<T, E: Into<io::Error>> Step<T> for Result<T, E> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, StepError> {
        self.map_err(|e| StepError {
            step: step(),
            source: e.into(),
        })
    }
}
