//! The local provider's lifecycle against real sandboxes: create, exec,
//! files, kill, a second provider on the same home, SIGKILL of the creating
//! process, expiry, and that nothing survives destruction.

mod local_common;

use std::time::{Duration, Instant};

use local_common::*;
use sandkeep::provider::{ExecRequest, FileKind, Provider, ProviderError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_create_exec_kill() {
    let home = state_dir();
    let p = provider(home.path());
    let info = create(&p, 60).await;
    let out = sh(&p, &info.sandbox_id, "echo hello; echo oops >&2; exit 3").await;
    assert_eq!(text(&out.stdout), "hello\n");
    assert_eq!(text(&out.stderr), "oops\n");
    assert_eq!(out.exit_code, Some(3));
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    assert!(!sandbox_dir(home.path(), &info.sandbox_id).exists());
}
