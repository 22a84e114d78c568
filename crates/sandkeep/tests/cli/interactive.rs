//! Interactive tasks from the command line (SPEC.md §15): `task start
//! --interactive [--pty]`, `task send`, and `task attach` driven as a person
//! would, in a real terminal (tmux: send-keys, capture-pane).

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::cli::parse_one;
use support::{Home, bin, poll, require};

fn start(home: &Home, sandbox: &str, flags: &[&str], command: &str) -> String {
    let mut args = vec!["task", "start", "--sandbox", sandbox, "--json"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", command]);
    let started = home.json(&args);
    started["task_id"].as_str().expect("task_id").to_owned()
}

fn stdout_of(home: &Home, sandbox: &str, task: &str) -> serde_json::Value {
    home.json(&["task", "get", sandbox, task, "--json"])
}

#[test]
fn send_feeds_a_pipe_task_and_close_ends_its_input() {
    let home = Home::new();
    let sandbox = home.sandbox();
    let task = start(
        &home,
        &sandbox,
        &["--interactive"],
        "read a; echo \"a=$a\"; cat",
    );
    let sent = parse_one(
        &home.ok(&["task", "send", &sandbox, &task, "first\n", "--json"]),
        &["task", "send"],
    );
    assert_eq!(sent["bytes_accepted"], 6, "{sent}");
    assert_eq!(home.ok(&["task", "send", &sandbox, &task, "rest"]), "4\n");
    home.ok(&[
        "task", "send", &sandbox, &task, "IQ==", "--base64", "--close",
    ]);
    let done = poll(Duration::from_secs(30), "the task ending", || {
        let v = stdout_of(&home, &sandbox, &task);
        (v["state"] != "running").then_some(v)
    });
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["stdout"], "a=first\nrest!");
    let out = home.run(&["task", "send", &sandbox, &task, "more"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("closed"),
        "{out:?}"
    );
    // --pty needs --interactive.
    let out = home.run(&[
        "task",
        "start",
        "--sandbox",
        &sandbox,
        "--pty",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A private tmux server for one test, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Self {
        Self {
            socket: format!("sandkeep-test-{}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("running tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "attach"])
    }

    fn until_screen_shows(&self, what: &str) -> String {
        poll(
            Duration::from_secs(20),
            &format!("the screen showing {what:?}"),
            || {
                let screen = self.screen();
                screen.contains(what).then_some(screen)
            },
        )
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

#[test]
fn attach_joins_a_terminal_to_a_pty_task_and_detaches_leaving_it_running() {
    if !require(
        Command::new("tmux").arg("-V").output().is_ok(),
        "tmux is not installed",
    ) {
        return;
    }
    let home = Home::new();
    let sandbox = home.sandbox();
    let script = "echo READY; read name; echo \"hello $name\"; stty size; read x; echo \"x=$x\"";
    let task = start(&home, &sandbox, &["--interactive", "--pty"], script);
    let attach = format!(
        "env SANDKEEP_HOME={} {} task attach {sandbox} {task}; sleep 60",
        home.path().display(),
        bin()
    );
    let tmux = Tmux::new();
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "attach",
        "-x",
        "100",
        "-y",
        "30",
        &attach,
    ]);
    tmux.until_screen_shows("READY");
    tmux.run(&["send-keys", "-t", "attach", "world", "Enter"]);
    // The task's terminal took the window's size when attach began.
    let screen = tmux.until_screen_shows("30 100");
    assert!(screen.contains("hello world"), "{screen}");
    tmux.run(&["send-keys", "-t", "attach", "C-]"]);
    tmux.until_screen_shows("detached");
    assert_eq!(stdout_of(&home, &sandbox, &task)["state"], "running");

    // Attaching again shows what was saved, then goes on.
    tmux.run(&["kill-session", "-t", "attach"]);
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "attach",
        "-x",
        "90",
        "-y",
        "20",
        &attach,
    ]);
    tmux.until_screen_shows("hello world");
    tmux.run(&["send-keys", "-t", "attach", "bye", "Enter"]);
    let screen = tmux.until_screen_shows("task has ended");
    assert!(screen.contains("x=bye"), "{screen}");
    assert_eq!(stdout_of(&home, &sandbox, &task)["state"], "succeeded");
}
