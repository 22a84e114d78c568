//! The command line. (Being written.)

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    2
}
