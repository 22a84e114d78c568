//! Task reads at the server's own speed (issue 28): what the resident
//! reader (`sandkeep-task serve`, one per sandbox) makes of get_task and
//! wait_task, each against a baseline of the same server in the same run.
//!
//! - HTTP: 50 connections sending sessionless 2026-07-28 get_task requests
//!   on a finished task, as wrk would (raw bodies, answers checked by a
//!   substring), against the same connections sending `tools/list` to the
//!   same server (alternating rounds): the rate ratio (target ≥ 0.5×) and
//!   get_task's p99 (target ≤ 25 ms).
//! - stdio: get_task's median round trip through rmcp's client (target
//!   ≤ 1 ms), beside `tools/list`'s on the same server; then the same on
//!   the e2b provider against a local `serve --e2b` (target ≤ 1.5× the
//!   local figure of the run).
//! - wait_task: 100 waits on 100 tasks that all end at once (they block on
//!   one FIFO, released by one command run beside the server, and print
//!   when they end); the longest time from a task's end to its answer
//!   (target ≤ 100 ms), beside the machine's floor measured in the same
//!   sandbox ([`FLOOR`]: the longest time for a bare parent to see its
//!   child's end, 100 ending at once); then the same on the e2b provider
//!   against a local `serve --e2b`, beside the local figure.
//!
//! - memory: 1,000 idle sandboxes (`SANDKEEP_BENCH_READERS` to change),
//!   each read once, so each has a reader: host memory per idle sandbox
//!   (PSS of the keeper and every process below it, the reader included;
//!   target ≤ 1 MiB), beside the same sandboxes before their first read;
//!   and the CPU all those idle readers use over 5 s (target: none).
//!
//! Run: `cargo bench -p sandkeep --bench reader` as root (it reads other
//! users' `/proc` entries) (one `BENCH` line a figure
//! for `scripts/bench`); `SANDKEEP_BENCH_PARTS=wait,http` runs only those
//! of stdio, http, wait and memory.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Client, EXE, bench_line, call, keepers_pss_kib, local_config, local_provider, median, ms,
    state_dir, stdio_server,
};
use sandkeep::provider::local::{HostBounds, LocalProvider};
use sandkeep::provider::{CreateSpec, Provider};
use sandkeep::service::{ListTasksArgs, Service};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const CLIENTS: usize = 50;
const CALLS_PER_CLIENT: usize = 40;
const ROUNDS: usize = 3;
const STDIO_SAMPLES: usize = 300;
const WAITERS: usize = 100;
/// The length of `date +%s.%N`'s line, until the year 2286.
const END_LINE: u64 = 21;
/// The floor of [`wait_part`]'s figure on this machine, run in the same
/// sandbox: 100 processes released at once (stopped, then one CONT to
/// their group), each printing its end time, each parent (bash) printing
/// when it saw that end; the longest gap, in ms. No sandkeep in between:
/// what 100 ends at once cost the scheduler alone.
const FLOOR: &str = r#"d=$(mktemp -d)
for i in $(seq 100); do bash -c "sh -c 'kill -STOP \$\$; date +%s.%N'; echo \$EPOCHREALTIME" > $d/$i & done
n=0
until [ "$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "T"' | wc -l)" -ge 100 ]; do
  n=$((n + 1)); [ $n -lt 3000 ] || { echo "the 100 processes did not all stop within 30 s"; exit 1; }
  sleep 0.01
done
kill -CONT 0
wait
for f in $d/*; do paste -s -d' ' $f; done | awk '{x = ($2 - $1) * 1000; if (x > m) m = x} END {printf "%.3f\n", m}'
rm -rf $d"#;

/// `sandkeep serve --http` without a token (loopback), its URL read from
/// stderr.
async fn http_server(home: &std::path::Path) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(EXE)
        .args(["serve", "--http", "127.0.0.1:0", "--insecure-no-auth"])
        // Every client comes from loopback: the per-peer cap would evict
        // this very round's connections.
        .args(["--max-connections-per-peer", "256"])
        .env("SANDKEEP_HOME", home)
        .env("SANDKEEP_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sandkeep serve --http");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("the server prints its URL within 10 s")
            .unwrap()
            .expect("the server exited before printing its URL");
        if let Some(u) = line.split("serving MCP at ").nth(1) {
            break u.to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// The body of one sessionless 2026-07-28 request, and the method and
/// tool name its headers repeat.
fn modern_request(method: &str, params: Value) -> (String, Option<String>, Vec<u8>) {
    let name = params["name"].as_str().map(str::to_owned);
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    (method.to_owned(), name, serde_json::to_vec(&body).unwrap())
}

const MODERN: &str = "2026-07-28";

#[derive(Clone, Copy)]
enum Ask {
    ToolsList,
    GetTask,
}

struct Round {
    per_second: f64,
    p99: Duration,
}

/// 50 workers, each its own keep-alive connection, sending the same
/// request one after another, as wrk does: the request's bytes written
/// whole, the answer read until the chunked body's last chunk and checked
/// by a substring. No HTTP client library: the client shares the server's
/// two cores, and a general client's own work per call is counted as the
/// server's tail (with reqwest here the p99 was 97–108 ms where wrk saw
/// 22–38 ms against the same server: docs/benchmarks-log.md, 2026-12-07
/// 20:30).
async fn round(url: &str, ask: Ask, handle: &Value) -> Round {
    let (method, name, body) = match ask {
        Ask::ToolsList => modern_request("tools/list", json!({})),
        Ask::GetTask => modern_request(
            "tools/call",
            json!({"name": "get_task", "arguments": handle}),
        ),
    };
    let expect = match ask {
        Ask::ToolsList => "\"wait_task\"",
        Ask::GetTask => "\"succeeded\"",
    };
    let (addr, path) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .expect("an http:// URL with a path");
    let mut request = format!(
        "POST /{path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: {MODERN}\r\n\
         mcp-method: {method}\r\n"
    );
    if let Some(name) = &name {
        request.push_str(&format!("mcp-name: {name}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut request = request.into_bytes();
    request.extend_from_slice(&body);
    let request = Arc::new(request);
    let started = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (addr, request) = (addr.to_owned(), Arc::clone(&request));
            tokio::spawn(async move {
                let mut connection = tokio::net::TcpStream::connect(&addr)
                    .await
                    .expect("connect to the server");
                connection.set_nodelay(true).expect("TCP_NODELAY");
                let mut answer = Vec::with_capacity(64 * 1024);
                let mut times = Vec::with_capacity(CALLS_PER_CLIENT);
                for _ in 0..CALLS_PER_CLIENT {
                    let t = Instant::now();
                    connection.write_all(&request).await.expect("POST /mcp");
                    answer.clear();
                    // The server answers with a chunked event stream: the
                    // answer is whole at its last (empty) chunk.
                    let whole = async {
                        while !answer.ends_with(b"\r\n0\r\n\r\n") {
                            let n = connection.read_buf(&mut answer).await.expect("the answer");
                            assert_ne!(n, 0, "the server closed the connection mid-answer");
                        }
                    };
                    if tokio::time::timeout(Duration::from_secs(30), whole)
                        .await
                        .is_err()
                    {
                        panic!(
                            "no whole chunked answer within 30 s: {}",
                            String::from_utf8_lossy(&answer)
                        );
                    }
                    assert!(
                        answer.starts_with(b"HTTP/1.1 200 ")
                            && answer.windows(expect.len()).any(|w| w == expect.as_bytes()),
                        "{}",
                        String::from_utf8_lossy(&answer)
                    );
                    times.push(t.elapsed());
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for w in workers {
        times.extend(w.await.unwrap());
    }
    let wall = started.elapsed();
    times.sort();
    Round {
        per_second: times.len() as f64 / wall.as_secs_f64(),
        p99: times[times.len() * 99 / 100],
    }
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn http_part(home: &std::path::Path, handle: &Value) {
    let (_server, url) = http_server(home).await;
    let (mut list, mut get) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        list.push(round(&url, Ask::ToolsList, handle).await);
        get.push(round(&url, Ask::GetTask, handle).await);
    }
    let rate = |rounds: &[Round]| median_f(rounds.iter().map(|r| r.per_second).collect());
    let p99 = |rounds: &[Round]| median(rounds.iter().map(|r| r.p99).collect());
    let (list_rate, get_rate) = (rate(&list), rate(&get));
    println!(
        "HTTP, {CLIENTS} clients x {CALLS_PER_CLIENT} calls, median of {ROUNDS} rounds: \
         tools/list {list_rate:.0}/s (p99 {:.2} ms), get_task {get_rate:.0}/s (p99 {:.2} ms): {:.3}x",
        ms(p99(&list)),
        ms(p99(&get)),
        get_rate / list_rate
    );
    bench_line(
        "reader.http_get_task",
        get_rate,
        "calls/s",
        Some(list_rate),
        ">=0.5x",
    );
    bench_line(
        "reader.http_get_task_p99",
        ms(p99(&get)),
        "ms",
        Some(ms(p99(&list))),
        "<=25",
    );
}

/// Waits until the sandbox's shared watcher (`wait --stream`) has an
/// inotify watch on `tasks` task directories: every wait is in place.
async fn watching(tasks: usize) {
    let watches = || -> usize {
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return 0;
        };
        procs
            .flatten()
            .filter(|p| {
                std::fs::read(p.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("wait\0--stream"))
            })
            .flat_map(|p| {
                std::fs::read_dir(p.path().join("fdinfo"))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
            .map(|info| {
                info.lines()
                    .filter(|l| l.starts_with("inotify wd:"))
                    .count()
            })
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while watches() < tasks {
        assert!(
            Instant::now() < deadline,
            "the waits were not all watching within 60 s (this bench reads /proc as root)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let home = state_dir("sk-bench-reader-");
    let (_child, client) = stdio_server(home.path(), &[]).await;
    let client: Arc<Client> = Arc::new(client);
    let (sid, handle) = finished_task(&client).await;

    let local_get = if part("stdio") {
        let (get, list) = stdio_medians(&client, &handle).await;
        println!(
            "local: stdio get_task median {:.3} ms (tools/list {:.3} ms)",
            ms(get),
            ms(list)
        );
        bench_line(
            "reader.stdio_get_task",
            ms(get),
            "ms",
            Some(ms(list)),
            "<=1",
        );
        Some(get)
    } else {
        None
    };
    if part("http") {
        http_part(home.path(), &handle).await;
    }
    let local_wait = if part("wait") {
        Some(wait_part("local", home.path(), &client, &sid).await)
    } else {
        None
    };
    call(&client, "kill_sandbox", json!({"sandbox_id": sid})).await;
    drop(client);
    if let Some((last, floor)) = local_wait {
        bench_line(
            "reader.wait_100_last_answer",
            ms(last),
            "ms",
            Some(ms(floor)),
            "<=100",
        );
    }

    // The same reads on the e2b provider against a local `serve --e2b`,
    // the local figures of this run beside them.
    if local_get.is_some() || local_wait.is_some() {
        let endpoint_home = state_dir("sk-bench-reader-e2b-");
        let (mut endpoint, env) = common::e2b_endpoint(endpoint_home.path());
        let e2b_home = state_dir("sk-bench-reader-provider-");
        let (_server, client) = stdio_server(e2b_home.path(), &env).await;
        let client = Arc::new(client);
        let (sid, handle) = finished_task(&client).await;
        if let Some(local_get) = local_get {
            let (get, list) = stdio_medians(&client, &handle).await;
            println!(
                "e2b: stdio get_task median {:.3} ms (tools/list {:.3} ms); local {:.3} ms: {:.2}x",
                ms(get),
                ms(list),
                ms(local_get),
                ms(get) / ms(local_get)
            );
            bench_line(
                "reader.e2b_stdio_get_task",
                ms(get),
                "ms",
                Some(ms(local_get)),
                "<=1.5x",
            );
        }
        if let Some((local_last, _)) = local_wait {
            let (last, _) = wait_part("e2b", endpoint_home.path(), &client, &sid).await;
            bench_line(
                "reader.e2b_wait_100_last_answer",
                ms(last),
                "ms",
                Some(ms(local_last)),
                "<=100",
            );
        }
        call(&client, "kill_sandbox", json!({"sandbox_id": sid})).await;
        let _ = endpoint.kill();
        let _ = endpoint.wait();
    }
    if part("memory") {
        memory_part().await;
    }
}

/// A new sandbox with one finished task: the sandbox and the task's handle.
async fn finished_task(client: &Client) -> (String, Value) {
    let sandbox = call(client, "create_sandbox", json!({"timeout": 3600})).await;
    let sid = sandbox["sandbox_id"].as_str().unwrap().to_owned();
    let done = call(
        client,
        "start_task",
        json!({"sandbox_id": sid, "command": "echo done"}),
    )
    .await;
    let handle = json!({"sandbox_id": sid, "task_id": done["task_id"]});
    // Past its output ("done\n"), so that only its end answers the wait.
    let finished = call(
        client,
        "wait_task",
        json!({"sandbox_id": sid, "task_id": done["task_id"], "timeout": 30,
               "stdout_offset": 5}),
    )
    .await;
    assert_eq!(finished["state"], "succeeded", "{finished}");
    (sid, handle)
}

/// get_task's and tools/list's median round trips over stdio,
/// interleaved so that drift hits both.
async fn stdio_medians(client: &Client, handle: &Value) -> (Duration, Duration) {
    let (mut get, mut list) = (Vec::new(), Vec::new());
    for _ in 0..STDIO_SAMPLES {
        let t = Instant::now();
        client.list_tools(None).await.expect("tools/list");
        list.push(t.elapsed());
        let t = Instant::now();
        let v = call(client, "get_task", handle.clone()).await;
        get.push(t.elapsed());
        assert_eq!(v["state"], "succeeded");
    }
    (median(get), median(list))
}

/// `SANDKEEP_BENCH_PARTS` (comma-separated: stdio, http, wait, memory)
/// runs only those parts; all by default.
fn part(name: &str) -> bool {
    std::env::var("SANDKEEP_BENCH_PARTS").map_or(true, |parts| parts.split(',').any(|p| p == name))
}

/// 100 waits on 100 tasks that end at once, in sandbox `sid` of the local
/// provider on `home` (the e2b provider's too, through a local `serve
/// --e2b`), asked of `client`: the longest task end -> answer, and the
/// machine's floor for it ([`FLOOR`], in the same sandbox).
async fn wait_part(
    provider: &str,
    home: &std::path::Path,
    client: &Arc<Client>,
    sid: &str,
) -> (Duration, Duration) {
    // 100 tasks blocked opening one FIFO; one command opens it for
    // writing and closes it, and every task ends, printing when (the
    // sandbox's clock is the host's).
    call(
        client,
        "run_command",
        json!({"sandbox_id": sid, "command": "mkfifo /tmp/go"}),
    )
    .await;
    let mut tasks = Vec::with_capacity(WAITERS);
    for _ in 0..WAITERS {
        let t = call(
            client,
            "start_task",
            json!({"sandbox_id": sid, "command": "cat /tmp/go; date +%s.%N"}),
        )
        .await;
        tasks.push(t["task_id"].as_str().unwrap().to_owned());
    }
    let waits: Vec<_> = tasks
        .iter()
        .map(|task| {
            let client = Arc::clone(client);
            // Past the end time the task prints (`date +%s.%N`: always
            // 21 bytes), so that only the task's end answers the wait.
            let args = json!({"sandbox_id": sid, "task_id": task, "timeout": 120,
                              "stdout_offset": END_LINE});
            tokio::spawn(async move {
                let v = call(&client, "wait_task", args).await;
                (std::time::SystemTime::now(), v)
            })
        })
        .collect();
    // Every wait must be watching before the release: a wait answers at
    // once only when its task has already ended.
    watching(WAITERS).await;
    // Released from outside the MCP server (its answers must not queue
    // behind the release's own): an exec through a provider of the same
    // state directory. The tasks end as the release's writer closes.
    let released = Instant::now();
    let release = local_provider(home)
        .exec(
            &sandkeep::provider::SandboxId::parse(sid).unwrap(),
            common::exec_request(": > /tmp/go", 1024),
        )
        .await
        .expect("release the tasks");
    let release_took = released.elapsed();
    assert_eq!(release.exit_code, Some(0), "{release:?}");
    // Each answer against its own task's end, and where the time went:
    // until the task's supervisor wrote its terminal record (that file's
    // mtime), then until the answer.
    let mut latencies = Vec::with_capacity(WAITERS);
    let (mut to_record, mut from_record) = (Vec::new(), Vec::new());
    let records = call(
        client,
        "run_command",
        json!({"sandbox_id": sid, "command":
               "cd ~/.local/state/sandkeep/tasks && stat -c '%n %.9Y' */state.json"}),
    )
    .await;
    let recorded = |task: &str| -> f64 {
        records["stdout"]
            .as_str()
            .and_then(|out| {
                out.lines()
                    .find_map(|l| l.strip_prefix(&format!("{task}/state.json ")))
            })
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("the record time of {task}: {records}"))
    };
    for (w, task) in waits.into_iter().zip(&tasks) {
        let (at, v) = w.await.unwrap();
        assert_eq!(v["state"], "succeeded", "{v}");
        let v = call(
            client,
            "get_task",
            json!({"sandbox_id": sid, "task_id": task}),
        )
        .await;
        let ended: f64 = v["stdout"]
            .as_str()
            .and_then(|out| out.trim().parse().ok())
            .unwrap_or_else(|| panic!("the task printed when it ended: {v}"));
        let at = at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        latencies.push(Duration::from_secs_f64((at - ended).max(0.0)));
        let record = recorded(task);
        to_record.push(Duration::from_secs_f64((record - ended).max(0.0)));
        from_record.push(Duration::from_secs_f64((at - record).max(0.0)));
    }
    latencies.sort();
    to_record.sort();
    from_record.sort();
    let last = latencies[WAITERS - 1];
    let floor = call(
        client,
        "run_command",
        json!({"sandbox_id": sid, "command": FLOOR, "timeout": 60}),
    )
    .await;
    let floor: f64 = floor["stdout"]
        .as_str()
        .and_then(|out| out.trim().parse().ok())
        .unwrap_or_else(|| panic!("the floor script printed its figure: {floor}"));
    let floor = Duration::from_secs_f64(floor / 1000.0);
    println!(
        "{provider}: {WAITERS} wait_task answers after {WAITERS} tasks end at once: each answered at most {:.1} ms \
         after its task's end (median {:.1} ms; the release's own round trip {:.1} ms; the floor, \
         a bare parent seeing its child's end, 100 at once, at most {:.1} ms); \
         task end -> terminal record at most {:.1} ms (median {:.1}), record -> answer at most \
         {:.1} ms (median {:.1})",
        ms(last),
        ms(latencies[WAITERS / 2]),
        ms(release_took),
        ms(floor),
        ms(to_record[WAITERS - 1]),
        ms(to_record[WAITERS / 2]),
        ms(from_record[WAITERS - 1]),
        ms(from_record[WAITERS / 2]),
    );
    (last, floor)
}

/// Idle sandboxes with a reader each: their host memory and CPU.
async fn memory_part() {
    let count: usize = std::env::var("SANDKEEP_BENCH_READERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let home = state_dir("sk-bench-readers-");
    let bounds = HostBounds {
        sandboxes: count as u32 + 1,
        memory_mib: u64::MAX,
    };
    let provider = Arc::new(
        LocalProvider::new(local_config(home.path()).with_bounds(bounds)).expect("local provider"),
    );
    let service = Service::new(provider.clone(), Vec::new());
    let mut sandboxes = Vec::with_capacity(count);
    for _ in 0..count {
        let info = provider
            .create(CreateSpec {
                template: "base".into(),
                timeout: 1800,
                envs: Default::default(),
                network: None,
                allow_hosts: Vec::new(),
                limits: Default::default(),
                shares: Vec::new(),
                on_timeout: Default::default(),
            })
            .await
            .expect("create an idle sandbox");
        sandboxes.push(info.sandbox_id);
    }
    let per_sandbox = |pss: Vec<u64>| {
        assert_eq!(pss.len(), count, "one keeper per live sandbox");
        pss.iter().sum::<u64>() / count as u64
    };
    let without = per_sandbox(keepers_pss_kib(home.path()));
    for id in &sandboxes {
        let listed = service
            .list_tasks(ListTasksArgs {
                sandbox_id: id.to_string(),
            })
            .await
            .expect("list_tasks");
        assert!(listed.tasks.is_empty());
    }
    let readers = readers_of(home.path());
    assert_eq!(readers.len(), count, "one reader per sandbox");
    let with = per_sandbox(keepers_pss_kib(home.path()));
    let reader_pss: u64 =
        readers.iter().map(|&pid| common::pss_kib(pid)).sum::<u64>() / count as u64;
    let ticks = || -> u64 { readers.iter().map(|&pid| cpu_ticks(pid)).sum() };
    let before = ticks();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_ticks = ticks() - before;
    println!(
        "{count} idle sandboxes: {with} KiB PSS each with a reader ({reader_pss} KiB of it the \
         reader's), {without} KiB before their first read; their readers used {idle_ticks} CPU \
         ticks in 5 s"
    );
    bench_line(
        "reader.idle_pss_per_sandbox",
        with as f64,
        "KiB",
        Some(without as f64),
        "<=1024",
    );
    bench_line(
        "reader.idle_cpu_ticks_5s",
        idle_ticks as f64,
        "ticks",
        None,
        "<=0",
    );
    for id in &sandboxes {
        provider.kill(id).await.expect("kill");
    }
}

/// The resident readers in the sandboxes of `home`: `sandkeep-task serve`
/// processes below a keeper that serves that state directory.
fn readers_of(home: &std::path::Path) -> Vec<u32> {
    let keeper = format!("\0run\0{}\0", home.display());
    let cmdline = |pid: u32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
    };
    let below_keeper = |mut pid: u32| {
        while let Some(up) = parent(pid).filter(|&p| p > 1) {
            if String::from_utf8_lossy(&cmdline(up)).contains(&keeper) {
                return true;
            }
            pid = up;
        }
        false
    };
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&pid| cmdline(pid).ends_with(b"sandkeep-task\0serve\0") && below_keeper(pid))
        .collect()
}

fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
