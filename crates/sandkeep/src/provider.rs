//! Where sandboxes live: the [`Provider`] trait and its types (crate
//! `sandkeep-provider`), the embedded local provider (crate
//! `sandkeep-local`), and the choice between them from the environment.

pub use sandkeep_local as local;
pub use sandkeep_provider::*;

use std::sync::Arc;

/// The provider this process's configuration names. Today that is always
/// the local provider on `SANDKEEP_HOME`; the choice lives here so the CLI
/// and `serve` never name a provider themselves.
pub fn from_env() -> Result<Arc<dyn Provider>> {
    Ok(Arc::new(local::LocalProvider::from_env()?))
}

/// `SANDKEEP_HOME` as this process's configuration resolves it (absolute):
/// the server keeps its own files there too (the generated HTTP token).
pub fn home_from_env() -> std::io::Result<std::path::PathBuf> {
    std::path::absolute(local::LocalConfig::from_env()?.home)
}
