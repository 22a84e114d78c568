//! Port forwards of the local provider where the MCP tests do not go: a
//! process-only sandbox (no network namespace: the forward connects on the
//! host's loopback, which the sandbox shares), a forward's listener on
//! the configured `expose_addr`, and a server on `::1` only.

use crate::support;

use std::time::Duration;

use sandkeep_local::{LocalConfig, LocalProvider};
use sandkeep_provider::{Port, Provider};
use support::local::*;
use support::ports::*;

/// An echo server on `host:port` inside a new sandbox answers through a
/// forward; the forward's url.
async fn echo_through_a_forward(p: &LocalProvider, host: &str, port: u16) -> String {
    let id = create(p, 120).await.sandbox_id;
    p.write_file(&id, "echo.py", ECHO_PY.as_bytes())
        .await
        .unwrap();
    let out = sh(
        p,
        &id,
        &format!("(setsid python3 echo.py {port} {host} </dev/null >/dev/null 2>&1 &)"),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let forward = p
        .expose_port(&id, Port::new(port).unwrap())
        .await
        .expect("expose");
    until_answering(&forward.url, Duration::from_secs(20)).await;
    let listed = p.info(&id).await.unwrap().ports;
    assert_eq!(listed, vec![forward.clone()]);
    p.kill(&id).await.unwrap();
    forward.url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_only_sandbox_is_exposed_too() {
    let home = state_dir();
    let p = LocalProvider::new(LocalConfig::new(home.path(), EXE).with_process_only(true)).unwrap();
    // A port of the host's own loopback: pick one no one uses now.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    echo_through_a_forward(&p, "127.0.0.1", port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_listen_where_the_configuration_says() {
    let home = state_dir();
    let addr: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let p = LocalProvider::new(LocalConfig::new(home.path(), EXE).with_expose_addr(addr)).unwrap();
    let url = echo_through_a_forward(&p, "127.0.0.1", 7000).await;
    assert!(url.starts_with("http://127.0.0.2:"), "{url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_ipv6_loopback_only_is_reached() {
    let home = state_dir();
    let p = LocalProvider::new(LocalConfig::new(home.path(), EXE)).unwrap();
    echo_through_a_forward(&p, "::1", 7000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_has_at_most_64_forwards() {
    use sandkeep_provider::ProviderError;
    let home = state_dir();
    let p = LocalProvider::new(LocalConfig::new(home.path(), EXE)).unwrap();
    let id = create(&p, 120).await.sandbox_id;
    let max = sandkeep_proto::limits::PORTS_MAX as u16;
    for port in 1..=max {
        p.expose_port(&id, Port::new(port).unwrap())
            .await
            .unwrap_or_else(|e| panic!("forward {port}: {e}"));
    }
    match p.expose_port(&id, Port::new(max + 1).unwrap()).await {
        Err(ProviderError::LimitReached(why)) => {
            assert!(why.contains("64 port forwards"), "{why}")
        }
        other => panic!("a 65th forward: {other:?}"),
    }
    // What it has is still answered, and listed.
    p.expose_port(&id, Port::new(1).unwrap()).await.unwrap();
    assert_eq!(p.info(&id).await.unwrap().ports.len(), usize::from(max));
    p.kill(&id).await.unwrap();
}
