//! envd's `/files`: uploads (multipart parts named `file`, or an
//! octet-stream body) streamed into the sandbox, downloads streamed out of
//! it (whole, or one `Range`), never holding a whole file in memory.
//!
//! Each transfer is one small `sh` script in the sandbox run through
//! [`sandkeep_provider::Provider::spawn`] (`cat` between the HTTP body and
//! the file), so it sees the sandbox's files exactly as its user does. An
//! upload lands in a temporary file beside the target and is renamed over
//! it only once the whole body arrived: a broken upload (the client goes
//! away, a bad multipart body, a failing script) kills the script, leaves
//! the old file, and removes the temporary one ([`Staged`]).

use axum::body::{Body, Bytes};
use axum::extract::{Multipart, Query};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use sandkeep_envd_wire::filesystem::WrittenFile;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::Envd;
use super::envd::{absolute, clean, http_error};
use super::metadata;
use super::users::{self, RunAs};
use sandkeep_proto::wire::{MetadataRequest, UPLOAD_STAGING_NEW_PREFIX, UPLOAD_STAGING_PREFIX};
use sandkeep_provider::{
    ExecRequest, ExitStatus, Program, Provider, ProviderError, RunningProcess, SandboxId,
    SpawnRequest, Spawned,
};

/// Exit statuses of the transfer scripts.
const GONE: i32 = 44;
const IS_DIR: i32 = 45;
/// The read size of a download.
const CHUNK: usize = 256 * 1024;
/// The time limit of the small root scripts around an upload (making its
/// parent directories, removing a broken one's temporary file).
const ROOT_SCRIPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, Deserialize)]
pub struct FileQuery {
    #[serde(default)]
    path: Option<String>,
    /// The user the transfer runs as (the sandbox's default when absent).
    #[serde(default)]
    username: Option<String>,
}

impl FileQuery {
    /// Who the transfer runs as, or why the name is refused.
    fn user(&self, envd: &Envd) -> Result<RunAs, String> {
        let name = self.username.as_deref().filter(|u| !u.is_empty());
        users::run_as(envd.record.account.as_ref(), name)
    }
}

async fn spawn(
    envd: &Envd,
    user: &RunAs,
    script: String,
    stdin: bool,
) -> Result<Spawned, Response> {
    envd.e2b
        .provider
        .spawn(
            &envd.id,
            SpawnRequest {
                program: Program::Shell(user.shell(script)),
                cwd: None,
                stdin,
            },
        )
        .await
        .map_err(|e| http_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// The rest of a (small) pipe: a script's stderr or its answer line.
async fn read_small(mut from: Box<dyn AsyncRead + Send + Unpin>) -> String {
    let mut out = Vec::new();
    let _ = (&mut from).take(64 * 1024).read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).trim().to_owned()
}

/// The answer to a script that failed before any data moved.
fn failed(
    status: Result<ExitStatus, impl std::fmt::Display>,
    stderr: &str,
    path: &str,
) -> Response {
    match status {
        Ok(ExitStatus::Code(GONE)) => http_error(
            StatusCode::NOT_FOUND,
            format!("path {path:?} does not exist"),
        ),
        Ok(ExitStatus::Code(IS_DIR)) => http_error(
            StatusCode::BAD_REQUEST,
            format!("path {path:?} is a directory"),
        ),
        Ok(_) => http_error(StatusCode::BAD_REQUEST, format!("{path}: {stderr}")),
        Err(e) => http_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A byte range of a `Range: bytes=…` header, or why it is unsatisfiable;
/// `None` for a header that is not one range (answered with the whole file).
fn range(header: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = header.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let r = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            if n == 0 || len == 0 {
                return Some(Err(()));
            }
            (len.saturating_sub(n), len - 1)
        }
        (a, "") => (a.parse().ok()?, len.saturating_sub(1)),
        (a, b) => (
            a.parse().ok()?,
            b.parse::<u64>().ok()?.min(len.saturating_sub(1)),
        ),
    };
    Some(if r.0 >= len || r.0 > r.1 {
        Err(())
    } else {
        Ok(r)
    })
}

/// The download body: `first`, then the script's stdout to its end; a
/// script that fails midway breaks the body (the client sees an error,
/// never a silently short file).
fn body(
    first: Vec<u8>,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
    process: Box<dyn RunningProcess>,
) -> Body {
    let state = (Some(first), stdout, process, false);
    Body::from_stream(futures_util::stream::unfold(
        state,
        |(first, mut stdout, process, done)| async move {
            if done {
                return None;
            }
            if let Some(first) = first.filter(|f| !f.is_empty()) {
                return Some((Ok(Bytes::from(first)), (None, stdout, process, false)));
            }
            let mut buf = Vec::with_capacity(CHUNK);
            match (&mut stdout).take(CHUNK as u64).read_to_end(&mut buf).await {
                Ok(0) => match process.wait().await {
                    Ok(ExitStatus::Code(0)) => None,
                    status => Some((
                        Err(std::io::Error::other(format!(
                            "the file could not be read to its end ({status:?})"
                        ))),
                        (None, stdout, process, true),
                    )),
                },
                Ok(_) => Some((Ok(Bytes::from(buf)), (None, stdout, process, false))),
                Err(e) => Some((Err(e), (None, stdout, process, true))),
            }
        },
    ))
}

/// `GET /files?path=`: the whole file, or the requested range (206).
pub async fn download(envd: Envd, Query(q): Query<FileQuery>, headers: HeaderMap) -> Response {
    let user = match q.user(&envd) {
        Ok(u) => u,
        Err(e) => return http_error(StatusCode::BAD_REQUEST, e),
    };
    let Some(path) = q.path.filter(|p| !p.is_empty()) else {
        return http_error(StatusCode::BAD_REQUEST, "the path parameter is required");
    };
    let wanted = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let check = format!(
        "{}[ -e \"$p\" ] || exit {GONE}; [ -d \"$p\" ] && exit {IS_DIR}; ",
        absolute(&path)
    );
    // With a range, the size comes first and the range to send is read
    // back from stdin.
    let script = match wanted {
        None => format!("{check}exec cat -- \"$p\""),
        Some(_) => format!(
            "{check}stat -L -c %s -- \"$p\" || exit 1; read a n; [ \"$n\" -gt 0 ] || exit 0; \
             tail -c +$((a + 1)) -- \"$p\" | head -c \"$n\""
        ),
    };
    let spawned = match spawn(&envd, &user, script, wanted.is_some()).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Spawned {
        stdin,
        mut stdout,
        stderr,
        process,
    } = spawned;
    let stderr = tokio::spawn(read_small(stderr));
    // The first bytes (or the size line) tell a file from a failure.
    let mut first = Vec::with_capacity(CHUNK);
    let mut line_end = None;
    loop {
        let mut buf = vec![0u8; CHUNK];
        match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => first.extend_from_slice(&buf[..n]),
        }
        line_end = first.iter().position(|&b| b == b'\n');
        if wanted.is_none() || line_end.is_some() {
            break;
        }
    }
    let name = path.rsplit('/').next().unwrap_or("file").replace('"', "");
    let base = [
        (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        ),
        (header::ACCEPT_RANGES, "bytes".to_owned()),
    ];
    let Some(wanted) = wanted else {
        if first.is_empty() {
            let code = process.wait().await;
            if !code.as_ref().is_ok_and(|c| c.success()) {
                return failed(code, &stderr.await.unwrap_or_default(), &path);
            }
        }
        return (base, body(first, stdout, process)).into_response();
    };
    let size = line_end.and_then(|e| {
        std::str::from_utf8(&first[..e])
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    });
    let (Some(len), Some(end), Some(mut stdin)) = (size, line_end, stdin) else {
        let code = process.wait().await;
        return failed(code, &stderr.await.unwrap_or_default(), &path);
    };
    let rest = first.split_off(end + 1);
    let (status, (a, n)) = match range(&wanted, len) {
        None => (StatusCode::OK, (0, len)),
        Some(Err(())) => (StatusCode::RANGE_NOT_SATISFIABLE, (0, 0)),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, (a, b - a + 1)),
    };
    if stdin
        .write_all(format!("{a} {n}\n").as_bytes())
        .await
        .is_err()
    {
        let code = process.wait().await;
        return failed(code, &stderr.await.unwrap_or_default(), &path);
    }
    drop(stdin);
    match status {
        StatusCode::RANGE_NOT_SATISFIABLE => {
            (status, [(header::CONTENT_RANGE, format!("bytes */{len}"))]).into_response()
        }
        StatusCode::PARTIAL_CONTENT => (
            status,
            base,
            [
                (
                    header::CONTENT_RANGE,
                    format!("bytes {a}-{}/{len}", a + n - 1),
                ),
                (header::CONTENT_LENGTH, n.to_string()),
            ],
            body(rest, stdout, process),
        )
            .into_response(),
        _ => (
            status,
            base,
            [(header::CONTENT_LENGTH, n.to_string())],
            body(rest, stdout, process),
        )
            .into_response(),
    }
}

/// Where an upload's bytes come from.
enum Source<'a> {
    Part(Box<axum::extract::multipart::Field<'a>>),
    Body(axum::body::BodyDataStream),
}

impl Source<'_> {
    async fn next(&mut self) -> Result<Option<Bytes>, String> {
        match self {
            Self::Part(f) => f.chunk().await.map_err(|e| e.to_string()),
            Self::Body(b) => b.next().await.transpose().map_err(|e| e.to_string()),
        }
    }
}

/// An upload script and its temporary file until the file is renamed over
/// the target. Dropped before [`Staged::done`] (an error, or the client
/// went away and the handler with it), it kills the script, waits for it
/// to be dead (so nothing can rename or write the file any more) and only
/// then closes its stdin and removes the file, in a task of its own.
struct Staged {
    stdin: Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    process: Option<Box<dyn RunningProcess>>,
    /// The sandbox and the script that removes the temporary file.
    cleanup: Option<(std::sync::Arc<dyn Provider>, SandboxId, String)>,
}

impl Staged {
    fn process(&self) -> &dyn RunningProcess {
        self.process.as_deref().expect("held until dropped")
    }

    /// The file was renamed over the target: nothing to clean up.
    fn done(mut self) {
        self.cleanup = None;
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let Some((provider, id, script)) = self.cleanup.take() else {
            return;
        };
        let (stdin, process) = (self.stdin.take(), self.process.take());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Some(process) = &process {
                let _ = process.kill_group();
                let _ = process.wait().await;
            }
            // Closed only now: an end of input while the script lived
            // would have let it rename the partial file over the target.
            drop(stdin);
            let removed = provider
                .exec(
                    &id,
                    ExecRequest {
                        command: script,
                        cwd: None,
                        timeout: ROOT_SCRIPT_TIMEOUT,
                        stdin: None,
                        output_limit: 4096,
                    },
                )
                .await;
            match removed {
                // Gone with its sandbox.
                Ok(_) | Err(ProviderError::NoSuchSandbox(_)) => {}
                Err(e) => {
                    tracing::warn!(sandbox = %id, "cannot remove a broken upload's temporary file: {e}");
                }
            }
        });
    }
}

/// How an upload's body is encoded (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    /// Decoded in the sandbox (`gzip -dc`) on its way to the file: what is
    /// stored is what the caller sent, never the compressed stream.
    Gzip,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Result<Self, String> {
        let Some(value) = headers.get(header::CONTENT_ENCODING) else {
            return Ok(Self::Identity);
        };
        match value
            .to_str()
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            Ok("" | "identity") => Ok(Self::Identity),
            Ok("gzip" | "x-gzip") => Ok(Self::Gzip),
            _ => Err(format!(
                "Content-Encoding {value:?} is not supported; send gzip or no encoding"
            )),
        }
    }

    /// The command writing stdin's decoded bytes to stdout.
    fn decoder(self) -> &'static str {
        match self {
            Self::Identity => "cat",
            Self::Gzip => "gzip -dc",
        }
    }
}

/// Runs `script` (from [`RunAs::parents_as_root`]) as the sandbox's root:
/// an upload's missing parent directories, the user's.
async fn make_parents(envd: &Envd, script: String, path: &str) -> Result<(), Response> {
    let out = envd
        .e2b
        .provider
        .exec(
            &envd.id,
            ExecRequest {
                command: script,
                cwd: None,
                timeout: ROOT_SCRIPT_TIMEOUT,
                stdin: None,
                output_limit: 4096,
            },
        )
        .await
        .map_err(|e| http_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if out.exit_code == Some(0) {
        return Ok(());
    }
    Err(http_error(
        StatusCode::BAD_REQUEST,
        format!(
            "{path}: cannot create its directory: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    ))
}

/// Streams one file into the sandbox; its entry as envd answers it.
async fn write_one(
    envd: &Envd,
    user: &RunAs,
    path: &str,
    encoding: Encoding,
    mut source: Source<'_>,
) -> Result<WrittenFile, Response> {
    // `$d`, `$p` and `$t`: the directory, the target and the temporary
    // file, named here so that a cleanup can find it. The upload script
    // renames `$t` to `$n` first when the target is new: a directory
    // watch (`watch-dir`) reports the staged file's rename as envd's
    // in-place write of the target, its creation included.
    let names = format!(
        "{}d=${{p%/*}}; [ -n \"$d\" ] || d=/; s={}; t=\"$d/{UPLOAD_STAGING_PREFIX}$s\"; \
         n=\"$d/{UPLOAD_STAGING_NEW_PREFIX}$s\"; ",
        absolute(path),
        super::random_hex()
    );
    if let Some(parents) = user.parents_as_root(&names) {
        make_parents(envd, parents, path).await?;
    }
    let script = format!(
        "{names}mkdir -p -- \"$d\" || exit 1; [ -e \"$p\" ] || t=\"$n\"; \
         {} > \"$t\" && mv -fT -- \"$t\" \"$p\" && printf '%s' \"$p\"",
        encoding.decoder()
    );
    let Spawned {
        stdin,
        stdout,
        stderr,
        process,
    } = spawn(envd, user, script, true).await?;
    let mut staged = Staged {
        stdin: Some(stdin.expect("spawned with a stdin pipe")),
        process: Some(process),
        cleanup: Some((
            std::sync::Arc::clone(&envd.e2b.provider),
            envd.id.clone(),
            user.shell(format!("{names}rm -f -- \"$t\" \"$n\"")),
        )),
    };
    let stdout = tokio::spawn(read_small(stdout));
    let stderr = tokio::spawn(read_small(stderr));
    let input = staged.stdin.as_mut().expect("held until the body ends");
    loop {
        match source.next().await {
            Ok(Some(chunk)) => {
                // A script that stopped reading failed: its status says why.
                if input.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                return Err(http_error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the upload: {e}"),
                ));
            }
        }
    }
    drop(staged.stdin.take());
    let code = staged.process().wait().await;
    if !code.as_ref().is_ok_and(|c| c.success()) {
        return Err(failed(code, &stderr.await.unwrap_or_default(), path));
    }
    staged.done();
    let full = clean(&stdout.await.unwrap_or_default());
    let name = full.rsplit('/').next().unwrap_or("").to_owned();
    Ok(WrittenFile {
        path: full,
        name,
        file_type: "file".to_owned(),
        metadata: None,
    })
}

/// `POST /files`: multipart parts named `file` (the filename is the path
/// when no `path` parameter is given) or an octet-stream body with `path`.
pub async fn upload(
    envd: Envd,
    Query(q): Query<FileQuery>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let answer = store(&envd, q, headers, request).await;
    // What a directory watch saw of the upload is handed on before the
    // caller hears of it (`watch`).
    envd.e2b.watchers.sync(&envd.id).await;
    answer
}

async fn store(
    envd: &Envd,
    q: FileQuery,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let user = match q.user(envd) {
        Ok(u) => u,
        Err(e) => return http_error(StatusCode::BAD_REQUEST, e),
    };
    let path = q.path.filter(|p| !p.is_empty());
    let encoding = match Encoding::of(&headers) {
        Ok(e) => e,
        Err(message) => return http_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, message),
    };
    let wanted = match metadata::from_headers(&headers) {
        Ok(m) => m,
        Err(message) => return http_error(StatusCode::BAD_REQUEST, message),
    };
    let mut written = Vec::new();
    if content_type.starts_with("multipart/form-data") {
        // The encoding covers the whole multipart body, parts and
        // boundaries: the SDKs send a gzip upload as octet-stream only.
        if encoding != Encoding::Identity {
            return http_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a gzip-encoded upload must be application/octet-stream with the path parameter",
            );
        }
        let mut multipart =
            match <Multipart as axum::extract::FromRequest<()>>::from_request(request, &()).await {
                Ok(m) => m,
                Err(e) => {
                    return http_error(StatusCode::BAD_REQUEST, format!("bad multipart body: {e}"));
                }
            };
        loop {
            let field = match multipart.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    return http_error(StatusCode::BAD_REQUEST, format!("bad multipart body: {e}"));
                }
            };
            if field.name() != Some("file") {
                continue;
            }
            let target = match (&path, field.file_name()) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) if !f.is_empty() => f.to_owned(),
                (None, _) => {
                    return http_error(
                        StatusCode::BAD_REQUEST,
                        "a file part needs a filename when no path parameter is given",
                    );
                }
            };
            match write_one(
                envd,
                &user,
                &target,
                encoding,
                Source::Part(Box::new(field)),
            )
            .await
            {
                Ok(v) => written.push(v),
                Err(r) => return r,
            }
        }
    } else if content_type.starts_with("application/octet-stream") {
        let Some(path) = path else {
            return http_error(
                StatusCode::BAD_REQUEST,
                "an octet-stream upload needs the path parameter",
            );
        };
        let source = Source::Body(request.into_body().into_data_stream());
        match write_one(envd, &user, &path, encoding, source).await {
            Ok(v) => written.push(v),
            Err(r) => return r,
        }
    } else {
        return http_error(
            StatusCode::BAD_REQUEST,
            format!(
                "content type {content_type:?} is not supported; send multipart/form-data or application/octet-stream"
            ),
        );
    }
    if !wanted.is_empty() {
        let request = MetadataRequest {
            set: written
                .iter()
                .map(|w| (w.path.clone(), wanted.clone()))
                .collect(),
            get: written.iter().map(|w| w.path.clone()).collect(),
        };
        match metadata::call(&envd.e2b, &envd.id, &user, &request).await {
            Ok(reply) => {
                for (w, m) in written.iter_mut().zip(reply.metadata) {
                    w.metadata = Some(m);
                }
            }
            Err(e) => {
                return http_error(
                    StatusCode::BAD_REQUEST,
                    format!("the file was written but its metadata was not set: {e}"),
                );
            }
        }
    }
    axum::Json(written).into_response()
}
