//! Shared setup of the sandkeep benchmarks: a throwaway state directory, a
//! local provider on it, exec requests, a `sandkeep serve` over stdio with
//! its MCP client, and the median arithmetic. It measures nothing by
//! itself.
#![allow(dead_code)] // each bench uses a different subset

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::Value;

use sandkeep::provider::ExecRequest;
use sandkeep::provider::local::{LocalConfig, LocalProvider};

pub const EXE: &str = env!("CARGO_BIN_EXE_sandkeep");

/// A state directory under /var/tmp named `prefix…`, removed on drop.
pub fn state_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .expect("state dir")
}

pub fn local_config(home: &Path) -> LocalConfig {
    LocalConfig::new(home, EXE)
}

pub fn local_provider(home: &Path) -> LocalProvider {
    LocalProvider::new(local_config(home)).expect("local provider")
}

/// An exec of `command` without stdin or working directory.
pub fn exec_request(command: impl Into<String>, output_limit: usize) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        cwd: None,
        timeout: Duration::from_secs(20),
        stdin: None,
        output_limit,
    }
}

/// An MCP client of a `sandkeep serve` over stdio.
pub type Client = RunningService<rmcp::RoleClient, ()>;

/// `sandkeep serve` (stdio) on `home`, with `env` added to its
/// environment, and its client after the handshake.
pub async fn stdio_server(home: &Path, env: &[(&str, String)]) -> (tokio::process::Child, Client) {
    let mut child = tokio::process::Command::new(EXE)
        .arg("serve")
        .env("SANDKEEP_HOME", home)
        .env("SANDKEEP_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sandkeep serve");
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve((stdout, stdin)).await.expect("handshake");
    (child, client)
}

/// A tool call that must succeed: its structured content.
pub async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let Value::Object(map) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .expect("tools/call");
    assert_ne!(r.is_error, Some(true), "{tool}: {:?}", r.content);
    r.structured_content.expect("structuredContent")
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The machine-readable line `scripts/bench` collects from every bench,
/// printed beside the human output:
/// `BENCH name=… value=… unit=… baseline=… ratio=… target=…`.
/// `baseline` is measured in the same run (`-` when there is none) and
/// `ratio` is value / baseline; `target` is `<=N` or `>=N` in `unit`,
/// `<=Nx` or `>=Nx` of the baseline, or `-`.
pub fn bench_line(name: &str, value: f64, unit: &str, baseline: Option<f64>, target: &str) {
    let (baseline, ratio) = match baseline {
        Some(b) if b != 0.0 => (format!("{b:.3}"), format!("{:.3}", value / b)),
        Some(b) => (format!("{b:.3}"), "-".to_owned()),
        None => ("-".to_owned(), "-".to_owned()),
    };
    println!(
        "BENCH name={name} value={value:.3} unit={unit} baseline={baseline} ratio={ratio} target={target}"
    );
}

/// The PSS (KiB) of each keeper serving `home`, summed over the keeper and
/// all of its descendants.
pub fn keepers_pss_kib(home: &Path) -> Vec<u64> {
    let mut parent = HashMap::new();
    let mut keepers = Vec::new();
    let home = home.display().to_string();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(pid) = entry
            .expect("/proc entry")
            .file_name()
            .to_string_lossy()
            .parse::<u32>()
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The parent is the second field after the parenthesised name.
        let after = &stat[stat.rfind(')').expect("stat") + 2..];
        let ppid: u32 = after
            .split(' ')
            .nth(1)
            .expect("ppid")
            .parse()
            .expect("ppid");
        parent.insert(pid, ppid);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        // `sandkeep-keeper run HOME ID BUILD`, or `sandkeep __keeper run …`.
        if cmdline.contains(&format!("\0run\0{home}\0")) {
            keepers.push(pid);
        }
    }
    // The keeper's forks (init, proxy) carry its command line too: the
    // keeper is the one whose parent is not one of them.
    let forks: Vec<u32> = keepers
        .iter()
        .copied()
        .filter(|pid| keepers.contains(&parent[pid]))
        .collect();
    keepers.retain(|pid| !forks.contains(pid));
    let keeper_of = |mut pid: u32| loop {
        if keepers.contains(&pid) {
            return Some(pid);
        }
        pid = *parent.get(&pid)?;
        if pid <= 1 {
            return None;
        }
    };
    let mut pss: HashMap<u32, u64> = HashMap::new();
    for &pid in parent.keys() {
        if let Some(keeper) = keeper_of(pid) {
            *pss.entry(keeper).or_default() += pss_kib(pid);
        }
    }
    keepers.iter().map(|k| pss[k]).collect()
}

pub fn pss_kib(pid: u32) -> u64 {
    let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return 0;
    };
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `sandkeep serve --e2b` on a free loopback port: the process, and the
/// environment that points the e2b provider at it.
pub fn e2b_endpoint(home: &std::path::Path) -> (std::process::Child, Vec<(&'static str, String)>) {
    const KEY: &str = "e2b_bench";
    let (child, url) = sandkeep_testkit::e2b::start_endpoint(Path::new(EXE), home, KEY, &[]);
    let env = vec![
        ("SANDKEEP_PROVIDER", "e2b".to_owned()),
        ("E2B_API_KEY", KEY.to_owned()),
        ("E2B_API_URL", url.clone()),
        ("E2B_SANDBOX_URL", url),
    ];
    (child, env)
}
