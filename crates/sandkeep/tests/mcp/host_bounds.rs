//! The host-wide bounds of a state directory (`--max-sandboxes`,
//! `--max-total-memory-mib`) as a user meets them: through concurrent CLI
//! creates and an MCP server sharing one state directory. They bound the
//! local provider, so these run on it whatever `SANDKEEP_TEST_PROVIDER`
//! says.

use std::time::Duration;

use crate::support::mcp::{HttpServer, err, ok, sid};
use crate::support::{Home, require};

/// The host-wide bounds of a state directory hold across processes and
/// against concurrent creates: eight CLI creates at once with room for
/// three make exactly three sandboxes, the others told which bound stopped
/// them and how to raise it; a server with room for four counts the CLI's
/// three and makes one more, then answers a tool error, until a kill makes
/// room. The memory ceiling is set far out of the way: its default (80% of
/// RAM) is below four default sandboxes on a small host such as the v2 VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_count_bound_holds_across_processes() {
    const NO_MEMORY_CEILING: &str = "1048576";
    let home = Home::local();
    let creates: Vec<_> = (0..8)
        .map(|_| {
            home.async_command()
                .args(["sandbox", "create", "--json", "--timeout", "120"])
                .env("SANDKEEP_MAX_SANDBOXES", "3")
                .env("SANDKEEP_MAX_TOTAL_MEMORY_MIB", NO_MEMORY_CEILING)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn sandkeep sandbox create")
        })
        .collect();
    let mut made = Vec::new();
    for create in creates {
        let out = tokio::time::timeout(Duration::from_secs(60), create.wait_with_output())
            .await
            .expect("a create within 60 s")
            .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            made.push(v["sandbox_id"].as_str().unwrap().to_owned());
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("3 sandboxes")
                    && stderr.contains("--max-sandboxes")
                    && stderr.contains("SANDKEEP_MAX_SANDBOXES"),
                "{stderr}"
            );
        }
    }
    assert_eq!(made.len(), 3, "{made:?}");

    let server = HttpServer::start(
        &home,
        &[
            "--http",
            "127.0.0.1:0",
            "--max-sandboxes",
            "4",
            "--max-total-memory-mib",
            NO_MEMORY_CEILING,
        ],
    )
    .await;
    let client = server.modern().await;
    made.push(sid(
        &ok(&client, "create_sandbox", serde_json::json!({})).await
    ));
    let refused = err(&client, "create_sandbox", serde_json::json!({})).await;
    assert!(
        refused.contains("4 sandboxes") && refused.contains("--max-sandboxes"),
        "{refused}"
    );
    let gone = made.pop().unwrap();
    ok(
        &client,
        "kill_sandbox",
        serde_json::json!({"sandbox_id": gone}),
    )
    .await;
    made.push(sid(
        &ok(&client, "create_sandbox", serde_json::json!({})).await
    ));
    for id in made {
        ok(
            &client,
            "kill_sandbox",
            serde_json::json!({"sandbox_id": id}),
        )
        .await;
    }
    client.cancel().await.unwrap();
    server.stop().await;
}

/// The committed-memory ceiling: the `memory_mib` of every live sandbox
/// (2048 for one that asked for none) plus the new one's must fit; past it
/// create_sandbox is a tool error naming the ceiling and the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_memory_ceiling_counts_every_live_sandbox() {
    if !require(
        rustix::process::geteuid().is_root(),
        "memory_mib needs the memory cgroup (root here)",
    ) {
        return;
    }
    let home = Home::local();
    let server = HttpServer::start(
        &home,
        &["--http", "127.0.0.1:0", "--max-total-memory-mib", "3000"],
    )
    .await;
    let client = server.modern().await;
    let a = sid(&ok(
        &client,
        "create_sandbox",
        serde_json::json!({"memory_mib": 1024}),
    )
    .await);
    let refused = err(&client, "create_sandbox", serde_json::json!({})).await;
    assert!(
        refused.contains("1024 MiB")
            && refused.contains("2048 MiB")
            && refused.contains("3000 MiB")
            && refused.contains("--max-total-memory-mib"),
        "{refused}"
    );
    let b = sid(&ok(
        &client,
        "create_sandbox",
        serde_json::json!({"memory_mib": 1976}),
    )
    .await);
    let refused = err(
        &client,
        "create_sandbox",
        serde_json::json!({"memory_mib": 64}),
    )
    .await;
    assert!(refused.contains("3000 MiB"), "{refused}");
    for id in [a, b] {
        ok(
            &client,
            "kill_sandbox",
            serde_json::json!({"sandbox_id": id}),
        )
        .await;
    }
    client.cancel().await.unwrap();
    server.stop().await;
}
