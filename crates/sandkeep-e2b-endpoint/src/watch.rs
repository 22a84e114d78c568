//! envd's directory watch: `WatchDir` (a stream, the async Python and JS
//! SDKs) and its polling form `CreateWatcher` / `GetWatcherEvents` /
//! `RemoveWatcher` (the sync Python SDK).
//!
//! Each watch is the sandbox's own helper (`sandkeep-task watch-dir`, on
//! inotify) run as the request's user through [`Provider::spawn`]: the
//! sandbox's files are watched inside the sandbox with the user's rights,
//! never by a host process. Its lines become envd's events here, with the
//! entry (a Stat, as the user) for create, write and chmod when asked.
//!
//! inotify is asynchronous to whoever reads it, so two points are made
//! exact by a sync with the helper ([`Watcher::sync`]: every change made
//! before it has been handed on): after each change this endpoint makes
//! itself (an upload, MakeDir, Move, Remove), so that a watch has seen a
//! new directory before the next call writes into it, and before
//! `GetWatcherEvents` answers, so a poll right after a change sees it.
//!
//! A watch lives as long as its stream is open or until `RemoveWatcher`,
//! and ends with its sandbox: the helper dies with it, the stream breaks
//! off (as E2B's proxy drops it) and a poll answers the watcher's error.
//!
//! [`Provider::spawn`]: sandkeep_provider::Provider::spawn

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use sandkeep_envd_wire::filesystem::{
    FilesystemEvent, WatchDirResponse, WatchRequest, WatcherEvents, WatcherId,
};
use sandkeep_proto::wire::{DirWatchLine, DirWatchRequest, FsOp, shell_quote, verb};
use sandkeep_provider::{Program, RunningProcess, SandboxId, SpawnRequest};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::E2b;
use super::connect::{self, Code, RpcError};
use super::envd::{absolute, entry_at};
use super::process::{connect_timeout, keepalive};
use super::users::RunAs;

/// The most a sync waits for the helper: past it the call goes on without
/// (a stalled watch must not stall the filesystem calls).
const SYNC_TIMEOUT: Duration = Duration::from_secs(5);
/// Events queued for a stream; a full queue holds the helper back.
const QUEUE: usize = 64;
/// The most events a polled watcher keeps unfetched: past it the watch
/// ends with an error (as an overflowing inotify queue would lose
/// events), so a sandbox cannot grow this server's memory without bound.
const MAX_UNFETCHED: usize = 16 * 1024;
/// Exit statuses of the watch script before the helper takes over.
const GONE: i32 = 44;
const NOT_DIR: i32 = 45;

type Stdin = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// One running `watch-dir` helper.
struct Watcher {
    /// The helper's stdin and how many syncs were asked on it.
    requests: tokio::sync::Mutex<(Stdin, u64)>,
    /// How many syncs the helper answered (their events handed on).
    synced: watch::Receiver<u64>,
    process: Box<dyn RunningProcess>,
}

impl Watcher {
    /// Returns once every change made before the call has been handed on
    /// (or the helper is gone, or [`SYNC_TIMEOUT`] passed).
    async fn sync(&self) {
        let target = {
            let mut requests = self.requests.lock().await;
            if requests.0.write_all(b"\n").await.is_err() || requests.0.flush().await.is_err() {
                return;
            }
            requests.1 += 1;
            requests.1
        };
        let mut synced = self.synced.clone();
        let done = synced.wait_for(|&n| n >= target);
        if tokio::time::timeout(SYNC_TIMEOUT, done).await.is_err() {
            tracing::warn!("a directory watch did not answer a sync within {SYNC_TIMEOUT:?}");
        }
    }
}

impl Watcher {
    /// Ends the helper and waits (at most [`SYNC_TIMEOUT`]) until it is
    /// gone, as envd's RemoveWatcher has closed the watch when it answers.
    async fn stop(&self) {
        let _ = self.process.signal(9);
        let _ = tokio::time::timeout(SYNC_TIMEOUT, self.process.wait()).await;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Its stdin closes too, which ends it anyway; this is for a
        // helper stuck writing.
        let _ = self.process.signal(9);
    }
}

/// Where a watch's events go.
enum Sink {
    Stream(mpsc::Sender<FilesystemEvent>),
    Polled(Arc<Mutex<Polled>>),
}

/// A polled watcher's events since the last poll, and why it ended.
#[derive(Default)]
struct Polled {
    events: Vec<FilesystemEvent>,
    ended: Option<String>,
}

#[derive(Default)]
struct SandboxWatches {
    polled: HashMap<String, (Arc<Watcher>, Arc<Mutex<Polled>>)>,
    /// Every watch, streams included, for the syncs after changes.
    all: Vec<Weak<Watcher>>,
}

/// Every watch of this server, by sandbox.
#[derive(Default)]
pub struct Watchers {
    table: Mutex<HashMap<SandboxId, SandboxWatches>>,
}

impl Watchers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, SandboxWatches>> {
        self.table.lock().expect("watchers lock")
    }

    fn add(&self, id: &SandboxId, watcher: &Arc<Watcher>) {
        let mut table = self.lock();
        let watches = table.entry(id.clone()).or_default();
        watches.all.retain(|w| w.strong_count() > 0);
        watches.all.push(Arc::downgrade(watcher));
    }

    /// After a change this endpoint made in sandbox `id`: returns once
    /// every watch there has handed on what it saw of it.
    pub async fn sync(&self, id: &SandboxId) {
        let live: Vec<Arc<Watcher>> = self
            .lock()
            .get(id)
            .map(|w| w.all.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default();
        futures_util::future::join_all(live.iter().map(|w| w.sync())).await;
    }

    /// Forgets a killed sandbox's watches (their helpers died with it).
    pub fn forget(&self, id: &SandboxId) {
        self.lock().remove(id);
    }

    fn polled(
        &self,
        id: &SandboxId,
        watcher_id: &str,
    ) -> Result<(Arc<Watcher>, Arc<Mutex<Polled>>), RpcError> {
        self.lock()
            .get(id)
            .and_then(|w| w.polled.get(watcher_id))
            .cloned()
            .ok_or_else(|| not_found(watcher_id))
    }
}

type Lines = BufReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>;

/// A helper whose watch is in place.
struct Began {
    watcher: Watcher,
    /// Its stdout, after the start line.
    lines: Lines,
    /// Where its sync answers are counted.
    synced: watch::Sender<u64>,
    /// The watched directory, absolute.
    root: String,
}

/// Starts the helper for `request` and waits for its watch to be in place.
async fn begin(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    request: &WatchRequest,
) -> Result<Began, RpcError> {
    let helper = e2b.provider.task_helper(id).await?;
    let json = serde_json::to_string(&DirWatchRequest {
        path: request.path.clone(),
        recursive: request.recursive,
    })
    .expect("watch requests always encode");
    let script = format!(
        "{}[ -e \"$p\" ] || exit {GONE}; [ -d \"$p\" ] || exit {NOT_DIR}; exec {} {} {}",
        absolute(&request.path),
        shell_quote(&helper),
        verb::WATCH_DIR,
        shell_quote(&json)
    );
    let spawned = e2b
        .provider
        .spawn(
            id,
            SpawnRequest {
                program: Program::Shell(user.shell(script)),
                cwd: None,
                stdin: true,
            },
        )
        .await?;
    let mut stdout = BufReader::new(spawned.stdout);
    let mut first = String::new();
    let _ = stdout.read_line(&mut first).await;
    if let Ok(DirWatchLine::Started { path }) = serde_json::from_str(&first) {
        let (synced, synced_rx) = watch::channel(0);
        let watcher = Watcher {
            requests: tokio::sync::Mutex::new((
                spawned.stdin.expect("spawned with a stdin pipe"),
                0,
            )),
            synced: synced_rx,
            process: spawned.process,
        };
        return Ok(Began {
            watcher,
            lines: stdout,
            synced,
            root: path,
        });
    }
    // No watch: the script's or the helper's reason.
    let mut stderr = String::new();
    let _ = spawned
        .stderr
        .take(64 * 1024)
        .read_to_string(&mut stderr)
        .await;
    let path = &request.path;
    Err(match spawned.process.wait().await?.shell_code() {
        GONE => RpcError::new(Code::NotFound, format!("path {path} not found")),
        NOT_DIR => RpcError::new(
            Code::InvalidArgument,
            format!("path {path} not a directory"),
        ),
        _ => RpcError::new(
            Code::Internal,
            format!(
                "error watching {path}: {}",
                if first.trim().is_empty() {
                    stderr.trim()
                } else {
                    first.trim()
                }
            ),
        ),
    })
}

/// What a watch's events need to be made envd's.
struct Source {
    e2b: Arc<E2b>,
    id: SandboxId,
    user: RunAs,
    /// The watched directory, absolute.
    root: String,
    include_entry: bool,
}

impl Source {
    async fn event(&self, name: String, op: FsOp) -> FilesystemEvent {
        let carries_entry = matches!(op, FsOp::Create | FsOp::Write | FsOp::Chmod);
        let entry = if self.include_entry && carries_entry {
            let path = format!("{}/{name}", self.root.trim_end_matches('/'));
            // Best effort, as envd: gone again meanwhile, no entry.
            entry_at(&self.e2b, &self.id, &self.user, &path)
                .await
                .ok()
                .flatten()
                .map(Box::new)
        } else {
            None
        };
        let event_type = match op {
            FsOp::Create => "EVENT_TYPE_CREATE",
            FsOp::Write => "EVENT_TYPE_WRITE",
            FsOp::Remove => "EVENT_TYPE_REMOVE",
            FsOp::Rename => "EVENT_TYPE_RENAME",
            FsOp::Chmod => "EVENT_TYPE_CHMOD",
        };
        FilesystemEvent {
            name,
            event_type: event_type.to_owned(),
            entry,
        }
    }
}

/// Hands the helper's lines on to `sink` until it ends (or the stream's
/// reader went away).
async fn follow(mut lines: Lines, source: Source, synced: watch::Sender<u64>, sink: Sink) {
    let mut line = String::new();
    let why = loop {
        line.clear();
        match lines.read_line(&mut line).await {
            Ok(0) => break "the watch ended: its sandbox is gone or it was stopped".to_owned(),
            Err(e) => break format!("the watch ended: {e}"),
            Ok(_) => {}
        }
        match serde_json::from_str(&line) {
            Ok(DirWatchLine::Event { name, op }) => {
                let event = source.event(name, op).await;
                match &sink {
                    Sink::Stream(tx) => {
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                    Sink::Polled(p) => {
                        let mut polled = p.lock().expect("polled lock");
                        if polled.events.len() >= MAX_UNFETCHED {
                            break format!(
                                "the watch stopped: more than {MAX_UNFETCHED} events were not fetched"
                            );
                        }
                        polled.events.push(event);
                    }
                }
            }
            Ok(DirWatchLine::Synced) => synced.send_modify(|n| *n += 1),
            Ok(DirWatchLine::Started { .. }) | Err(_) => {
                break format!("the watch's helper answered {:?}", line.trim());
            }
        }
    };
    // Whoever waits for a sync is answered: nothing more will come.
    synced.send_modify(|n| *n = u64::MAX);
    if let Sink::Polled(p) = sink {
        p.lock().expect("polled lock").ended = Some(why);
    }
}

/// Starts a watch whose events go to `sink`.
async fn start(
    e2b: &Arc<E2b>,
    id: &SandboxId,
    user: &RunAs,
    request: &WatchRequest,
    sink: Sink,
) -> Result<Arc<Watcher>, RpcError> {
    let Began {
        watcher,
        lines,
        synced,
        root,
    } = begin(e2b, id, user, request).await?;
    let watcher = Arc::new(watcher);
    e2b.watchers.add(id, &watcher);
    let source = Source {
        e2b: Arc::clone(e2b),
        id: id.clone(),
        user: user.clone(),
        root,
        include_entry: request.include_entry,
    };
    tokio::spawn(follow(lines, source, synced, sink));
    Ok(watcher)
}

/// `WatchDir`: the stream of a watch's events.
pub async fn watch_dir(
    e2b: &Arc<E2b>,
    id: &SandboxId,
    user: &RunAs,
    headers: &HeaderMap,
    request: WatchRequest,
) -> Result<Response, RpcError> {
    let timeout = connect_timeout(headers)?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let watcher = start(e2b, id, user, &request, Sink::Stream(tx)).await?;
    let now = Instant::now();
    let stream = Stream {
        rx,
        _watcher: watcher,
        keepalive: keepalive(headers),
        ping: now,
        deadline: timeout.map(|t| now + t),
        started: false,
        done: false,
    };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let message = s.next().await?;
        Some((message, s))
    });
    Ok((
        [(header::CONTENT_TYPE, connect::STREAM_JSON)],
        Body::from_stream(body),
    )
        .into_response())
}

/// A WatchDir response being produced; dropping it (the client went away)
/// ends the watch.
struct Stream {
    rx: mpsc::Receiver<FilesystemEvent>,
    _watcher: Arc<Watcher>,
    keepalive: Duration,
    ping: Instant,
    deadline: Option<Instant>,
    started: bool,
    /// The end of the stream was sent.
    done: bool,
}

fn message(event: WatchDirResponse) -> Bytes {
    connect::envelope(&event)
}

impl Stream {
    /// The next envelope; `None` after the end of the stream.
    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        if !self.started {
            self.started = true;
            self.ping = Instant::now() + self.keepalive;
            return Some(Ok(message(WatchDirResponse::Start {})));
        }
        if self.done {
            return None;
        }
        let deadline = self.deadline;
        let expired = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let out = tokio::select! {
            biased;
            event = self.rx.recv() => match event {
                Some(event) => message(WatchDirResponse::Filesystem(event)),
                // The helper died under the stream: its sandbox went away.
                // E2B's proxy drops such a connection; so does this.
                None => {
                    return Some(Err(std::io::Error::other(
                        "the sandbox went away under the directory watch",
                    )));
                }
            },
            () = tokio::time::sleep_until(self.ping) => message(WatchDirResponse::Keepalive {}),
            () = expired => {
                self.done = true;
                let e = RpcError::new(Code::DeadlineExceeded, "the Connect-Timeout-Ms deadline expired");
                return Some(Ok(connect::end_stream(Some(&e))));
            }
        };
        self.ping = Instant::now() + self.keepalive;
        Some(Ok(out))
    }
}

/// `CreateWatcher`: a watch whose events wait for `GetWatcherEvents`.
pub async fn create(
    e2b: &Arc<E2b>,
    id: &SandboxId,
    user: &RunAs,
    request: WatchRequest,
) -> Result<Response, RpcError> {
    let polled = Arc::new(Mutex::new(Polled::default()));
    let watcher = start(e2b, id, user, &request, Sink::Polled(Arc::clone(&polled))).await?;
    let watcher_id = format!("w{}", super::random_hex());
    e2b.watchers
        .lock()
        .entry(id.clone())
        .or_default()
        .polled
        .insert(watcher_id.clone(), (watcher, polled));
    Ok(connect::unary_response(&WatcherId { watcher_id }))
}

/// `GetWatcherEvents`: what happened since the last call, up to now.
pub async fn events(e2b: &E2b, id: &SandboxId, request: WatcherId) -> Result<Response, RpcError> {
    let (watcher, polled) = e2b.watchers.polled(id, &request.watcher_id)?;
    watcher.sync().await;
    let mut polled = polled.lock().expect("polled lock");
    if let Some(why) = &polled.ended {
        return Err(RpcError::new(Code::Internal, why.clone()));
    }
    let events = std::mem::take(&mut polled.events);
    Ok(connect::unary_response(&WatcherEvents { events }))
}

/// `RemoveWatcher`: the watch ends.
pub async fn remove(e2b: &E2b, id: &SandboxId, request: WatcherId) -> Result<Response, RpcError> {
    let removed = e2b
        .watchers
        .lock()
        .get_mut(id)
        .and_then(|w| w.polled.remove(&request.watcher_id));
    let Some((watcher, _)) = removed else {
        return Err(not_found(&request.watcher_id));
    };
    watcher.stop().await;
    Ok(connect::unary_response(
        &sandkeep_envd_wire::connect::Empty {},
    ))
}

fn not_found(watcher_id: &str) -> RpcError {
    RpcError::new(
        Code::NotFound,
        format!("watcher with id {watcher_id} not found"),
    )
}
