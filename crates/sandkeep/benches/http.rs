//! HTTP front-door benchmark: 50 concurrent Streamable HTTP clients
//! calling get_task on a running task, against a `sandkeep serve --http`
//! with its bearer token and caps, and the same against a server started
//! with `--insecure-no-auth` in the same run (alternating rounds, so
//! machine noise hits both alike).
//!
//! Prints throughput, p50/p99 latency and the server's CPU time per
//! request for each, and the ratios token / no token.
//!
//! Run: `cargo bench -p sandkeep --bench http`. Prints one `BENCH` line a
//! figure for `scripts/bench` (target: the token and caps cost ≤ 5 %).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{EXE, bench_line, median, ms, state_dir};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const CLIENTS: usize = 50;
const CALLS_PER_CLIENT: usize = 20;
const ROUNDS: usize = 3;

struct Server {
    child: tokio::process::Child,
    url: String,
    token: Option<String>,
}

impl Server {
    /// Starts a server and reads its URL (and generated token) from stderr.
    async fn start(home: &std::path::Path, extra: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(EXE)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .env("SANDKEEP_HOME", home)
            .env_remove("SANDKEEP_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sandkeep serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (mut url, mut token) = (None, None);
        let open = extra.contains(&"--insecure-no-auth");
        while url.is_none() || (token.is_none() && !open) {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
                .await
                .expect("the server prints its URL within 10 s")
                .unwrap()
                .expect("the server exited before printing its URL");
            if let Some(u) = line.split("serving MCP at ").nth(1) {
                url = Some(u.to_owned());
            }
            if let Some(rest) = line.split("`Authorization: Bearer ").nth(1) {
                token = rest.split('`').next().map(str::to_owned);
            }
        }
        // Keep draining stderr so the server never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            url: url.unwrap(),
            token,
        }
    }

    fn cpu_ticks(&self) -> u64 {
        let pid = self.child.id().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        // utime and stime: fields 14 and 15, i.e. 11 and 12 after the state.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    async fn client(&self) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(t) = &self.token {
            config = config.auth_header(t.clone());
        }
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("HTTP client")
    }
}

struct Round {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    cpu_us_per_call: f64,
}

async fn round(server: &Server, handle: &Value) -> Round {
    let clients = futures_all((0..CLIENTS).map(|_| server.client())).await;
    let args = handle.as_object().unwrap().clone();
    let ticks_before = server.cpu_ticks();
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let args = args.clone();
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(CALLS_PER_CLIENT);
                for _ in 0..CALLS_PER_CLIENT {
                    let t = Instant::now();
                    let r = client
                        .call_tool(
                            CallToolRequestParams::new("get_task").with_arguments(args.clone()),
                        )
                        .await
                        .expect("get_task");
                    assert_ne!(r.is_error, Some(true), "{:?}", r.content);
                    times.push(t.elapsed());
                }
                let _ = client.cancel().await;
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    let ticks = server.cpu_ticks() - ticks_before;
    let hz = rustix::param::clock_ticks_per_second() as f64;
    times.sort();
    let calls = times.len();
    Round {
        per_second: calls as f64 / wall.as_secs_f64(),
        p50: times[calls / 2],
        p99: times[calls * 99 / 100],
        cpu_us_per_call: ticks as f64 / hz * 1e6 / calls as f64,
    }
}

async fn futures_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.collect();
    let mut out = Vec::with_capacity(handles.len());
    for f in handles {
        out.push(f.await);
    }
    out
}

fn cli(home: &std::path::Path, args: &[&str]) -> Value {
    let out = std::process::Command::new(EXE)
        .args(args)
        .env("SANDKEEP_HOME", home)
        .output()
        .expect("run sandkeep");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json output")
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let home = state_dir("sk-bench-http-");
    let sandbox = cli(
        home.path(),
        &["sandbox", "create", "--timeout", "600", "--json"],
    );
    let sandbox = sandbox["sandbox_id"].as_str().unwrap().to_owned();
    let task = cli(
        home.path(),
        &[
            "task",
            "start",
            "--sandbox",
            &sandbox,
            "--json",
            "--",
            "echo ready; sleep 600",
        ],
    );
    let handle = json!({"sandbox_id": sandbox, "task_id": task["task_id"]});

    // Every client comes from loopback, as from a reverse proxy, and each
    // holds more than one connection: the per-peer cap (half of the total
    // by default) would evict connections of this very round's clients.
    let one_peer = ["--max-connections-per-peer", "256"];
    let guarded = Server::start(home.path(), &one_peer).await;
    let open = Server::start(
        home.path(),
        &[&one_peer[..], &["--insecure-no-auth"]].concat(),
    )
    .await;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        with.push(round(&guarded, &handle).await);
        without.push(round(&open, &handle).await);
    }
    let summary = |rounds: &[Round]| {
        (
            median_f(rounds.iter().map(|r| r.per_second).collect()),
            median(rounds.iter().map(|r| r.p50).collect()),
            median(rounds.iter().map(|r| r.p99).collect()),
            median_f(rounds.iter().map(|r| r.cpu_us_per_call).collect()),
        )
    };
    let (t_rate, t_p50, t_p99, t_cpu) = summary(&with);
    let (o_rate, o_p50, o_p99, o_cpu) = summary(&without);
    println!(
        "HTTP get_task, {CLIENTS} concurrent clients x {CALLS_PER_CLIENT} calls, median of {ROUNDS} rounds"
    );
    println!("                 calls/s   p50 ms   p99 ms   server CPU us/call");
    for (name, rate, p50, p99, cpu) in [
        ("token + caps", t_rate, t_p50, t_p99, t_cpu),
        ("--insecure-no-auth", o_rate, o_p50, o_p99, o_cpu),
    ] {
        println!(
            "{name:<18} {rate:>7.0}  {:>7.2}  {:>7.2}  {cpu:>8.0}",
            ms(p50),
            ms(p99)
        );
    }
    println!(
        "ratio token/none: throughput {:.3}x, p50 {:.3}x, p99 {:.3}x, CPU/call {:.3}x",
        t_rate / o_rate,
        ms(t_p50) / ms(o_p50),
        ms(t_p99) / ms(o_p99),
        t_cpu / o_cpu
    );
    bench_line(
        "http.throughput",
        t_rate,
        "calls/s",
        Some(o_rate),
        ">=0.95x",
    );
    bench_line("http.p50", ms(t_p50), "ms", Some(ms(o_p50)), "<=1.05x");
    bench_line("http.cpu_per_call", t_cpu, "us", Some(o_cpu), "<=1.05x");
    cli(home.path(), &["sandbox", "kill", &sandbox, "--json"]);
}
