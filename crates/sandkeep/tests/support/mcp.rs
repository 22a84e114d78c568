//! MCP test support: real `sandkeep serve` child processes (stdio and
//! HTTP) with rmcp clients, an in-process server over a duplex pipe, a
//! provider wrapper that records (or breaks) calls, and small result helpers.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::model::ProtocolVersion;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use sandkeep::mcp::SandkeepMcp;
use sandkeep::provider::{
    CreateSpec, ExecOutput, ExecRequest, FileEntry, Provider, ProviderError, Release,
    Result as PResult, SandboxId, SandboxInfo,
};
use sandkeep::service::{Service, Session};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use super::{Home, bin, send_signal, until, wait_exit};

pub type Client = RunningService<RoleClient, ()>;

/// A `sandkeep serve` child process with an rmcp client on its stdio.
pub struct StdioServer {
    pub child: Child,
    pub client: Client,
    pub stderr: Arc<Mutex<String>>,
}

impl StdioServer {
    pub async fn start(home: &Home) -> Self {
        Self::start_with(home, &[]).await
    }

    /// [`StdioServer::start`] with more arguments to `serve`.
    pub async fn start_with(home: &Home, args: &[&str]) -> Self {
        let mut child = home.spawn_serve_with(Stdio::piped(), args);
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stderr = collect(child.stderr.take().unwrap());
        let client = ().serve((stdout, stdin)).await.expect("MCP handshake with sandkeep serve");
        Self {
            child,
            client,
            stderr,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    /// Calls a tool that must succeed (see [`ok`]).
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        ok(&self.client, tool, args).await
    }

    /// Closes stdin (the session ends) and waits for the exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        let _ = self.client.cancel().await;
        wait_exit(&mut self.child, Duration::from_secs(15)).await
    }
}

/// Gathers a child's stderr in the background (for failure messages).
pub fn collect(stderr: tokio::process::ChildStderr) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    text
}

/// A raw client's `initialize` request (id 1, protocol 2025-11-25).
pub const RAW_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
/// A raw client's `initialized` notification.
pub const RAW_INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// What a raw client writes: the handshake, then `messages`, each line
/// ended by a newline.
pub fn raw_session(messages: &[&str]) -> String {
    [RAW_INITIALIZE, RAW_INITIALIZED]
        .iter()
        .chain(messages)
        .map(|m| format!("{m}\n"))
        .collect()
}

/// The `sandbox_id` of a tool result.
pub fn sid(v: &Value) -> String {
    v["sandbox_id"].as_str().expect("a sandbox_id").to_owned()
}

/// The `task_id` of a tool result.
pub fn tid(v: &Value) -> String {
    v["task_id"].as_str().expect("a task_id").to_owned()
}

/// The longest any test's tool call may take: far beyond the slowest one
/// (a 100 MiB transfer on a loaded machine), so that a call the server
/// never answers (a lost connection once left a test waiting for 16
/// minutes) fails the test with a message instead of stalling the suite.
const CALL_BOUND: std::time::Duration = std::time::Duration::from_secs(300);

/// Calls a tool with JSON arguments.
pub async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Value::Object(map) = args {
        params = params.with_arguments(map);
    }
    tokio::time::timeout(CALL_BOUND, client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool}: no answer within {CALL_BOUND:?}"))
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

/// Calls a tool that must succeed; returns its structured content after
/// checking the text block carries the same JSON.
pub async fn ok(client: &Client, tool: &str, args: Value) -> Value {
    let r = call(client, tool, args.clone()).await;
    assert_ne!(r.is_error, Some(true), "{tool} {args} failed: {}", text(&r));
    let structured = r.structured_content.clone().expect("structuredContent");
    let from_text: Value = serde_json::from_str(&text(&r)).expect("text block is JSON");
    assert_eq!(
        from_text, structured,
        "text block and structuredContent differ"
    );
    structured
}

/// Calls a tool that must fail as a tool error; returns its message.
pub async fn err(client: &Client, tool: &str, args: Value) -> String {
    let r = call(client, tool, args.clone()).await;
    assert_eq!(
        r.is_error,
        Some(true),
        "{tool} {args} should fail, got {:?}",
        r.structured_content
    );
    text(&r)
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls get_task until the state is terminal (or `deadline` passes).
pub async fn wait_terminal(
    client: &Client,
    sandbox: &str,
    task: &str,
    deadline: Duration,
) -> Value {
    let start = Instant::now();
    loop {
        let v = ok(
            client,
            "get_task",
            serde_json::json!({"sandbox_id": sandbox, "task_id": task}),
        )
        .await;
        if !matches!(v["state"].as_str(), Some("running")) {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "task {task} still running after {deadline:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads a task's whole stdout by following the next offsets.
pub async fn read_all_stdout(client: &Client, sandbox: &str, task: &str, limit: u64) -> String {
    let mut out = String::new();
    let mut offset = 0u64;
    loop {
        let v = ok(
            client,
            "get_task",
            serde_json::json!({"sandbox_id": sandbox, "task_id": task, "stdout_offset": offset, "limit": limit}),
        )
        .await;
        let next = v["stdout_next_offset"].as_u64().unwrap();
        out.push_str(v["stdout"].as_str().unwrap());
        if next == offset {
            return out;
        }
        offset = next;
    }
}

/// A local provider on this home, in-process.
pub fn local_provider(home: &Home) -> Arc<dyn Provider> {
    Arc::new(
        sandkeep::provider::local::LocalProvider::new(sandkeep::provider::local::LocalConfig::new(
            home.path(),
            bin(),
        ))
        .expect("local provider"),
    )
}

// ---- HTTP server ---------------------------------------------------------

/// A `sandkeep serve --http` child process.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
    /// What clients send as `Authorization: Bearer TOKEN`: the
    /// `--auth-token` argument, else the token the server generated and
    /// printed; `None` with `--insecure-no-auth`.
    pub token: Option<String>,
    pub stderr: Arc<Mutex<String>>,
}

impl HttpServer {
    pub async fn start(home: &Home, args: &[&str]) -> Self {
        let mut child = home
            .async_command()
            .arg("serve")
            .args(args)
            .env_remove("SANDKEEP_AUTH_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sandkeep serve --http");
        let stderr = collect(child.stderr.take().unwrap());
        let mut url = String::new();
        // The token's line may come after the URL's: both are awaited
        // (without a token there is no such line).
        let tokenless = args.contains(&"--insecure-no-auth");
        until(
            Duration::from_secs(10),
            "the server to print its URL and how to send its token",
            || {
                let printed = stderr.lock().unwrap();
                let found = printed
                    .lines()
                    .find_map(|l| l.split("serving MCP at ").nth(1).map(str::to_owned));
                if let Some(u) = found {
                    url = u;
                }
                let told = tokenless || printed.contains("`Authorization: Bearer ");
                std::future::ready(!url.is_empty() && told)
            },
        )
        .await;
        let given = args
            .iter()
            .position(|a| *a == "--auth-token")
            .map(|i| args[i + 1].to_owned());
        let printed = stderr.lock().unwrap().lines().find_map(|l| {
            let rest = l.split("`Authorization: Bearer ").nth(1)?;
            Some(rest.split('`').next()?.to_owned())
        });
        let token = given.or(printed.filter(|t| t != "TOKEN"));
        Self {
            child,
            url,
            token,
            stderr,
        }
    }

    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches("/mcp")
            .parse()
            .unwrap()
    }

    fn client_config(&self) -> StreamableHttpClientTransportConfig {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        match &self.token {
            Some(t) => config.auth_header(t.clone()),
            None => config,
        }
    }

    /// A client of the initialize protocol (one legacy session).
    pub async fn legacy(&self) -> Client {
        ().serve(StreamableHttpClientTransport::from_config(
            self.client_config(),
        ))
        .await
        .expect("legacy HTTP session")
    }

    /// A 2026-07-28 client (no session).
    pub async fn modern(&self) -> Client {
        ().serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(self.client_config()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("2026-07-28 HTTP client")
    }

    pub async fn stop(mut self) {
        send_signal(
            self.child.id().unwrap() as i32,
            rustix::process::Signal::TERM,
        );
        let status = wait_exit(&mut self.child, Duration::from_secs(30)).await;
        assert!(
            status.success(),
            "{status:?}\n{}",
            self.stderr.lock().unwrap()
        );
    }
}

// ---- in-process server ---------------------------------------------------

/// An in-process server over a duplex pipe, with its own session.
pub async fn in_process(provider: Arc<dyn Provider>) -> (Client, Arc<Service>, Arc<Session>) {
    let service = Arc::new(Service::new(provider, vec!["host-secret-value".into()]));
    let session = Arc::new(Session::new());
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let handler = SandkeepMcp::stdio(service.clone(), session.clone());
    tokio::spawn(async move {
        if let Ok(running) = handler.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await.expect("in-process handshake");
    (client, service, session)
}

/// A pause in one [`Recorder`] call, to order it against something else.
pub struct Gate {
    pub call: &'static str,
    pub entered: Arc<tokio::sync::Notify>,
    pub go: Arc<tokio::sync::Notify>,
}

impl Gate {
    pub fn new(call: &'static str) -> Self {
        Self {
            call,
            entered: Arc::new(tokio::sync::Notify::new()),
            go: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

/// How [`Recorder`] spoils an exec after forwarding it.
#[derive(Clone, Copy, Debug)]
pub enum ExecFault {
    /// Reported as `Unconfirmed`, the way a connection lost after sending
    /// looks.
    ConnectionLost,
    /// Reported as timed out with no status and no output, the way a
    /// command that has not answered within the exec's timeout looks.
    TimedOut,
}

/// A provider that records every call and forwards it to `inner` (or fails
/// with `Unavailable` without one). With `break_exec`, an exec whose
/// command contains the text is forwarded and then spoiled.
pub struct Recorder {
    pub inner: Option<Arc<dyn Provider>>,
    pub calls: Mutex<Vec<String>>,
    pub break_exec: Option<(String, ExecFault)>,
    /// When set, the named call signals `entered` and then waits for `go`
    /// before forwarding.
    pub gate: Option<Gate>,
}

impl Recorder {
    pub fn new(inner: Option<Arc<dyn Provider>>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            calls: Mutex::default(),
            break_exec: None,
            gate: None,
        })
    }

    pub fn breaking_exec(inner: Arc<dyn Provider>, matching: &str, fault: ExecFault) -> Arc<Self> {
        Arc::new(Self {
            inner: Some(inner),
            calls: Mutex::default(),
            break_exec: Some((matching.to_owned(), fault)),
            gate: None,
        })
    }

    /// The call named `gate.call` pauses: it notifies `gate.entered`, then
    /// waits for `gate.go`.
    pub fn gating(inner: Arc<dyn Provider>, gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            inner: Some(inner),
            calls: Mutex::default(),
            break_exec: None,
            gate: Some(gate),
        })
    }

    async fn pass_gate(&self, call: &str) {
        if let Some(gate) = self.gate.as_ref().filter(|g| g.call == call) {
            gate.entered.notify_one();
            gate.go.notified().await;
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn note(&self, what: impl Into<String>) -> PResult<&Arc<dyn Provider>> {
        self.calls.lock().unwrap().push(what.into());
        self.inner
            .as_ref()
            .ok_or_else(|| ProviderError::Unavailable("test provider: no sandbox host".into()))
    }
}

#[async_trait]
impl Provider for Recorder {
    fn kind(&self) -> &'static str {
        "recorder"
    }
    async fn create(&self, spec: CreateSpec) -> PResult<SandboxInfo> {
        let inner = self.note("create")?;
        self.pass_gate("create").await;
        inner.create(spec).await
    }
    async fn kill(&self, id: &SandboxId) -> PResult<bool> {
        self.note(format!("kill {id}"))?.kill(id).await
    }
    async fn kill_unless_retained(&self, id: &SandboxId) -> PResult<Release> {
        self.note(format!("kill_unless_retained {id}"))?
            .kill_unless_retained(id)
            .await
    }
    async fn list(&self) -> PResult<Vec<SandboxInfo>> {
        self.note("list")?.list().await
    }
    async fn info(&self, id: &SandboxId) -> PResult<SandboxInfo> {
        self.note(format!("info {id}"))?.info(id).await
    }
    async fn exec(&self, id: &SandboxId, request: ExecRequest) -> PResult<ExecOutput> {
        let inner = self.note(format!("exec {id} {}", request.command))?;
        let fault = self
            .break_exec
            .as_ref()
            .filter(|(m, _)| request.command.contains(m.as_str()))
            .map(|(_, f)| *f);
        let out = inner.exec(id, request).await;
        match fault {
            None => out,
            Some(ExecFault::ConnectionLost) => Err(ProviderError::Unconfirmed {
                sandbox: id.clone(),
                message: "test: connection reset after the request was sent".into(),
            }),
            Some(ExecFault::TimedOut) => Ok(ExecOutput {
                exit_code: None,
                stdout: Vec::new(),
                stderr: Vec::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                timed_out: true,
            }),
        }
    }
    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> PResult<Vec<u8>> {
        self.note(format!("read_file {id} {path}"))?
            .read_file(id, path, limit)
            .await
    }
    async fn write_file(&self, id: &SandboxId, path: &str, content: &[u8]) -> PResult<u64> {
        self.note(format!("write_file {id} {path}"))?
            .write_file(id, path, content)
            .await
    }
    async fn list_files(&self, id: &SandboxId, path: &str) -> PResult<Vec<FileEntry>> {
        self.note(format!("list_files {id} {path}"))?
            .list_files(id, path)
            .await
    }
    async fn renew(&self, id: &SandboxId) -> PResult<SandboxInfo> {
        self.note(format!("renew {id}"))?.renew(id).await
    }
    async fn retain(&self, id: &SandboxId) -> PResult<()> {
        let inner = self.note(format!("retain {id}"))?;
        self.pass_gate("retain").await;
        inner.retain(id).await
    }
    async fn task_helper(&self, id: &SandboxId) -> PResult<String> {
        self.note(format!("task_helper {id}"))?
            .task_helper(id)
            .await
    }
}
