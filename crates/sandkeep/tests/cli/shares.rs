//! Host shares (SPEC §13) through the CLI, on real sandboxes and real host
//! directories: same-path mounts, the three modes, the changes of a cow
//! share listed, diffed and applied, conflicts, and the symlink attacks
//! that must never write outside a share.

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use serde_json::Value;
use support::Home;
use support::cli::{assert_mcp_shape, describe};

/// A host uid no one here runs as: the owner of a shared project.
const OWNER: u32 = 4242;

/// A project directory on the host, owned by [`OWNER`] when root.
fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandkeep-project")
        .tempdir()
        .unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::create_dir_all(p.join("docs/old")).unwrap();
    std::fs::write(p.join("README"), "hello\n").unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(p.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(p.join("docs/old/a.txt"), "old\n").unwrap();
    std::fs::write(p.join("kind"), "a file that becomes a directory\n").unwrap();
    std::fs::write(p.join("secret"), "owner only\n").unwrap();
    std::fs::set_permissions(p.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    if rustix::process::geteuid().is_root() {
        chown_tree(p, OWNER);
    }
    dir
}

fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

fn path_of(dir: &tempfile::TempDir) -> String {
    std::fs::canonicalize(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// `sandbox create --share …`; returns the sandbox id.
fn create(home: &Home, shares: &[&str]) -> String {
    let mut args = vec!["sandbox", "create", "--json", "--timeout", "600"];
    for s in shares {
        args.extend(["--share", s]);
    }
    let created = home.json(&args);
    assert_mcp_shape("create_sandbox", &created);
    created["sandbox_id"].as_str().unwrap().to_owned()
}

/// Runs `command` in `sb`; its stdout, or the test fails.
fn sh(home: &Home, sb: &str, command: &str) -> String {
    home.ok(&["exec", "--sandbox", sb, "--", command])
}

fn changes(home: &Home, sb: &str) -> Vec<(String, String, String)> {
    let listed = home.json(&["sandbox", "changes", sb, "--json"]);
    assert_mcp_shape("list_changes", &listed);
    listed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["type"].as_str().unwrap().to_owned(),
                c["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn change(kind: &str, entry: &str, path: impl AsRef<Path>) -> (String, String, String) {
    (
        kind.to_owned(),
        entry.to_owned(),
        path.as_ref().to_str().unwrap().to_owned(),
    )
}

#[test]
fn a_cow_share_is_seen_at_its_path_keeps_the_host_intact_and_lists_exact_changes() {
    let home = Home::new();
    let dir = project();
    let p = path_of(&dir);
    let sb = create(&home, &[&format!("{p}:cow")]);
    let listed = home.json(&["sandbox", "list", "--json"]);
    let entry = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox_id"] == sb.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        entry["shares"],
        serde_json::json!([{"path": p, "mode": "cow"}])
    );

    // The first share is the default working directory; the owner's files
    // (a 0600 one too) are the sandbox root's.
    let seen = sh(&home, &sb, "pwd; cat README secret; stat -c %u:%a secret");
    assert_eq!(seen, format!("{p}\nhello\nowner only\n0:600\n"));

    sh(
        &home,
        &sb,
        "set -e
         echo more >> README
         rm src/main.rs
         cat src/lib.rs > src/lib.rs.tmp
         mv src/lib.rs.tmp src/lib.rs
         rm -r docs/old
         mkdir -p new/deep
         printf 'x\\n' > new/deep/file
         rm kind
         mkdir kind
         echo inside > kind/f
         ln -s /etc/passwd link
         chmod 700 secret",
    );
    // The host never changed.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("README")).unwrap(),
        "hello\n"
    );
    assert!(dir.path().join("src/main.rs").exists());
    assert!(!dir.path().join("new").exists());

    let got = changes(&home, &sb);
    let p = Path::new(&p);
    assert_eq!(
        got,
        vec![
            change("modified", "file", p.join("README")),
            change("deleted", "dir", p.join("docs/old")),
            change("modified", "dir", p.join("kind")),
            change("added", "file", p.join("kind/f")),
            change("added", "symlink", p.join("link")),
            change("added", "dir", p.join("new")),
            change("added", "dir", p.join("new/deep")),
            change("added", "file", p.join("new/deep/file")),
            change("modified", "file", p.join("secret")),
            change("deleted", "file", p.join("src/main.rs")),
        ],
        "src/lib.rs was rewritten with the same content: not a change"
    );

    let diffed = home.json(&["sandbox", "changes", &sb, "--diff", "--json"]);
    let diff = diffed["diff"].as_str().unwrap();
    let rel = p.strip_prefix("/").unwrap().display().to_string();
    for part in [
        format!("--- a/{rel}/README\n+++ b/{rel}/README\n@@ -1 +1,2 @@\n hello\n+more\n"),
        format!("--- a/{rel}/src/main.rs\n+++ /dev/null\n"),
        format!("--- /dev/null\n+++ b/{rel}/new/deep/file\n"),
    ] {
        assert!(diff.contains(&part), "the diff lacks {part:?}:\n{diff}");
    }
    assert_eq!(diffed["diff_truncated"], false);

    // A readable table for people.
    let table = home.ok(&["sandbox", "changes", &sb]);
    assert!(table.starts_with("CHANGE"), "{table}");
    assert!(
        table.contains("deleted") && table.contains("src/main.rs"),
        "{table}"
    );

    home.ok(&["sandbox", "kill", &sb]);
}

#[test]
fn applied_changes_reach_the_host_owned_by_the_share_owner_and_conflicts_are_left_alone() {
    let home = Home::new();
    let dir = project();
    let p = path_of(&dir);
    let sb = create(&home, &[&format!("{p}:cow")]);
    sh(
        &home,
        &sb,
        "set -e
         echo more >> README
         echo sandbox > src/lib.rs
         rm src/main.rs
         rm -r docs
         mkdir -p new
         printf '#!/bin/sh\\n' > new/run
         chmod 4755 new/run
         ln -s ../README new/link",
    );
    // The host changes one of them meanwhile: a conflict.
    std::fs::write(dir.path().join("src/lib.rs"), "host edit\n").unwrap();

    let out = home.run(&["sandbox", "apply", &sb, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a conflict exits 1: {}",
        describe(&out)
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_mcp_shape("apply_changes", &done);
    let conflicts = done["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{done}");
    assert_eq!(conflicts[0]["path"], format!("{p}/src/lib.rs"));
    assert!(
        conflicts[0]["reason"]
            .as_str()
            .unwrap()
            .contains("changed on the host"),
        "{done}"
    );

    let host = dir.path();
    assert_eq!(
        std::fs::read_to_string(host.join("README")).unwrap(),
        "hello\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("src/lib.rs")).unwrap(),
        "host edit\n"
    );
    assert!(!host.join("src/main.rs").exists());
    assert!(!host.join("docs").exists());
    let run = std::fs::symlink_metadata(host.join("new/run")).unwrap();
    assert_eq!(run.mode() & 0o7777, 0o755, "setuid is never applied");
    assert_eq!(
        std::fs::read_link(host.join("new/link")).unwrap(),
        Path::new("../README")
    );
    if rustix::process::geteuid().is_root() {
        for made in ["README", "new", "new/run", "new/link"] {
            let md = std::fs::symlink_metadata(host.join(made)).unwrap();
            assert_eq!((md.uid(), md.gid()), (OWNER, OWNER), "{made}");
        }
    }
    // Applied paths are no longer changes; the conflict still is.
    // (The sandbox's file keeps its setuid bit: still a difference.)
    let left = changes(&home, &sb);
    assert_eq!(
        left,
        vec![
            change("modified", "file", format!("{p}/new/run")),
            change("modified", "file", format!("{p}/src/lib.rs")),
        ]
    );
    home.ok(&["sandbox", "kill", &sb]);
}

#[test]
fn apply_never_writes_outside_the_share() {
    let home = Home::new();
    let dir = project();
    let outside = tempfile::tempdir().unwrap();
    let p = path_of(&dir);
    // A host symlink inside the share (the project owner's), pointing out
    // of it.
    symlink(outside.path(), dir.path().join("out")).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::lchown(dir.path().join("out"), Some(OWNER), Some(OWNER)).unwrap();
    }
    let sb = create(&home, &[&format!("{p}:cow")]);
    sh(
        &home,
        &sb,
        &format!(
            "set -e
             rm out
             mkdir out
             echo planted > out/file
             mkdir -p {o}
             ln -s {o} escape
             echo x > escape/through",
            o = outside.path().display()
        ),
    );
    // `..` in paths: refused, nothing applied.
    let out = home.run(&["sandbox", "apply", &sb, &format!("{p}/out/../../x")]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`paths`"),
        "{}",
        describe(&out)
    );
    let out = home.run(&["sandbox", "apply", &sb, "/etc"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));

    let done = home.json(&["sandbox", "apply", &sb, "--json"]);
    assert!(done["conflicts"].as_array().unwrap().is_empty(), "{done}");
    let listing: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert!(
        listing.is_empty(),
        "nothing may reach the directory outside: {listing:?}"
    );
    let out_dir = std::fs::symlink_metadata(dir.path().join("out")).unwrap();
    assert!(
        out_dir.is_dir(),
        "the host symlink was replaced by a directory"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/file")).unwrap(),
        "planted\n"
    );
    assert_eq!(
        std::fs::read_link(dir.path().join("escape")).unwrap(),
        outside.path(),
        "a symlink is applied as a symlink"
    );
    home.ok(&["sandbox", "kill", &sb]);
}

#[test]
fn ro_refuses_writes_rw_writes_through_as_the_owner_and_a_toolchain_runs_from_a_share() {
    let home = Home::new();
    let (ro, rw) = (project(), project());
    let tools = tempfile::tempdir().unwrap();
    std::fs::create_dir(tools.path().join("bin")).unwrap();
    let tool = tools.path().join("bin/greet");
    std::fs::write(&tool, "#!/bin/sh\necho \"greetings from $0\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ro_p, rw_p, tools_p) = (path_of(&ro), path_of(&rw), path_of(&tools));
    let sb = create(
        &home,
        &[&format!("{rw_p}:rw"), &format!("{ro_p}:ro"), &tools_p],
    );
    let out = home.run(&[
        "exec",
        "--sandbox",
        &sb,
        "--",
        &format!("echo x > {ro_p}/README"),
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        std::fs::read_to_string(ro.path().join("README")).unwrap(),
        "hello\n"
    );

    let pwd = sh(&home, &sb, "pwd; mkdir made && echo new > made/file");
    assert_eq!(
        pwd,
        format!("{rw_p}\n"),
        "the first share is the working directory"
    );
    assert_eq!(
        std::fs::read_to_string(rw.path().join("made/file")).unwrap(),
        "new\n"
    );
    if rustix::process::geteuid().is_root() {
        for made in ["made", "made/file"] {
            let md = std::fs::metadata(rw.path().join(made)).unwrap();
            assert_eq!(
                (md.uid(), md.gid()),
                (OWNER, OWNER),
                "{made} is the owner's on the host"
            );
        }
    }
    let greeted = sh(&home, &sb, &format!("PATH={tools_p}/bin:$PATH greet"));
    assert_eq!(greeted, format!("greetings from {tools_p}/bin/greet\n"));

    // Neither has changes to list.
    let out = home.run(&["sandbox", "changes", &sb]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no copy-on-write share"),
        "{}",
        describe(&out)
    );
    home.ok(&["sandbox", "kill", &sb]);
}

#[test]
fn bad_shares_are_refused_with_the_flag_named_and_nothing_created() {
    let home = Home::new();
    let file = tempfile::NamedTempFile::new().unwrap();
    let file = file.path().to_str().unwrap().to_owned();
    let state = home.path().to_str().unwrap().to_owned();
    for (share, says) in [
        ("/".to_owned(), "whole host filesystem"),
        ("/nonexistent/project".to_owned(), "No such file"),
        (file.clone(), "not a directory"),
        (state.clone(), "state directory"),
        (
            Path::new(&state).parent().unwrap().display().to_string(),
            "state directory",
        ),
    ] {
        let out = home.run(&["sandbox", "create", "--share", &share]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{share}: {}", describe(&out));
        assert!(
            stderr.contains(&format!("--share {share}")) && stderr.contains(says),
            "{share}: {}",
            describe(&out)
        );
        let out = home
            .command(&["serve", "--share", &share])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "serve --share {share}: {}",
            describe(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            describe(&out)
        );
    }
    let listed = home.json(&["sandbox", "list", "--json"]);
    assert_eq!(listed["sandboxes"], serde_json::json!([]));
}

#[test]
fn a_fresh_exec_with_a_cow_share_says_what_it_discards() {
    let home = Home::new();
    let dir = project();
    let p = path_of(&dir);
    let out = home.run(&[
        "exec",
        "--share",
        &format!("{p}:cow"),
        "--",
        "echo x > a && echo y > b && rm README",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("3 change(s) to the cow share(s) are discarded"),
        "{}",
        describe(&out)
    );
    assert!(dir.path().join("README").exists() && !dir.path().join("a").exists());
    let listed = home.json(&["sandbox", "list", "--json"]);
    assert_eq!(
        listed["sandboxes"],
        serde_json::json!([]),
        "the fresh sandbox is gone"
    );
}

/// The mcp-config line carries the shares to `serve`.
#[test]
fn mcp_config_passes_the_shares_to_serve() {
    let home = Home::new();
    let dir = project();
    let p = path_of(&dir);
    let line = home.ok(&["mcp-config", "claude-code", "--share", &format!("{p}:cow")]);
    assert!(line.contains(&format!("serve --share {p}:cow")), "{line}");
    let json: Value =
        serde_json::from_str(&home.ok(&["mcp-config", "json", "--share", &p])).unwrap();
    assert_eq!(
        json["mcpServers"]["sandkeep"]["args"],
        serde_json::json!(["serve", "--share", p])
    );
    let out = home.run(&["mcp-config", "json", "--share", "/nonexistent/x"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

/// An ordinary user's own project, shared cow, changed and applied: what
/// lands is that user's. Run as root, it runs `sandkeep` as a throwaway
/// user (`setpriv`).
#[test]
fn an_ordinary_user_shares_their_project_and_applies_its_changes() {
    const USER: &str = "sktest";
    if !rustix::process::geteuid().is_root() {
        eprintln!("already an ordinary user: the other share tests cover this one");
        return;
    }
    let _user = support::local::ThrowawayUser::ensure(USER);
    let id = |flag: &str| -> u32 {
        let out = std::process::Command::new("id")
            .args([flag, USER])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (uid, gid) = (id("-u"), id("-g"));
    let base = tempfile::Builder::new()
        .prefix("sandkeep-user")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let project = base.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("README"), "hello\n").unwrap();
    for p in [&project, &project.join("README")] {
        std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    }
    let home = base.path().join("state");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    let p = project.to_str().unwrap().to_owned();
    let run = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--init-groups",
                "--",
            ])
            .arg(support::bin())
            .args(args)
            .env_clear()
            .env("SANDKEEP_HOME", &home)
            .env("HOME", base.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .expect("run setpriv");
        assert_eq!(
            out.status.code(),
            Some(0),
            "sandkeep {args:?} as {USER}: {}",
            describe(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let created: Value = serde_json::from_str(&run(&[
        "sandbox",
        "create",
        "--json",
        "--share",
        &format!("{p}:cow"),
    ]))
    .unwrap();
    let sb = created["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(created["isolation"], "userns-single", "{created}");
    run(&[
        "exec",
        "--sandbox",
        &sb,
        "--",
        "echo more >> README; mkdir d; echo x > d/f",
    ]);
    let listed: Value = serde_json::from_str(&run(&["sandbox", "changes", &sb, "--json"])).unwrap();
    let paths: Vec<&str> = listed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    let expected = [format!("{p}/README"), format!("{p}/d"), format!("{p}/d/f")];
    assert_eq!(paths, expected, "{listed}");
    assert_eq!(
        std::fs::read_to_string(project.join("README")).unwrap(),
        "hello\n"
    );
    run(&["sandbox", "apply", &sb]);
    assert_eq!(
        std::fs::read_to_string(project.join("README")).unwrap(),
        "hello\nmore\n"
    );
    for made in ["README", "d", "d/f"] {
        let md = std::fs::metadata(project.join(made)).unwrap();
        assert_eq!((md.uid(), md.gid()), (uid, gid), "{made} is the user's");
    }
    run(&["sandbox", "kill", &sb]);
}
