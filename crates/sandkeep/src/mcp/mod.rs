//! MCP over the service, with rmcp: the tool list, `tools/call` routing,
//! and the two transports ([`stdio`], [`http`]).
//!
//! This layer decides no policy. It maps a call to
//! [`Service::call_json`], a result to `structuredContent` plus the same
//! JSON as text, a [`ToolError`] to an `isError: true` result, and an MCP
//! connection to a [`Session`]: a stdio process's lifetime is one session
//! whatever the protocol era; over HTTP a legacy (initialize) session is
//! one session and each 2026-07-28 request is stateless.

pub mod http;
pub mod stdio;
mod tasks;

use std::sync::{Arc, LazyLock};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::service::{Service, Session, ToolError, catalog};

/// What the server tells a model about itself at the handshake.
const INSTRUCTIONS: &str = "sandkeep gives you Linux sandboxes and durable background tasks in them. \
Typical flow: create_sandbox (timeout long enough for your work), run_command for quick commands, \
start_task for long ones, then poll get_task with the returned handle (sandbox_id + task_id), paging \
logs with the *_next_offset values. Tasks survive disconnects and server restarts; sandboxes without \
tasks are destroyed when this session ends. kill_sandbox when done.";

/// The published tool list, built once per process from the catalogue.
static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    catalog::TOOLS
        .iter()
        .map(|t| {
            Tool::new(t.name, t.description, Arc::new((t.input_schema)()))
                .with_title(t.title)
                .with_raw_output_schema(Arc::new((t.output_schema)()))
                .with_annotations(
                    ToolAnnotations::with_title(t.title)
                        .read_only(t.read_only)
                        .destructive(t.destructive)
                        .idempotent(t.idempotent)
                        .open_world(false),
                )
        })
        .collect()
});

/// The multi-thread runtime both transports serve on; `None` after telling
/// the user on stderr why it could not start.
fn serve_runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("sandkeep serve: cannot start the async runtime: {e}"))
        .ok()
}

/// Tools whose call is dropped as soon as the client cancels it or goes
/// away: they only wait, so dropping them loses nothing, and the dropped
/// provider call ends the waiter in the sandbox.
const ABANDONED_ON_CANCEL: &[&str] = &["wait_task"];

/// How a handler maps calls to sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionScope {
    /// stdio: the process is the session, in every protocol era.
    Process,
    /// HTTP: a legacy session is the session; 2026-07-28 requests have none.
    HttpSession,
}

/// The rmcp handler: cheap to clone (two `Arc`s), so rmcp's HTTP factory
/// can make one per session or request.
#[derive(Clone)]
pub struct SandkeepMcp {
    service: Arc<Service>,
    session: Arc<SessionHandle>,
    scope: SessionScope,
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
        }
    }

    fn http(service: Arc<Service>, ender: http::SessionEnder) -> Self {
        Self {
            service,
            session: Arc::new(SessionHandle {
                session: Arc::new(Session::new()),
                on_drop: Some(ender),
            }),
            scope: SessionScope::HttpSession,
        }
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        let stateless;
        let session = if self.scope == SessionScope::HttpSession && modern {
            stateless = Session::stateless();
            &stateless
        } else {
            self.session.session.as_ref()
        };
        if tasks::wanted(&request, context) {
            return Ok(tasks::start(&self.service, session, request)
                .await
                .unwrap_or_else(|e| tool_error(&e).into()));
        }
        let work = self
            .service
            .call_json(session, &request.name, request.arguments);
        let outcome = if ABANDONED_ON_CANCEL.contains(&request.name.as_ref()) {
            tokio::select! {
                outcome = work => outcome,
                () = context.ct.cancelled() => {
                    return Err(McpError::internal_error("the request was cancelled", None));
                }
            }
        } else {
            work.await
        };
        match outcome {
            Ok(value) => Ok(CallToolResult::structured(value).into()),
            Err(ToolError::UnknownTool(name)) => Err(McpError::invalid_params(
                format!("tool not found: {name:?}; call tools/list for the available tools"),
                None,
            )),
            Err(e) => {
                tracing::debug!(tool = %request.name, error = %e, "tool error");
                Ok(tool_error(&e).into())
            }
        }
    }
}

/// A [`ToolError`] as an `isError: true` result.
fn tool_error(e: &ToolError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
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
        tasks::get(&self.service, request).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tasks::cancel(&self.service, request).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(TOOLS.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TOOLS.iter().find(|t| t.name == name).cloned()
    }
}
