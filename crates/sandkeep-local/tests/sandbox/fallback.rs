//! The weaker level used where the kernel refuses namespaces, forced here
//! through the configuration: reported as such, commands, files and the
//! task helper work, writes outside the sandbox are refused (Landlock), and
//! kill and expiry still end every process, escaped daemons included.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sandkeep_local::{LocalConfig, LocalProvider};
use sandkeep_provider::Provider;
use support::local::*;
use support::*;

fn weak_provider(home: &Path) -> LocalProvider {
    LocalProvider::new(LocalConfig::new(home, EXE).with_process_only(true)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_only_fallback_is_reported_and_still_destroys_everything() {
    let home = state_dir();
    let p = weak_provider(home.path());
    let info = create(&p, 60).await;
    let id = &info.sandbox_id;
    assert_eq!(info.isolation, "landlock", "this kernel has Landlock");

    let out = sh(
        &p,
        id,
        "echo \"$HOME\"; pwd; id -u; echo hi > note && cat note",
    )
    .await;
    let s = text(&out.stdout);
    let lines: Vec<&str> = s.lines().collect();
    let sandbox_home = sandbox_dir(home.path(), id).join("home");
    assert_eq!(lines[..2], [sandbox_home.to_str().unwrap(); 2], "{s}");
    if rustix::process::geteuid().is_root() {
        assert!(
            lines[2].parse::<u32>().unwrap() >= 1 << 30,
            "root fallback runs as host root: {s}"
        );
    }
    assert_eq!(lines[3], "hi");
    assert_eq!(p.read_file(id, "note", 100).await.unwrap(), b"hi\n");
    assert_eq!(p.write_file(id, "d/e", b"x").await.unwrap(), 1);

    // Writes outside the sandbox directory are refused.
    let marker = format!("/var/tmp/sk-fallback-escape-{id}");
    let out = sh(&p, id, &format!("echo x > {marker} 2>/dev/null || echo DENIED; echo y > /tmp/sk-fallback-{id} 2>/dev/null || echo DENIED")).await;
    assert_eq!(text(&out.stdout), "DENIED\nDENIED\n");
    assert!(!Path::new(&marker).exists());
    let out = sh(&p, id, "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"").await;
    assert_eq!(text(&out.stdout), "t\n", "{}", text(&out.stderr));

    // The task helper works here too.
    let helper = p.task_helper(id).await.unwrap();
    assert!(helper.ends_with("/sandkeep-task"));
    let out = sh(&p, id, &format!("{helper} list")).await;
    assert_eq!(
        out.exit_code,
        Some(0),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // Kill ends every process, escaped ones included.
    let m = tag("2727");
    start_zoo(&p, id, &m).await;
    assert!(p.kill(id).await.unwrap());
    assert_no_survivors(&format!("1000.{m}"), "kill");
    assert!(!sandbox_dir(home.path(), id).exists());

    // And so does expiry.
    let info = create(&p, 3).await;
    let m = tag("2828");
    start_zoo(&p, &info.sandbox_id, &m).await;
    until(
        Duration::from_secs(6),
        "the expired process-only sandbox to go",
        || async { !sandbox_dir(home.path(), &info.sandbox_id).exists() },
    )
    .await;
    assert_no_survivors(&format!("1000.{m}"), "expiry");
    assert!(p.list().await.unwrap().is_empty());
}

/// Run by `refused_namespaces_fall_back_visibly` in a child process.
#[test]
#[ignore = "helper process of refused_namespaces_fall_back_visibly"]
fn refused_namespaces_inner() {
    if std::env::var_os("SK_REFUSE_NAMESPACES").is_none() {
        return;
    }
    fake_kernel::refuse(fake_kernel::ALL_NAMESPACES, libc::EPERM);
    let out = Command::new("unshare")
        .args(["-U", "true"])
        .status()
        .unwrap();
    assert!(!out.success(), "the simulation must refuse user namespaces");
    support::fake_kernel::block_on(async {
        let home = state_dir();
        let p = provider(home.path());
        let info = create(&p, 60).await;
        println!("ISOLATION {}", info.isolation);
        let out = sh(&p, &info.sandbox_id, "echo works").await;
        assert_eq!(text(&out.stdout), "works\n");
        assert!(p.kill(&info.sandbox_id).await.unwrap());
        let report = p.doctor().await.unwrap();
        println!("DOCTOR {}", report.isolation);
        assert!(!report.remediation.is_empty());
    });
}

#[test]
fn refused_namespaces_fall_back_visibly() {
    let stdout = run_ignored_test("fallback::refused_namespaces_inner", "SK_REFUSE_NAMESPACES");
    assert!(stdout.contains("ISOLATION landlock"), "{stdout}");
    assert!(stdout.contains("DOCTOR landlock"), "{stdout}");
}
