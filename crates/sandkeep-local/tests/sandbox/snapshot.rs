//! Snapshots (SPEC §17) against real sandboxes: a snapshot holds the
//! files a sandbox wrote (its home, /etc, /tmp, a directory of its own at
//! the top), not its processes; a sandbox created from it sees them; the
//! snapshot's size is what was written; names are unique and deletion
//! makes the template unknown; a gone sandbox cannot be snapshotted; a
//! fork has the files and leaves no snapshot.

use crate::support;

use sandkeep_provider::{CreateSpec, Provider, ProviderError};
use support::local::*;

/// A sandbox created from snapshot `id`.
async fn from_snapshot(
    p: &sandkeep_local::LocalProvider,
    id: &str,
) -> sandkeep_provider::SandboxInfo {
    p.create(CreateSpec {
        template: id.to_owned(),
        ..spec(120)
    })
    .await
    .unwrap_or_else(|e| panic!("create from snapshot {id}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_from_a_snapshot_sees_the_files_not_the_processes() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let marker = tag("777");
    let out = sh(
        &p,
        id,
        &format!(
            "echo home > ~/notes.txt && echo etc > /etc/snapshot-test && mkdir -p /app/src \
             && echo app > /app/src/main.txt && echo tmp > /tmp/t.txt \
             && head -c 3000000 /dev/urandom > ~/big.bin \
             && setsid sleep 1000.{marker} </dev/null >/dev/null 2>&1 & echo ok"
        ),
    )
    .await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let snap = p
        .snapshot(id, Some(format!("snap-test-{marker}")))
        .await
        .expect("snapshot");
    assert_eq!(snap.snapshot_id, format!("snap-test-{marker}"));
    assert_eq!(&snap.sandbox_id, id);
    assert!(
        (3_000_000..20_000_000).contains(&snap.size_bytes),
        "a snapshot's size is what the sandbox wrote: {}",
        snap.size_bytes
    );
    let listed = p.list_snapshots().await.unwrap();
    assert_eq!(listed, vec![snap.clone()]);

    let copy = from_snapshot(&p, &snap.snapshot_id).await;
    assert_eq!(copy.template, snap.snapshot_id);
    let seen = sh(
        &p,
        &copy.sandbox_id,
        "cat ~/notes.txt /etc/snapshot-test /app/src/main.txt /tmp/t.txt; \
         wc -c < ~/big.bin; pgrep -x sleep || echo no-process",
    )
    .await;
    assert_eq!(
        text(&seen.stdout),
        "home\netc\napp\ntmp\n3000000\nno-process\n",
        "{}",
        text(&seen.stderr)
    );
    // The source sandbox goes on untouched.
    let still = sh(&p, id, "pgrep -x sleep >/dev/null && echo running").await;
    assert_eq!(text(&still.stdout), "running\n");

    match p.snapshot(id, Some(snap.snapshot_id.clone())).await {
        Err(e @ ProviderError::SnapshotExists(_)) => {
            assert!(e.to_string().contains(&snap.snapshot_id), "{e}")
        }
        other => panic!("a second snapshot of the same name: {other:?}"),
    }
    assert!(p.delete_snapshot(&snap.snapshot_id).await.unwrap());
    assert!(!p.delete_snapshot(&snap.snapshot_id).await.unwrap());
    assert!(p.list_snapshots().await.unwrap().is_empty());
    match p
        .create(CreateSpec {
            template: snap.snapshot_id.clone(),
            ..spec(60)
        })
        .await
    {
        Err(ProviderError::UnknownTemplate { .. }) => {}
        other => panic!("create from a deleted snapshot: {other:?}"),
    }
    // The sandbox made from it keeps its files.
    let kept = sh(&p, &copy.sandbox_id, "cat ~/notes.txt").await;
    assert_eq!(text(&kept.stdout), "home\n");
    p.kill(&copy.sandbox_id).await.unwrap();
    p.kill(id).await.unwrap();
    match p.snapshot(id, None).await {
        Err(ProviderError::NoSuchSandbox(_)) => {}
        other => panic!("snapshot of a killed sandbox: {other:?}"),
    }
    // Nothing half-made is left in the state directory.
    let left: Vec<_> = std::fs::read_dir(p.state_dir().join("snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A snapshot takes only what changed in `/etc` (every sandbox starts
/// from the host's): one that changed one file there is small, and a
/// sandbox from it has that change (an existing file changed in place,
/// copied up by the overlay) and the rest of /etc as base has it,
/// untouched: the restore rewrites none of its directories (GNU tar
/// rewrites the metadata of every directory in an archive, and on the
/// overlay that copied all of /etc up, the larger part of a create from a
/// snapshot). A snapshot of that sandbox still has the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_takes_what_changed_in_etc_not_all_of_it() {
    // A state directory's first create snapshots the host's /etc, at
    // times within the clock tick of that sandbox's ready moment, and a
    // snapshot takes what changed in that tick too (it never misses a
    // change): the source is the directory's second sandbox.
    let (_home, p, first) = fresh_sandbox(120).await;
    let info = p.create(spec(120)).await.expect("create");
    assert!(p.kill(&first.sandbox_id).await.unwrap());
    let id = &info.sandbox_id;
    let file = ["/etc/profile", "/etc/bash.bashrc", "/etc/environment"]
        .into_iter()
        .find(|f| std::path::Path::new(f).is_file())
        .expect("a common file in the host's /etc");
    let out = sh(
        &p,
        id,
        &format!("echo '# changed-in-sandbox' >> {file} && echo ok"),
    )
    .await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let snap = p.snapshot(id, None).await.expect("snapshot");
    assert!(
        snap.size_bytes < 512 * 1024,
        "a snapshot of one changed file in /etc is small, not all of /etc: {} bytes",
        snap.size_bytes
    );
    // The host's /etc changing (anything on the host may write to it)
    // makes the create snapshot it anew, every directory new: the check
    // below needs a create that made none.
    let etc_snapshots = || {
        std::fs::read_dir(p.state_dir().join("etc-snapshots"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut attempts = 0;
    let (copy, before_copy, etc_steady) = loop {
        attempts += 1;
        let known = etc_snapshots();
        let before_copy = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let copy = from_snapshot(&p, &snap.snapshot_id).await;
        let steady = etc_snapshots() == known;
        if steady || attempts == 3 {
            break (copy, before_copy, steady);
        }
        p.kill(&copy.sandbox_id).await.unwrap();
    };
    let seen = sh(
        &p,
        &copy.sandbox_id,
        &format!("tail -n 1 {file}; test -s /etc/passwd && echo passwd"),
    )
    .await;
    assert_eq!(
        text(&seen.stdout),
        "# changed-in-sandbox\npasswd\n",
        "{}",
        text(&seen.stderr)
    );
    // Changed since the copy's create began; the masks mounted at create
    // are not the restore's. A restore of every directory rewrites them
    // all (over a hundred in a usual /etc); a stray one may have moved
    // on the host meanwhile.
    let rewritten = sh(
        &p,
        &copy.sandbox_id,
        &format!(
            "cut -d' ' -f5 /proc/self/mountinfo > /tmp/mounts; \
             find /etc -xdev -mindepth 1 -type d -newerct @{}.{:09} | grep -vxF -f /tmp/mounts",
            before_copy.as_secs(),
            before_copy.subsec_nanos()
        ),
    )
    .await;
    let rewritten = text(&rewritten.stdout);
    if etc_steady {
        assert!(
            rewritten.lines().count() < 5,
            "directories of /etc rewritten by the restore: {rewritten}"
        );
    } else {
        eprintln!("the host's /etc changed in each of 3 creates: its directories not checked");
    }
    let again = p.snapshot(&copy.sandbox_id, None).await.expect("snapshot");
    let copy2 = from_snapshot(&p, &again.snapshot_id).await;
    let seen = sh(&p, &copy2.sandbox_id, &format!("tail -n 1 {file}")).await;
    assert_eq!(
        text(&seen.stdout),
        "# changed-in-sandbox\n",
        "a snapshot of a sandbox made from a snapshot keeps its /etc: {}",
        text(&seen.stderr)
    );
    for sandbox in [&copy2.sandbox_id, &copy.sandbox_id, id] {
        p.kill(sandbox).await.unwrap();
    }
    for snapshot in [&snap.snapshot_id, &again.snapshot_id] {
        p.delete_snapshot(snapshot).await.unwrap();
    }
}

/// A snapshot whose archive the sandbox's `tar` cannot read makes no
/// sandbox: the create fails with what `tar` said, and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_from_an_unreadable_snapshot_fails_with_tars_words_and_leaves_nothing() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let snap = p.snapshot(&info.sandbox_id, None).await.expect("snapshot");
    let archive = p
        .state_dir()
        .join("snapshots")
        .join(&snap.snapshot_id)
        .join("files.tar");
    std::fs::write(&archive, vec![b'x'; 4096]).unwrap();
    match p
        .create(CreateSpec {
            template: snap.snapshot_id.clone(),
            ..spec(60)
        })
        .await
    {
        Err(e) => assert!(
            e.to_string()
                .contains("restoring the snapshot's files failed")
                && e.to_string().contains("tar"),
            "{e}"
        ),
        Ok(copy) => panic!("a sandbox from a broken archive: {copy:?}"),
    }
    let live: Vec<_> = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.sandbox_id)
        .collect();
    assert_eq!(live, vec![info.sandbox_id.clone()]);
    p.kill(&info.sandbox_id).await.unwrap();
    p.delete_snapshot(&snap.snapshot_id).await.unwrap();
}

/// A sandbox process, as sandbox root, trying to take the snapshot's
/// output from its `tar` (pidfd_getfd, or opening /proc/PID/fd/1) and to
/// write 10 MiB to it after the snapshot is done; it says what it got.
const THIEF_PY: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438
def tar():
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                cmd = open('/proc/%s/cmdline' % pid, 'rb').read()
            except OSError:
                continue
            if cmd.startswith(b'tar\0') and b'--create' in cmd:
                return int(pid)
def take(pid):
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd >= 0:
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, 1, 0)
        if fd >= 0:
            return fd
    try:
        return os.open('/proc/%d/fd/1' % pid, os.O_WRONLY)
    except OSError:
        return -1
open('/tmp/thief-ready', 'w').close()
deadline, seen, fd = time.time() + 60, False, -1
while fd < 0 and time.time() < deadline and not os.path.exists('/tmp/thief-go'):
    pid = tar()
    if pid:
        seen = True
        fd = take(pid)
while not os.path.exists('/tmp/thief-go'):
    time.sleep(0.01)
if fd < 0:
    print('refused' if seen else 'no tar seen')
    sys.exit(0)
written = 0
try:
    for _ in range(160):
        written += os.write(fd, b'x' * 65536)
    print('wrote', written)
except OSError as e:
    print('taken; refused after', written, 'errno', e.errno)
"#;

/// A sandbox process that tries to take the snapshot's output from its
/// `tar` and write to it afterwards changes nothing on the host: the
/// archive keeps the size the snapshot reported. (When the archive file's
/// own descriptor was the tar's stdout, a process that got it could grow
/// the host file without bound, past every limit of the sandbox; here the
/// kernel refuses sandbox root the tar's descriptors, and should a host
/// allow it, what it gets is the pipe, closed once the snapshot is done.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_process_that_takes_the_snapshots_output_cannot_write_to_the_host() {
    if !support::require(
        std::path::Path::new("/usr/bin/python3").exists(),
        "the thief is a python3 script (the base template shows the host's /usr)",
    ) {
        return;
    }
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let setup = format!(
        "head -c 67108864 /dev/zero > /root/big && cat > /tmp/thief.py <<'PY'\n{THIEF_PY}\nPY\n\
         setsid python3 /tmp/thief.py </dev/null >/tmp/thief.out 2>&1 & \
         for i in $(seq 500); do [ -e /tmp/thief-ready ] && break; sleep 0.01; done; echo ok"
    );
    let out = sh(&p, id, &setup).await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let name = format!("snap-thief-{}", tag(""));
    let snap = p.snapshot(id, Some(name.clone())).await.expect("snapshot");
    let said = sh(
        &p,
        id,
        "touch /tmp/thief-go; for i in $(seq 1000); do grep -q . /tmp/thief.out && break; sleep 0.01; done; \
         cat /tmp/thief.out",
    )
    .await;
    let said = text(&said.stdout);
    assert!(
        !said.is_empty() && !said.starts_with("no tar seen"),
        "the thief: {said}"
    );
    let archive = home.path().join("snapshots").join(&name).join("files.tar");
    let on_host = std::fs::metadata(&archive).expect("the archive").len();
    assert_eq!(
        on_host, snap.size_bytes,
        "the archive grew on the host after the snapshot; the thief said: {said}"
    );
    assert!(
        !said.starts_with("wrote"),
        "the thief wrote somewhere: {said}"
    );
    assert!(p.kill(id).await.unwrap());
    assert!(p.delete_snapshot(&name).await.unwrap());
}

/// A fork (its snapshot taken while its sandbox is made) has the source's
/// files and leaves no snapshot behind; a fork of a sandbox that is gone
/// fails and leaves no sandbox and no snapshot either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_has_the_files_and_leaves_no_snapshot_and_a_failed_one_leaves_nothing() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let out = sh(
        &p,
        id,
        "mkdir -p /app && echo built > /app/state && echo ok",
    )
    .await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let fork = p.fork(id, spec(60)).await.expect("fork");
    assert!(fork.template.starts_with("snap-"), "{fork:?}");
    let read = sh(&p, &fork.sandbox_id, "cat /app/state").await;
    assert_eq!(text(&read.stdout), "built\n", "{}", text(&read.stderr));
    assert!(
        p.list_snapshots().await.unwrap().is_empty(),
        "the fork's snapshot kept"
    );
    p.kill(&fork.sandbox_id).await.unwrap();
    p.kill(id).await.unwrap();
    match p.fork(id, spec(60)).await {
        Err(ProviderError::NoSuchSandbox(_)) => {}
        other => panic!("a fork of a killed sandbox: {other:?}"),
    }
    assert!(p.list().await.unwrap().is_empty(), "a sandbox left");
    assert!(
        p.list_snapshots().await.unwrap().is_empty(),
        "a snapshot left"
    );
}
