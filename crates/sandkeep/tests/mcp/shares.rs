//! Host shares through a real MCP client (SPEC §13): the operator's
//! `serve --share`, `create_sandbox`'s `shares` choosing among them, and
//! `list_changes` / `apply_changes`. On the e2b provider the same, over
//! shares copied into the remote sandbox; an `rw` share is refused there.

use crate::support;

use serde_json::json;
use support::Home;
use support::mcp::{StdioServer, err, sid};

fn project() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new()
        .prefix("sandkeep-project")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("README"), "hello\n").unwrap();
    let path = std::fs::canonicalize(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    (dir, path)
}

#[tokio::test]
async fn an_agent_picks_among_the_operators_shares_and_applies_what_it_changed() {
    let home = Home::new();
    let (dir, p) = project();
    let (other, o) = project();
    let cow = format!("{p}:cow");
    if home.e2b.is_some() {
        let rw = format!("{o}:rw");
        let server = StdioServer::start_with(&home, &["--share", &rw]).await;
        let e = err(&server.client, "create_sandbox", json!({})).await;
        assert!(
            e.contains("is rw") && e.contains(&format!("{o}:cow")),
            "{e}"
        );
        server.close().await;
    }
    let server = StdioServer::start_with(&home, &["--share", &cow, "--share", &o]).await;

    // Never a host path the operator did not configure; nothing created.
    for (shares, says) in [
        (json!(["/etc"]), "is not one of them"),
        (json!([p, p]), "named twice"),
        (
            json!((0..17).map(|_| p.clone()).collect::<Vec<_>>()),
            "at most 16",
        ),
    ] {
        let e = err(&server.client, "create_sandbox", json!({"shares": shares})).await;
        assert!(e.contains("`shares`") && e.contains(says), "{e}");
        if says == "is not one of them" {
            assert!(
                e.contains(&format!("{p} (cow)")) && e.contains(&format!("{o} (ro)")),
                "{e}"
            );
        }
    }
    assert_eq!(
        server.ok("list_sandboxes", json!({})).await["sandboxes"],
        json!([])
    );

    let all = server.ok("create_sandbox", json!({})).await;
    assert_eq!(
        all["shares"],
        json!([{"path": p, "mode": "cow"}, {"path": o, "mode": "ro"}])
    );
    let none = server.ok("create_sandbox", json!({"shares": []})).await;
    assert_eq!(none["shares"], json!([]));
    let e = err(
        &server.client,
        "list_changes",
        json!({"sandbox_id": sid(&none)}),
    )
    .await;
    assert!(e.contains("no copy-on-write share"), "{e}");

    let sb = sid(&all);
    let ran = server
        .ok(
            "run_command",
            json!({"sandbox_id": sb, "command": format!("pwd; echo more >> README; cat {o}/README")}),
        )
        .await;
    assert_eq!(ran["stdout"], format!("{p}\nhello\n"));
    if home.e2b.is_some() {
        // A sandbox of `serve --e2b` may not mount: its ro copy is root's
        // and read-only by its modes (only its root could still write it).
        let modes = server
            .ok(
                "run_command",
                json!({"sandbox_id": sb, "command": format!("stat -c '%u %a' {o} {o}/README")}),
            )
            .await;
        assert_eq!(modes["stdout"], "0 555\n0 444\n", "{modes}");
    } else {
        let ro = server
            .ok(
                "run_command",
                json!({"sandbox_id": sb, "command": format!("echo x > {o}/README")}),
            )
            .await;
        assert_ne!(ro["exit_code"], 0, "an ro share took a write: {ro}");
        let said = ro["stderr"].as_str().unwrap();
        assert!(said.contains("Read-only file system"), "{ro}");
    }
    let listed = server
        .ok("list_changes", json!({"sandbox_id": sb, "diff": true}))
        .await;
    assert_eq!(
        listed["changes"],
        json!([{"path": format!("{p}/README"), "kind": "modified", "type": "file", "size": 11}])
    );
    assert!(
        listed["diff"].as_str().unwrap().contains("+more\n"),
        "{listed}"
    );
    // A task starts in the first share too.
    let task = server
        .ok("start_task", json!({"sandbox_id": sb, "command": "pwd"}))
        .await;
    let done = server
        .ok(
            "wait_task",
            json!({"sandbox_id": sb, "task_id": task["task_id"], "timeout": 60}),
        )
        .await;
    assert_eq!(done["stdout"], format!("{p}\n"), "{done}");

    assert_eq!(
        std::fs::read_to_string(dir.path().join("README")).unwrap(),
        "hello\n"
    );
    let applied = server.ok("apply_changes", json!({"sandbox_id": sb})).await;
    assert_eq!(applied["applied"], json!([format!("{p}/README")]));
    assert_eq!(applied["conflicts"], json!([]));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("README")).unwrap(),
        "hello\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(other.path().join("README")).unwrap(),
        "hello\n"
    );

    let tools = server.client.list_all_tools().await.unwrap();
    let apply = tools.iter().find(|t| t.name == "apply_changes").unwrap();
    let hints = apply.annotations.as_ref().unwrap();
    assert_eq!(
        hints.destructive_hint,
        Some(true),
        "clients ask before applying"
    );
    server.close().await;
}

/// Every kind of change, read by another server process than the one
/// that made the sandbox (the e2b provider finds its copies' layout in the
/// sandbox's metadata), and a host file changed meanwhile left alone.
#[tokio::test]
async fn a_new_server_lists_and_applies_every_kind_of_change() {
    let home = Home::new();
    let (dir, p) = project();
    let host = dir.path();
    std::fs::create_dir_all(host.join("src")).unwrap();
    std::fs::create_dir(host.join("d")).unwrap();
    std::fs::write(host.join("d/inner"), "i\n").unwrap();
    std::fs::write(host.join("src/a.rs"), "a\n").unwrap();
    std::fs::write(host.join("src/gone.rs"), "g\n").unwrap();
    std::fs::write(host.join("same"), "same\n").unwrap();
    let cow = format!("{p}:cow");

    let first = StdioServer::start_with(&home, &["--share", &cow]).await;
    let sb = sid(&first.ok("create_sandbox", json!({})).await);
    let script = "echo more >> README; printf 'same\\n' > same; rm src/gone.rs; \
                  echo b >> src/a.rs; mkdir -p new/deep; echo n > new/deep/f; \
                  rm -r d; echo x > d; ln -s /etc/passwd evil";
    let ran = first
        .ok("run_command", json!({"sandbox_id": sb, "command": script}))
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    // A task keeps the sandbox past this session.
    first
        .ok("start_task", json!({"sandbox_id": sb, "command": "true"}))
        .await;
    first.close().await;
    std::fs::write(host.join("src/a.rs"), "changed on the host\n").unwrap();

    let second = StdioServer::start_with(&home, &["--share", &cow]).await;
    let listed = second.ok("list_changes", json!({"sandbox_id": sb})).await;
    let got: Vec<(String, String, String)> = listed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let rel = c["path"].as_str().unwrap().strip_prefix(&p).unwrap();
            (
                rel.to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
                c["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("/README", "modified", "file"),
        ("/d", "modified", "file"),
        ("/evil", "added", "symlink"),
        ("/new", "added", "dir"),
        ("/new/deep", "added", "dir"),
        ("/new/deep/f", "added", "file"),
        ("/src/a.rs", "modified", "file"),
        ("/src/gone.rs", "deleted", "file"),
    ]
    .iter()
    .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
    .collect();
    assert_eq!(got, want, "{listed}");

    let applied = second.ok("apply_changes", json!({"sandbox_id": sb})).await;
    let conflicts: Vec<&str> = applied["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(conflicts, [format!("{p}/src/a.rs")], "{applied}");
    let read = |rel: &str| std::fs::read_to_string(host.join(rel)).unwrap();
    assert_eq!(read("README"), "hello\nmore\n");
    assert_eq!(read("src/a.rs"), "changed on the host\n");
    assert_eq!(read("d"), "x\n");
    assert_eq!(read("new/deep/f"), "n\n");
    assert!(!host.join("src/gone.rs").exists());
    assert_eq!(
        std::fs::read_link(host.join("evil")).unwrap(),
        std::path::Path::new("/etc/passwd")
    );
    second.ok("kill_sandbox", json!({"sandbox_id": sb})).await;
    second.close().await;
}
