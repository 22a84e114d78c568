//! Sessionless clients (protocol 2026-07-28 over HTTP, as Claude Code
//! speaks it) against a real `sandkeep serve --http`, with raw JSON-RPC
//! requests carrying the 2026-07-28 headers and `_meta`: nothing promises a
//! default sandbox that does not exist, and every hint says to pass
//! `sandbox_id`. Also: `--allow-origin`, and the README's annotation table
//! against what `tools/list` publishes.

use crate::support;

use serde_json::{Value, json};
use support::mcp::*;
use support::*;

const MODERN: &str = "2026-07-28";

/// One 2026-07-28 request: the required headers and `_meta`, answered as
/// JSON or a request-scoped SSE stream; returns the JSON-RPC response.
async fn modern(port: u16, token: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    });
    let mut req = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        req = req.header("mcp-name", name);
    }
    let response = req
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .expect("POST /mcp");
    let status = response.status();
    let body = response.text().await.expect("response body");
    assert!(status.is_success(), "{method}: {status}: {body}");
    let json_text = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| d.contains("\"id\":7"))
        .unwrap_or(body.as_str());
    serde_json::from_str(json_text).unwrap_or_else(|e| panic!("{method}: {e}: {body}"))
}

async fn tool(port: u16, token: &str, name: &str, args: Value) -> Value {
    let v = modern(
        port,
        token,
        "tools/call",
        json!({"name": name, "arguments": args}),
    )
    .await;
    v["result"].clone()
}

fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessionless_requests_are_told_to_pass_sandbox_id() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--http", "127.0.0.1:0"]).await;
    let token = server.token.clone().expect("the server printed its token");
    let port = server.port();

    let list = modern(port, &token, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    for name in [
        "run_command",
        "read_file",
        "write_file",
        "list_files",
        "start_task",
    ] {
        let t = tools.iter().find(|t| t["name"] == name).expect(name);
        let required = t["inputSchema"]["required"].as_array().unwrap();
        assert!(
            required.iter().any(|r| r == "sandbox_id"),
            "{name}: sandbox_id is required without a session: {t}"
        );
        let d = t["description"].as_str().unwrap();
        assert!(
            d.contains("sandbox_id is required") && !d.contains("default sandbox is used"),
            "{name}: {d}"
        );
    }
    for t in &tools {
        let all = t.to_string();
        assert!(
            !all.contains("this session's"),
            "{}: promises a session default: {all}",
            t["name"]
        );
    }

    let created = tool(port, &token, "create_sandbox", json!({"timeout": 60})).await;
    assert_ne!(created["isError"], true, "{created}");
    let sandbox = created["structuredContent"]["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        texts(&created).contains("pass this sandbox_id to every call")
            && created["structuredContent"]["next"]
                .as_str()
                .is_some_and(|n| n.contains("pass this sandbox_id")),
        "{created}"
    );

    let refused = tool(port, &token, "run_command", json!({"command": "true"})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let m = texts(&refused);
    // The request carried no sandbox_id: the error says where one comes
    // from, and speaks of no "this sandbox_id" it never had.
    assert!(
        m.contains("no default sandbox")
            && m.contains("pass sandbox_id to every call")
            && m.contains("create_sandbox's result")
            && m.contains("list_sandboxes")
            && !m.contains("this sandbox_id"),
        "{m}"
    );

    let ran = tool(
        port,
        &token,
        "run_command",
        json!({"sandbox_id": sandbox, "command": "[[ 1 == 1 ]] && echo bash"}),
    )
    .await;
    assert_eq!(ran["structuredContent"]["stdout"], "bash\n", "{ran}");
    // A small preview shows the verdict before the output.
    let text = texts(&ran);
    assert!(
        text.find("\"exit_code\"") < text.find("\"stdout\""),
        "{text}"
    );

    let gone = tool(
        port,
        &token,
        "read_file",
        json!({"sandbox_id": "sb-0000000000000000", "path": "x"}),
    )
    .await;
    let m = texts(&gone);
    // The error says where this server looks: the provider and its place.
    let (provider, place) = match &home.e2b {
        Some(endpoint) => ("provider e2b", endpoint.api_url.clone()),
        None => ("provider local", home.path().display().to_string()),
    };
    assert!(
        m.contains("no such sandbox") && m.contains(provider) && m.contains(&place),
        "{m}"
    );

    tool(port, &token, "kill_sandbox", json!({"sandbox_id": sandbox})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_origin_admits_a_named_web_client_only() {
    let home = Home::new();
    let server = HttpServer::start(
        &home,
        &[
            "--http",
            "127.0.0.1:0",
            "--allow-origin",
            "http://localhost:6274",
        ],
    )
    .await;
    let token = server.token.clone().unwrap();
    let status = |origin: &'static str| {
        let token = token.clone();
        let port = server.port();
        async move {
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{port}/mcp"))
                .header("accept", "application/json, text/event-stream")
                .header("authorization", format!("Bearer {token}"))
                .header("origin", origin)
                .json(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "web", "version": "0"}}}),
                )
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(status("http://localhost:6274").await, 200);
    assert_eq!(status("http://localhost:6275").await, 403);
    assert_eq!(status("http://evil.example").await, 403);
    server.stop().await;
}

/// The annotation table in README.md, as (tool, [read-only, destructive,
/// idempotent, open-world]).
fn readme_table() -> Vec<(String, [bool; 4])> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find("<!-- annotations-table")
        .expect("README.md has the annotations table marker");
    readme[start..]
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let flag = |i: usize| match cells[i] {
                "yes" => true,
                "no" => false,
                other => panic!("README annotation cell {other:?} in {l:?}: yes or no"),
            };
            (cells[0].to_owned(), [flag(1), flag(2), flag(3), flag(4)])
        })
        .collect()
}

#[tokio::test]
async fn annotations_match_the_readme_table() {
    let (client, _service, _session) = in_process(Recorder::new(None)).await;
    let tools = client.list_all_tools().await.unwrap();
    let table = readme_table();
    assert_eq!(
        table.len(),
        tools.len(),
        "README annotation table rows vs tools/list: {table:?}"
    );
    for t in &tools {
        let a = t.annotations.as_ref().expect("annotations");
        let published = [
            a.read_only_hint == Some(true),
            a.destructive_hint == Some(true),
            a.idempotent_hint == Some(true),
            a.open_world_hint == Some(true),
        ];
        let row = table
            .iter()
            .find(|(name, _)| name == t.name.as_ref())
            .unwrap_or_else(|| panic!("{} is missing from the README table", t.name));
        assert_eq!(row.1, published, "{}: README vs annotations", t.name);
        let d = t.description.as_deref().unwrap();
        // A description must not claim the opposite of its annotations.
        if published[0] {
            assert!(!d.contains("Destroy"), "{}: read-only yet {d}", t.name);
        }
        if d.contains("(bash -c)") {
            assert!(
                published[1] && published[3] && !published[0],
                "{} runs arbitrary commands: destructive and open-world",
                t.name
            );
        }
    }
    client.cancel().await.unwrap();
}
