//! Pause and resume as E2B's API has them (SPEC §17): `POST
//! /sandboxes/{id}/pause` (204, 409 when paused already; `{"memory":
//! false}` ends the sandbox's processes and keeps its files), the deprecated
//! `POST /sandboxes/{id}/resume` (201, 409 when running), the resume that
//! `connect` does for a paused sandbox (201), and the gate in front of envd
//! and the sandbox's ports: a paused sandbox's traffic answers 502, as
//! E2B's proxy does, so the SDKs' `is_running()` says false and nothing
//! starts in a frozen sandbox, unless it was created with `autoResume`:
//! then its traffic resumes it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use sandkeep_provider::{ProviderError, SandboxId, SandboxState};

use super::rest::{self, MAX_TIMEOUT, error, provider_error, sandbox_id};
use super::{E2b, SmallBody};

/// A resume's timeout when none is given (E2B's default).
const RESUME_TIMEOUT: u64 = 300;

#[derive(Debug, Default, Deserialize)]
pub struct PauseBody {
    /// `false`: a filesystem-only pause (the SDKs' `keep_memory=False`,
    /// `mode="filesystem"`): the sandbox's processes end, its files stay.
    #[serde(default)]
    memory: Option<bool>,
}

pub async fn pause(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    body: SmallBody,
) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: PauseBody = match body.json_or_default() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let paused = if request.memory == Some(false) {
        e2b.provider.pause_files_only(&id).await
    } else {
        e2b.provider.pause(&id).await
    };
    match paused {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => provider_error(&e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ResumeBody {
    #[serde(default)]
    timeout: Option<u64>,
}

/// The deprecated `POST /sandboxes/{id}/resume`.
pub async fn resume_v1(
    State(e2b): State<Arc<E2b>>,
    Path(id): Path<String>,
    body: SmallBody,
) -> Response {
    let id = match sandbox_id(&id) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    let request: ResumeBody = match body.json_or_default() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    resume(&e2b, &id, request.timeout).await
}

/// Resumes `id` with a deadline `timeout` seconds away (E2B's default of
/// 300 s when `None`: the sandbox's own may be the 0 of a
/// `set_timeout(0)` that forced its auto-pause): 201 with its `Sandbox`
/// object.
pub async fn resume(e2b: &E2b, id: &SandboxId, timeout: Option<u64>) -> Response {
    let timeout = timeout.unwrap_or(RESUME_TIMEOUT);
    if timeout == 0 || timeout > MAX_TIMEOUT {
        return error(
            StatusCode::BAD_REQUEST,
            format!("timeout must be 1-{MAX_TIMEOUT} seconds"),
        );
    }
    let info = match e2b.provider.resume(id, Some(timeout)).await {
        Ok(info) => info,
        Err(e) => return provider_error(&e),
    };
    match e2b.records.load_or_create(id) {
        Ok(record) => (
            StatusCode::CREATED,
            Json(rest::sandbox_json(&info, &record)),
        )
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// In front of every envd route: see [`admit`].
pub async fn envd_gate(State(e2b): State<Arc<E2b>>, request: Request, next: Next) -> Response {
    if let Some(Ok(id)) = super::target(request.headers()).map(|t| SandboxId::parse(&t))
        && let Err(refused) = admit(&e2b, &id).await
    {
        return refused;
    }
    next.run(request).await
}

/// Whether traffic for sandbox `id` (an envd call, a request for one of
/// its ports) goes on, as E2B's proxy decides: a running sandbox's does;
/// a paused one is resumed first when it was created with `autoResume`
/// (with its own timeout, E2B's default where that is 0), else the answer
/// is a 502 saying it is paused. A sandbox the provider does not know goes
/// on too: the route answers that it was not found.
pub async fn admit(e2b: &E2b, id: &SandboxId) -> Result<(), Response> {
    let Ok(info) = e2b.provider.info(id).await else {
        return Ok(());
    };
    if info.state != SandboxState::Paused {
        return Ok(());
    }
    if !e2b.records.load(id).is_some_and(|r| r.auto_resume) {
        return Err(error(
            StatusCode::BAD_GATEWAY,
            "The sandbox is paused: resume it with connect (Sandbox.connect) first, or create it \
             with lifecycle autoResume",
        ));
    }
    let timeout = if info.timeout == 0 {
        RESUME_TIMEOUT
    } else {
        info.timeout
    };
    match e2b.provider.resume(id, Some(timeout)).await {
        // Another request resumed it meanwhile.
        Ok(_) | Err(ProviderError::AlreadyInState { .. }) => Ok(()),
        Err(e) => Err(provider_error(&e)),
    }
}
