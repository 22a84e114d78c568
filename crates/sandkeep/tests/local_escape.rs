//! Escape attempts from inside a local sandbox, each of which must fail:
//! writing host files, reading host secrets, seeing or signalling host
//! processes, unmasking through mount/umount (also from a nested user
//! namespace), reaching sandkeep's state directory, regaining host root.

mod support;

use std::process::{Command, Stdio};

use sandkeep::provider::Provider;
use support::local::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_attempts_fail() {
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;

    // Writes land in the sandbox's copy, never on the host.
    let marker = format!("/var/tmp/sk-escape-{}", id);
    let out = sh(
        &p,
        id,
        &format!("echo pwned > {marker} && touch /usr/sk-escape-probe && echo wrote"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "wrote\n",
        "copy-on-write must accept writes: {}",
        text(&out.stderr)
    );
    assert!(
        !std::path::Path::new(&marker).exists(),
        "a sandbox write reached the host"
    );
    assert!(
        !std::path::Path::new("/usr/sk-escape-probe").exists(),
        "a sandbox write reached host /usr"
    );
    // Other host trees are simply absent.
    let out = sh(
        &p,
        id,
        "ls /work /home /mnt /root 2>&1; ls -A /home | wc -l",
    )
    .await;
    assert!(
        text(&out.stdout).contains("No such file") && text(&out.stdout).ends_with("0\n"),
        "{}",
        text(&out.stdout)
    );

    // Host secrets are masked.
    let shadow = std::fs::read("/etc/shadow").unwrap_or_default();
    let out = sh(&p, id, "cat /etc/shadow; cat /etc/gshadow; echo end").await;
    assert_eq!(text(&out.stdout), "end\n", "secrets visible");
    assert!(
        !shadow.is_empty(),
        "the host has a non-empty /etc/shadow to protect"
    );

    // Host processes are invisible and unreachable by pid.
    let marker8 = tag("8181");
    let mut host = Command::new("sleep")
        .arg(format!("1000.{marker8}"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = host.id();
    let out = sh(&p, id, &format!("kill -0 {pid} 2>&1 && echo SIGNALLED; cat /proc/{pid}/cmdline 2>&1; ls /proc | grep -c '^[0-9]'")).await;
    let seen = text(&out.stdout);
    assert!(
        !seen.contains("SIGNALLED") && !seen.contains(&format!("1000.{marker8}")),
        "host process reachable: {seen}"
    );
    let visible: u32 = seen.lines().last().unwrap().trim().parse().unwrap();
    assert!(visible < 10, "the sandbox sees {visible} processes");
    assert!(
        host.try_wait().unwrap().is_none(),
        "the host process was killed"
    );
    host.kill().unwrap();
    host.wait().unwrap();

    // The mount table is out of reach, also from a nested user namespace.
    for attempt in [
        "mount -o remount,ro / 2>/dev/null && echo REMOUNTED",
        "umount /etc/shadow 2>/dev/null; cat /etc/shadow",
        "umount -l /proc 2>/dev/null && echo UNMOUNTED",
        "mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED",
        "unshare -Urm sh -c 'umount /etc/shadow 2>/dev/null; cat /etc/shadow' 2>/dev/null",
        "unshare -Urm sh -c 'umount -l /var/tmp 2>/dev/null; ls /var/tmp' 2>/dev/null | grep -c sk-local",
    ] {
        let out = sh(&p, id, attempt).await;
        let s = text(&out.stdout);
        assert!(
            !s.contains("REMOUNTED")
                && !s.contains("UNMOUNTED")
                && !s.contains("MOUNTED")
                && !s.contains("root:")
                && s.trim() != "1",
            "{attempt:?} succeeded: {s}"
        );
    }

    // No nested user namespace (it would hold a full capability set), and
    // no kernel surface such as keyrings or bpf.
    let out = sh(
        &p,
        id,
        "unshare -Ur true 2>/dev/null && echo NESTED; unshare -U true 2>/dev/null && echo NESTED2; \
         grep -E '^Seccomp(_filters)?:' /proc/self/status",
    )
    .await;
    let s = text(&out.stdout);
    assert!(!s.contains("NESTED"), "nested user namespace allowed: {s}");
    assert!(
        s.contains("Seccomp:\t2") && s.contains("Seccomp_filters:\t2"),
        "no seccomp filter: {s}"
    );

    // sandkeep's own state (here under /var/tmp, inside an overlaid tree).
    let state = home.path().display().to_string();
    let out = sh(
        &p,
        id,
        &format!("ls -A {state} | wc -l; ls {state}/sb 2>&1; touch {state}/x 2>&1 || echo DENIED"),
    )
    .await;
    let s = text(&out.stdout);
    assert!(
        s.starts_with("0\n") && s.contains("DENIED"),
        "state directory reachable: {s}"
    );

    // Sandbox root is no host root: a shifted uid, no admin capabilities.
    let out = sh(
        &p,
        id,
        "cat /proc/self/uid_map; grep CapBnd /proc/self/status",
    )
    .await;
    let s = text(&out.stdout);
    let mut fields = s.split_whitespace();
    assert_eq!(fields.next(), Some("0"));
    let base: u64 = fields.next().unwrap().parse().unwrap();
    assert!(base >= 1 << 30, "sandbox root is host uid {base}");
    let bnd = u64::from_str_radix(
        s.lines().nth(1).unwrap().split_whitespace().nth(1).unwrap(),
        16,
    )
    .unwrap();
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_SYS_PTRACE: u64 = 1 << 19;
    const CAP_NET_ADMIN: u64 = 1 << 12;
    assert_eq!(
        bnd & (CAP_SYS_ADMIN | CAP_SYS_PTRACE | CAP_NET_ADMIN),
        0,
        "bounding set {bnd:x}"
    );
    let out = sh(&p, id, "grep NoNewPrivs /proc/self/status").await;
    assert!(text(&out.stdout).contains('1'), "{}", text(&out.stdout));
    // The fork server (pid 1) cannot be inspected from inside.
    let out = sh(
        &p,
        id,
        "ls /proc/1/fd 2>&1 >/dev/null | grep -c denied; cat /proc/1/environ 2>&1 | grep -c denied",
    )
    .await;
    assert_eq!(text(&out.stdout), "1\n1\n");
    // The task helper is read-only.
    let out = sh(
        &p,
        id,
        "echo x > /.sandkeep/sandkeep-task 2>&1 || echo DENIED",
    )
    .await;
    assert!(text(&out.stdout).contains("DENIED"));

    assert!(p.kill(id).await.unwrap());
}
