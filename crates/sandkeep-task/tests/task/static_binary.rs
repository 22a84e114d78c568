//! The helper is a static executable that runs in an otherwise empty root:
//! only itself and /proc, no shell, no libraries, no /dev.

use crate::common;

use std::fs;
use std::process::Command;

use common::{HELPER, is_root, new_id, require};
use sandkeep_proto::TaskState;
use sandkeep_proto::wire::{ListReply, TaskStatus, TaskSummary};
use serde_json::json;

#[test]
fn ldd_reports_no_dynamic_dependencies() {
    let out = Command::new("ldd")
        .arg(HELPER)
        .output()
        .expect("running ldd");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("not a dynamic executable") || text.contains("statically linked"),
        "ldd {HELPER}: {text}"
    );
    assert!(!text.contains("=>"), "dynamic dependencies: {text}");
}

/// Runs the helper inside a fresh root that holds only the binary, an
/// empty home and /proc, in a private mount namespace.
fn in_empty_root(root: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = chrooted(root, true, args);
    assert!(
        out.status.success(),
        "{args:?} in the empty root: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn chrooted(root: &std::path::Path, with_proc: bool, args: &[&str]) -> std::process::Output {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| sandkeep_proto::wire::shell_quote(a))
        .collect();
    let mount = if with_proc {
        format!("mount -t proc proc {}/proc && ", root.display())
    } else {
        String::new()
    };
    let script = format!(
        "{mount}exec chroot {root} /sandkeep-task {args}",
        root = root.display(),
        args = quoted.join(" ")
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("HOME", "/home")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("running unshare")
}

/// A root directory holding only the helper and the empty directories
/// `dirs`.
fn root_with_helper(dirs: &[&str]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    fs::copy(HELPER, root.path().join("sandkeep-task")).unwrap();
    for dir in dirs {
        fs::create_dir(root.path().join(dir)).unwrap();
    }
    root
}

#[test]
fn runs_in_an_empty_root_with_only_proc() {
    if !require(is_root(), "chroot and mounting /proc need root") {
        return;
    }
    let root = root_with_helper(&["proc", "home"]);
    assert_eq!(fs::read_dir(root.path()).unwrap().count(), 3);

    let listed: ListReply = serde_json::from_slice(&in_empty_root(root.path(), &["list"])).unwrap();
    assert!(listed.tasks.is_empty());

    // There is no shell in this root, so the supervisor (re-executed via
    // /proc/self/exe) records that it could not run the command.
    let id = new_id();
    let req = json!({"task_id": id, "command": "echo hi", "timeout": 5}).to_string();
    let started: TaskSummary =
        serde_json::from_slice(&in_empty_root(root.path(), &["start", &req])).unwrap();
    assert_eq!(started.state, TaskState::Failed, "{started:?}");
    assert_eq!(started.exit_code, None);
    let status_req = json!({"task_id": id}).to_string();
    let status: TaskStatus =
        serde_json::from_slice(&in_empty_root(root.path(), &["status", &status_req])).unwrap();
    assert_eq!(status.summary.state, TaskState::Failed);
    assert!(
        status
            .stderr
            .contains("could not run the command with bash or sh"),
        "{status:?}"
    );
    assert!(
        root.path()
            .join("home/.local/state/sandkeep/tasks")
            .join(id.as_str())
            .join("state.json")
            .exists()
    );
}

#[test]
fn without_proc_start_fails_cleanly_and_creates_no_task() {
    if !require(is_root(), "chroot needs root") {
        return;
    }
    let root = root_with_helper(&["home"]);
    let id = new_id();
    let req = json!({"task_id": id, "command": "true", "timeout": 5}).to_string();
    let out = chrooted(root.path(), false, &["start", &req]);
    assert_eq!(out.status.code(), Some(1));
    let reply: sandkeep_proto::wire::ErrorReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply.error.kind, sandkeep_proto::wire::ErrorKind::Internal);
    assert!(
        reply.error.message.contains("/proc"),
        "{}",
        reply.error.message
    );
    let tasks = root.path().join("home/.local/state/sandkeep/tasks");
    assert_eq!(
        fs::read_dir(tasks).unwrap().count(),
        0,
        "no task directory is left"
    );
}
