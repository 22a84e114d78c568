//! Host shares through a real MCP client (SPEC §13): the operator's
//! `serve --share`, `create_sandbox`'s `shares` choosing among them, and
//! `list_changes` / `apply_changes`. On the e2b provider a share is
//! refused, plainly.

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
    let server = StdioServer::start_with(&home, &["--share", &cow, "--share", &o]).await;
    if home.e2b.is_some() {
        let e = err(&server.client, "create_sandbox", json!({})).await;
        assert!(e.contains("does not mount host shares"), "{e}");
        server.close().await;
        return;
    }

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
