//! The embedded local provider: namespaced sandboxes on this host. (Being
//! written.)

/// The first argument that makes the `sandkeep` binary a keeper.
pub const KEEPER_ARG: &str = "__keeper";

/// Entry point of the per-sandbox keeper process; returns its exit code.
pub fn keeper_main(_args: Vec<String>) -> i32 {
    2
}
