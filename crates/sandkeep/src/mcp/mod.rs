//! MCP over the service, with rmcp: the tool list, `tools/call` routing,
//! and the two transports ([`stdio`], [`http`]).
//!
//! This layer decides no policy. It maps a call to
//! [`Service::call_json`], a result to `structuredContent` plus the same
//! JSON as text, a [`ToolError`] to an `isError: true` result, and an MCP
//! connection to a [`Session`]: a stdio process's lifetime is one session
//! whatever the protocol era; over HTTP a legacy (initialize) session is
//! one session and each 2026-07-28 request is stateless. A sessionless
//! caller is told so everywhere a default sandbox would apply: in
//! `tools/list` (`sandbox_id` required), in create_sandbox's result and in
//! errors.
//!
//! It also owns what only the protocol knows about: progress notifications
//! while a call runs (when the client sent a `progressToken`) and client
//! cancellation, which drops the call (for run_command that kills the
//! command's process group).

pub mod http;
mod http_answers;
pub mod stdio;
mod tasks;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};

use crate::provider::ProviderError;
use crate::service::catalog::{self, Era};
use crate::service::{Service, Session, ToolError};

/// What the server tells a model about itself at the handshake (true with
/// and without a session).
const INSTRUCTIONS: &str = "sandkeep gives you isolated Linux sandboxes to run commands in, and \
durable background tasks in them for long-running work (builds, test suites, servers) that \
survive disconnects. Typical flow: create_sandbox (timeout long enough for your work) and pass its sandbox_id to \
every call, run_command for quick commands, start_task for long ones, then wait_task with the \
returned handle (sandbox_id + task_id): it answers when the task ends or prints, without polling; \
page logs with the *_next_offset values (get_task reads any page). Tasks survive \
disconnects and server restarts. kill_sandbox when done.";

/// A client that asked for progress hears from a running call this often
/// (the TypeScript SDK gives up on a silent request after 60 s unless
/// progress resets its timer).
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// The same for a long-poll (wait_task), whose silence is its purpose and
/// whose waits are many: a server holding 1,000 of them would send 200
/// notifications a second at [`PROGRESS_INTERVAL`]. Two intervals still fit
/// in the TypeScript SDK's 60 s, so one late report does not cut it off.
pub const LONG_POLL_PROGRESS_INTERVAL: Duration = Duration::from_secs(25);

/// How often a call of `tool` reports progress.
fn progress_interval(tool: &str) -> Duration {
    if tool == "wait_task" {
        LONG_POLL_PROGRESS_INTERVAL
    } else {
        PROGRESS_INTERVAL
    }
}

fn publish(era: Era) -> Vec<Tool> {
    catalog::TOOLS
        .iter()
        .map(|t| {
            let a = t.annotations;
            Tool::new(t.name, t.description(era), Arc::new(t.input_schema(era)))
                .with_title(t.title)
                .with_raw_output_schema(Arc::new((t.output_schema)()))
                .with_annotations(
                    ToolAnnotations::with_title(t.title)
                        .read_only(a.read_only)
                        .destructive(a.destructive)
                        .idempotent(a.idempotent)
                        .open_world(a.open_world),
                )
        })
        .collect()
}

/// The published tool lists, built once per process from the catalogue.
static SESSION_TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| publish(Era::Session));
static SESSIONLESS_TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| publish(Era::Sessionless));

/// Where this server keeps sandboxes, named in "no such sandbox" errors
/// ([`crate::provider::whereabouts`]): a client that started the server
/// with other settings than the CLI's sees none of the CLI's sandboxes, and
/// must be told where it looks.
#[derive(Debug, Clone, Default)]
pub struct Whereabouts {
    note: Option<Arc<str>>,
}

impl Whereabouts {
    pub fn new(note: String) -> Self {
        Self {
            note: Some(note.into()),
        }
    }
}

impl std::fmt::Display for Whereabouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.note.as_deref().unwrap_or("state directory unknown"))
    }
}

/// Sandbox ids for a log line: `sb-1, sb-2` (their Debug form would read
/// `SandboxId(sb-1)`).
fn id_list(ids: &[crate::provider::SandboxId]) -> String {
    let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

/// Tools whose call is dropped as soon as the client cancels it: the
/// dropped provider call kills what it ran in the sandbox (run_command's
/// command, wait_task's waiter). Other calls run to their end, so that a
/// cancelled start or cancel never leaves a half-done change.
const ABANDONED_ON_CANCEL: &[&str] = &["run_command", "wait_task"];

/// How a handler maps calls to sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionScope {
    /// stdio: the process is the session, in every protocol era.
    Process,
    /// HTTP: a legacy session is the session; 2026-07-28 requests have none.
    HttpSession,
}

/// The rmcp handler: cheap to clone, so rmcp's HTTP factory can make one
/// per session or request.
#[derive(Clone)]
pub struct SandkeepMcp {
    service: Arc<Service>,
    session: Arc<SessionHandle>,
    scope: SessionScope,
    whereabouts: Whereabouts,
}

/// Owns a session; over HTTP its drop (legacy session deleted or expired)
/// ends the session in the background.
struct SessionHandle {
    session: Arc<Session>,
    on_drop: Option<http::SessionEnder>,
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        if let Some(ender) = self.on_drop.take() {
            ender.end(self.session.clone());
        }
    }
}

impl SandkeepMcp {
    /// A handler for a stdio server whose session the caller ends.
    pub fn stdio(service: Arc<Service>, session: Arc<Session>) -> Self {
        Self {
            service,
            session: Arc::new(SessionHandle {
                session,
                on_drop: None,
            }),
            scope: SessionScope::Process,
            whereabouts: Whereabouts::default(),
        }
    }

    /// Names the state directory in "no such sandbox" errors.
    pub fn with_whereabouts(mut self, whereabouts: Whereabouts) -> Self {
        self.whereabouts = whereabouts;
        self
    }

    fn http(service: Arc<Service>, ender: http::SessionEnder, whereabouts: Whereabouts) -> Self {
        Self {
            service,
            session: Arc::new(SessionHandle {
                session: Arc::new(Session::new()),
                on_drop: Some(ender),
            }),
            scope: SessionScope::HttpSession,
            whereabouts,
        }
    }

    /// Whether the request has a session: only a 2026-07-28 request over
    /// HTTP has none.
    fn era(&self, context: &RequestContext<RoleServer>) -> Era {
        if self.scope == SessionScope::HttpSession && tasks::modern(context) {
            Era::Sessionless
        } else {
            Era::Session
        }
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let era = self.era(context);
        let stateless;
        let session = match era {
            Era::Sessionless => {
                stateless = Session::stateless();
                &stateless
            }
            Era::Session => self.session.session.as_ref(),
        };
        // The branches that run something are boxed (as each tool is in
        // call_json): a handler's future is as large as its largest branch,
        // and every open call, an idle wait_task too, holds one.
        if tasks::wanted(&request, context) {
            return Ok(Box::pin(tasks::start(&self.service, session, request))
                .await
                .unwrap_or_else(|e| tool_error(&e, self.explain(&e, era)).into()));
        }
        let abandon = ABANDONED_ON_CANCEL.contains(&request.name.as_ref());
        let work = self
            .service
            .call_json(session, &request.name, request.arguments);
        let progress = context.meta.get_progress_token().map(|token| {
            Box::pin(report_progress(
                context.peer.clone(),
                token,
                request.name.to_string(),
            ))
        });
        let cancelled = async {
            if abandon {
                context.ct.cancelled().await
            } else {
                std::future::pending().await
            }
        };
        let outcome = tokio::select! {
            outcome = work => outcome,
            () = cancelled => {
                tracing::info!(tool = %request.name, "the client cancelled the call; stopped it");
                return Err(McpError::internal_error("cancelled by the client", None));
            }
            () = keep_reporting(progress) => unreachable!("progress reports run until the call ends"),
        };
        match outcome {
            Ok(value) => Ok(CallToolResult::structured(value).into()),
            Err(ToolError::UnknownTool(name)) => Err(McpError::invalid_params(
                format!("tool not found: {name:?}; call tools/list for the available tools"),
                None,
            )),
            Err(e) => {
                tracing::debug!(tool = %request.name, error = %e, "tool error");
                Ok(tool_error(&e, self.explain(&e, era)).into())
            }
        }
    }

    /// The error's message, plus what only this layer knows: that a
    /// sessionless caller has no default at all, and where this server
    /// looks for sandboxes.
    fn explain(&self, e: &ToolError, era: Era) -> String {
        match e {
            ToolError::NoDefaultSandbox if era == Era::Sessionless => catalog::NO_SESSION.into(),
            ToolError::Provider(ProviderError::NoSuchSandbox(_)) => {
                format!("{e} (this server: {})", self.whereabouts)
            }
            _ => e.to_string(),
        }
    }
}

/// Sends `notifications/progress` every [`progress_interval`] until
/// dropped; the progress value is the seconds elapsed.
async fn report_progress(peer: Peer<RoleServer>, token: ProgressToken, tool: String) {
    let started = tokio::time::Instant::now();
    let every = progress_interval(&tool);
    let mut ticks = tokio::time::interval_at(started + every, every);
    loop {
        ticks.tick().await;
        let secs = started.elapsed().as_secs();
        let note = ProgressNotificationParam::new(token.clone(), secs as f64)
            .with_message(format!("{tool} still running after {secs} s"));
        if let Err(e) = peer.notify_progress(note).await {
            tracing::debug!("cannot send progress: {e}");
        }
    }
}

/// Runs the progress reporter if there is one, else waits forever.
async fn keep_reporting(reporter: Option<impl Future<Output = ()>>) {
    match reporter {
        Some(r) => r.await,
        None => std::future::pending().await,
    }
}

/// A [`ToolError`] as an `isError: true` result saying `message`.
fn tool_error(e: &ToolError, message: String) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message)]);
    result.structured_content = e.structured();
    result
}

impl ServerHandler for SandkeepMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("sandkeep", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if let Some(ender) = &self.session.on_drop {
            ender.register(&self.session.session);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request).map(tasks::not_offered)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, &context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Box::pin(tasks::get(&self.service, request)).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Box::pin(tasks::cancel(&self.service, request)).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = match self.era(&context) {
            Era::Session => &SESSION_TOOLS,
            Era::Sessionless => &SESSIONLESS_TOOLS,
        };
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        SESSION_TOOLS.iter().find(|t| t.name == name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code defers MCP tools behind its tool search: the words an
    /// agent searches for must find sandkeep.
    #[test]
    fn instructions_and_titles_carry_the_words_agents_search_for() {
        for word in ["sandbox", "background", "run", "long-running", "command"] {
            assert!(INSTRUCTIONS.contains(word), "{word}");
        }
        for t in catalog::TOOLS {
            assert!(
                t.title.contains("sandbox") || t.title.contains("task"),
                "{}: {}",
                t.name,
                t.title
            );
        }
    }
}
