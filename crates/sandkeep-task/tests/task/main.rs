//! The helper against real processes, one module per former test file, in
//! one test binary (each binary is linked statically; one link instead of
//! four). `common` is their shared sandbox user.

mod common;

mod interactive;
mod lifecycle;
mod refusals;
mod relay;
mod static_binary;
mod wait_delete;
