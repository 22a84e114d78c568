//! The in-sandbox envd API, served for every sandbox on the one listener:
//! `/health`, the filesystem service and the dispatch of the process
//! service (`process.rs`); `/files` is `files.rs`.
//!
//! Filesystem calls run GNU `find`/`mkdir`/`mv`/`rm` in the sandbox through
//! [`Provider::exec`], so they see exactly what the sandbox's processes see
//! (its mount namespace, its user), with envd's answers: absolute paths,
//! `NOT_FOUND` for a missing path, `ALREADY_EXISTS` from MakeDir.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sandkeep_envd_wire::connect::Empty;
use sandkeep_envd_wire::filesystem::{
    EntryInfo, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
};
use sandkeep_envd_wire::header;

use super::connect::{self, Code, RpcError};
use super::users::{self, RunAs};
use super::{BodyTooLarge, E2b, Envd, SmallBody};
use super::{metadata, process, watch};
use sandkeep_proto::wire::shell_quote;
use sandkeep_provider::{ExecRequest, SandboxId};

/// The time limit of one filesystem call.
const FS_TIMEOUT: Duration = Duration::from_secs(60);

/// Exit statuses of the filesystem scripts, mapped to envd's codes.
const GONE: i32 = 44;
const NOT_DIR: i32 = 45;
const EXISTS: i32 = 46;
const EXISTS_NOT_DIR: i32 = 47;

/// envd's JSON error for its plain HTTP routes: the shape of E2B's REST
/// errors, `{code, message}` with the numeric status.
pub(super) use super::rest::error as http_error;

/// `GET /health`: exempt from the token; 204 while the routed sandbox
/// lives, E2B's proxy answer (502, "was not found") once it is gone, which
/// the SDKs' `is_running` reads.
pub async fn health(
    axum::extract::State(e2b): axum::extract::State<std::sync::Arc<E2b>>,
    headers: HeaderMap,
) -> Response {
    let Some(text) = super::target(&headers) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let live = match SandboxId::parse(&text) {
        Ok(id) => e2b.provider.info(&id).await.is_ok(),
        Err(_) => false,
    };
    if live {
        StatusCode::NO_CONTENT.into_response()
    } else {
        super::sandbox_not_found(&text)
    }
}

/// Runs a script in the sandbox; its exit status and stdout.
async fn run(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    script: String,
) -> Result<(i32, Vec<u8>), RpcError> {
    let out = e2b
        .provider
        .exec(
            id,
            ExecRequest {
                command: user.shell(script),
                cwd: None,
                timeout: FS_TIMEOUT,
                stdin: None,
                output_limit: 64 << 20,
            },
        )
        .await?;
    if out.timed_out {
        return Err(RpcError::new(
            Code::DeadlineExceeded,
            "the filesystem call did not finish in 60 s",
        ));
    }
    let code = out.exit_code.unwrap_or(-1);
    if ![0, GONE, NOT_DIR, EXISTS, EXISTS_NOT_DIR].contains(&code) {
        return Err(RpcError::new(
            Code::Internal,
            format!(
                "filesystem call failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok((code, out.stdout))
}

/// `p` set to the absolute form of `path` (relative paths are taken from
/// the user's home, the sandbox's working directory).
pub(super) fn absolute(path: &str) -> String {
    let q = shell_quote(path);
    format!("case {q} in /*) p={q};; *) p=\"$PWD\"/{q};; esac; ")
}

/// `find`'s actions printing one [`entry`] per file, NUL-terminated: a
/// symbolic link's resolved target (`readlink -f`, in the sandbox, so
/// chains and relative links resolve as there) on a line of its own (an
/// empty line for anything else, or a link `readlink` cannot resolve), then
/// the type (of the link and, `%Y`, of what it points to), size, mode,
/// owner, group, mtime and, last, the path.
const PRINT: &str = concat!(
    r"\( -type l -exec readlink -f -- {} \; -o -printf '\n' \) ",
    r"-printf '%y\t%Y\t%s\t%m\t%M\t%u\t%g\t%T@\t%p\0'"
);

/// One record of [`PRINT`]. A symbolic link is described as envd does:
/// the type of its target and the target's absolute resolved path.
fn entry(record: &str) -> Option<EntryInfo> {
    let (resolved, fields) = record.split_once('\n')?;
    let mut f = fields.splitn(9, '\t');
    let (kind, target_kind, size, mode, perms, owner, group, mtime, path) = (
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
        f.next()?,
    );
    let path = clean(path);
    let name = path.rsplit('/').next().unwrap_or("").to_owned();
    let symlink = kind == "l";
    // A dangling or looping link (`N`, `L`) stays a link.
    let file_type = match target_kind {
        "d" => "FILE_TYPE_DIRECTORY",
        "f" => "FILE_TYPE_FILE",
        "N" | "L" | "l" => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_UNSPECIFIED",
    };
    // Before the epoch (a negative mtime) reads as the epoch.
    let secs = mtime
        .split('.')
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let modified = sandkeep_provider::rfc3339(secs);
    Some(EntryInfo {
        name,
        file_type: file_type.to_owned(),
        path,
        size: size.to_owned(),
        mode: u32::from_str_radix(mode, 8).unwrap_or(0),
        permissions: perms.to_owned(),
        owner: owner.to_owned(),
        group: group.to_owned(),
        modified_time: modified,
        symlink_target: symlink.then(|| resolved.to_owned()),
        metadata: Default::default(),
    })
}

/// `/a//b/./c/` → `/a/b/c` (what `find` prints is the path as given).
pub(super) fn clean(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

fn entries(stdout: &[u8]) -> Vec<EntryInfo> {
    String::from_utf8_lossy(stdout)
        .split('\0')
        .filter(|r| !r.is_empty())
        .filter_map(entry)
        .collect()
}

/// `entries` in envd's order (Go's `filepath.WalkDir`): a directory
/// before what is in it, each directory's entries by name, bytewise —
/// not the order the file system happens to keep them in.
fn walk_order(mut entries: Vec<EntryInfo>) -> Vec<EntryInfo> {
    entries.sort_by(|a, b| {
        a.path
            .split('/')
            .map(str::as_bytes)
            .cmp(b.path.split('/').map(str::as_bytes))
    });
    entries
}

fn not_found(path: &str) -> RpcError {
    RpcError::new(Code::NotFound, format!("path {path:?} does not exist"))
}

/// What Stat answers for `path`, metadata included; `None` when nothing
/// is there.
pub(super) async fn entry_at(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    path: &str,
) -> Result<Option<EntryInfo>, RpcError> {
    let script = format!(
        "{}[ -e \"$p\" ] || [ -L \"$p\" ] || exit {GONE}; find \"$p\" -maxdepth 0 {PRINT}",
        absolute(path)
    );
    let (code, out) = run(e2b, id, user, script).await?;
    if code == GONE {
        return Ok(None);
    }
    Ok(metadata::attach(e2b, id, user, entries(&out))
        .await
        .into_iter()
        .next())
}

/// The answer naming the one entry `stdout` describes, with its metadata.
async fn one_entry(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    path: &str,
    stdout: &[u8],
) -> Result<Response, RpcError> {
    let entry = metadata::attach(e2b, id, user, entries(stdout))
        .await
        .into_iter()
        .next()
        .ok_or_else(|| not_found(path))?;
    Ok(connect::unary_response(&EntryResponse { entry }))
}

async fn filesystem(
    e2b: &Arc<E2b>,
    id: &SandboxId,
    user: &RunAs,
    method: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, RpcError> {
    match method {
        "MakeDir" | "Move" | "Remove" => {
            let answer = change(e2b, id, user, method, headers, body).await;
            // What a watch saw of the change is handed on before the
            // caller hears of it (`watch`).
            e2b.watchers.sync(id).await;
            answer
        }
        "Stat" => {
            let r: PathRequest = connect::unary_request(headers, body)?;
            let entry = entry_at(e2b, id, user, &r.path)
                .await?
                .ok_or_else(|| not_found(&r.path))?;
            Ok(connect::unary_response(&EntryResponse { entry }))
        }
        "ListDir" => {
            let r: ListDirRequest = connect::unary_request(headers, body)?;
            let script = format!(
                "{}[ -e \"$p\" ] || exit {GONE}; [ -d \"$p\" ] || exit {NOT_DIR}; \
                 find \"$p\" -mindepth 1 -maxdepth {} {PRINT}",
                absolute(&r.path),
                r.depth.max(1)
            );
            match run(e2b, id, user, script).await? {
                (GONE, _) => Err(not_found(&r.path)),
                (NOT_DIR, _) => Err(RpcError::new(
                    Code::InvalidArgument,
                    format!("path {:?} is not a directory", r.path),
                )),
                (_, out) => Ok(connect::unary_response(&ListDirResponse {
                    entries: metadata::attach(e2b, id, user, walk_order(entries(&out))).await,
                })),
            }
        }
        "WatchDir" => {
            let request = connect::single_stream_request(headers, body, method)?;
            watch::watch_dir(e2b, id, user, headers, request).await
        }
        "CreateWatcher" => {
            watch::create(e2b, id, user, connect::unary_request(headers, body)?).await
        }
        "GetWatcherEvents" => watch::events(e2b, id, connect::unary_request(headers, body)?).await,
        "RemoveWatcher" => watch::remove(e2b, id, connect::unary_request(headers, body)?).await,
        other => Err(RpcError::new(
            Code::NotFound,
            format!("filesystem.Filesystem/{other} is not a method"),
        )),
    }
}

/// The filesystem calls that change files: MakeDir, Move and Remove.
async fn change(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    method: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, RpcError> {
    match method {
        "MakeDir" => {
            let r: PathRequest = connect::unary_request(headers, body)?;
            let script = format!(
                "{}if [ -d \"$p\" ]; then exit {EXISTS}; elif [ -e \"$p\" ]; then exit {EXISTS_NOT_DIR}; fi; \
                     mkdir -p -- \"$p\" && find \"$p\" -maxdepth 0 {PRINT}",
                absolute(&r.path)
            );
            match run(e2b, id, user, script).await? {
                (EXISTS, _) => Err(RpcError::new(
                    Code::AlreadyExists,
                    format!("directory {:?} already exists", r.path),
                )),
                (EXISTS_NOT_DIR, _) => Err(RpcError::new(
                    Code::InvalidArgument,
                    format!("path {:?} exists and is not a directory", r.path),
                )),
                (_, out) => one_entry(e2b, id, user, &r.path, &out).await,
            }
        }
        "Move" => {
            let r: MoveRequest = connect::unary_request(headers, body)?;
            let script = format!(
                "{}s=\"$p\"; {}[ -e \"$s\" ] || [ -L \"$s\" ] || exit {GONE}; \
                     mkdir -p -- \"$(dirname -- \"$p\")\" && mv -T -- \"$s\" \"$p\" && \
                     find \"$p\" -maxdepth 0 {PRINT}",
                absolute(&r.source),
                absolute(&r.destination)
            );
            match run(e2b, id, user, script).await? {
                (GONE, _) => Err(not_found(&r.source)),
                (_, out) => one_entry(e2b, id, user, &r.destination, &out).await,
            }
        }
        "Remove" => {
            let r: PathRequest = connect::unary_request(headers, body)?;
            run(
                e2b,
                id,
                user,
                format!("{}rm -rf -- \"$p\"", absolute(&r.path)),
            )
            .await?;
            Ok(connect::unary_response(&Empty {}))
        }
        other => Err(RpcError::new(
            Code::NotFound,
            format!("filesystem.Filesystem/{other} is not a method that changes files"),
        )),
    }
}

async fn process_rpc(
    e2b: &E2b,
    id: &SandboxId,
    user: &RunAs,
    method: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, RpcError> {
    let procs = &e2b.processes;
    match method {
        "Start" => {
            let request = connect::single_stream_request(headers, body, method)?;
            process::start(procs, &e2b.provider, id, headers, request, user).await
        }
        "Connect" => {
            let request = connect::single_stream_request(headers, body, method)?;
            process::connect(procs, id, headers, request)
        }
        "List" => {
            connect::unary_request::<serde::de::IgnoredAny>(headers, body)?;
            Ok(process::list(procs, id))
        }
        "SendInput" => process::send_input(procs, id, connect::unary_request(headers, body)?).await,
        "CloseStdin" => {
            process::close_stdin(procs, id, connect::unary_request(headers, body)?).await
        }
        "SendSignal" => process::send_signal(procs, id, connect::unary_request(headers, body)?),
        "Update" => process::update(procs, id, connect::unary_request(headers, body)?).await,
        other => Err(RpcError::new(
            Code::NotFound,
            format!("process.Process/{other} is not a method"),
        )),
    }
}

/// Whether a method answers with a stream (errors then travel in the
/// end-stream envelope).
fn is_stream(service: &str, method: &str) -> bool {
    matches!(
        (service, method),
        ("process.Process", "Start" | "Connect") | ("filesystem.Filesystem", "WatchDir")
    )
}

/// Who a request runs as: envd's user named in its `Authorization`.
fn user(envd: &Envd, headers: &HeaderMap) -> Result<RunAs, RpcError> {
    users::basic_user(headers)
        .and_then(|name| users::run_as(envd.record.account.as_ref(), name.as_deref()))
        .map_err(|e| RpcError::new(Code::InvalidArgument, e))
}

/// `POST /process.Process/StreamInput`: its body read as it comes, not
/// whole as the other calls' (see [`process::stream_input`]).
pub async fn stream_input(envd: Envd, headers: HeaderMap, body: axum::body::Body) -> Response {
    let streamed = match user(&envd, &headers) {
        Ok(_) => process::stream_input(&envd.e2b.processes, &envd.id, &headers, body).await,
        Err(e) => Err(e),
    };
    streamed.unwrap_or_else(|e| process::stream_error(&e))
}

/// `POST /{service}/{method}`.
pub async fn rpc(
    envd: Envd,
    service: &str,
    method: &str,
    headers: HeaderMap,
    body: Result<SmallBody, BodyTooLarge>,
) -> Response {
    let e2b = &envd.e2b;
    let user = user(&envd, &headers);
    let result = match (service, body, user) {
        (_, Err(too_large), _) => Err(too_large.into()),
        (_, _, Err(e)) => Err(e),
        ("process.Process", Ok(body), Ok(user)) => {
            process_rpc(e2b, &envd.id, &user, method, &headers, body.bytes()).await
        }
        ("filesystem.Filesystem", Ok(body), Ok(user)) => {
            filesystem(e2b, &envd.id, &user, method, &headers, body.bytes()).await
        }
        (other, Ok(_), Ok(_)) => Err(RpcError::new(
            Code::NotFound,
            format!("{other} is not a service of envd"),
        )),
    };
    match result {
        Ok(r) => r,
        Err(e) if is_stream(service, method) => process::stream_error(&e),
        Err(e) => e.into_response(),
    }
}

/// The access token check of every envd route but the exempt ones.
pub fn authorized(expected: &str, headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCESS_TOKEN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| super::same(t, expected))
}

/// The answer to a missing or wrong access token.
pub fn unauthorized(is_rpc: bool) -> Response {
    let message = "missing or invalid X-Access-Token for this sandbox";
    if is_rpc {
        RpcError::new(Code::Unauthenticated, message).into_response()
    } else {
        http_error(StatusCode::UNAUTHORIZED, message)
    }
}
