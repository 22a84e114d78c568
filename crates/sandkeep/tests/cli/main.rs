//! The CLI's integration tests, one module per former test file, in one
//! test binary: each binary links sandkeep and its dependencies statically,
//! and linking dominated a cold build when every file was a binary.

#[path = "../support/mod.rs"]
mod support;

mod args;
mod interactive;
mod shares;
mod tasks;
mod trust;
