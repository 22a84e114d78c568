//! The shared in-sandbox watcher behind wait_task (docs/tools.md): one
//! `sandkeep-task wait --stream` per sandbox that has waiters, however many
//! wait there, its reports fanned out to them through `watch` channels.
//!
//! It owns the watchers' lives: started with a sandbox's first waiter, told
//! which tasks to watch as waiters come and go, killed when the last one
//! leaves (a waiter dropped mid-wait leaves nothing in the sandbox), and
//! forgotten when it dies, so the next waiter starts a new one. An idle
//! waiter is one pending future: no thread, no process, no CPU. It does not
//! read task pages: the caller reads the answer with `status` once
//! [`Waiters::until_changed`] returns.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use sandkeep_proto::TaskId;
use sandkeep_proto::wire::{self, WaitRequest, WatchCommand, WatchEvent};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::helper::{HelperError, HelperPaths};
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
    tasks: HashMap<TaskId, Watched>,
    process: Box<dyn RunningProcess>,
}

struct Watched {
    /// The watcher's latest report; `None` before its first.
    seen: watch::Sender<Option<WatchEvent>>,
    waiters: usize,
}

/// How [`Waiters::until_changed`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The task changed as asked, or the deadline passed.
    Done,
    /// No watcher could serve this wait (the provider cannot keep a process
    /// running, or the watcher keeps dying); the reason is for the log.
    NoWatcher(String),
}

impl Waiters {
    /// Waits until the task is settled or either log has bytes past the
    /// request's offsets, or until `deadline`.
    pub(super) async fn until_changed(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        request: &WaitRequest,
        deadline: Instant,
    ) -> Result<Outcome, HelperError> {
        for _ in 0..=MAX_RESTARTS {
            let mut sub = match self
                .subscribe(provider, paths, sandbox, &request.task_id)
                .await
            {
                Ok(sub) => sub,
                Err(HelperError::Provider(ProviderError::Unsupported(why))) => {
                    return Ok(Outcome::NoWatcher(why));
                }
                Err(e) => return Err(e),
            };
            // The value is the watcher's latest report, given after the
            // watch was in place: a change after it is another report.
            loop {
                match &*sub.seen.borrow_and_update() {
                    Some(WatchEvent::Seen {
                        state,
                        stdout_bytes,
                        stderr_bytes,
                        ..
                    }) if state.is_settled()
                        || *stdout_bytes > request.stdout_offset
                        || *stderr_bytes > request.stderr_offset =>
                    {
                        return Ok(Outcome::Done);
                    }
                    Some(WatchEvent::Refused { error, .. }) => {
                        return Err(HelperError::Refused {
                            kind: error.kind,
                            message: error.message.clone(),
                        });
                    }
                    _ => {}
                }
                match tokio::time::timeout_at(deadline, sub.seen.changed()).await {
                    Err(_) => return Ok(Outcome::Done),
                    Ok(Ok(())) => {}
                    // The watcher died: look again through a new one.
                    Ok(Err(_)) => break,
                }
            }
        }
        Ok(Outcome::NoWatcher(format!(
            "the watcher in sandbox {sandbox} died {} times in one wait",
            MAX_RESTARTS + 1
        )))
    }

    /// Registers a waiter on the task, starting the sandbox's watcher if it
    /// has none.
    async fn subscribe(
        &self,
        provider: &dyn Provider,
        paths: &HelperPaths,
        sandbox: &SandboxId,
        task: &TaskId,
    ) -> Result<Subscription, HelperError> {
        loop {
            if let Some(sub) = join(&self.shared, &mut lock(&self.shared), sandbox, task) {
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
            if let Some(sub) = join(&self.shared, &mut lock(&self.shared), sandbox, task) {
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
            tokio::spawn(read_reports(
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
                    tasks: HashMap::new(),
                    process: spawned.process,
                },
            );
            let sub = join(&self.shared, &mut watchers, sandbox, task);
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

/// A waiter on the sandbox's existing watcher, if it has one.
fn join(
    shared: &Arc<Mutex<Watchers>>,
    watchers: &mut Watchers,
    sandbox: &SandboxId,
    task: &TaskId,
) -> Option<Subscription> {
    let watcher = watchers.by_sandbox.get_mut(sandbox)?;
    let watched = match watcher.tasks.entry(task.clone()) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            // A watcher whose stdin is gone is dying; its reader will
            // forget it and this waiter will start again.
            let _ = watcher.commands.send(WatchCommand::Watch(task.clone()));
            e.insert(Watched {
                seen: watch::Sender::new(None),
                waiters: 0,
            })
        }
    };
    watched.waiters += 1;
    Some(Subscription {
        shared: Arc::clone(shared),
        sandbox: sandbox.clone(),
        task: task.clone(),
        generation: watcher.generation,
        seen: watched.seen.subscribe(),
    })
}

/// One waiter on one task. Dropping it (answered, timed out, or the call
/// dropped) unwatches the task when no one else waits on it, and ends the
/// watcher when no one waits in the sandbox.
struct Subscription {
    shared: Arc<Mutex<Watchers>>,
    sandbox: SandboxId,
    task: TaskId,
    generation: u64,
    seen: watch::Receiver<Option<WatchEvent>>,
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
        if let Entry::Occupied(mut watched) = watcher.tasks.entry(self.task.clone()) {
            watched.get_mut().waiters -= 1;
            if watched.get().waiters == 0 {
                watched.remove();
                let _ = watcher
                    .commands
                    .send(WatchCommand::Unwatch(self.task.clone()));
            }
        }
        if watcher.tasks.is_empty() {
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
        let mut line = serde_json::to_vec(&command).expect("commands always encode");
        line.push(b'\n');
        if stdin.write_all(&line).await.is_err() {
            return;
        }
    }
}

/// Hands each report to the task's waiters; when the watcher's stdout ends
/// (it died, or was ended) forgets it, which wakes its waiters to start
/// again. Holds the watchers weakly: a dropped service ends this too.
async fn read_reports(
    shared: Weak<Mutex<Watchers>>,
    sandbox: SandboxId,
    generation: u64,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let why = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break "its output ended".to_owned(),
            Err(e) => break format!("its output failed: {e}"),
        };
        let event: WatchEvent = match serde_json::from_str(&line) {
            Ok(event) => event,
            Err(e) => break format!("it wrote {line:?}, not a report ({e})"),
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let watchers = lock(&shared);
        let Some(watcher) = watchers
            .by_sandbox
            .get(&sandbox)
            .filter(|w| w.generation == generation)
        else {
            return;
        };
        if let Some(watched) = watcher.tasks.get(event.task_id()) {
            watched.seen.send_replace(Some(event));
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
