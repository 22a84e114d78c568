//! The task lifecycle against real processes: output across pauses, exit
//! codes, timeouts, cancel, the process group after exit, escaped
//! processes, lost supervisors, floods and secrets.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{User, assert_state, live_with_cmdline, new_id};
use sandkeep_proto::TaskState;
use sandkeep_proto::limits::LOG_CAP_BYTES;

const SOON: Duration = Duration::from_secs(10);

#[test]
fn output_across_a_pause_reads_back_as_before_after_in_pages() {
    let user = User::new();
    let id = new_id();
    let started = user.start(&id, "printf BEFORE; sleep 2; printf AFTER", 60);
    assert_eq!(started.state, TaskState::Running);
    assert!(started.started_at.is_some());

    // Saved bytes are visible while the command still runs.
    let t0 = Instant::now();
    let early = user.wait_for(&id, SOON, "showing BEFORE", |s| s.stdout_bytes == 6);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "BEFORE took {:?}",
        t0.elapsed()
    );
    assert_state(&early, TaskState::Running, None);
    assert_eq!(early.stdout, "BEFORE");
    assert_eq!(early.summary.finished_at, None);

    let done = user.wait_terminal(&id, SOON);
    assert_state(&done, TaskState::Succeeded, Some(0));
    assert!(done.summary.finished_at >= done.summary.started_at);

    let mut text = String::new();
    let mut offset = 0;
    let mut pages = 0;
    loop {
        let page = user.status_page(&id, offset, 0, 4);
        if page.stdout.is_empty() {
            assert_eq!(
                page.stdout_next_offset, offset,
                "past the end keeps the offset"
            );
            break;
        }
        text.push_str(&page.stdout);
        offset = page.stdout_next_offset;
        pages += 1;
    }
    assert_eq!(text, "BEFOREAFTER");
    assert_eq!(pages, 3);
    // Reading the same offset again gives the same bytes.
    assert_eq!(user.status_page(&id, 4, 0, 4).stdout, "REAF");
}

#[test]
fn exit_codes_and_signals_are_recorded() {
    let user = User::new();
    let cases = [
        ("exit 0", TaskState::Succeeded, Some(0)),
        ("echo oops >&2; exit 3", TaskState::Failed, Some(3)),
        ("kill -KILL $$", TaskState::Failed, Some(137)),
        ("kill -TERM $$", TaskState::Failed, Some(143)),
    ];
    let ids: Vec<_> = cases
        .iter()
        .map(|(command, ..)| {
            let id = new_id();
            user.start(&id, command, 60);
            id
        })
        .collect();
    for (id, (command, state, code)) in ids.iter().zip(cases) {
        let s = user.wait_terminal(id, SOON);
        assert_eq!(
            (s.summary.state, s.summary.exit_code),
            (state, code),
            "{command}: {s:?}"
        );
    }
    assert_eq!(user.status(&ids[1]).stderr, "oops\n");
}

#[test]
fn timeout_stops_the_group_and_reads_timed_out() {
    let user = User::new();
    let id = new_id();
    let t0 = Instant::now();
    user.start(&id, "sleep 1000.413", 1);
    let s = user.wait_terminal(&id, SOON);
    assert_state(&s, TaskState::TimedOut, Some(143));
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t0.elapsed()
    );
    assert!(live_with_cmdline(&["sleep", "1000.413"]).is_empty());
}

#[test]
fn cancel_of_a_task_trapping_term_is_confirmed_within_3_s() {
    let user = User::new();
    let id = new_id();
    // The task ignores TERM and waits until it is told it ignores TERM, so
    // the cancel cannot land before the trap is set.
    user.start(
        &id,
        "trap '' TERM; echo trapped; sleep 1000.517; echo never",
        60,
    );
    user.wait_for(&id, SOON, "trapping", |s| s.stdout == "trapped\n");

    let t0 = Instant::now();
    let reply = user.cancel(&id);
    let took = t0.elapsed();
    assert!(reply.confirmed, "{reply:?}");
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    assert_state(&reply.status, TaskState::Cancelled, Some(137));
    assert_eq!(reply.status.stdout, "trapped\n");
    assert!(live_with_cmdline(&["sleep", "1000.517"]).is_empty());
    // The supervisor itself exits just after recording the ending.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !user.live_processes().is_empty() {
        let left = user.live_processes();
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(5));
    }

    // Cancelling again returns the saved result and signals nothing.
    let again = user.cancel(&id);
    assert!(again.confirmed);
    assert_eq!(again.status, reply.status);
}

#[test]
fn cancel_of_a_finished_task_returns_its_result() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "echo done; exit 4", 60);
    let finished = user.wait_terminal(&id, SOON);
    let reply = user.cancel(&id);
    assert!(reply.confirmed);
    assert_eq!(reply.status, finished);
    assert_state(&reply.status, TaskState::Failed, Some(4));
}

#[test]
fn background_child_is_not_left_behind_after_exit() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "sleep 1000.271 & exit 0", 60);
    let s = user.wait_terminal(&id, SOON);
    assert_state(&s, TaskState::Succeeded, Some(0));
    assert_eq!(live_with_cmdline(&["sleep", "1000.271"]), Vec::<u32>::new());
}

/// The supervisor is its task's child subreaper: the task's orphans come
/// to it, and it reaps them as they die, so none piles up as a zombie
/// while the task runs (its group check counts on knowing them).
#[test]
fn orphans_of_a_running_task_come_to_its_supervisor_and_are_reaped() {
    let user = User::new();
    let id = new_id();
    // Each subshell exits at once, leaving its sleep an orphan.
    user.start(
        &id,
        "for i in $(seq 20); do (sleep 0.01 &); done; (exec sleep 1000.292 &); echo spawned; \
         exec sleep 1000.291",
        60,
    );
    user.wait_for(&id, SOON, "its orphans spawned", |s| {
        s.stdout == "spawned\n"
    });
    let supervisor = user.record(&id).supervisor.pid;
    let stat = |pid: u32| sandkeep_proto::procfs::stat(pid).ok();
    let long = live_with_cmdline(&["sleep", "1000.292"]);
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(
        stat(long[0]).map(|s| s.ppid),
        Some(supervisor),
        "an orphan's parent is the supervisor"
    );
    let zombies = || {
        sandkeep_task::procfs::pids()
            .expect("listing /proc")
            .filter(|&pid| stat(pid).is_some_and(|s| s.ppid == supervisor && !s.is_running()))
            .count()
    };
    let deadline = Instant::now() + SOON;
    while zombies() > 0 || !live_with_cmdline(&["sleep", "0.01"]).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the supervisor still has {} zombie children after {SOON:?}",
            zombies()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // They are the task's too: its end stops the one left.
    user.cancel(&id);
    let deadline = Instant::now() + SOON;
    while !live_with_cmdline(&["sleep", "1000.292"]).is_empty() {
        assert!(Instant::now() < deadline, "the orphan outlived its task");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn escaped_process_holding_the_pipes_does_not_keep_the_task_running() {
    let user = User::new();
    let fifo = user.home().join("escaped");
    let id = new_id();
    // The main process exits only once the escapee has its own session.
    let command = format!(
        "mkfifo {f}; setsid sh -c 'echo > {f}; exec sleep 1000.321' & read x < {f}; echo main-exits",
        f = fifo.display()
    );
    user.start(&id, &command, 60);
    let exited = user.wait_for(&id, SOON, "at its main exit", |s| {
        s.stdout == "main-exits\n"
    });
    let t0 = Instant::now();
    let s = user.wait_terminal(&id, SOON);
    let took = t0.elapsed();
    assert_state(&s, TaskState::Succeeded, Some(0));
    assert!(
        took < Duration::from_millis(1600),
        "terminal {took:?} after the main exit"
    );
    assert_eq!(exited.summary.state, TaskState::Running);
    // It left the group, so it is outside what the supervisor may stop.
    assert_eq!(live_with_cmdline(&["sleep", "1000.321"]).len(), 1);
}

#[test]
fn lost_supervisor_reads_unknown_never_success() {
    let user = User::new();
    let id = new_id();
    user.start(&id, "sleep 1000.602", 60);
    let record = user.record(&id);
    let supervisor = rustix::process::Pid::from_raw(record.supervisor.pid as i32).unwrap();
    rustix::process::kill_process(supervisor, rustix::process::Signal::KILL).unwrap();

    let s = user.wait_for(&id, SOON, "unknown", |s| {
        s.summary.state != TaskState::Running
    });
    assert_state(&s, TaskState::Unknown, None);
    assert_eq!(s.summary.finished_at, None);
    let listed: sandkeep_proto::wire::ListReply = user.ok(&["list"]);
    assert_eq!(listed.tasks[0].summary.state, TaskState::Unknown);
    // Nobody is left to confirm a cancel.
    let reply = user.cancel(&id);
    assert!(!reply.confirmed);
    assert_eq!(reply.status.summary.state, TaskState::Unknown);
}

#[test]
fn task_without_a_record_reads_unknown() {
    let user = User::new();
    user.ok::<sandkeep_proto::wire::ListReply>(&["list"]);
    let id = new_id();
    std::fs::create_dir_all(user.tasks_dir().join(id.as_str())).unwrap();
    // `list` created nothing, so make the private directory private.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(user.tasks_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_state(&user.status(&id), TaskState::Unknown, None);
}

#[test]
fn started_task_survives_the_death_of_its_starter() {
    let user = User::new();
    let id = new_id();
    let json = User::start_json(&id, "sleep 1; echo survived", 60);
    // The starter stays alive after start returns, and is then killed
    // with its whole process group.
    let mut starter = user
        .shell(&format!(
            "{} start '{json}'; exec sleep 1000.733",
            common::HELPER
        ))
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(starter.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("\"running\""), "{line}");
    let group = rustix::process::Pid::from_raw(starter.id() as i32).unwrap();
    rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
    starter.wait().unwrap();

    let s = user.wait_terminal(&id, SOON);
    assert_state(&s, TaskState::Succeeded, Some(0));
    assert_eq!(s.stdout, "survived\n");
}

#[test]
fn flood_of_50_mb_saves_exactly_1_mib_and_is_not_slowed() {
    let user = User::new();
    let command = "head -c 50000000 /dev/zero; echo tail >&2";
    let baseline = {
        let t0 = Instant::now();
        let st = Command::new("bash")
            .arg("-c")
            .arg(format!("{{ {command}; }} >/dev/null 2>&1"))
            .status()
            .unwrap();
        assert!(st.success());
        t0.elapsed()
    };
    let id = new_id();
    let t0 = Instant::now();
    user.start(&id, command, 60);
    let s = user.wait_terminal(&id, SOON);
    let captured = t0.elapsed();
    assert_state(&s, TaskState::Succeeded, Some(0));
    assert_eq!(s.stdout_bytes, LOG_CAP_BYTES);
    assert!(s.stdout_truncated);
    assert_eq!((s.stderr.as_str(), s.stderr_truncated), ("tail\n", false));
    let log = std::fs::metadata(user.tasks_dir().join(id.as_str()).join("stdout.log")).unwrap();
    assert_eq!(log.len(), 1_048_576);
    println!("50 MB: {captured:?} captured vs {baseline:?} to /dev/null");
    // Generous: both are tens of milliseconds and the machine is shared.
    assert!(
        captured < baseline * 3 + Duration::from_millis(500),
        "capture took {captured:?}, /dev/null {baseline:?}"
    );
}

#[test]
fn secrets_are_redacted_even_when_split_across_writes() {
    let user = User::with_env(&[
        ("API_TOKEN", "tok-123456789"),
        ("db_password", "hunter22"),
        ("MY_KEY", "abc"),
    ]);
    let id = new_id();
    let command = "printf 'a tok-1234'; sleep 0.3; printf '56789 b hunter'; sleep 0.3; \
                   printf '22 abc\\n'; printf 'tok-123456789' >&2";
    user.start(&id, command, 60);
    let s = user.wait_terminal(&id, SOON);
    assert_eq!(s.stdout, "a [REDACTED] b [REDACTED] abc\n");
    assert_eq!(s.stderr, "[REDACTED]");
}

#[test]
fn start_returns_without_leaking_inherited_descriptors_to_the_supervisor() {
    let user = User::new();
    let id = new_id();
    let json = User::start_json(&id, "sleep 3; echo late", 60);
    // fd 3 is another copy of the caller's stdout, without close-on-exec,
    // as a careless exec agent might pass it. If the supervisor kept it,
    // reading the caller's output would wait for the task to end.
    let t0 = Instant::now();
    let out = user
        .shell(&format!("exec 3>&1; {} start '{json}'", common::HELPER))
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        took < Duration::from_millis(1500),
        "the caller waited {took:?}"
    );
    assert_eq!(user.status(&id).summary.state, TaskState::Running);
}

#[test]
fn truncation_shows_while_the_task_still_runs() {
    let user = User::new();
    let id = new_id();
    user.start(
        &id,
        "head -c 2000000 /dev/zero; echo flooded >&2; sleep 1000.9",
        60,
    );
    let s = user.wait_for(&id, SOON, "past its flood", |s| s.stderr == "flooded\n");
    assert_state(&s, TaskState::Running, None);
    assert!(s.stdout_truncated && !s.stderr_truncated, "{s:?}");
    assert_eq!(s.stdout_bytes, LOG_CAP_BYTES);
    // The last page ends exactly at the cap.
    let last = user.status_page(&id, LOG_CAP_BYTES - 10, 0, 100);
    assert_eq!(last.stdout_next_offset, LOG_CAP_BYTES);
    assert!(user.cancel(&id).confirmed);
}
