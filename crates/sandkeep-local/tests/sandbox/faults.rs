//! Faults around a local sandbox's fork server and exec: malformed and
//! oversized requests on its socket, concurrent callers, process groups
//! killed at the timeout, output held open by background processes,
//! floods; and the doctor report.

use crate::support;

use std::io::IoSlice;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SendAncillaryBuffer, SendFlags, SocketAddrUnix, SocketType};
use sandkeep_provider::Provider;
use support::local::*;
use support::*;

fn raw_send(socket: &std::path::Path, bytes: &[u8]) -> Vec<u8> {
    let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
    rustix::net::connect(&fd, &SocketAddrUnix::new(socket).unwrap()).unwrap();
    let mut control = SendAncillaryBuffer::default();
    // An oversized packet may be refused by the sender's buffer: that is
    // as good as the fork server dropping it.
    if rustix::net::sendmsg(
        &fd,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .is_err()
    {
        return Vec::new();
    }
    let mut buf = vec![0u8; 4096];
    let n = rustix::io::read(&fd, &mut buf).unwrap_or(0);
    buf.truncate(n);
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_server_survives_malformed_requests() {
    let (home, p, info) = fresh_sandbox(60).await;
    let socket = sandbox_dir(home.path(), &info.sandbox_id).join("sock");
    let reply = String::from_utf8_lossy(&raw_send(&socket, b"{not json")).into_owned();
    assert!(reply.contains("malformed request"), "{reply}");
    let reply = String::from_utf8_lossy(&raw_send(
        &socket,
        br#"{"op":"exec","command":"true","cwd":null}"#,
    ))
    .into_owned();
    assert!(reply.contains("three descriptors"), "{reply}");
    let huge = vec![b'x'; 600 * 1024];
    raw_send(&socket, &huge);
    // Still serving, and nothing ran.
    let out = sh(&p, &info.sandbox_id, "echo fine").await;
    assert_eq!(text(&out.stdout), "fine\n");
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_execs_each_get_their_own_output() {
    let (_home, p, info) = fresh_sandbox(60).await;
    let mut handles = Vec::new();
    for i in 0..24 {
        let p = p.clone();
        let id = info.sandbox_id.clone();
        handles.push(tokio::spawn(async move {
            let out = sh(&p, &id, &format!("echo {i}; exit {}", i % 7)).await;
            (i, text(&out.stdout), out.exit_code)
        }));
    }
    for h in handles {
        let (i, stdout, code) = h.await.unwrap();
        assert_eq!((stdout, code), (format!("{i}\n"), Some(i % 7)));
    }
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_process_group_and_background_output_does_not_block() {
    let (_home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    let m = tag("313");
    let mut r = request(&format!("sleep 1000.{m}1 & sleep 1000.{m}2; echo never"));
    r.timeout = Duration::from_millis(500);
    let out = p.exec(id, r).await.unwrap();
    assert!(out.timed_out && out.stdout.is_empty(), "{out:?}");
    until(
        Duration::from_secs(3),
        "the timed-out group to die",
        || async { host_pids_with(&format!("1000.{m}")).is_empty() },
    )
    .await;

    // A daemon that keeps stdout open must not hold the call.
    let t = Instant::now();
    let out = sh(&p, id, &format!("setsid sleep 1000.{m}3 & echo done")).await;
    assert_eq!(
        (text(&out.stdout).as_str(), out.exit_code),
        ("done\n", Some(0))
    );
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "exec waited {:?} for a background process",
        t.elapsed()
    );
    assert_eq!(
        host_pids_with(&format!("1000.{m}3")).len(),
        1,
        "the background process belongs to the sandbox and lives on"
    );

    // A flood keeps only the tail, within bounded time.
    let mut r = request("head -c 50000000 /dev/zero; echo; echo TAIL");
    r.output_limit = 65536;
    let out = p.exec(id, r).await.unwrap();
    assert!(out.stdout_truncated && out.stdout.len() == 65536 && out.stdout.ends_with(b"\nTAIL\n"));
    assert!(p.kill(id).await.unwrap());
    assert!(host_pids_with(&format!("1000.{m}3")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_the_level_and_why() {
    let home = state_dir();
    let p = provider(home.path());
    let report = p.doctor().await.unwrap();
    assert_eq!(report.state_dir, home.path());
    for name in [
        "user namespace",
        "mount namespace",
        "pid namespace",
        "overlayfs",
        "landlock",
    ] {
        let check = report
            .checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} check"));
        assert!(check.ok, "{name}: {}", check.detail);
    }
    // One check per resource limit; as root each is enforced here, the
    // controllers saying which cgroup version holds them.
    let root = rustix::process::geteuid().is_root();
    for name in ["memory limit", "pids limit", "cpu limit", "disk limit"] {
        let check = report
            .checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} check"));
        if root {
            assert!(check.ok, "{name}: {}", check.detail);
            assert!(
                name == "disk limit" || check.detail.contains("cgroup v"),
                "{name}: {}",
                check.detail
            );
        }
    }
    let expected = if root {
        "userns-idmap"
    } else {
        "userns-single"
    };
    assert_eq!(report.isolation, expected);
    assert!(!report.reason.is_empty());
    // And a sandbox gets the level the doctor announced.
    let info = create(&p, 30).await;
    assert_eq!(info.isolation, report.isolation);
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_creates_get_distinct_uid_blocks() {
    let home = state_dir();
    let p = provider(home.path());
    let mut handles = Vec::new();
    for _ in 0..6 {
        let p = p.clone();
        handles.push(tokio::spawn(async move { create(&p, 60).await }));
    }
    let mut maps = std::collections::BTreeSet::new();
    let mut ids = Vec::new();
    for h in handles {
        let info = h.await.unwrap();
        let out = sh(&p, &info.sandbox_id, "cat /proc/self/uid_map").await;
        maps.insert(text(&out.stdout));
        ids.push(info.sandbox_id);
    }
    assert_eq!(
        maps.len(),
        6,
        "uid blocks shared between sandboxes: {maps:?}"
    );
    assert_eq!(p.list().await.unwrap().len(), 6);
    // Each block is claimed by exactly one slot, which its keeper releases
    // (by number) when the sandbox is killed.
    let root = rustix::process::geteuid().is_root();
    for id in &ids {
        if root {
            assert_eq!(uid_slots_naming(&sandbox_dir(home.path(), id)), 1, "{id}");
        }
        assert!(p.kill(id).await.unwrap());
        if root {
            assert_eq!(
                uid_slots_naming(&sandbox_dir(home.path(), id)),
                0,
                "the uid slot of {id} outlived it"
            );
        }
    }
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cut_off_by_kill_is_unconfirmed() {
    let (_home, p, info) = fresh_sandbox(60).await;
    let m = tag("4545");
    let runner = {
        let p = p.clone();
        let id = info.sandbox_id.clone();
        let cmd = format!("sleep 1000.{m}");
        tokio::spawn(async move { p.exec(&id, request(&cmd)).await })
    };
    until(Duration::from_secs(5), "the command to start", || async {
        !host_pids_with(&format!("1000.{m}")).is_empty()
    })
    .await;
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    match runner.await.unwrap() {
        Err(sandkeep_provider::ProviderError::Unconfirmed { .. }) => {}
        other => panic!("expected Unconfirmed, got {other:?}"),
    }
}

/// An I/O error taking the sandbox's lock at session end is an error that
/// leaves the sandbox for a retry; only a sandbox whose directory is gone
/// is `Gone`. Anything else would skip a destruction silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_failure_at_session_end_is_an_error_and_the_sandbox_stays() {
    use sandkeep_provider::Release;
    let (home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    // A directory where the lock file belongs: opening it for writing fails
    // with EISDIR even for root, which ignores permission bits.
    let lock = sandbox_dir(home.path(), id).join("lock");
    match std::fs::remove_file(&lock) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("remove the lock: {e}"),
        _ => {}
    }
    std::fs::create_dir(&lock).unwrap();
    let err = p
        .kill_unless_retained(id)
        .await
        .expect_err("a lock that cannot be taken must be reported");
    assert!(err.to_string().contains("lock"), "{err}");
    assert_eq!(&p.info(id).await.expect("still live").sandbox_id, id);
    std::fs::remove_dir(&lock).unwrap();
    assert!(matches!(
        p.kill_unless_retained(id).await.unwrap(),
        Release::Destroyed
    ));
    // Its files follow its processes (see `presence::Until`).
    until(
        Duration::from_secs(5),
        "the files of the released sandbox to be removed",
        || async { !sandbox_dir(home.path(), id).exists() },
    )
    .await;
    assert!(matches!(
        p.kill_unless_retained(id).await.unwrap(),
        Release::Gone
    ));
}

/// The same for a record that cannot be read (here a directory where
/// `meta.json` belongs): an error, the sandbox left for a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_at_session_end_is_an_error_and_the_sandbox_stays() {
    use sandkeep_provider::Release;
    let (home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    let meta = sandbox_dir(home.path(), id).join("meta.json");
    let aside = meta.with_extension("aside");
    std::fs::rename(&meta, &aside).unwrap();
    std::fs::create_dir(&meta).unwrap();
    let err = p
        .kill_unless_retained(id)
        .await
        .expect_err("an unreadable record must be reported");
    assert!(err.to_string().contains("meta.json"), "{err}");
    let err = p
        .kill(id)
        .await
        .expect_err("kill_sandbox must not say 'not found'");
    assert!(err.to_string().contains("meta.json"), "{err}");
    std::fs::remove_dir(&meta).unwrap();
    std::fs::rename(&aside, &meta).unwrap();
    assert!(matches!(
        p.kill_unless_retained(id).await.unwrap(),
        Release::Destroyed
    ));
    // Its files follow its processes (see `presence::Until`).
    until(
        Duration::from_secs(5),
        "the files of the released sandbox to be removed",
        || async { !sandbox_dir(home.path(), id).exists() },
    )
    .await;
}

/// A request the fork server could not even fork for ran nothing: it is a
/// plain error, never "unconfirmed" (which tells an agent not to resubmit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_the_sandbox_refuses_is_a_plain_error() {
    let (home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    let init = recorded_pid(home.path(), id, "init");
    // A soft RLIMIT_NPROC of 1 on the init: its own process is the one
    // allowed, so its next fork fails with EAGAIN (sandbox root has no
    // CAP_SYS_RESOURCE in the host's user namespace to bypass it). Set as
    // the init's own host uid: lowering one's own soft limit needs no
    // capability, which the host may not grant even to root.
    let set_nproc = |soft: &str| {
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .expect("a Uid line")
            .to_owned();
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                &uid,
                "--regid",
                &uid,
                "--clear-groups",
                "prlimit",
            ])
            .arg(format!("--pid={init}"))
            .arg(format!("--nproc={soft}:"))
            .output()
            .expect("run setpriv and prlimit (util-linux)");
        assert!(out.status.success(), "prlimit: {}", text(&out.stderr));
    };
    let limits = std::fs::read_to_string(format!("/proc/{init}/limits")).unwrap();
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max processes"))
        .and_then(|l| l.split_whitespace().next())
        .expect("a Max processes line")
        .to_owned();
    set_nproc("1");
    let m = tag("5656");
    let result = p.exec(id, request(&format!("echo ran > /tmp/{m}"))).await;
    set_nproc(&soft);
    match result {
        Err(e @ sandkeep_provider::ProviderError::Refused { .. }) => {
            let message = e.to_string();
            assert!(message.contains("nothing ran"), "{message}");
            assert!(message.contains("fork"), "{message}");
        }
        other => panic!("expected a Refused error, got {other:?}"),
    }
    let out = sh(&p, id, &format!("cat /tmp/{m} 2>&1; echo after")).await;
    assert!(
        !text(&out.stdout).contains("ran\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stdout).ends_with("after\n"));
    assert!(p.kill(id).await.unwrap());
}
