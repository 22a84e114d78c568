//! The local provider run by an ordinary user (user namespaces, single id
//! map, per-directory overlays). CI runs as root, so the outer test creates
//! a throwaway user `sktest` if missing (and deletes it afterwards) and
//! re-runs this test binary as that user (`setpriv`), running the ignored
//! `unprivileged_inner` test; an
//! unprivileged CI runs the inner test's checks directly.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sandkeep_provider::{FileKind, Provider, ProviderError};
use support::local::*;
use support::*;

const USER: &str = "sktest";

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id").args([flag, USER]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn unprivileged_mode_works_and_holds() {
    if !rustix::process::geteuid().is_root() {
        // Already unprivileged: run the checks here.
        return inner_checks();
    }
    let _user = ThrowawayUser::ensure(USER);
    let (uid, gid) = (id_of("-u"), id_of("-g"));
    let later = MadePrivateLater::plant(uid, gid);
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--init-groups",
            "--",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(ignored_test_args("unprivileged::unprivileged_inner"))
        .env_clear()
        .env("HOME", "/var/tmp")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("SK_UNPRIVILEGED_INNER", "1")
        .env(LATER, &later.sync)
        .output()
        .expect("run setpriv");
    later.finish();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the unprivileged run as {USER} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// Names the directory through which the inner test and
/// [`MadePrivateLater`] take turns.
const LATER: &str = "SK_UNPRIVILEGED_LATER";
/// What the host writes into the files it made private.
const LATER_SECRET: &str = "sk-unpriv-made-private-later";

/// Root's world-readable files in /etc, /opt, /var and /usr/local, made
/// private and given a secret once the inner test's sandbox has read them
/// (`ready` in the sync directory; root answers `go`): the sandbox of an
/// ordinary user must not read the secret either.
struct MadePrivateLater {
    sync: std::path::PathBuf,
    files: Vec<std::path::PathBuf>,
    turn: Option<std::thread::JoinHandle<()>>,
}

impl MadePrivateLater {
    fn plant(uid: u32, gid: u32) -> Self {
        let tag = tag("later");
        let sync = Path::new("/var/tmp").join(format!("sk-unpriv-sync-{tag}"));
        std::fs::create_dir(&sync).unwrap();
        std::os::unix::fs::chown(&sync, Some(uid), Some(gid)).unwrap();
        let files: Vec<_> = ["/etc", "/opt", "/var", "/usr/local"]
            .iter()
            .map(|place| Path::new(place).join(format!("sk-unpriv-{tag}")))
            .collect();
        for f in &files {
            std::fs::write(f, format!("open-{tag}\n")).unwrap();
        }
        let list: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
        std::fs::write(sync.join("files"), list).unwrap();
        let (ready, go, made) = (sync.join("ready"), sync.join("go"), files.clone());
        let turn = std::thread::spawn(move || {
            poll(
                Duration::from_secs(120),
                "the inner test's sandbox read the files",
                || ready.exists().then_some(()),
            );
            for f in &made {
                std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
                std::fs::write(f, LATER_SECRET).unwrap();
            }
            std::fs::write(go, "").unwrap();
        });
        Self {
            sync,
            files,
            turn: Some(turn),
        }
    }

    fn finish(mut self) {
        self.turn
            .take()
            .unwrap()
            .join()
            .expect("the host's turn failed");
    }
}

impl Drop for MadePrivateLater {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        let _ = std::fs::remove_dir_all(&self.sync);
    }
}

/// The inner half of [`MadePrivateLater`].
async fn made_private_later_stays_unreadable(
    p: &sandkeep_local::LocalProvider,
    id: &sandkeep_provider::SandboxId,
) {
    let Some(sync) = std::env::var_os(LATER).map(std::path::PathBuf::from) else {
        return;
    };
    let files = std::fs::read_to_string(sync.join("files")).unwrap();
    let probe: String = files.lines().map(|f| format!("cat {f}; ")).collect();
    let before = text(&sh(p, id, &probe).await.stdout);
    assert_eq!(
        before.matches("open-").count(),
        files.lines().count(),
        "{before}"
    );
    std::fs::write(sync.join("ready"), "").unwrap();
    let go = sync.join("go");
    until(
        Duration::from_secs(120),
        "the host made the files private",
        || {
            let there = go.exists();
            async move { there }
        },
    )
    .await;
    let out = sh(p, id, &probe).await;
    assert!(
        !text(&out.stdout).contains(LATER_SECRET),
        "an ordinary user's sandbox read a host file made private after it looked:\n{}",
        text(&out.stdout)
    );
}

#[test]
#[ignore = "run by unprivileged_mode_works_and_holds as an ordinary user"]
fn unprivileged_inner() {
    if std::env::var_os("SK_UNPRIVILEGED_INNER").is_some() {
        inner_checks();
    }
}

fn inner_checks() {
    assert!(
        !rustix::process::geteuid().is_root(),
        "must run unprivileged"
    );
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(checks());
}

/// An ordinary user: a limit is enforced exactly when the doctor finds its
/// controller (a delegated cgroup v2 subtree; this machine's v1
/// hierarchies belong to root); otherwise it reads `None` and an explicit
/// request is refused by name. The disk is sized either way.
async fn limits_are_reported_as_the_doctor_says(
    p: &sandkeep_local::LocalProvider,
    info: &sandkeep_provider::SandboxInfo,
) {
    let report = p.doctor().await.unwrap();
    let ok = |name: &str| {
        report
            .checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} check"))
            .ok
    };
    assert_eq!(info.limits.memory_mib.is_some(), ok("memory limit"));
    assert_eq!(info.limits.pids.is_some(), ok("pids limit"));
    // A cpus of every CPU there is (the default on 2 cores) holds without
    // a cgroup: enforced either way then.
    let cores = std::thread::available_parallelism().unwrap().get() as u32;
    assert_eq!(
        info.limits.milli_cpus.is_some(),
        ok("cpu limit") || 2000 >= 1000 * cores
    );
    assert_eq!(info.limits.disk_mib, Some(4096));
    // Going without them is said first and loudly, not only in a row of
    // the table: nothing else bounds what one sandbox takes of the host.
    let unbounded: Vec<&str> = ["memory", "pids", "cpu"]
        .into_iter()
        .filter(|c| !ok(&format!("{c} limit")))
        .collect();
    if !unbounded.is_empty() {
        let first = report.remediation.first().map_or("", String::as_str);
        assert!(
            first.starts_with("WARNING: sandboxes here get NO ")
                && unbounded.iter().all(|c| first.contains(c)),
            "the doctor does not say first that sandboxes go without {unbounded:?}: {:?}",
            report.remediation
        );
    }
    if !ok("memory limit") {
        let asked = sandkeep_provider::CreateSpec {
            limits: sandkeep_provider::Limits {
                memory_mib: Some(128),
                ..Default::default()
            },
            ..spec(60)
        };
        match p.create(asked).await {
            Err(ProviderError::Unsupported(m)) => assert!(m.contains("memory_mib"), "{m}"),
            other => panic!("an unenforceable memory_mib was not refused: {other:?}"),
        }
    }
}

/// The keeper of an ordinary user joins the sandbox's network namespace
/// too (it owns it through its user namespace): a forward reaches a
/// server inside.
async fn port_forward_works(p: &sandkeep_local::LocalProvider, id: &sandkeep_provider::SandboxId) {
    use support::ports::*;
    p.write_file(id, "echo.py", ECHO_PY.as_bytes())
        .await
        .unwrap();
    let out = sh(
        p,
        id,
        "(setsid python3 echo.py 7000 </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let port = sandkeep_provider::Port::new(7000).unwrap();
    let forward = p
        .expose_port(id, port)
        .await
        .expect("expose as an ordinary user");
    until_answering(&forward.url, Duration::from_secs(20)).await;
}

async fn checks() {
    let home = state_dir();
    let p = provider(home.path());
    let t = Instant::now();
    let info = p.create(spec(60)).await.expect("unprivileged create");
    eprintln!("unprivileged create took {:?}", t.elapsed());
    let id = &info.sandbox_id;
    assert_eq!(info.isolation, "userns-single");
    limits_are_reported_as_the_doctor_says(&p, &info).await;

    let me = rustix::process::geteuid().as_raw();
    let out = sh(&p, id, "id -u; cat /proc/self/uid_map; echo $HOME; pwd").await;
    let s = text(&out.stdout);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], "0", "{s}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "1"]
    );
    assert_eq!(&lines[2..], ["/root", "/root"]);
    // The keeper's namespace maps root to the invoking user.
    let keeper = recorded_pid(home.path(), id, "keeper");
    let keeper_map = std::fs::read_to_string(format!("/proc/{keeper}/uid_map")).unwrap();
    assert_eq!(
        keeper_map.split_whitespace().collect::<Vec<_>>(),
        ["0", &me.to_string(), "1"]
    );

    // Files and copy-on-write where the user may write.
    assert_eq!(p.write_file(id, "a/b.txt", b"hey").await.unwrap(), 3);
    assert_eq!(p.read_file(id, "a/b.txt", 100).await.unwrap(), b"hey");
    let entries = p.list_files(id, "a").await.unwrap();
    assert_eq!(
        (entries[0].name.as_str(), entries[0].kind),
        ("b.txt", FileKind::File)
    );
    assert!(matches!(
        p.read_file(id, "missing", 10).await,
        Err(ProviderError::NoSuchPath { .. })
    ));
    port_forward_works(&p, id).await;
    let marker = format!("/var/tmp/sk-unpriv-escape-{id}");
    let out = sh(
        &p,
        id,
        &format!("echo x > {marker}; echo x > /tmp/inside && cat /tmp/inside"),
    )
    .await;
    assert_eq!(text(&out.stdout), "x\n");
    assert!(
        !Path::new(&marker).exists(),
        "a sandbox write reached the host"
    );

    // Escapes.
    let out = sh(&p, id, "cat /etc/shadow; echo end").await;
    assert_eq!(text(&out.stdout), "end\n");
    let out = sh(&p, id, "umount /etc/shadow 2>/dev/null && echo UNMOUNTED; mount -t tmpfs x /mnt 2>/dev/null && echo MOUNTED; ls /proc | grep -c '^[0-9]'").await;
    let s = text(&out.stdout);
    assert!(!s.contains("MOUNTED"), "{s}");
    assert!(s.trim().parse::<u32>().unwrap() < 10, "{s}");
    let state = home.path().display().to_string();
    let out = sh(&p, id, &format!("ls -A {state} 2>/dev/null | wc -l")).await;
    assert_eq!(text(&out.stdout), "0\n", "state directory visible");
    let out = sh(&p, id, "grep CapBnd /proc/self/status").await;
    let bnd =
        u64::from_str_radix(text(&out.stdout).split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(bnd & (1 << 21), 0, "CAP_SYS_ADMIN kept: {bnd:x}");

    made_private_later_stays_unreadable(&p, id).await;

    // Destruction, also of escaping processes.
    let m = tag("9191");
    start_zoo(&p, id, &m).await;
    assert!(p.kill(id).await.unwrap());
    assert_no_survivors(&format!("1000.{m}"), "kill");
    assert!(!sandbox_dir(home.path(), id).exists(), "files left behind");
    assert!(p.list().await.unwrap().is_empty());

    // The weaker level works for an ordinary user too.
    let weak = sandkeep_local::LocalProvider::new(
        sandkeep_local::LocalConfig::new(home.path(), EXE).with_process_only(true),
    )
    .unwrap();
    let info = weak.create(spec(60)).await.unwrap();
    assert_eq!(info.isolation, "landlock");
    let m = tag("9292");
    start_zoo(&weak, &info.sandbox_id, &m).await;
    let out = sh(
        &weak,
        &info.sandbox_id,
        &format!("touch {marker}-weak 2>/dev/null || echo DENIED"),
    )
    .await;
    assert_eq!(text(&out.stdout), "DENIED\n");
    assert!(weak.kill(&info.sandbox_id).await.unwrap());
    assert_no_survivors(&format!("1000.{m}"), "kill");
}
