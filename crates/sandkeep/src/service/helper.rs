//! Calls to the in-sandbox task helper: `sandkeep-task VERB JSON` run
//! through [`Provider::exec`], one JSON object read back from its stdout.
//! This is the only place that knows the helper's exit-code convention
//! ([`decode`]); the resident reader (`super::reader`) answers in the same
//! terms.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sandkeep_proto::limits::{CHANGES_DIFF_MAX_BYTES, CHANGES_MAX};
use sandkeep_proto::wire::{self, ErrorKind, ErrorReply};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::provider::{ExecRequest, Provider, ProviderError, SandboxId};

/// How long a helper call may take. Status and start answer in
/// milliseconds; cancel waits up to 3 s for the terminal record; `wait`
/// gets its own timeout on top of this.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The helper's replies are one JSON object; a status page is at most two
/// 64 KiB pages, JSON-escaped (up to 6 bytes per byte).
const REPLY_LIMIT: usize = 2 * 6 * 65_536 + 65_536;

/// How long a walk of a sandbox's share changes (`changes`) may take.
const CHANGES_TIMEOUT: Duration = Duration::from_secs(120);

/// The `changes` reply: 10,000 entries and the diff, JSON-escaped.
const CHANGES_REPLY_LIMIT: usize = CHANGES_MAX * 512 + 6 * CHANGES_DIFF_MAX_BYTES;

/// The longest reply of any verb.
pub(super) const LONGEST_REPLY: usize = CHANGES_REPLY_LIMIT;

/// How long a call of `verb` may take, and the most bytes of its reply
/// read back: a `changes` walk grows with what the sandbox wrote.
pub(super) fn bounds(verb: &str) -> (Duration, usize) {
    if verb == wire::verb::CHANGES {
        (CHANGES_TIMEOUT, CHANGES_REPLY_LIMIT)
    } else {
        (CALL_TIMEOUT, REPLY_LIMIT)
    }
}

#[derive(Debug)]
pub(super) enum HelperError {
    /// The provider failed; [`ProviderError::Unconfirmed`] means the
    /// request may have been run.
    Provider(ProviderError),
    /// The helper answered with an error reply: the request was refused
    /// and nothing happened.
    Refused { kind: ErrorKind, message: String },
    /// No readable answer (timeout, crash, garbage): the request may have
    /// been run.
    Unreadable(String),
}

/// Where the helper is in each sandbox. Asking the provider costs a round
/// trip per call, and the path of a sandbox's helper never changes; a
/// vanished sandbox fails the exec anyway and is then forgotten.
#[derive(Default)]
pub(super) struct HelperPaths {
    known: Mutex<HashMap<SandboxId, String>>,
}

/// Bounds the cache; past it, it starts over (a miss costs one round trip).
const MAX_KNOWN: usize = 4096;

impl HelperPaths {
    pub(super) async fn get(
        &self,
        provider: &dyn Provider,
        sandbox: &SandboxId,
    ) -> Result<String, ProviderError> {
        if let Some(path) = self.lock().get(sandbox) {
            return Ok(path.clone());
        }
        let path = provider.task_helper(sandbox).await?;
        let mut known = self.lock();
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(sandbox.clone(), path.clone());
        Ok(path)
    }

    pub(super) fn forget(&self, sandbox: &SandboxId) {
        self.lock().remove(sandbox);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, String>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) async fn call<Req: Serialize, Rep: DeserializeOwned>(
    provider: &dyn Provider,
    paths: &HelperPaths,
    sandbox: &SandboxId,
    verb: &str,
    request: &Req,
) -> Result<Rep, HelperError> {
    call_within(provider, paths, sandbox, verb, request, Duration::ZERO).await
}

/// [`call`] with `stdin` for the helper (the bytes of `input`): they
/// travel as they are, with no quoting or encoding.
pub(super) async fn call_with_stdin<Req: Serialize, Rep: DeserializeOwned>(
    provider: &dyn Provider,
    paths: &HelperPaths,
    sandbox: &SandboxId,
    verb: &str,
    request: &Req,
    stdin: Vec<u8>,
) -> Result<Rep, HelperError> {
    let (timeout, reply_limit) = bounds(verb);
    let call = Call {
        verb,
        stdin: Some(stdin),
        timeout,
        reply_limit,
    };
    run(provider, paths, sandbox, call, request).await
}

/// One run of the helper: its verb, what it reads on stdin, how long it
/// may take.
struct Call<'a> {
    verb: &'a str,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    /// The most bytes of its answer read back.
    reply_limit: usize,
}

/// [`call`] for a verb that may itself wait up to `wait` before answering
/// (the `wait` verb): the call's timeout is that much longer.
pub(super) async fn call_within<Req: Serialize, Rep: DeserializeOwned>(
    provider: &dyn Provider,
    paths: &HelperPaths,
    sandbox: &SandboxId,
    verb: &str,
    request: &Req,
    wait: Duration,
) -> Result<Rep, HelperError> {
    let (timeout, reply_limit) = bounds(verb);
    let call = Call {
        verb,
        stdin: None,
        timeout: timeout + wait,
        reply_limit,
    };
    run(provider, paths, sandbox, call, request).await
}

async fn run<Req: Serialize, Rep: DeserializeOwned>(
    provider: &dyn Provider,
    paths: &HelperPaths,
    sandbox: &SandboxId,
    call: Call<'_>,
    request: &Req,
) -> Result<Rep, HelperError> {
    let helper = paths
        .get(provider, sandbox)
        .await
        .map_err(HelperError::Provider)?;
    let result = exec(provider, &helper, sandbox, call, request).await;
    if let Err(HelperError::Provider(ProviderError::NoSuchSandbox(_))) = &result {
        paths.forget(sandbox);
    }
    result
}

impl HelperError {
    /// The tool error of a helper call that is not about one task.
    pub(super) fn into_tool_error(self, sandbox: &SandboxId) -> super::ToolError {
        match self {
            HelperError::Provider(p) => super::ToolError::Provider(p),
            HelperError::Refused { kind, message } => super::ToolError::Helper { kind, message },
            HelperError::Unreadable(detail) => super::ToolError::BadHelperReply {
                sandbox_id: sandbox.to_string(),
                detail,
            },
        }
    }
}

async fn exec<Req: Serialize, Rep: DeserializeOwned>(
    provider: &dyn Provider,
    helper: &str,
    sandbox: &SandboxId,
    call: Call<'_>,
    request: &Req,
) -> Result<Rep, HelperError> {
    let timeout = call.timeout;
    let out = provider
        .exec(
            sandbox,
            ExecRequest {
                command: wire::helper_command_line(helper, call.verb, request),
                cwd: None,
                timeout,
                stdin: call.stdin,
                output_limit: call.reply_limit,
            },
        )
        .await
        .map_err(HelperError::Provider)?;
    if out.timed_out {
        return Err(HelperError::Unreadable(format!(
            "the helper did not answer within {} s",
            timeout.as_secs()
        )));
    }
    decode(out.exit_code, &out.stdout, &out.stderr)
}

/// The helper's answer by its exit code and output: the verb's reply, its
/// refusal, or why neither could be read. Both transports (a process per
/// call, the resident reader) answer in these terms.
pub(super) fn decode<Rep: DeserializeOwned>(
    exit_code: Option<i32>,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<Rep, HelperError> {
    match exit_code {
        Some(0) => serde_json::from_slice(stdout).map_err(|e| unreadable(stdout, stderr, e)),
        Some(1) => match serde_json::from_slice::<ErrorReply>(stdout) {
            Ok(r) => Err(HelperError::Refused {
                kind: r.error.kind,
                message: r.error.message,
            }),
            Err(e) => Err(unreadable(stdout, stderr, e)),
        },
        code => Err(HelperError::Unreadable(format!(
            "the helper exited with {}: {}",
            code.map_or("no status".to_owned(), |c| format!("status {c}")),
            snippet(stderr)
        ))),
    }
}

fn unreadable(stdout: &[u8], stderr: &[u8], e: serde_json::Error) -> HelperError {
    HelperError::Unreadable(format!(
        "reply {:?} is not the expected JSON ({e}); stderr: {}",
        snippet(stdout),
        snippet(stderr)
    ))
}

fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    text.trim().to_owned()
}
