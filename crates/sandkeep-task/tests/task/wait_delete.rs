//! The `wait`, `delete` and `list` verbs against real processes: the
//! long-poll answers on exit, on new output past each offset, on a lost
//! supervisor and at its timeout; a waiter whose reader goes away exits;
//! `wait --stream` answers many waits from one process with one inotify
//! instance, each as `status` would, and exits when its stdin ends;
//! delete frees a place and refuses a running task; list shows the
//! command redacted, newest first.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{User, assert_state, new_id};
use sandkeep_proto::TaskId;
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::MAX_TASK_DIRS;
use sandkeep_proto::wire::{
    DeleteReply, ErrorKind, ListReply, StatusRequest, TaskStatus, WaitReply, WatchCommand,
};
use serde_json::json;

const SOON: Duration = Duration::from_secs(10);

fn wait_json(id: &TaskId, stdout_offset: u64, stderr_offset: u64, timeout: u64) -> String {
    json!({"task_id": id, "stdout_offset": stdout_offset,
           "stderr_offset": stderr_offset, "timeout": timeout})
    .to_string()
}

/// Runs `wait` and returns its reply with the time it took as seen here.
fn wait(user: &User, id: &TaskId, offsets: (u64, u64), timeout: u64) -> (WaitReply, Duration) {
    let t = Instant::now();
    let reply: WaitReply = user.ok(&["wait", &wait_json(id, offsets.0, offsets.1, timeout)]);
    (reply, t.elapsed())
}

#[test]
fn wait_answers_on_exit_not_before() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "sleep 0.7; exit 3", 60);
    let (reply, took) = wait(&user, &id, (0, 0), 30);
    assert_state(&reply.status, TaskState::Failed, Some(3));
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(1_500),
        "answered after {took:?}"
    );
    assert!(reply.waited_ms >= 500, "{reply:?}");
    // Settled: it answers at once however long it may wait.
    let (again, took) = wait(&user, &id, (0, 0), 300);
    assert_eq!(again.status, reply.status);
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[test]
fn wait_answers_on_output_past_each_offset_and_else_at_its_timeout() {
    let user = User::new();
    let id = new_id();
    user.start(
        &id,
        "sleep 0.5; printf out; sleep 0.5; printf err >&2; sleep 30",
        60,
    );
    let (first, took) = wait(&user, &id, (0, 0), 30);
    assert_state(&first.status, TaskState::Running, None);
    assert_eq!(first.status.stdout, "out");
    assert!(took < Duration::from_secs(2), "{took:?}");

    let (second, took) = wait(&user, &id, (first.status.stdout_next_offset, 0), 30);
    assert_eq!(second.status.stderr, "err");
    assert_eq!(second.status.stdout, "");
    assert!(took < Duration::from_secs(2), "{took:?}");

    let past = (
        second.status.stdout_next_offset,
        second.status.stderr_next_offset,
    );
    let (quiet, took) = wait(&user, &id, past, 1);
    assert_state(&quiet.status, TaskState::Running, None);
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1_800),
        "a quiet task answers at the timeout, took {took:?}"
    );
    assert!(quiet.waited_ms >= 1_000, "{quiet:?}");
    user.cancel(&id);
}

#[test]
fn wait_notices_a_lost_supervisor_at_once() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "sleep 1000.611", 60);
    let supervisor = user.record(&id).supervisor.pid as i32;
    let mut waiter = user
        .command()
        .args(["wait", &wait_json(&id, 0, 0, 60)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Asleep or still starting, the waiter must answer promptly: a
    // starting one sees the dead supervisor on its first look, a sleeping
    // one through the pidfd. The pause makes the second case the likely one.
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(supervisor).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let mut out = String::new();
    waiter
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(waiter.wait().unwrap().success(), "{out}");
    let reply: WaitReply = serde_json::from_str(&out).unwrap();
    assert_state(&reply.status, TaskState::Unknown, None);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_waiter_whose_reader_goes_away_exits() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "sleep 1000.612", 60);
    let mut waiter = user
        .command()
        .args(["wait", &wait_json(&id, 0, 0, 300)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter waits");
    drop(waiter.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(status) = waiter.try_wait().unwrap() {
            assert!(!status.success(), "no one got an answer: {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter outlived its reader by 2 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    user.cancel(&id);
}

/// One answer line of `wait --stream`: the wait's number, and the
/// `CODE JSON` that `status` of its request would exit with and print.
type Answer = (u64, String);

/// The next answer `wait --stream` writes, within [`SOON`].
fn next_answer(answers: &mpsc::Receiver<Answer>, what: &str) -> Answer {
    answers
        .recv_timeout(SOON)
        .unwrap_or_else(|e| panic!("no answer ({what}) within {SOON:?}: {e}"))
}

/// What the one-shot `status` exits with and prints for this request.
fn one_shot_status(user: &User, request: &StatusRequest) -> String {
    let out = user.run(&["status", &serde_json::to_string(request).unwrap()]);
    format!(
        "{} {}",
        out.status.code().expect("status exited"),
        String::from_utf8(out.stdout).unwrap().trim_end()
    )
}

fn page(task_id: &TaskId, stdout_offset: u64) -> StatusRequest {
    StatusRequest {
        task_id: task_id.clone(),
        stdout_offset,
        stderr_offset: 0,
        limit: 16384,
    }
}

#[test]
fn one_stream_answers_many_waits_and_ends_with_its_stdin() {
    let user = User::new();
    let (writer, lost, finished, unknown) = (new_id(), new_id(), new_id(), new_id());
    user.start(&writer, "sleep 0.5; printf x; sleep 0.5; exit 2", 60);
    user.start(&lost, "sleep 1000.613", 60);
    user.start(&finished, "printf done", 60);
    user.wait_terminal(&finished, SOON);
    let mut stream = user
        .command()
        .args(["wait", "--stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = stream.stdin.take().unwrap();
    let stdout = BufReader::new(stream.stdout.take().unwrap());
    let (tx, answers) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let line = line.unwrap();
            let (number, rest) = line.split_once(' ').expect("NUMBER CODE JSON");
            if tx.send((number.parse().unwrap(), rest.to_owned())).is_err() {
                break;
            }
        }
    });
    let mut watch = |number: u64, request: &StatusRequest| {
        let command = WatchCommand::Watch {
            number,
            request: request.clone(),
        };
        writeln!(stdin, "{}", serde_json::to_string(&command).unwrap()).unwrap();
    };
    // Waits already due are answered at once, as `status` answers them: a
    // finished task, a task that is not there.
    watch(1, &page(&finished, 0));
    watch(2, &page(&unknown, 0));
    let mut first = [
        next_answer(&answers, "the finished task"),
        next_answer(&answers, "the missing task"),
    ];
    first.sort();
    assert_eq!(first[0], (1, one_shot_status(&user, &page(&finished, 0))));
    assert_eq!(first[1], (2, one_shot_status(&user, &page(&unknown, 0))));
    assert!(first[1].1.starts_with("1 "), "{first:?}");
    assert!(first[0].1.contains("\"stdout\":\"done\""), "{first:?}");

    // A wait from the start is answered by the output, one past it by the
    // exit; each with the page its own offsets ask for.
    watch(3, &page(&writer, 0));
    watch(4, &page(&writer, 1));
    watch(5, &page(&lost, 0));
    let (number, output) = next_answer(&answers, "writer's output");
    assert_eq!(number, 3, "{output}");
    let output: TaskStatus = serde_json::from_str(output.strip_prefix("0 ").unwrap()).unwrap();
    assert_eq!(
        (output.summary.state, output.stdout.as_str()),
        (TaskState::Running, "x"),
        "{output:?}"
    );
    let t = Instant::now();
    let exit = next_answer(&answers, "writer's exit");
    assert_eq!(exit, (4, one_shot_status(&user, &page(&writer, 1))));
    assert!(exit.1.contains("\"state\":\"failed\""), "{exit:?}");
    assert!(
        t.elapsed() > Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    // One process, one inotify instance for every task.
    let inotify_fds = std::fs::read_dir(format!("/proc/{}/fd", stream.id()))
        .unwrap()
        .filter(|fd| {
            std::fs::read_link(fd.as_ref().unwrap().path())
                .is_ok_and(|target| target.to_string_lossy().contains("inotify"))
        })
        .count();
    assert_eq!(inotify_fds, 1, "one inotify instance for all tasks");

    // A supervisor killed without recording its end: `unknown` at once.
    let supervisor = user.record(&lost).supervisor.pid as i32;
    let t = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(supervisor).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let unknown_now = next_answer(&answers, "lost supervisor");
    assert_eq!(unknown_now, (5, one_shot_status(&user, &page(&lost, 0))));
    assert!(
        unknown_now.1.contains("\"state\":\"unknown\""),
        "{unknown_now:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );

    // A wait given up is not answered.
    let again = new_id();
    user.start(&again, "sleep 0.3; printf y", 60);
    watch(6, &page(&again, 0));
    let unwatch = serde_json::to_string(&WatchCommand::Unwatch { number: 6 }).unwrap();
    writeln!(stdin, "{unwatch}").unwrap();
    user.wait_terminal(&again, SOON);
    assert!(
        answers.recv_timeout(Duration::from_millis(300)).is_err(),
        "a wait given up is not answered"
    );

    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(2);
    while stream.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the stream outlived its stdin by 2 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(stream.wait().unwrap().success());
}

#[test]
fn wait_refuses_values_out_of_range_naming_them() {
    let user = User::new();
    let id = new_id();
    for (req, param) in [
        (wait_json(&id, 0, 0, 0), "timeout"),
        (wait_json(&id, 0, 0, 301), "timeout"),
        (wait_json(&id, 1_048_577, 0, 1), "stdout_offset"),
    ] {
        let message = user.refused(&["wait", &req], ErrorKind::BadRequest);
        assert!(message.contains(param), "{message}");
    }
    user.refused(&["wait", &wait_json(&id, 0, 0, 1)], ErrorKind::NoSuchTask);
}

#[test]
fn delete_frees_a_place_and_refuses_a_running_task() {
    let user = User::new();
    let running = new_id();
    user.start(&running, "sleep 1000.613", 60);
    let mut ids = vec![running.clone()];
    for _ in 1..MAX_TASK_DIRS {
        let id = new_id();
        user.start(&id, "true", 60);
        ids.push(id);
    }
    let extra = new_id();
    user.refused(
        &["start", &User::start_json(&extra, "true", 60)],
        ErrorKind::TooManyTasks,
    );

    let delete = |id: &TaskId| json!({"task_id": id}).to_string();
    let message = user.refused(&["delete", &delete(&running)], ErrorKind::TaskRunning);
    assert!(message.contains("cancel it first"), "{message}");
    assert!(user.tasks_dir().join(running.as_str()).is_dir());

    let finished = &ids[1];
    user.wait_terminal(finished, SOON);
    let reply: DeleteReply = user.ok(&["delete", &delete(finished)]);
    assert!(reply.deleted);
    assert!(!user.tasks_dir().join(finished.as_str()).exists());
    user.refused(&["delete", &delete(finished)], ErrorKind::NoSuchTask);
    user.start(&extra, "true", 60);

    user.cancel(&running);
    let reply: DeleteReply = user.ok(&["delete", &delete(&running)]);
    assert!(reply.deleted);
}

#[test]
fn list_shows_the_command_redacted_and_shortened_newest_first() {
    let user = User::with_env(&[("API_TOKEN", "hunter2-value")]);
    let first = new_id();
    user.start(&first, "echo 'hunter2-value'", 60);
    user.wait_terminal(&first, SOON);
    // Start times are whole seconds: the second task starts a second later.
    std::thread::sleep(Duration::from_millis(1_100));
    let second = new_id();
    let long = format!("echo {}", "x".repeat(400));
    user.start(&second, &long, 60);
    user.wait_terminal(&second, SOON);
    let listed: ListReply = user.ok(&["list"]);
    assert_eq!(listed.tasks.len(), 2);
    assert_eq!(listed.tasks[0].summary.task_id, second);
    assert_eq!(listed.tasks[0].command.chars().count(), 256);
    assert_eq!(listed.tasks[0].stdout_bytes, 401);
    assert_eq!(listed.tasks[1].command, "echo '[REDACTED]'");
    assert_eq!(listed.tasks[1].stdout_bytes, "[REDACTED]\n".len() as u64);
}
