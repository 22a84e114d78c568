//! sandkeep's in-sandbox helper: task directories, start/status/cancel/list
//! and the supervisor. (Being written.)

/// Runs the helper with its command-line arguments (without argv\[0\]) and
/// returns the process exit code.
pub fn main_with_args(_args: Vec<String>) -> i32 {
    2
}
