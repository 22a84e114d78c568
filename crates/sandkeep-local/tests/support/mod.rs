//! Support of the local provider's tests: what every crate's tests share
//! (`sandkeep-testkit`), with the local provider running this crate's
//! `sandkeep-local-test` as keeper and task helper.
#![allow(dead_code)] // each test binary uses a different subset

pub use sandkeep_testkit::*;

pub mod local {
    pub use sandkeep_testkit::local::*;

    use sandkeep_local::LocalProvider;
    use sandkeep_provider::SandboxInfo;

    pub const EXE: &str = env!("CARGO_BIN_EXE_sandkeep-local-test");

    /// [`provider_of`] this crate's test executable.
    pub fn provider(home: &std::path::Path) -> LocalProvider {
        provider_of(EXE, home)
    }

    /// [`fresh_sandbox_of`] this crate's test executable.
    pub async fn fresh_sandbox(timeout: u64) -> (tempfile::TempDir, LocalProvider, SandboxInfo) {
        fresh_sandbox_of(EXE, timeout).await
    }
}
