//! Requests the helper must refuse, each with a clear error and nothing
//! created: repeated ids, the 129th task, missing cwd, values out of range,
//! malformed input, and an unsafe private directory.

use crate::common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

use common::{User, is_root, new_id, require};
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::MAX_TASK_DIRS;
use sandkeep_proto::wire::{ErrorKind, ListReply};
use serde_json::json;

fn task_dirs(user: &User) -> usize {
    fs::read_dir(user.tasks_dir()).map_or(0, |d| d.count())
}

#[test]
fn repeated_id_is_refused_and_not_run_again() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "echo once", 60);
    let message = user.refused(
        &["start", &User::start_json(&id, "echo twice", 60)],
        ErrorKind::TaskExists,
    );
    assert!(message.contains(id.as_str()), "{message}");
    let s = user.wait_terminal(&id, std::time::Duration::from_secs(10));
    assert_eq!(s.stdout, "once\n");
}

#[test]
fn the_129th_task_is_refused_and_nothing_is_created() {
    let user = User::new();
    let ids: Vec<_> = (0..MAX_TASK_DIRS - 1).map(|_| new_id()).collect();
    for id in &ids {
        user.start(id, "exit 0", 60);
    }
    // Two starts race for the last slot: exactly one gets it.
    let racers: Vec<_> = (0..2)
        .map(|_| {
            user.command()
                .args(["start", &User::start_json(&new_id(), "exit 0", 60)])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut codes: Vec<_> = racers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code())
        .collect();
    codes.sort();
    assert_eq!(codes, [Some(0), Some(1)]);
    assert_eq!(task_dirs(&user), MAX_TASK_DIRS);
    let extra = new_id();
    let message = user.refused(
        &["start", &User::start_json(&extra, "echo nope", 60)],
        ErrorKind::TooManyTasks,
    );
    assert!(message.contains("128"), "{message}");
    assert_eq!(task_dirs(&user), MAX_TASK_DIRS);
    assert!(!user.tasks_dir().join(extra.as_str()).exists());
    let listed: ListReply = user.ok(&["list"]);
    assert_eq!(listed.tasks.len(), MAX_TASK_DIRS);

    // Removing one finished task directory frees a slot.
    fs::remove_dir_all(user.tasks_dir().join(ids[0].as_str())).unwrap();
    user.start(&extra, "exit 0", 60);
}

#[test]
fn bad_start_requests_are_refused_before_anything_is_created() {
    let user = User::new();
    let id = new_id();
    let missing = user.home().join("no/such/dir");
    let cases = [
        (
            json!({"task_id": id, "command": "true", "timeout": 60, "cwd": missing}),
            ErrorKind::NoSuchCwd,
            "no/such/dir",
        ),
        (
            json!({"task_id": id, "command": "true", "timeout": 0}),
            ErrorKind::BadRequest,
            "timeout",
        ),
        (
            json!({"task_id": id, "command": "true", "timeout": 3601}),
            ErrorKind::BadRequest,
            "timeout",
        ),
        (
            json!({"task_id": id, "command": "", "timeout": 5}),
            ErrorKind::BadRequest,
            "command",
        ),
        (
            json!({"task_id": id, "command": "x".repeat(65_537), "timeout": 5}),
            ErrorKind::BadRequest,
            "command",
        ),
        (
            json!({"task_id": "ABC", "command": "true", "timeout": 5}),
            ErrorKind::BadRequest,
            "task_id",
        ),
        (
            json!({"task_id": id, "command": "true", "timeout": 5, "extra": 1}),
            ErrorKind::BadRequest,
            "extra",
        ),
    ];
    for (req, kind, mentions) in cases {
        let message = user.refused(&["start", &req.to_string()], kind);
        assert!(message.contains(mentions), "{req}: {message}");
    }
    user.refused(&["start", "{not json"], ErrorKind::BadRequest);
    user.refused(&["start"], ErrorKind::BadRequest);
    assert_eq!(task_dirs(&user), 0, "nothing was created");
}

#[test]
fn unknown_verbs_and_stray_arguments_are_refused() {
    let user = User::new();
    user.refused(&["frobnicate"], ErrorKind::BadRequest);
    user.ok::<ListReply>(&["list", "{}"]);
    user.refused(&["list", r#"{"all":true}"#], ErrorKind::BadRequest);
    user.refused(&["list", "{}", "more"], ErrorKind::BadRequest);
    user.refused(&[], ErrorKind::BadRequest);
    assert_eq!(task_dirs(&user), 0, "nothing was created");
}

#[test]
fn bad_status_and_cancel_requests_are_refused() {
    let user = User::new();
    let id = new_id();
    let status = |req: serde_json::Value| req.to_string();
    user.refused(
        &["status", &status(json!({"task_id": id, "limit": 0}))],
        ErrorKind::BadRequest,
    );
    user.refused(
        &["status", &status(json!({"task_id": id, "limit": 65_537}))],
        ErrorKind::BadRequest,
    );
    user.refused(
        &[
            "status",
            &status(json!({"task_id": id, "stdout_offset": 1_048_577})),
        ],
        ErrorKind::BadRequest,
    );
    user.refused(
        &["status", &status(json!({"task_id": id}))],
        ErrorKind::NoSuchTask,
    );
    user.refused(
        &["cancel", &status(json!({"task_id": id}))],
        ErrorKind::NoSuchTask,
    );
}

#[test]
fn relative_cwd_is_taken_from_home() {
    let user = User::new();
    fs::create_dir(user.home().join("work")).unwrap();
    let id = new_id();
    let req = json!({"task_id": id, "command": "pwd", "timeout": 5, "cwd": "work"});
    user.ok::<serde_json::Value>(&["start", &req.to_string()]);
    let s = user.wait_terminal(&id, std::time::Duration::from_secs(10));
    assert_eq!(
        s.stdout.trim_end(),
        user.home().join("work").to_str().unwrap()
    );
}

fn assert_unsafe(user: &User, why: &str) {
    let id = new_id();
    let message = user.refused(
        &["start", &User::start_json(&id, "true", 5)],
        ErrorKind::UnsafeTaskDir,
    );
    assert!(message.contains(why), "{message}");
    user.refused(&["list"], ErrorKind::UnsafeTaskDir);
    user.refused(
        &["status", &json!({"task_id": id}).to_string()],
        ErrorKind::UnsafeTaskDir,
    );
}

#[test]
fn symlinked_private_directory_is_refused() {
    let user = User::new();
    let elsewhere = user.home().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir_all(user.tasks_dir().parent().unwrap()).unwrap();
    symlink(&elsewhere, user.tasks_dir()).unwrap();
    assert_unsafe(&user, "symlink");
    assert_eq!(
        fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing created through it"
    );
}

#[test]
fn private_directory_open_to_others_is_refused() {
    let user = User::new();
    fs::create_dir_all(user.tasks_dir()).unwrap();
    fs::set_permissions(user.tasks_dir(), fs::Permissions::from_mode(0o755)).unwrap();
    assert_unsafe(&user, "chmod 700");
}

#[test]
fn foreign_owned_private_directory_is_refused() {
    if !require(is_root(), "changing a directory's owner needs root") {
        return;
    }
    let user = User::new();
    fs::create_dir_all(user.tasks_dir()).unwrap();
    fs::set_permissions(user.tasks_dir(), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(user.tasks_dir(), Some(65_534), Some(65_534)).unwrap();
    assert_unsafe(&user, "owned by uid 65534");
}

#[test]
fn private_directory_is_created_0700() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "true", 5);
    let mode = fs::metadata(user.tasks_dir()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let s = user.wait_terminal(&id, std::time::Duration::from_secs(10));
    assert_eq!(s.summary.state, TaskState::Succeeded);
}
