//! The embedded local provider: namespaced sandboxes on this host. (Being
//! written.)
