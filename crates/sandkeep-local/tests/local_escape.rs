//! Escape attempts from inside a local sandbox, each of which must fail:
//! writing host files, reading host secrets, seeing or signalling host
//! processes, unmasking through mount/umount (also from a nested user
//! namespace), reaching sandkeep's state directory, regaining host root.
//! One test per way out, so that one open door does not hide another.

mod support;

use std::process::{Command, Stdio};

use sandkeep_provider::Provider;
use support::local::*;

/// Writes land in the sandbox's copy, never on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_in_the_sandbox_never_on_the_host() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let marker = format!("/var/tmp/sk-escape-{}", id);
    let out = sh(
        &p,
        id,
        // Root's sandboxes see /usr read-only, an ordinary user's as
        // copy-on-write: either way nothing reaches the host.
        &format!("echo pwned > {marker} && echo wrote; touch /usr/sk-escape-probe 2>/dev/null"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "wrote\n",
        "/var/tmp must accept writes: {}",
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
    assert!(p.kill(id).await.unwrap());
}

/// Other host trees (homes, /work, /mnt, /root) are simply absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_host_trees_are_absent() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
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
    assert!(p.kill(id).await.unwrap());
}

/// /etc/shadow and /etc/gshadow are masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_secrets_are_masked() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let shadow = std::fs::read("/etc/shadow").unwrap_or_default();
    let out = sh(&p, id, "cat /etc/shadow; cat /etc/gshadow; echo end").await;
    assert_eq!(text(&out.stdout), "end\n", "secrets visible");
    assert!(
        !shadow.is_empty(),
        "the host has a non-empty /etc/shadow to protect"
    );
    assert!(p.kill(id).await.unwrap());
}

/// Host processes are invisible and unreachable by pid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_processes_are_invisible_and_unreachable() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
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
    assert!(p.kill(id).await.unwrap());
}

/// The mount table is out of reach, also through a nested user namespace:
/// each attempt is refused with the tool's own message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mount_table_is_out_of_reach() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    // Exit status and message of util-linux (present in every sandbox of
    // the base template: it is the host's /usr); a missing tool fails too.
    for (attempt, status, refusal) in [
        ("mount -o remount,ro /", 32, "mount: /: permission denied."),
        (
            "mount -t tmpfs none /mnt",
            32,
            "mount: /mnt: permission denied.",
        ),
        // libmount refuses before the syscall: sandbox root holds no
        // CAP_SYS_ADMIN over the mount namespace.
        (
            "umount /proc/kcore",
            32,
            "umount: /proc/kcore: must be superuser to unmount.",
        ),
        (
            "umount -l /proc",
            32,
            "umount: /proc: must be superuser to unmount.",
        ),
        // A nested user namespace would own a mount namespace of its own.
        (
            "unshare -Urm sh -c 'umount /proc/kcore; cat /proc/kcore'",
            1,
            "unshare: unshare failed: Operation not permitted",
        ),
    ] {
        let out = sh(&p, id, attempt).await;
        assert_eq!(
            (out.exit_code, text(&out.stderr).lines().next()),
            (Some(status), Some(refusal)),
            "{attempt:?} was not refused as expected; stdout: {}",
            text(&out.stdout)
        );
        assert_eq!(text(&out.stdout), "", "{attempt:?}");
    }
    let out = sh(&p, id, "cat /etc/shadow; echo end").await;
    assert_eq!(text(&out.stdout), "end\n", "/etc/shadow unmasked");
    assert!(p.kill(id).await.unwrap());
}

/// No nested user namespace (it would hold a full capability set), and a
/// seccomp filter against kernel surface such as keyrings or bpf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_nested_user_namespace_and_a_seccomp_filter() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    for attempt in ["unshare -Ur true", "unshare -U true"] {
        let out = sh(&p, id, attempt).await;
        assert_eq!(
            (out.exit_code, text(&out.stderr).trim_end()),
            (Some(1), "unshare: unshare failed: Operation not permitted"),
            "{attempt:?}"
        );
    }
    let out = sh(&p, id, "grep -E '^Seccomp(_filters)?:' /proc/self/status").await;
    let s = text(&out.stdout);
    // One filter: the init's (seccomp.rs), nothing stacked on it.
    assert!(
        s.contains("Seccomp:\t2") && s.contains("Seccomp_filters:\t1"),
        "no seccomp filter: {s}"
    );
    assert!(p.kill(id).await.unwrap());
}

/// What Docker's default profile denies is refused with EPERM, not merely
/// failing for want of arguments: each call gets arguments that would
/// otherwise fail differently (EFAULT/EINVAL/EBADF).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_denied_syscalls_are_refused_io_uring_included() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let probe = r#"python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in [("io_uring_setup", 425), ("io_uring_enter", 426), ("io_uring_register", 427), ("kcmp", 312), ("mbind", 237), ("clock_adjtime", 305)]:
    libc.syscall(nr, -1, 0, 0, 0, 0)
    print(name, ctypes.get_errno())
'"#;
    let out = sh(&p, &info.sandbox_id, probe).await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let eperm = libc::EPERM.to_string();
    let lines = text(&out.stdout);
    assert_eq!(lines.lines().count(), 6, "{lines}");
    for line in lines.lines() {
        let (name, errno) = line.split_once(' ').unwrap();
        assert_eq!(
            errno, eperm,
            "{name} was not refused by seccomp: errno {errno}"
        );
    }
    // The same probe on the host gets other errors: the probe can tell.
    let host = std::process::Command::new("bash")
        .args(["-c", probe])
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout);
    assert!(
        host.lines()
            .any(|l| l.starts_with("io_uring_setup") && !l.ends_with(&format!(" {eperm}"))),
        "{host}"
    );
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

/// Only the socket families a sandbox needs: others (vsock above all,
/// which no network namespace fences and which reaches the hypervisor)
/// fail with EAFNOSUPPORT, netlink protocols other than routing and socket
/// diagnostics with EPROTONOSUPPORT, while `ip`, `ss` and name lookups
/// keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_unix_inet_and_netlink_sockets_are_allowed() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let probe = r#"python3 -c '
import errno, socket
def attempt(make, *args):
    try:
        make(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
S = socket
for name, make, args in [
    ("AF_VSOCK", S.socket, (S.AF_VSOCK, S.SOCK_STREAM)),
    ("AF_PACKET", S.socket, (S.AF_PACKET, S.SOCK_DGRAM)),
    ("AF_KEY", S.socket, (15, S.SOCK_RAW, 2)),
    ("AF_BLUETOOTH", S.socket, (31, S.SOCK_STREAM)),
    ("AF_ALG", S.socket, (38, S.SOCK_SEQPACKET)),
    ("NETLINK_AUDIT", S.socket, (S.AF_NETLINK, S.SOCK_RAW, 9)),
    ("NETLINK_NETFILTER", S.socket, (S.AF_NETLINK, S.SOCK_RAW, 12)),
    ("AF_UNIX", S.socket, (S.AF_UNIX, S.SOCK_STREAM)),
    ("AF_UNIX pair", S.socketpair, (S.AF_UNIX, S.SOCK_STREAM)),
    ("AF_INET", S.socket, (S.AF_INET, S.SOCK_STREAM)),
    ("AF_INET6", S.socket, (S.AF_INET6, S.SOCK_DGRAM)),
    ("NETLINK_ROUTE", S.socket, (S.AF_NETLINK, S.SOCK_RAW, 0)),
    ("NETLINK_SOCK_DIAG", S.socket, (S.AF_NETLINK, S.SOCK_RAW, 4)),
]:
    print(name, attempt(make, *args), sep=":")
'"#;
    let out = sh(&p, id, probe).await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let expected = "AF_VSOCK:EAFNOSUPPORT\nAF_PACKET:EAFNOSUPPORT\nAF_KEY:EAFNOSUPPORT\n\
                    AF_BLUETOOTH:EAFNOSUPPORT\nAF_ALG:EAFNOSUPPORT\n\
                    NETLINK_AUDIT:EPROTONOSUPPORT\nNETLINK_NETFILTER:EPROTONOSUPPORT\n\
                    AF_UNIX:ok\nAF_UNIX pair:ok\nAF_INET:ok\nAF_INET6:ok\n\
                    NETLINK_ROUTE:ok\nNETLINK_SOCK_DIAG:ok\n";
    assert_eq!(text(&out.stdout), expected);
    // Root on the host opens a packet socket: the probe can tell.
    let host = Command::new("bash").args(["-c", probe]).output().unwrap();
    assert!(
        text(&host.stdout).contains("AF_PACKET:ok\n"),
        "{}",
        text(&host.stdout)
    );
    // The tools that talk netlink (routing, socket diagnostics) and
    // glibc's resolver.
    let out = sh(
        &p,
        id,
        "ip -o addr show dev lo && ss -ltn | head -n1 && \
         python3 -c 'import socket; print(len(socket.getaddrinfo(\"localhost\", 80)) > 0)'",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("inet 127.0.0.1/8") && s.contains("State") && s.ends_with("True\n"),
        "{s}"
    );
    assert!(p.kill(id).await.unwrap());
}

/// A 32-bit `socketcall` (through `int 0x80`) cannot get around the socket
/// families: any syscall of another arch than x86_64 kills the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_i386_socketcall_is_killed() {
    let (_home, p, info) = fresh_sandbox(120).await;
    // push rbx; socketcall(SYS_SOCKET, NULL); pop rbx; ret: on an
    // unfiltered host the kernel answers -EFAULT.
    let probe = r#"python3 -c '
import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes.fromhex("53b866000000bb0100000031c9cd805bc3"))
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))())
'"#;
    let out = sh(&p, &info.sandbox_id, probe).await;
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (Some(128 + libc::SIGSYS), String::new()),
        "{}",
        text(&out.stderr)
    );
    let host = Command::new("bash").args(["-c", probe]).output().unwrap();
    assert_eq!(text(&host.stdout), format!("-{}\n", libc::EFAULT));
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

/// Calls and personalities Docker's profile leaves out: `memfd_secret` and
/// `modify_ldt` fail as if the kernel lacked them, and `personality` may
/// only query or pick the Linux personas (READ_IMPLIES_EXEC would make
/// every readable mapping executable, ADDR_NO_RANDOMIZE turn off ASLR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memfd_secret_modify_ldt_and_odd_personalities_are_refused() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let probe = r#"python3 -c '
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(16)
for name, nr, arg0, arg1 in [
    ("memfd_secret", 447, 0, None),
    ("modify_ldt", 154, 0, buf),
    ("READ_IMPLIES_EXEC", 135, 0x0400000, None),
    ("ADDR_NO_RANDOMIZE", 135, 0x0040000, None),
    ("PER_LINUX", 135, 0, None),
    ("query", 135, 0xffffffff, None),
]:
    r = libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(arg0), arg1, ctypes.c_ulong(16))
    print(name, "ok" if r != -1 else errno.errorcode[ctypes.get_errno()], sep=":")
'"#;
    let out = sh(&p, &info.sandbox_id, probe).await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "memfd_secret:ENOSYS\nmodify_ldt:ENOSYS\nREAD_IMPLIES_EXEC:EPERM\n\
         ADDR_NO_RANDOMIZE:EPERM\nPER_LINUX:ok\nquery:ok\n"
    );
    // Unfiltered, the same calls succeed: the probe can tell.
    let host = Command::new("bash").args(["-c", probe]).output().unwrap();
    let host = text(&host.stdout);
    assert!(
        host.contains("modify_ldt:ok\n") && host.contains("READ_IMPLIES_EXEC:ok\n"),
        "{host}"
    );
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}

/// sandkeep's own state (here under /var/lib, a tree sandboxes see).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandkeeps_state_directory_is_unreachable() {
    let home = visible_state_dir();
    let p = provider(home.path());
    let info = create(&p, 120).await;
    let id = &info.sandbox_id;
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
    assert!(p.kill(id).await.unwrap());
}

/// Sandbox root is no host root: a shifted uid, no admin capabilities,
/// no_new_privs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_root_is_no_host_root() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
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
    assert!(p.kill(id).await.unwrap());
}

/// The fork server (pid 1) cannot be inspected from inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_server_cannot_be_inspected() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(
        &p,
        id,
        "ls /proc/1/fd 2>&1 >/dev/null | grep -c denied; cat /proc/1/environ 2>&1 | grep -c denied",
    )
    .await;
    assert_eq!(text(&out.stdout), "1\n1\n");
    assert!(p.kill(id).await.unwrap());
}

/// The task helper is read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_helper_is_read_only() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(
        &p,
        id,
        "echo x > /.sandkeep/sandkeep-task 2>&1 || echo DENIED",
    )
    .await;
    assert!(text(&out.stdout).contains("DENIED"));
    assert!(p.kill(id).await.unwrap());
}

/// The sandbox's directory on the host (`$SANDKEEP_HOME/sb/ID`, where its
/// disk is mounted before the pivot) is named nowhere in its mount table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mount_table_names_no_sandbox_directory() {
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(&p, id, "cat /proc/self/mountinfo").await;
    let mounts = text(&out.stdout);
    let sandboxes = home.path().join("sb").display().to_string();
    assert!(p.kill(id).await.unwrap());
    assert!(mounts.contains(" /proc "), "no mount table: {mounts}");
    assert!(
        !mounts.contains(&sandboxes),
        "the mount table names {sandboxes}: {mounts}"
    );
}

/// pid 1's command line inside names neither the keeper's executable,
/// nor its build, nor the state directory: only the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_1_shows_no_host_command_line() {
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(&p, id, "tr '\\0' ' ' < /proc/1/cmdline").await;
    let cmdline = text(&out.stdout);
    assert!(p.kill(id).await.unwrap());
    let exe_dir = std::path::Path::new(EXE).parent().unwrap();
    assert!(
        !cmdline.is_empty(),
        "no command line: {}",
        text(&out.stderr)
    );
    for host in [
        exe_dir.display().to_string(),
        home.path().display().to_string(),
        "keeper".to_owned(),
    ] {
        assert!(
            !cmdline.contains(&host),
            "pid 1's command line shows {host}: {cmdline}"
        );
    }
    // No build fingerprint either: the keeper's arguments are gone.
    assert_eq!(
        cmdline.split_whitespace().collect::<Vec<_>>(),
        ["sandkeep-init", id.as_str()]
    );
}

/// The sandbox sees its own cgroups as the root of each hierarchy, not
/// their host paths (a cgroup namespace); its commands run in the child
/// `w` of the one that freezes them (pause, SPEC §17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_cgroup_paths_do_not_show() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(&p, id, "cat /proc/self/cgroup").await;
    let cgroups = text(&out.stdout);
    assert!(p.kill(id).await.unwrap());
    assert!(!cgroups.is_empty(), "{}", text(&out.stderr));
    for line in cgroups.lines() {
        assert!(
            line.ends_with(":/") || line.ends_with(":/w"),
            "a host cgroup path shows inside: {cgroups}"
        );
    }
}

/// Root's uid-slot registry names the sandbox directories of every state
/// directory on the host: only root may list it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_uid_slot_registry_is_private() {
    use std::os::unix::fs::PermissionsExt;
    if !support::require(rustix::process::geteuid().is_root(), "uid slots are root's") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(120).await;
    let modes: Vec<(&str, u32)> = ["/run/sandkeep", "/run/sandkeep/uid-slots"]
        .into_iter()
        .map(|d| {
            (
                d,
                std::fs::metadata(d).unwrap().permissions().mode() & 0o777,
            )
        })
        .collect();
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    for (dir, mode) in modes {
        assert_eq!(mode, 0o700, "{dir} has mode {mode:o}");
    }
}
