//! Snapshots (SPEC §17) against real sandboxes: a snapshot holds the
//! files a sandbox wrote (its home, /etc, /tmp, a directory of its own at
//! the top), not its processes; a sandbox created from it sees them; the
//! snapshot's size is what was written; names are unique and deletion
//! makes the template unknown; a gone sandbox cannot be snapshotted.

use crate::support;

use sandkeep_provider::{CreateSpec, Provider, ProviderError};
use support::local::*;

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

    let copy = p
        .create(CreateSpec {
            template: snap.snapshot_id.clone(),
            ..spec(120)
        })
        .await
        .expect("create from the snapshot");
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
/// copied up by the overlay) and the rest of /etc as base has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_takes_what_changed_in_etc_not_all_of_it() {
    let (_home, p, info) = fresh_sandbox(120).await;
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
    let copy = p
        .create(CreateSpec {
            template: snap.snapshot_id.clone(),
            ..spec(120)
        })
        .await
        .expect("create from the snapshot");
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
    p.kill(&copy.sandbox_id).await.unwrap();
    p.kill(id).await.unwrap();
    p.delete_snapshot(&snap.snapshot_id).await.unwrap();
}
