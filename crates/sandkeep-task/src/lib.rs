//! sandkeep's in-sandbox helper: the private task directory, the verbs
//! start / status / wait / cancel / delete / list / input / resize, and the
//! supervisor that runs each task; besides, `changes` and `export`, what
//! the sandbox wrote in its copy-on-write shares, and for the E2B
//! endpoint `metadata` (file metadata), `watch-dir` (directory watch) and
//! `pty` (an attached terminal).
//!
//! The helper is a short-lived command answering with exactly one JSON
//! object on stdout (the verb's reply, or an error reply with exit code 1);
//! `wait --stream`, `watch-dir` and `serve` (the resident reader of
//! `status` and `list`) live as long as their stdin and answer with lines;
//! `pty` relays a terminal for as long as its command runs.
//! The supervisor is the same executable re-run detached under a hidden
//! verb. Nothing here knows about MCP or the host.

// Denied, not forbidden: two `unsafe` calls are allowed where they are
// made, closing the descriptors this process inherited
// (`close_inherited_fds`) and the task's `pre_exec` (`spawn_command`).
#![deny(unsafe_code)]

mod cancel;
mod capture;
mod changes;
mod delete;
mod dirwatch;
mod error;
mod input;
mod interact;
mod metadata;
mod nullio;
mod oom;
pub mod procfs;
mod pty;
mod redact;
mod relay;
mod serve;
mod start;
mod status;
mod supervisor;
mod taskdir;
mod wait;

use std::io::Write;

use serde::Serialize;
use serde::de::DeserializeOwned;

use sandkeep_proto::wire::{self, ErrorReply, verb};

pub use error::HelperError;
pub use supervisor::SUPERVISE_VERB;

/// What `sandkeep-task --version` prints: a host uploads a helper only if
/// it prints exactly the line the host's own copy of this library gives.
/// The source fingerprint (build.rs) tells apart builds whose protocol
/// number was not bumped, such as a stale development binary.
pub fn version_line() -> String {
    format!(
        "sandkeep-task {} protocol {} source {}",
        env!("CARGO_PKG_VERSION"),
        wire::PROTOCOL_VERSION,
        env!("SANDKEEP_TASK_SOURCE")
    )
}

const USAGE: &str = "usage: sandkeep-task --version | start JSON | status JSON | wait JSON | wait --stream | cancel JSON | delete JSON | list [{}] | serve | input JSON < DATA | resize JSON | changes JSON | export JSON | metadata JSON | watch-dir JSON | pty JSON";

/// Runs the helper with its command-line arguments (without argv\[0\]) and
/// returns the process exit code.
///
/// `start` leaves the supervisor as a child of the calling process until
/// that process exits: call this from a short-lived process (the helper
/// executable), not from a long-running one.
pub fn main_with_args(args: Vec<String>) -> i32 {
    oom::stand_back();
    let verb_name = args.first().map(String::as_str);
    if verb_name == Some(SUPERVISE_VERB) {
        return supervisor::main(&args[1..]);
    }
    if verb_name == Some(pty::SESSION_VERB) {
        return pty::session_main(&args[1..]);
    }
    if verb_name == Some(wire::VERSION_FLAG) && args.len() == 1 {
        println!("{}", version_line());
        return 0;
    }
    let json = args.get(1).map(String::as_str);
    let extra = args.len() > 2;
    if extra {
        return reply::<()>(Err(HelperError::BadRequest(format!(
            "too many arguments; {USAGE}"
        ))));
    }
    match verb_name {
        Some(verb::START) => {
            close_inherited_fds();
            reply(parse(json).and_then(start::start))
        }
        Some(verb::STATUS) => reply(parse(json).and_then(status::status)),
        Some(verb::WAIT) if json == Some(wire::WAIT_STREAM) => {
            wait::stream();
            0
        }
        Some(verb::WAIT) => reply(parse(json).and_then(wait::wait)),
        Some(verb::CANCEL) => reply(parse(json).and_then(cancel::cancel)),
        Some(verb::DELETE) => reply(parse(json).and_then(delete::delete)),
        Some(verb::INPUT) => reply(parse(json).and_then(|req| interact::input(req, read_input()?))),
        Some(verb::RESIZE) => reply(parse(json).and_then(interact::resize)),
        Some(verb::LIST) => reply(no_arguments(json).and_then(|()| status::list())),
        Some(verb::SERVE) if json.is_none() => serve::serve(),
        Some(verb::CHANGES) => reply(parse(json).and_then(changes::changes)),
        // A stream, not one JSON reply: only a failure is a reply (after
        // whatever was written; the host reads the exit code first).
        Some(verb::EXPORT) => {
            match parse(json).and_then(|r| changes::export(r, &mut std::io::stdout().lock())) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            }
        }
        Some(verb::METADATA) => reply(parse(json).and_then(metadata::metadata)),
        Some(verb::PTY) => match parse(json) {
            Ok(request) => relay::run(request),
            Err(e) => reply::<()>(Err(e)),
        },
        Some(verb::WATCH_DIR) => match parse(json) {
            Ok(request) => dirwatch::run(request),
            Err(e) => reply::<()>(Err(e)),
        },
        _ => reply::<()>(Err(HelperError::BadRequest(USAGE.into()))),
    }
}

/// Descriptors this process inherited without close-on-exec (from whoever
/// ran the helper) must not reach the supervisor: one held open there could
/// keep the caller waiting for an end-of-file for the task's life. Called
/// before `start` opens anything, so every descriptor above 2 is foreign.
/// Closing a descriptor by its number is `unsafe` (rustix and std; nix's
/// safe `close` only hid that from `forbid(unsafe_code)`).
#[allow(unsafe_code)]
fn close_inherited_fds() {
    use std::os::fd::AsRawFd;
    let flags =
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC;
    let Ok(listing) = rustix::fs::open("/proc/self/fd", flags, rustix::fs::Mode::empty()) else {
        return;
    };
    // The listing's own descriptor is listed too: not one to close here.
    let own = listing.as_raw_fd();
    let Ok(mut entries) = rustix::fs::Dir::new(listing) else {
        return;
    };
    let mut fds = Vec::new();
    while let Some(Ok(entry)) = entries.read() {
        if let Some(fd) = entry.file_name().to_str().ok().and_then(|n| n.parse().ok())
            && fd > 2
            && fd != own
        {
            fds.push(fd);
        }
    }
    drop(entries);
    for fd in fds {
        // SAFETY: each is open (listed just now, nothing closed since but
        // the listing's own), and nothing in this process owns or uses it:
        // the helper has opened nothing yet, so no handle is left to a
        // descriptor closed here, nor to a later reuse of its number.
        unsafe { rustix::io::close(fd) };
    }
}

fn parse<T: DeserializeOwned>(json: Option<&str>) -> Result<T, HelperError> {
    let json =
        json.ok_or_else(|| HelperError::BadRequest(format!("missing JSON request; {USAGE}")))?;
    serde_json::from_str(json)
        .map_err(|e| HelperError::BadRequest(format!("malformed request: {e}")))
}

/// The bytes of `input`, on stdin; one byte more than a call may carry is
/// enough to refuse it.
fn read_input() -> Result<Vec<u8>, HelperError> {
    use std::io::Read;
    let limit = sandkeep_proto::limits::INPUT_MAX_BYTES as u64 + 1;
    let mut data = Vec::new();
    std::io::stdin()
        .take(limit)
        .read_to_end(&mut data)
        .map_err(|e| HelperError::BadRequest(format!("reading the input on stdin: {e}")))?;
    Ok(data)
}

/// `list` takes no arguments; the host's generic call sends an empty
/// object, which is accepted too.
fn no_arguments(json: Option<&str>) -> Result<(), HelperError> {
    let Some(json) = json else { return Ok(()) };
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
        Ok(map) if map.is_empty() => Ok(()),
        _ => Err(HelperError::BadRequest(format!(
            "list takes no arguments, got {json:?}; {USAGE}"
        ))),
    }
}

/// The one JSON object of the reply and the exit code that goes with it.
fn encode<T: Serialize>(result: Result<T, HelperError>) -> (String, i32) {
    let (json, code) = match result {
        Ok(value) => (serde_json::to_string(&value), 0),
        Err(e) => (
            serde_json::to_string(&ErrorReply::new(e.kind(), e.to_string())),
            1,
        ),
    };
    (json.expect("replies always encode"), code)
}

/// Prints the one JSON object of the reply and gives the exit code.
fn reply<T: Serialize>(result: Result<T, HelperError>) -> i32 {
    let (mut line, code) = encode(result);
    line.push('\n');
    let mut out = std::io::stdout().lock();
    // A caller that closed our stdout gets nothing; there is no one to tell.
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
    code
}
