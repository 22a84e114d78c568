//! The shared in-sandbox watcher behind wait_task (docs/tools.md): one
//! `sandkeep-task wait --stream` per sandbox that has waiters, however many
//! wait there, answering them.
//!
//! It owns the watchers' lives: started with a sandbox's first waiter, told
//! which waits to answer as waiters come and go, killed when the last one
//! leaves (a waiter dropped mid-wait leaves nothing in the sandbox), and
//! forgotten when it dies, so the next waiter starts a new one. An idle
//! waiter is one pending future: no thread, no process, no CPU.
//!
//! The watcher decides when a wait is due and answers it with the `status`
//! read the helper would give, in the line a resident reader writes
//! ([`super::reader`]): a woken waiter needs no read of its own. Waiters
//! asking the same (task, offsets, page limit) at once share one wait and
//! its answer; an answered wait is forgotten at once, so a later waiter
//! asks afresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use sandkeep_proto::wire::{self, StatusRequest, WatchCommand};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::helper::{HelperError, HelperPaths};
use super::reader::{Answer, next_answer};
use crate::provider::{Program, Provider, ProviderError, RunningProcess, SandboxId, SpawnRequest};

/// How often in one wait a dead watcher is replaced before giving up on
/// watchers for that wait: one that keeps dying is broken, not unlucky.
const MAX_RESTARTS: usize = 3;

/// Every sandbox's watcher. One per [`super::Service`].
#[derive(Default)]
pub(super) struct Waiters {
    shared: Arc<Mutex<Watchers>>,
}

#[derive(Default)]
struct Watchers {
    by_sandbox: HashMap<SandboxId, Watcher>,
    /// Held while a sandbox's watcher is being started: the waiters that
    /// find none wait for that one instead of each starting their own (a
    /// remote provider's spawn is a network round trip, time for hundreds
    /// of waiters to arrive).
    starting: HashMap<SandboxId, Arc<tokio::sync::Mutex<()>>>,
    /// Tells a watcher from its successor in the same sandbox, so a dead
    /// one's last words never touch the new one.
    next_generation: u64,
}

struct Watcher {
    generation: u64,
    /// To the task writing the watcher's stdin; dropping it ends stdin.
    commands: mpsc::UnboundedSender<WatchCommand>,
    /// The waits sent to the watcher and not answered yet, by number.
    waits: HashMap<u64, Wait>,
    /// The number of each of those waits' request.
    numbers: HashMap<StatusRequest, u64>,
    next_number: u64,
    /// Waiters subscribed, answered or not: the watcher ends with the last.
    subscribers: usize,
    process: Box<dyn RunningProcess>,
}

struct Wait {
    request: StatusRequest,
    /// Its answer once the watcher gave it; dropped unanswered when the
    /// watcher dies.
    answer: watch::Sender<Option<Arc<Answer>>>,
    waiters: usize,
}

/// How [`Waiters::until_answered`] ended.
pub(super) enum Outcome {
    /// The task changed as asked: the watcher's answer, what `status`
    /// would have exited with and printed.
    Answered(Arc<Answer>),
    /// The deadline passed first.
    TimedOut,
    /// No watcher could serve this wait (the provider cannot keep a process
    /// running, or the watcher keeps dying); the reason is for the log.
    NoWatcher(String),
}

impl Waiters {
    /// Waits until the task is settled or either log has bytes past the
    /// request's offsets, or until `deadline`.
    pub(super) async fn until_answered(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        request: &StatusRequest,
        deadline: Instant,
    ) -> Result<Outcome, HelperError> {
        for _ in 0..=MAX_RESTARTS {
            let mut sub = match self.subscribe(provider, paths, sandbox, request).await {
                Ok(sub) => sub,
                Err(HelperError::Provider(ProviderError::Unsupported(why))) => {
                    return Ok(Outcome::NoWatcher(why));
                }
                Err(e) => return Err(e),
            };
            // Closed unanswered: the watcher died. Ask a new one.
            if let Ok(answer) =
                tokio::time::timeout_at(deadline, sub.answer.wait_for(Option::is_some)).await
            {
                match answer {
                    Ok(answer) => {
                        let answer = answer.clone().expect("waited for an answer");
                        return Ok(Outcome::Answered(answer));
                    }
                    Err(_) => continue,
                }
            }
            return Ok(Outcome::TimedOut);
        }
        Ok(Outcome::NoWatcher(format!(
            "the watcher in sandbox {sandbox} died {} times in one wait",
            MAX_RESTARTS + 1
        )))
    }

    /// Registers a waiter on the request, starting the sandbox's watcher if
    /// it has none.
    async fn subscribe(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        request: &StatusRequest,
    ) -> Result<Subscription, HelperError> {
        loop {
            if let Some(sub) = join(&self.shared, &mut lock(&self.shared), sandbox, request) {
                return Ok(sub);
            }
            let gate = Arc::clone(
                lock(&self.shared)
                    .starting
                    .entry(sandbox.clone())
                    .or_default(),
            );
            let _starting = gate.lock().await;
            let started = Starting {
                shared: &self.shared,
                sandbox,
                gate: &gate,
            };
            if let Some(sub) = join(&self.shared, &mut lock(&self.shared), sandbox, request) {
                return Ok(sub);
            }
            let helper = paths
                .get(provider, sandbox)
                .await
                .map_err(HelperError::Provider)?;
            let spawned = provider
                .spawn(
                    sandbox,
                    SpawnRequest {
                        program: Program::Argv {
                            argv: vec![helper, wire::verb::WAIT.into(), wire::WAIT_STREAM.into()],
                            env: Vec::new(),
                        },
                        cwd: None,
                        stdin: true,
                    },
                )
                .await;
            let spawned = match spawned {
                Ok(spawned) => spawned,
                Err(e) => {
                    if let ProviderError::NoSuchSandbox(_) = e {
                        paths.forget(sandbox);
                    }
                    return Err(HelperError::Provider(e));
                }
            };
            let Some(stdin) = spawned.stdin else {
                return Err(HelperError::Unreadable(
                    "the provider gave the watcher no stdin".into(),
                ));
            };
            let mut watchers = lock(&self.shared);
            if watchers.by_sandbox.contains_key(sandbox) {
                // Another waiter started one meanwhile: use that one.
                drop(watchers);
                let _ = spawned.process.kill_group();
                continue;
            }
            let generation = watchers.next_generation;
            watchers.next_generation += 1;
            let (commands, pending) = mpsc::unbounded_channel();
            tokio::spawn(write_commands(pending, stdin));
            tokio::spawn(read_answers(
                Arc::downgrade(&self.shared),
                sandbox.clone(),
                generation,
                spawned.stdout,
            ));
            watchers.by_sandbox.insert(
                sandbox.clone(),
                Watcher {
                    generation,
                    commands,
                    waits: HashMap::new(),
                    numbers: HashMap::new(),
                    next_number: 0,
                    subscribers: 0,
                    process: spawned.process,
                },
            );
            let sub = join(&self.shared, &mut watchers, sandbox, request);
            drop(watchers);
            drop(started);
            return Ok(sub.expect("the watcher was just added"));
        }
    }
}

/// Forgets a sandbox's start gate once its start is over (started or
/// failed); waiters already queued on it still get it, and find the
/// watcher or start again.
struct Starting<'a> {
    shared: &'a Mutex<Watchers>,
    sandbox: &'a SandboxId,
    gate: &'a Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        let mut watchers = lock(self.shared);
        if watchers
            .starting
            .get(self.sandbox)
            .is_some_and(|g| Arc::ptr_eq(g, self.gate))
        {
            watchers.starting.remove(self.sandbox);
        }
    }
}

fn lock(shared: &Mutex<Watchers>) -> MutexGuard<'_, Watchers> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A waiter on the sandbox's existing watcher, if it has one: on the wait
/// already asked with the same request, or on a new one.
fn join(
    shared: &Arc<Mutex<Watchers>>,
    watchers: &mut Watchers,
    sandbox: &SandboxId,
    request: &StatusRequest,
) -> Option<Subscription> {
    let watcher = watchers.by_sandbox.get_mut(sandbox)?;
    let number = match watcher.numbers.get(request) {
        Some(&number) => number,
        None => {
            let number = watcher.next_number;
            watcher.next_number += 1;
            // A watcher whose stdin is gone is dying; its reader will
            // forget it and this waiter will start again.
            let _ = watcher.commands.send(WatchCommand::Watch {
                number,
                request: request.clone(),
            });
            watcher.numbers.insert(request.clone(), number);
            watcher.waits.insert(
                number,
                Wait {
                    request: request.clone(),
                    answer: watch::Sender::new(None),
                    waiters: 0,
                },
            );
            number
        }
    };
    let wait = watcher.waits.get_mut(&number).expect("numbered above");
    wait.waiters += 1;
    watcher.subscribers += 1;
    Some(Subscription {
        shared: Arc::clone(shared),
        sandbox: sandbox.clone(),
        generation: watcher.generation,
        number,
        answer: wait.answer.subscribe(),
    })
}

/// One waiter on one wait. Dropping it (answered, timed out, or the call
/// dropped) forgets the wait when no one else waits on it, and ends the
/// watcher when no one waits in the sandbox.
struct Subscription {
    shared: Arc<Mutex<Watchers>>,
    sandbox: SandboxId,
    generation: u64,
    number: u64,
    answer: watch::Receiver<Option<Arc<Answer>>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut watchers = lock(&self.shared);
        let Some(watcher) = watchers
            .by_sandbox
            .get_mut(&self.sandbox)
            .filter(|w| w.generation == self.generation)
        else {
            return;
        };
        // An answered wait is forgotten already.
        if let Some(wait) = watcher.waits.get_mut(&self.number) {
            wait.waiters -= 1;
            if wait.waiters == 0 {
                let wait = watcher.waits.remove(&self.number).expect("found above");
                watcher.numbers.remove(&wait.request);
                let _ = watcher.commands.send(WatchCommand::Unwatch {
                    number: self.number,
                });
            }
        }
        watcher.subscribers -= 1;
        if watcher.subscribers == 0 {
            let watcher = watchers
                .by_sandbox
                .remove(&self.sandbox)
                .expect("found above");
            drop(watchers);
            // Its stdin closes too, but a kill needs no reader's goodwill.
            let _ = watcher.process.kill_group();
        }
    }
}

async fn write_commands(
    mut pending: mpsc::UnboundedReceiver<WatchCommand>,
    mut stdin: Box<dyn AsyncWrite + Send + Unpin>,
) {
    while let Some(command) = pending.recv().await {
        let mut lines = Vec::new();
        // Commands queued together go in one write.
        for command in
            std::iter::once(command).chain(std::iter::from_fn(|| pending.try_recv().ok()))
        {
            serde_json::to_writer(&mut lines, &command).expect("commands always encode");
            lines.push(b'\n');
        }
        if stdin.write_all(&lines).await.is_err() {
            return;
        }
    }
}

/// Hands each answer to its wait's waiters and forgets the wait; when the
/// watcher's stdout ends (it died, or was ended) or carries what no
/// watcher writes, forgets the watcher, which wakes its waiters to start
/// again. Holds the watchers weakly: a dropped service ends this too.
async fn read_answers(
    shared: Weak<Mutex<Watchers>>,
    sandbox: SandboxId,
    generation: u64,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
) {
    let mut stdout = BufReader::new(stdout);
    let mut line = Vec::new();
    let why = loop {
        let (number, answer) = match next_answer(&mut stdout, &mut line).await {
            Ok(answer) => answer,
            Err(why) => break why,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut watchers = lock(&shared);
        let Some(watcher) = watchers
            .by_sandbox
            .get_mut(&sandbox)
            .filter(|w| w.generation == generation)
        else {
            return;
        };
        // A wait given up meanwhile has no one to answer.
        if let Some(wait) = watcher.waits.remove(&number) {
            watcher.numbers.remove(&wait.request);
            wait.answer.send_replace(Some(Arc::new(answer)));
        }
    };
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let mut watchers = lock(&shared);
    if watchers
        .by_sandbox
        .get(&sandbox)
        .is_some_and(|w| w.generation == generation)
    {
        tracing::debug!(%sandbox, "the task watcher ended: {why}");
        let watcher = watchers.by_sandbox.remove(&sandbox).expect("found above");
        drop(watchers);
        let _ = watcher.process.kill_group();
    }
}
