//! The service: one handler per tool of docs/tools.md, shared by every front end.
//!
//! It owns policy: argument validation (§3), session state (default sandbox,
//! destruction set, retention; §2, §6), the start_task protocol with the
//! in-sandbox helper, and masking of the server's own secrets in returned
//! output. It must not know about transports (no rmcp, no sockets) and never
//! touches `/proc` or sandbox internals: everything goes through
//! [`Provider`].
//!
//! # How a front end uses it
//!
//! Build one [`Service`] per process from an `Arc<dyn Provider>` and the
//! server's own secret configuration values ([`Service::new`]). Keep one
//! [`Session`] per MCP connection ([`Session::new`]), or use
//! [`Session::stateless`] where no session exists (2026-07-28 HTTP requests,
//! one-shot CLI commands that must not destroy what they create). When the
//! connection ends, call [`Service::end_session`].
//!
//! There are two ways in, and both run the very same code:
//!
//! - typed: `service.start_task(&session, StartTaskArgs { .. }).await`
//!   returns a [`StartTaskResult`] or a [`ToolError`]. The CLI builds the
//!   args struct from its flags and calls these handlers; with `--json` it
//!   prints the result object with `serde_json` exactly as MCP returns it in
//!   `structuredContent`, and on error prints [`ToolError`]'s message (and
//!   [`ToolError::structured`] when present).
//! - JSON: [`Service::call_json`] takes a tool name and a JSON object of
//!   arguments, as MCP receives them. It parses with messages that name the
//!   parameter even for wrong types, then calls the typed handler.
//!
//! [`catalog::TOOLS`] lists every tool with its description (written for a
//! model) and its input/output JSON schemas.

pub mod catalog;
mod error;
mod handlers;
mod helper;
mod interactive;
mod json;
mod list_tasks;
mod mask;
mod ports;
mod reader;
#[cfg(test)]
mod reference;
mod session;
mod shares;
mod snapshots;
mod types;
mod validate;
mod wait_task;
mod waiters;

use std::sync::Arc;

use crate::provider::{Provider, Release, SandboxId};

pub use error::ToolError;
pub use interactive::{
    ResizeTerminalArgs, ResizeTerminalResult, SendInputArgs, SendInputResult,
    StartInteractiveTaskArgs,
};
pub use list_tasks::{ListTasksArgs, ListTasksResult, TaskEntry};
pub use ports::{ExposePortArgs, ExposePortResult, PortEntry};
pub use session::Session;
pub use shares::{
    ApplyChangesArgs, ApplyChangesResult, ChangeEntry, ConflictEntry, ListChangesArgs,
    ListChangesResult, ShareResult,
};
pub use types::*;
pub use wait_task::{DeleteTaskArgs, DeleteTaskResult, WaitTaskArgs, WaitTaskResult};

use mask::Masker;
pub use mask::configured_secrets;

/// The handlers of every tool. Cheap to share: wrap it in an `Arc`.
pub struct Service {
    provider: Arc<dyn Provider>,
    masker: Masker,
    helpers: helper::HelperPaths,
    readers: reader::Readers,
    waiters: waiters::Waiters,
    ceilings: Ceilings,
    /// The operator's host shares (SPEC §13).
    shares: Vec<sandkeep_shares::ShareConfig>,
}

/// The most a `create_sandbox` may ask for (SPEC.md §7: server options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    pub memory_mib: u64,
    pub milli_cpus: u32,
    pub pids: u64,
    pub disk_mib: u64,
}

impl Default for Ceilings {
    /// Generous for one agent's sandbox, far from one host's whole: 16 GiB,
    /// every CPU of this host, 32768 processes, 64 GiB written.
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Self {
            memory_mib: 16_384,
            milli_cpus: cpus.saturating_mul(1000),
            pids: 32_768,
            disk_mib: 65_536,
        }
    }
}

/// What [`Service::end_session`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    /// Sandboxes of the destruction set that were destroyed.
    pub destroyed: Vec<SandboxId>,
    /// Sandboxes of the destruction set that another session retained in
    /// the meantime (a task was started in them), or that were already
    /// gone.
    pub kept: Vec<SandboxId>,
    /// Sandboxes that could not be destroyed, with the reason. They still
    /// expire at their deadline.
    pub failed: Vec<(SandboxId, String)>,
}

impl Service {
    /// `secrets` are the values of the server's own configuration secrets
    /// (API keys, the HTTP auth token). They are replaced by `[REDACTED]` in
    /// every stdout/stderr page the service returns.
    pub fn new(provider: Arc<dyn Provider>, secrets: Vec<String>) -> Self {
        Self {
            provider,
            masker: Masker::new(secrets),
            helpers: helper::HelperPaths::default(),
            readers: reader::Readers::default(),
            waiters: waiters::Waiters::default(),
            ceilings: Ceilings::default(),
            shares: Vec::new(),
        }
    }

    /// The same service with other ceilings for `create_sandbox`.
    pub fn with_ceilings(self, ceilings: Ceilings) -> Self {
        Self { ceilings, ..self }
    }

    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Ends a session: destroys every sandbox still in its destruction set,
    /// unless a task retains it (started from this session or any other,
    /// in this server process or another). Sandboxes the session only
    /// queried are left alone. Calling it twice is harmless: the set is
    /// emptied by the first call.
    pub async fn end_session(&self, session: &Session) -> SessionEnd {
        let mut end = SessionEnd::default();
        for id in session.take_destruction_set() {
            match self.provider.kill_unless_retained(&id).await {
                Ok(Release::Destroyed) => {
                    self.helpers.forget(&id);
                    end.destroyed.push(id);
                }
                Ok(Release::Retained | Release::Gone) => end.kept.push(id),
                Err(e) => end.failed.push((id, e.to_string())),
            }
        }
        end
    }
}
