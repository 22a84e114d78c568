//! What one CLI invocation works with: the service on the configured provider,
//! its one session, the async runtime, and how a failure is told to the
//! person (message, next step, exit code).
//!
//! One invocation is one service session. Commands that create nothing use
//! an ordinary session; `sandbox create` uses a stateless one, so the new
//! sandbox joins no destruction set and outlives the CLI process; `exec`
//! without `--sandbox` uses an ordinary session whose end destroys the
//! sandbox it created. Every session is ended through the service, which
//! owns the rule of what an end destroys.

use std::future::Future;
use std::sync::Arc;

use crate::provider::{self, Provider, ProviderError};
use crate::service::{Service, Session, ToolError};

use super::{Outcome, exit};

/// The service and the session of this invocation.
pub struct Context {
    pub service: Service,
    pub session: Session,
}

/// Which kind of session a command needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// Has a default sandbox and a destruction set, destroyed at the end.
    Ordinary,
    /// Has neither: what it creates lives until its deadline or a kill.
    Stateless,
}

impl Context {
    /// Opens the provider this environment configures (`SANDKEEP_PROVIDER`)
    /// and starts a session.
    pub fn open(
        kind: SessionKind,
        shares: Vec<sandkeep_shares::ShareConfig>,
    ) -> Result<Self, CliError> {
        let provider = open_provider()?;
        let session = match kind {
            SessionKind::Ordinary => Session::new(),
            SessionKind::Stateless => Session::stateless(),
        };
        Ok(Self {
            // The same configuration secrets as `sandkeep serve` masks, so
            // a person sees no more of them than an agent does.
            service: Service::new(provider, super::serve::secrets(None)).with_shares(shares),
            session,
        })
    }

    /// Ends the session through the service and reports, on stderr, what
    /// it could not destroy (those sandboxes still expire at their
    /// deadline).
    pub async fn finish(self) {
        let end = self.service.end_session(&self.session).await;
        for (id, why) in end.failed {
            eprintln!(
                "sandkeep: could not destroy sandbox {id} ({why}); it is destroyed at its deadline, \
                 or run `sandkeep sandbox kill {id}`"
            );
        }
    }
}

/// The provider this environment configures.
fn open_provider() -> Result<Arc<dyn Provider>, CliError> {
    provider::from_env().map_err(|e| {
        let error = CliError::new(format!("cannot open the provider: {e}"));
        if provider::is_bad_setting(&e) {
            return error;
        }
        error.hint(
            "for the local provider set SANDKEEP_HOME to a directory this user can create and write; \
             for SANDKEEP_PROVIDER=e2b set E2B_API_KEY; then run `sandkeep doctor`",
        )
    })
}

/// A failure of sandkeep itself (not of the command it ran), told on
/// stderr with what to do next.
#[derive(Debug)]
pub struct CliError {
    message: String,
    hint: Option<String>,
    /// The object an MCP error result would carry (an unconfirmed cancel's
    /// observed task); printed on stdout with `--json`.
    structured: Option<Box<serde_json::Value>>,
    code: u8,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            structured: None,
            code: exit::OWN_FAILURE,
        }
    }

    /// A failed service call, with the command-line form of its next step.
    pub fn tool(err: ToolError) -> Self {
        let hint = cli_hint(&err);
        // The service validates every value; a refused one is a bad
        // argument of this command line.
        let code = if matches!(err, ToolError::InvalidArgument(_)) {
            exit::USAGE
        } else {
            exit::OWN_FAILURE
        };
        Self {
            message: err.to_string(),
            hint,
            structured: err.structured().map(Box::new),
            code,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// For commands that exit with a command's own status: sandkeep's own
    /// failure gets a code of its own (bad arguments keep theirs).
    pub fn forwarding(mut self) -> Self {
        if self.code == exit::OWN_FAILURE {
            self.code = exit::OWN_FAILURE_FORWARDING;
        }
        self
    }

    /// Prints the error and returns its exit code.
    fn report(self, json: bool) -> u8 {
        if let (true, Some(value)) = (json, &self.structured) {
            super::output::print_json(value);
        }
        eprintln!(
            "sandkeep: error: {}",
            super::output::printable(&self.message, true)
        );
        if let Some(hint) = self.hint {
            eprintln!("  hint: {}", super::output::printable(&hint, true));
        }
        self.code
    }
}

impl From<ToolError> for CliError {
    fn from(err: ToolError) -> Self {
        Self::tool(err)
    }
}

/// The service's messages name MCP tools; a person at a shell needs the
/// matching command.
fn cli_hint(err: &ToolError) -> Option<String> {
    match err {
        ToolError::Provider(ProviderError::NoSuchSandbox(_)) => Some(
            "`sandkeep sandbox list` shows the live sandboxes; `sandkeep sandbox create` makes a new one"
                .to_owned(),
        ),
        ToolError::Provider(ProviderError::Unconfirmed { sandbox, .. }) => Some(format!(
            "it may or may not have run: look at sandbox {sandbox} (`sandkeep task list {sandbox}`, \
             `sandkeep exec --sandbox {sandbox} -- ...`) before running it again"
        )),
        ToolError::CancelNotConfirmed(task) => Some(format!(
            "check later with `sandkeep task get {} {}`, or stop everything with `sandkeep sandbox kill {}`",
            task.sandbox_id, task.task_id, task.sandbox_id
        )),
        ToolError::InvalidArgument(_) => Some(
            "parameters are named as in MCP: `timeout` is --timeout, `sandbox_id` is SANDBOX or \
             --sandbox, `task_id` is TASK, `stdout_offset` is --stdout-offset; see the command's --help"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Opens a context, runs `body` with it, and ends the session whatever
/// happened, also when the person presses Ctrl-C (then the exit code is
/// 130, as a shell reports SIGINT).
pub async fn with_context(
    kind: SessionKind,
    body: impl AsyncFnOnce(&Context) -> Outcome,
) -> Outcome {
    with_shares(kind, Vec::new(), body).await
}

/// [`with_context`] whose service has the shares of the command line's
/// `--share` (the person at the shell is the operator).
pub async fn with_shares(
    kind: SessionKind,
    shares: Vec<sandkeep_shares::ShareConfig>,
    body: impl AsyncFnOnce(&Context) -> Outcome,
) -> Outcome {
    let ctx = Context::open(kind, shares)?;
    let outcome = tokio::select! {
        outcome = body(&ctx) => outcome,
        () = interrupted() => Ok(exit::INTERRUPTED),
    };
    ctx.finish().await;
    outcome
}

/// Completes on Ctrl-C; never, if the handler cannot be installed (the
/// default action then still stops the process).
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs one command to its end on a small runtime and turns its outcome
/// into an exit code. `json` says whether an error's data goes to stdout.
pub fn block_on(json: bool, fut: impl Future<Output = Outcome>) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return CliError::new(format!("cannot start the async runtime: {e}"))
                .hint("the process may be out of file descriptors or threads; check `ulimit -n`")
                .report(false);
        }
    };
    match runtime.block_on(fut) {
        Ok(code) => code,
        Err(err) => err.report(json),
    }
}
