//! A state directory is trusted only when it is this user's and private
//! (SPEC.md §7); the CLI refusing one names it and the fix. (The provider's
//! own refusals are tested in crates/sandkeep-local/tests.)

use std::os::unix::fs::chown;
use std::process::Command;

use crate::support;
use support::local::state_dir;

/// The uid of `nobody`: an owner that is not this (root) test.
const OTHER_UID: u32 = 65534;

#[test]
fn the_cli_names_the_untrusted_directory_and_the_fix() {
    let home = state_dir();
    chown(home.path(), Some(OTHER_UID), None).unwrap();
    let out = Command::new(support::bin())
        .args(["sandbox", "list"])
        .env("SANDKEEP_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&home.path().display().to_string()) && stderr.contains("chmod go-w"),
        "{stderr}"
    );
}
