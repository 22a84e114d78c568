//! Host files in the `base` template (SPEC.md §10 "Host files"), against
//! real sandboxes: what others cannot read on the host (0600 and 0640
//! files, 0700 directories under /etc, /var, /opt, /srv, /usr/local, and
//! another sandkeep state directory with a live sandbox's `spec.json`) is
//! unreadable inside, to the sandbox's root and to an ordinary sandbox
//! user alike; what others may read stays readable; `/etc` stays a
//! writable copy-on-write copy; no host home or state directory shows.
//!
//! The planted files are root's and need root to plant: without root this
//! skips loudly, and fails under CI=true.

mod support;

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};

use sandkeep_provider::{CreateSpec, Provider};
use support::local::*;
use support::*;

/// Where files are planted on the host.
const PLACES: &[&str] = &["/etc", "/var", "/opt", "/srv", "/usr/local"];

/// The sandbox user a non-root probe runs as.
const SANDBOX_USER: u32 = 1000;

/// Held by each test here for its whole run: each changes the host's
/// /etc, and the snapshot test counts the snapshots those changes make.
static ETC: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Files and directories planted on the host, removed when dropped (also
/// when an assertion fails).
struct Planted {
    paths: Vec<PathBuf>,
    secret: String,
    /// Private files and directories, and the file inside each directory.
    private_files: Vec<PathBuf>,
    private_dirs: Vec<PathBuf>,
    /// World-readable files with their content.
    open: Vec<(PathBuf, String)>,
}

impl Planted {
    fn new(tag: &str) -> Self {
        let secret = format!("sk-hostfile-secret-{tag}");
        let mut p = Planted {
            paths: Vec::new(),
            secret: secret.clone(),
            private_files: Vec::new(),
            private_dirs: Vec::new(),
            open: Vec::new(),
        };
        for place in PLACES {
            let place = Path::new(place);
            assert!(
                place.is_dir(),
                "{} is missing on this host",
                place.display()
            );
            let name = |what: &str| place.join(format!("sk-hf-{tag}-{what}"));
            for (file, mode) in [(name("0600"), 0o600), (name("0640"), 0o640)] {
                p.file(&file, &secret, mode);
                p.private_files.push(file);
            }
            // A group others are not in: the sandbox's root group is not
            // the host's.
            chown(name("0640"), Some(0), Some(0)).unwrap();
            let dir = name("dir");
            std::fs::create_dir(&dir).unwrap();
            p.paths.push(dir.clone());
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            // World-readable itself, but inside a private directory.
            p.file(&dir.join("inner"), &secret, 0o644);
            p.private_dirs.push(dir);
            let open = name("open");
            let content = format!("open-{tag}");
            p.file(&open, &content, 0o644);
            p.open.push((open, content));
        }
        p
    }

    fn file(&mut self, path: &Path, content: &str, mode: u32) {
        std::fs::write(path, content).unwrap();
        self.paths.push(path.to_path_buf());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A shell probe printing `READ path` / `LISTED path` for every
    /// private thing it gets at, and the content of the open files.
    fn probe(&self) -> String {
        let mut s = String::new();
        for f in &self.private_files {
            let f = f.display();
            s.push_str(&format!("cat {f} 2>/dev/null && echo READ {f}; "));
        }
        for d in &self.private_dirs {
            let d = d.display();
            s.push_str(&format!(
                "ls -A {d} >/dev/null 2>&1 && echo LISTED {d}; \
                 cat {d}/inner 2>/dev/null && echo READ {d}/inner; "
            ));
        }
        for (f, _) in &self.open {
            s.push_str(&format!("cat {}; echo; ", f.display()));
        }
        s
    }

    fn check(&self, who: &str, stdout: &str, stderr: &str) {
        assert!(
            !stdout.contains(&self.secret)
                && !stdout.contains("READ ")
                && !stdout.contains("LISTED "),
            "{who} got at a private host file:\n{stdout}\n{stderr}"
        );
        for (f, content) in &self.open {
            assert!(
                stdout.contains(content.as_str()),
                "{who} cannot read the world-readable {}:\n{stdout}\n{stderr}",
                f.display()
            );
        }
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in self.paths.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
        }
    }
}

fn as_user(command: &str) -> String {
    let quoted = command.replace('\'', r"'\''");
    format!(
        "setpriv --reuid={SANDBOX_USER} --regid={SANDBOX_USER} --clear-groups -- sh -c '{quoted}'"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_others_cannot_read_on_the_host_is_unreadable_inside() {
    let _etc = ETC.lock().await;
    if !require(
        rustix::process::geteuid().is_root(),
        "planting root-only host files needs root",
    ) {
        return;
    }
    let tag = tag("");
    let planted = Planted::new(&tag);

    // A second state directory with a live sandbox whose spec.json holds
    // a secret (its API_KEY).
    let other_home = visible_state_dir();
    let other = provider(other_home.path());
    let other_secret = format!("sk-other-api-key-{tag}");
    let other_info = other
        .create(CreateSpec {
            envs: [("API_KEY".to_owned(), other_secret.clone())].into(),
            ..spec(120)
        })
        .await
        .expect("create the other sandbox");
    let other_dir = sandbox_dir(other_home.path(), &other_info.sandbox_id);
    let spec_json = std::fs::read_to_string(other_dir.join("spec.json")).unwrap();
    assert!(spec_json.contains(&other_secret), "{spec_json}");

    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let state_probe = format!(
        "cat {0}/spec.json 2>/dev/null; ls -A {1} 2>/dev/null; grep -rs {2} /var/tmp; echo",
        other_dir.display(),
        other_home.path().display(),
        other_secret,
    );
    for (who, command) in [
        ("sandbox root", planted.probe()),
        ("a sandbox user", as_user(&planted.probe())),
    ] {
        let out = sh(&p, id, &command).await;
        planted.check(who, &text(&out.stdout), &text(&out.stderr));
    }
    for (who, command) in [
        ("sandbox root", state_probe.clone()),
        ("a sandbox user", as_user(&state_probe)),
    ] {
        let out = sh(&p, id, &command).await;
        let stdout = text(&out.stdout);
        assert!(
            !stdout.contains(&other_secret) && stdout.trim().is_empty(),
            "{who} saw another state directory:\n{stdout}{}",
            text(&out.stderr)
        );
    }
    // The probe as a sandbox user really ran as that user.
    let out = sh(&p, id, &as_user("id -u")).await;
    assert_eq!(
        text(&out.stdout),
        format!("{SANDBOX_USER}\n"),
        "{}",
        text(&out.stderr)
    );

    // No host home, and none of the host's /root.
    let out = sh(&p, id, "ls -A /home; ls -A /root").await;
    let listed = text(&out.stdout);
    if let Ok(entries) = std::fs::read_dir("/root") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                !listed.lines().any(|l| l == name),
                "host /root's {name} shows inside:\n{listed}"
            );
        }
    }
    let out = sh(&p, id, &format!("ls -A {} 2>&1", home.path().display())).await;
    assert!(
        text(&out.stdout).trim().is_empty()
            || ["Permission denied", "No such file or directory"]
                .iter()
                .any(|refusal| text(&out.stdout).contains(refusal)),
        "the sandbox's own state directory shows: {}",
        text(&out.stdout)
    );

    // /etc is the sandbox's own, writable: an existing file and a new one.
    let hosts = std::fs::read("/etc/hosts").unwrap();
    let new_file = format!("/etc/sk-hf-{tag}-new");
    let out = sh(
        &p,
        id,
        &format!(
            "echo '10.0.0.9 sk-hf-{tag}' >> /etc/hosts && echo made > {new_file} \
             && grep -c sk-hf-{tag} /etc/hosts && cat {new_file}"
        ),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "1\nmade\n",
        "/etc is not writable: {}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read("/etc/hosts").unwrap(),
        hosts,
        "host /etc/hosts changed"
    );
    assert!(
        !Path::new(&new_file).exists(),
        "a sandbox write reached host /etc"
    );

    assert!(p.kill(id).await.unwrap());
    assert!(other.kill(&other_info.sandbox_id).await.unwrap());
}

/// Host files that become private after the sandbox exists stay out of
/// its reach: new 0600 and 0640 files and 0700 directories, and files
/// that were world-readable at create and are then made private and
/// given a secret, in /etc (the sandbox's root owns its /etc), /var,
/// /opt, /srv and /usr/local; as the sandbox's root and as another user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_becomes_private_after_create_stays_unreadable() {
    let _etc = ETC.lock().await;
    if !require(
        rustix::process::geteuid().is_root(),
        "planting root-only host files needs root",
    ) {
        return;
    }
    let earlier = Planted::new(&tag("before"));
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    // The sandbox saw the world-readable files as they were.
    let out = sh(&p, id, &earlier.probe()).await;
    earlier.check(
        "sandbox root, before",
        &text(&out.stdout),
        &text(&out.stderr),
    );

    let later = Planted::new(&tag("after"));
    let secret = later.secret.clone();
    for (file, _) in &earlier.open {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(file, &secret).unwrap();
    }
    for dir in &earlier.private_dirs {
        std::fs::write(dir.join("inner"), &secret).unwrap();
    }
    let mut probe = later.probe();
    for (file, _) in &earlier.open {
        probe.push_str(&format!("cat {} 2>/dev/null; echo; ", file.display()));
    }
    for dir in &earlier.private_dirs {
        probe.push_str(&format!("cat {}/inner 2>/dev/null; ", dir.display()));
    }
    for (who, command) in [
        ("sandbox root", probe.clone()),
        ("a sandbox user", as_user(&probe)),
    ] {
        let out = sh(&p, id, &command).await;
        let stdout = text(&out.stdout);
        assert!(
            !stdout.contains(&secret) && !stdout.contains("READ ") && !stdout.contains("LISTED "),
            "{who} got at a host file made private after create:\n{stdout}\n{}",
            text(&out.stderr)
        );
    }
    assert!(p.kill(id).await.unwrap());
}

/// A sandbox shows the host's /etc as it was at its create, from a
/// snapshot its state directory shares: sandboxes created while /etc is
/// unchanged share one; a file changed or made private on the host shows
/// so in the next sandbox and not in the running one; a snapshot that no
/// live sandbox can be using is removed when the next one is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sandbox_shows_etc_as_it_was_at_create() {
    if !require(
        rustix::process::geteuid().is_root(),
        "changing the host's /etc needs root",
    ) {
        return;
    }
    let _etc = ETC.lock().await;
    let home = state_dir();
    let p = provider(home.path());
    let store = home.path().join("etc-snapshots");
    let snapshots = || -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&store)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
            .collect();
        found.sort();
        found
    };
    let file = PathBuf::from(format!("/etc/sk-hf-{}-snap", tag("")));
    let planted = Planted {
        paths: vec![file.clone()],
        secret: String::new(),
        private_files: Vec::new(),
        private_dirs: Vec::new(),
        open: Vec::new(),
    };
    let show = format!("cat {} 2>/dev/null; echo end", file.display());
    std::fs::write(&file, "one\n").unwrap();

    let a = create(&p, 120).await;
    let b = create(&p, 120).await;
    assert_eq!(snapshots().len(), 1, "an unchanged /etc made two snapshots");
    let first = snapshots().remove(0);
    for id in [&a.sandbox_id, &b.sandbox_id] {
        assert_eq!(text(&sh(&p, id, &show).await.stdout), "one\nend\n");
    }
    // What one sandbox writes to its /etc stays its own: the snapshot
    // they share and the other sandbox see none of it.
    let tamper = format!("echo tampered >> {0} && cat {0}", file.display());
    assert_eq!(
        text(&sh(&p, &a.sandbox_id, &tamper).await.stdout),
        "one\ntampered\n"
    );
    assert_eq!(
        text(&sh(&p, &b.sandbox_id, &show).await.stdout),
        "one\nend\n"
    );
    let in_snapshot = first.join(file.file_name().unwrap());
    assert_eq!(std::fs::read_to_string(&in_snapshot).unwrap(), "one\n");

    std::fs::write(&file, "two\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = create(&p, 120).await;
    assert_eq!(
        text(&sh(&p, &c.sandbox_id, &show).await.stdout),
        "end\n",
        "a file made private before create shows"
    );
    assert_eq!(
        text(&sh(&p, &b.sandbox_id, &show).await.stdout),
        "one\nend\n",
        "a running sandbox's /etc changed"
    );
    assert_eq!(snapshots().len(), 2);
    let second = snapshots().into_iter().find(|s| *s != first).unwrap();

    // a and b go; c (on the second snapshot) stays. Both snapshots are
    // dated back, to be older than c's creation by more than the clock's
    // second.
    assert!(p.kill(&a.sandbox_id).await.unwrap());
    assert!(p.kill(&b.sandbox_id).await.unwrap());
    let ago = |secs| std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
    for (snapshot, secs) in [(&first, 3600), (&second, 1800)] {
        std::fs::File::open(snapshot)
            .unwrap()
            .set_modified(ago(secs))
            .unwrap();
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&file, "three\n").unwrap();
    let d = create(&p, 120).await;
    assert_eq!(
        text(&sh(&p, &d.sandbox_id, &show).await.stdout),
        "three\nend\n"
    );
    let left = snapshots();
    assert!(
        !left.contains(&first) && left.contains(&second) && left.len() == 2,
        "the snapshot no sandbox uses stays, or c's went: {left:?}"
    );
    for id in [&c.sandbox_id, &d.sandbox_id] {
        assert!(p.kill(id).await.unwrap());
    }
    drop(planted);
}
