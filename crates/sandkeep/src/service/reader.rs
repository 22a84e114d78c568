//! The resident reader of each sandbox: one `sandkeep-task serve` per
//! sandbox that is read, answering `status` and `list` (get_task,
//! wait_task's answer at its timeout, cancel_task's first look,
//! list_tasks, the MCP Tasks extension's reads, the CLI's) and `changes`
//! without a diff (list_changes) without a process start per call. Its
//! answer lines are also the shared watcher's ([`next_answer`]).
//!
//! The reader runs inside the sandbox with the sandbox user's rights, as
//! the one-shot helper does: no host process parses the task files. It is
//! started through [`Provider::spawn`] by the first read, and its channel
//! is the pipes that call hands over (no path a sandbox process could bind
//! or replace); it makes itself non-dumpable, so no other process of the
//! sandbox user can reach those pipes either. It ends at its own idle
//! timeout, with the sandbox, or when this service goes (its stdin closes).
//!
//! A reader is trusted to answer, never to answer in time: a reader that
//! dies (its stdout ends) is replaced and the read asked again of the new
//! one; a reader that leaves a read unanswered for [`ANSWER_WITHIN`] (a
//! `changes` walk: the one-shot helper's own timeout) is killed and that
//! read goes the old way, a helper process per call ([`helper::call`]), as
//! does every read where no reader can be started.
//! So a read is never slower than the bounded wait plus today's call, and
//! its answer is always a helper's answer to that very request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sandkeep_proto::wire;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::{OnceCell, mpsc, oneshot};

use super::helper::{self, HelperError, HelperPaths};
use crate::provider::{Program, Provider, ProviderError, RunningProcess, SandboxId, SpawnRequest};

/// How long a reader may leave a read unanswered before it counts as
/// wedged. Its reads take well under a millisecond each; this leaves room
/// for a loaded host (or a remote sandbox's round trip) without letting a
/// stopped or frozen reader hold a caller for long.
pub(super) const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// How long starting a reader may take: locally a message to the fork
/// server, remotely a round trip to the sandbox's envd.
const START_WITHIN: Duration = Duration::from_secs(5);

/// How many readers one read may try (the first, and one replacement for a
/// reader that died under it) before it goes the old way.
const ATTEMPTS: usize = 2;

/// The longest reply line a reader may write: the longest reply of any
/// verb, behind its number and code. A longer one is not a reader's.
const REPLY_LINE_MAX: u64 = helper::LONGEST_REPLY as u64 + 64;

/// Every sandbox's reader. One per [`super::Service`].
#[derive(Default)]
pub(super) struct Readers {
    by_sandbox: Arc<Mutex<HashMap<SandboxId, Arc<Slot>>>>,
}

/// A sandbox's reader once started; the cell lets concurrent first reads
/// wait for one start instead of each making their own.
type Slot = OnceCell<Arc<Reader>>;

struct Reader {
    /// To the task writing the reader's stdin; dropping it ends stdin.
    requests: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<Pending>>,
    process: Box<dyn RunningProcess>,
}

/// The reads sent to one reader and not yet answered.
#[derive(Default)]
struct Pending {
    next_id: u64,
    waiting: HashMap<u64, oneshot::Sender<Answer>>,
    /// The reader's stdout ended: nothing more will be answered.
    ended: bool,
}

/// What the one-shot helper would have exited with and printed.
pub(super) struct Answer {
    pub(super) code: i32,
    pub(super) json: Vec<u8>,
}

impl Answer {
    /// The reply it carries, as [`helper::call`] would return it.
    pub(super) fn decode<Rep: DeserializeOwned>(&self) -> Result<Rep, HelperError> {
        helper::decode(Some(self.code), &self.json, b"")
    }
}

/// Why a reader did not answer.
enum Lost {
    /// Its output ended before the answer: it died or was ended.
    Died,
    /// No answer within its bound.
    Wedged,
}

/// Why no reader could be had.
enum NoReader {
    /// The provider failed as it would for the old way too (the sandbox is
    /// gone, the helper cannot be placed): the read fails with it.
    Provider(ProviderError),
    /// The reader could not be started: the read goes the old way.
    Failed(String),
}

impl Readers {
    /// `verb` (one of [`wire::READER_VERBS`]) with `request`, answered by
    /// the sandbox's reader, or by a helper process when no reader answers.
    pub(super) async fn read<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        verb: &str,
        request: &Req,
    ) -> Result<Rep, HelperError> {
        debug_assert!(wire::READER_VERBS.contains(&verb), "{verb} is not a read");
        let line = wire::reader_request_line(0, verb, request);
        // A walk's time grows with what the sandbox wrote: it is given as
        // long as a helper process would be. Status reads take well under
        // a millisecond.
        let within = if verb == wire::verb::CHANGES {
            helper::bounds(verb).0
        } else {
            ANSWER_WITHIN
        };
        // A request the reader would refuse to read (only a `changes` of
        // many long share paths comes near) goes the old way at once.
        let attempts = if line.len() > wire::READER_REQUEST_MAX {
            0
        } else {
            ATTEMPTS
        };
        for _ in 0..attempts {
            let (slot, reader) = match self.reader(provider, paths, sandbox).await {
                Ok(found) => found,
                Err(NoReader::Provider(e)) => return Err(HelperError::Provider(e)),
                Err(NoReader::Failed(why)) => {
                    tracing::debug!(%sandbox, "reading without a resident reader: {why}");
                    break;
                }
            };
            match reader.ask(verb, request, within).await {
                Ok(answer) => return answer.decode(),
                Err(Lost::Died) => self.forget(sandbox, &slot),
                Err(Lost::Wedged) => {
                    tracing::warn!(
                        %sandbox,
                        "the resident task reader did not answer {verb} within {} ms; replacing it",
                        within.as_millis()
                    );
                    let _ = reader.process.kill_group();
                    self.forget(sandbox, &slot);
                    break;
                }
            }
        }
        helper::call(provider, paths, sandbox, verb, request).await
    }

    /// The sandbox's reader, started if it has none.
    async fn reader(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
    ) -> Result<(Arc<Slot>, Arc<Reader>), NoReader> {
        let slot = Arc::clone(self.lock().entry(sandbox.clone()).or_default());
        let reader = slot
            .get_or_try_init(|| self.start(provider, paths, sandbox, Arc::downgrade(&slot)))
            .await;
        match reader {
            Ok(reader) => {
                let reader = Arc::clone(reader);
                Ok((slot, reader))
            }
            Err(e) => {
                self.forget(sandbox, &slot);
                Err(e)
            }
        }
    }

    async fn start(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        slot: Weak<Slot>,
    ) -> Result<Arc<Reader>, NoReader> {
        let helper = paths
            .get(provider, sandbox)
            .await
            .map_err(NoReader::Provider)?;
        let spawn = provider.spawn(
            sandbox,
            SpawnRequest {
                program: Program::Argv {
                    argv: vec![helper, wire::verb::SERVE.into()],
                    env: Vec::new(),
                },
                cwd: None,
                stdin: true,
            },
        );
        let spawned = tokio::time::timeout(START_WITHIN, spawn)
            .await
            .map_err(|_| NoReader::Failed("the reader did not start in time".into()))?
            .map_err(|e| match e {
                ProviderError::NoSuchSandbox(_) => {
                    paths.forget(sandbox);
                    NoReader::Provider(e)
                }
                e => NoReader::Failed(e.to_string()),
            })?;
        let Some(stdin) = spawned.stdin else {
            let _ = spawned.process.kill_group();
            return Err(NoReader::Failed(
                "the provider gave the reader no stdin".into(),
            ));
        };
        let (requests, to_write) = mpsc::unbounded_channel();
        let pending = Arc::new(Mutex::new(Pending::default()));
        tokio::spawn(write_requests(to_write, stdin));
        tokio::spawn(read_answers(
            Arc::clone(&pending),
            Arc::downgrade(&self.by_sandbox),
            sandbox.clone(),
            slot,
            spawned.stdout,
        ));
        Ok(Arc::new(Reader {
            requests,
            pending,
            process: spawned.process,
        }))
    }

    /// Ends the sandbox's reader, if this service has one: before a pause,
    /// which would freeze it (a read would then wait [`ANSWER_WITHIN`] for
    /// it). The next read starts a new one, which a paused sandbox starts
    /// outside its frozen processes.
    pub(super) fn retire(&self, sandbox: &SandboxId) {
        let slot = self.lock().remove(sandbox);
        if let Some(reader) = slot.as_deref().and_then(OnceCell::get) {
            let _ = reader.process.kill_group();
        }
    }

    /// Forgets the sandbox's reader if it is still the one in `slot`, so
    /// that the next read starts a new one.
    fn forget(&self, sandbox: &SandboxId, slot: &Arc<Slot>) {
        forget(&self.by_sandbox, sandbox, slot);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SandboxId, Arc<Slot>>> {
        lock(&self.by_sandbox)
    }
}

impl Reader {
    async fn ask<Req: Serialize>(
        &self,
        verb: &str,
        request: &Req,
        within: Duration,
    ) -> Result<Answer, Lost> {
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut pending = lock(&self.pending);
            if pending.ended {
                return Err(Lost::Died);
            }
            let id = pending.next_id;
            pending.next_id += 1;
            pending.waiting.insert(id, answer);
            id
        };
        // Whatever ends this call (an answer, the bound, the caller going
        // away), the read is no longer waited for.
        let _asked = Asked {
            pending: &self.pending,
            id,
        };
        if self
            .requests
            .send(wire::reader_request_line(id, verb, request))
            .is_err()
        {
            return Err(Lost::Died);
        }
        match tokio::time::timeout(within, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(Lost::Died),
            Err(_) => Err(Lost::Wedged),
        }
    }
}

struct Asked<'a> {
    pending: &'a Mutex<Pending>,
    id: u64,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        lock(self.pending).waiting.remove(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn forget(by_sandbox: &Mutex<HashMap<SandboxId, Arc<Slot>>>, sandbox: &SandboxId, slot: &Slot) {
    let mut readers = lock(by_sandbox);
    if readers
        .get(sandbox)
        .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), slot))
    {
        readers.remove(sandbox);
    }
}

/// Writes the request lines in order; lines queued together go in one
/// write.
async fn write_requests(
    mut to_write: mpsc::UnboundedReceiver<Vec<u8>>,
    mut stdin: Box<dyn AsyncWrite + Send + Unpin>,
) {
    while let Some(mut lines) = to_write.recv().await {
        while let Ok(more) = to_write.try_recv() {
            lines.extend_from_slice(&more);
        }
        if stdin.write_all(&lines).await.is_err() {
            return;
        }
    }
}

/// Hands each answer to its read. When the reader's stdout ends, fails or
/// carries what no reader writes, the reads still waiting learn that it
/// died and the sandbox's reader is forgotten (the next read starts one).
async fn read_answers(
    pending: Arc<Mutex<Pending>>,
    by_sandbox: Weak<Mutex<HashMap<SandboxId, Arc<Slot>>>>,
    sandbox: SandboxId,
    slot: Weak<Slot>,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
) {
    let mut stdout = BufReader::new(stdout);
    let mut line = Vec::new();
    let why = loop {
        let (id, answer) = match next_answer(&mut stdout, &mut line).await {
            Ok(answer) => answer,
            Err(why) => break why,
        };
        // A read that stopped waiting (it timed out, its caller went away)
        // has no one to hand the answer to.
        if let Some(waiting) = lock(&pending).waiting.remove(&id) {
            let _ = waiting.send(answer);
        }
    };
    tracing::debug!(%sandbox, "the resident task reader ended: {why}");
    {
        let mut pending = lock(&pending);
        pending.ended = true;
        pending.waiting.clear();
    }
    if let (Some(by_sandbox), Some(slot)) = (by_sandbox.upgrade(), slot.upgrade()) {
        if let Some(reader) = slot.get() {
            let _ = reader.process.kill_group();
        }
        forget(&by_sandbox, &sandbox, &slot);
    }
}

/// The next answer line `ID CODE JSON` of a reader (or of the shared
/// watcher, whose answers are the same lines, [`super::waiters`]), read
/// into `line`; why not when the output ended, failed or carries what
/// neither writes.
pub(super) async fn next_answer(
    output: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> Result<(u64, Answer), String> {
    line.clear();
    match output.take(REPLY_LINE_MAX).read_until(b'\n', line).await {
        Ok(0) => return Err("its output ended".to_owned()),
        Ok(_) if line.ends_with(b"\n") => {}
        Ok(_) => return Err(format!("it wrote a line of over {REPLY_LINE_MAX} bytes")),
        Err(e) => return Err(format!("its output failed: {e}")),
    }
    let Some((id, code, json)) = wire::split_reader_line(line) else {
        return Err(format!(
            "it wrote {:?}, not an answer",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        ));
    };
    let Ok(code) = code.parse::<i32>() else {
        return Err(format!("it wrote {code:?} as an exit code"));
    };
    Ok((
        id,
        Answer {
            code,
            json: json.to_vec(),
        },
    ))
}
