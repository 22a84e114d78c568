//! Pause and resume (SPEC §17) against real sandboxes: a paused
//! sandbox's processes get no CPU and go on where they were when resumed,
//! commands on it still run (outside the freezer: how the task tools
//! read a paused sandbox), its deadline does not fire, an `on_timeout:
//! pause` sandbox pauses at its deadline (a `pause_files` one ending its
//! processes), the state outlives the provider
//! that set it, a paused sandbox can be killed, and the wrong transition
//! is refused. Here (as the rest of this binary) under cgroup v1's
//! freezer, and under v2's `cgroup.freeze` in scripts/cgroup-v2-vm.

use std::time::{Duration, Instant};

use sandkeep_local::LocalProvider;
use sandkeep_provider::{CreateSpec, OnTimeout, Provider, ProviderError, SandboxId, SandboxState};

use super::support::local::*;
use super::support::ports::authority;
use super::support::*;
use super::{patience, root, run};

/// Starts a loop that counts in /tmp/count as fast as it can (each
/// number written aside and renamed: never an empty file to read), under
/// a name of its own; returns its pid on the host.
async fn start_counter(p: &LocalProvider, id: &SandboxId, name: &str) -> i32 {
    let out = sh(
        p,
        id,
        &format!(
            "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/next; mv -f /tmp/next /tmp/count; done' {name} \
             </dev/null >/dev/null 2>&1 & echo started"
        ),
    )
    .await;
    assert_eq!(text(&out.stdout), "started\n", "{}", text(&out.stderr));
    // The loop itself (`sh -c i=0;… NAME`): the shell and setsid that
    // start it carry the name too, for a moment, and one mid-exec shows
    // no command line at all (the v2 VM once found nothing on the second
    // look). Its own forks, for `mv`, are copies of it for a moment: the
    // loop is the oldest, the lowest pid.
    let is_loop = |cmd: &str| cmd.starts_with("sh -c i=0;") && cmd.contains(name);
    until(
        Duration::from_secs(10) * patience(),
        "the counter visible on the host",
        || async { !host_pids_where(is_loop).is_empty() },
    )
    .await;
    host_pids_where(is_loop)
        .into_iter()
        .min()
        .expect("the counter's loop, seen a moment ago")
}

async fn count(p: &LocalProvider, id: &SandboxId) -> u64 {
    // 0 before the loop's first number (an emulated CPU is slow to start).
    let out = run(p, id, "cat /tmp/count 2>/dev/null || echo 0").await;
    text(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("count {:?}: {e}", text(&out.stdout)))
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the line; `after` starts at field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_uses_no_cpu_and_resumes_where_it_was() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(120 * u64::from(patience())).await;
    let id = &info.sandbox_id;
    let name = tag("spin-");
    let pid = start_counter(&p, id, &name).await;
    let before = count(&p, id).await;
    until(Duration::from_secs(10), "the counter counting", || async {
        count(&p, id).await > before
    })
    .await;

    let paused = p.pause(id).await.expect("pause");
    assert_eq!(paused.state, SandboxState::Paused);
    let listed = p.list().await.unwrap();
    let entry = listed.iter().find(|s| &s.sandbox_id == id).expect("listed");
    assert_eq!(entry.state, SandboxState::Paused);

    // Commands still run on a paused sandbox (the task tools' reads): the
    // count and the spinner's CPU time stand still over half a second.
    let (ticks, frozen_at) = (cpu_ticks(pid), count(&p, id).await);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        assert_eq!(
            count(&p, id).await,
            frozen_at,
            "the counter ran while paused"
        );
    }
    assert_eq!(
        cpu_ticks(pid),
        ticks,
        "the spinner got CPU time while paused"
    );

    let resumed = p.resume(id, None).await.expect("resume");
    assert_eq!(resumed.state, SandboxState::Running);
    assert!(resumed.expires_at >= sandkeep_provider::unix_now() + 100);
    until(Duration::from_secs(10), "the counter going on", || async {
        count(&p, id).await > frozen_at
    })
    .await;
    assert!(cpu_ticks(pid) > ticks || count(&p, id).await > frozen_at);
    assert!(
        host_pids_with(&name).contains(&pid),
        "the same process went on"
    );
    p.kill(id).await.unwrap();
}

/// A sandbox has a kernel boot id of its own (not the host's, not another
/// sandbox's), which it cannot change; a pause keeps it, a
/// filesystem-only pause's resume (a cold boot) has a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_boots_with_its_own_boot_id_and_reboots_after_a_files_only_pause() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    const BOOT_ID: &str = "cat /proc/sys/kernel/random/boot_id";
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let other = p.create(spec(120)).await.expect("create");
    let first = text(&run(&p, id, BOOT_ID).await.stdout);
    let host = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(
        first.len(),
        37,
        "a boot id as the kernel writes it: {first:?}"
    );
    assert_ne!(first, host, "the host's boot id");
    assert_ne!(
        first,
        text(&run(&p, &other.sandbox_id, BOOT_ID).await.stdout),
        "another sandbox's boot id"
    );
    let changed = run(
        &p,
        id,
        "f=/proc/sys/kernel/random/boot_id; echo 00000000-0000-4000-8000-000000000000 > $f; \
         umount $f; mount -o remount,rw $f; mount --bind /etc/hostname $f; \
         for fd in /proc/self/fd/*; do readlink $fd; done | grep boot_id; cat $f",
    )
    .await;
    assert_eq!(
        text(&changed.stdout),
        first,
        "the sandbox changed its boot id, or holds a descriptor of it"
    );

    p.pause(id).await.expect("pause");
    p.resume(id, None).await.expect("resume");
    assert_eq!(text(&run(&p, id, BOOT_ID).await.stdout), first);
    p.pause_files_only(id).await.expect("filesystem-only pause");
    p.resume(id, None).await.expect("resume");
    let rebooted = text(&run(&p, id, BOOT_ID).await.stdout);
    assert_eq!(rebooted.len(), 37, "{rebooted:?}");
    assert_ne!(
        rebooted, first,
        "a filesystem-only pause's resume is a new boot"
    );
    for sandbox in [id, &other.sandbox_id] {
        p.kill(sandbox).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_twice_and_resuming_a_running_sandbox_are_refused() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(60).await;
    let id = &info.sandbox_id;
    match p.resume(id, None).await {
        Err(e @ ProviderError::AlreadyInState { .. }) => {
            assert!(e.to_string().contains("already running"), "{e}")
        }
        other => panic!("resume of a running sandbox: {other:?}"),
    }
    p.pause(id).await.expect("pause");
    match p.pause(id).await {
        Err(e @ ProviderError::AlreadyInState { .. }) => {
            assert!(e.to_string().contains("already paused"), "{e}")
        }
        other => panic!("second pause: {other:?}"),
    }
    p.kill(id).await.unwrap();
    match p.pause(id).await {
        Err(ProviderError::NoSuchSandbox(_)) => {}
        other => panic!("pause of a killed sandbox: {other:?}"),
    }
}

/// The deadline stands still while paused, a new provider on the same
/// state directory (a server restart) sees it paused and resumes it, the
/// resumed sandbox gets a new deadline and dies at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_waits_while_paused_and_the_state_outlives_the_server() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let home = state_dir();
    let (id, expires_at) = {
        let p = provider(home.path());
        let id = create(&p, 60).await.sandbox_id;
        // A deadline close by, set right before the pause (a create may
        // take seconds on a busy host).
        let info = p.set_timeout(&id, 3).await.expect("set_timeout");
        p.pause(&id).await.expect("pause");
        (id, info.expires_at)
    };
    let p = provider(home.path());
    // Past the deadline (a measured interval, not a synchronisation).
    while sandkeep_provider::unix_now() <= expires_at + 1 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let info = p
        .info(&id)
        .await
        .expect("a paused sandbox outlives its deadline");
    assert_eq!(info.state, SandboxState::Paused);
    let resumed = p.resume(&id, Some(2)).await.expect("resume");
    assert_eq!((resumed.state, resumed.timeout), (SandboxState::Running, 2));
    assert_eq!(text(&sh(&p, &id, "echo up").await.stdout), "up\n");
    until(
        Duration::from_secs(10) * patience(),
        "the resumed sandbox ended at its new deadline",
        || async { matches!(p.info(&id).await, Err(ProviderError::NoSuchSandbox(_))) },
    )
    .await;
}

/// A sandbox of a new state directory whose deadline, a few seconds
/// away, does `on_timeout`.
async fn short_lived(
    on_timeout: OnTimeout,
) -> (
    tempfile::TempDir,
    LocalProvider,
    sandkeep_provider::SandboxInfo,
) {
    let home = state_dir();
    let p = provider(home.path());
    let info = p
        .create(CreateSpec {
            on_timeout,
            ..spec(8 * u64::from(patience()))
        })
        .await
        .expect("create");
    (home, p, info)
}

/// `on_timeout: pause`: at the deadline the sandbox pauses, its processes
/// kept; resumed, they go on; killed while paused, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_timeout_pause_pauses_at_the_deadline_and_a_paused_sandbox_can_be_killed() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (_home, p, info) = short_lived(OnTimeout::Pause).await;
    let id = &info.sandbox_id;
    assert_eq!(info.on_timeout, OnTimeout::Pause);
    let name = tag("autopause-");
    let pid = start_counter(&p, id, &name).await;
    until(
        Duration::from_secs(15) * patience(),
        "the sandbox paused at its deadline",
        || async { p.info(id).await.expect("alive").state == SandboxState::Paused },
    )
    .await;
    let ticks = cpu_ticks(pid);
    let frozen_at = count(&p, id).await;
    p.resume(id, Some(60)).await.expect("resume");
    until(Duration::from_secs(10), "the counter going on", || async {
        count(&p, id).await > frozen_at
    })
    .await;
    assert!(cpu_ticks(pid) >= ticks);
    p.pause(id).await.expect("pause again");
    assert!(p.kill(id).await.unwrap(), "kill of a paused sandbox");
    until(
        Duration::from_secs(10),
        "no process of the killed sandbox",
        || async { host_pids_with(&name).is_empty() },
    )
    .await;
}

/// `on_timeout: pause_files` (E2B's filesystem-only auto-pause): at the
/// deadline the sandbox's processes end and it pauses; resumed, its files
/// are there and its processes are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_timeout_pause_files_ends_the_processes_at_the_deadline_and_keeps_the_files() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (_home, p, info) = short_lived(OnTimeout::PauseFiles).await;
    let id = &info.sandbox_id;
    let name = tag("autopause-files-");
    start_counter(&p, id, &name).await;
    until(
        Duration::from_secs(15) * patience(),
        "the sandbox paused at its deadline",
        || async { p.info(id).await.expect("alive").state == SandboxState::Paused },
    )
    .await;
    until(
        Duration::from_secs(10),
        "no process left of the sandbox's counter",
        || async { host_pids_with(&name).is_empty() },
    )
    .await;
    p.resume(id, Some(60)).await.expect("resume");
    let kept = count(&p, id).await;
    assert!(kept > 0, "the counter's file kept");
    assert!(host_pids_with(&name).is_empty(), "a process came back");
    assert!(p.kill(id).await.unwrap());
}

/// A paused sandbox whose keeper was SIGKILLed is cleaned up by the next
/// look at it, frozen processes included (v1 ones die only once thawed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_of_a_dead_keeper_is_cleaned_up_with_its_processes() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let name = tag("orphan-");
    start_counter(&p, id, &name).await;
    p.pause(id).await.expect("pause");
    let keeper = recorded_pid(home.path(), id, "keeper");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(keeper).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    until(
        Duration::from_secs(10) * patience(),
        "the dead keeper's sandbox gone from the list",
        || async { p.list().await.unwrap().iter().all(|s| &s.sandbox_id != id) },
    )
    .await;
    until(
        Duration::from_secs(10) * patience(),
        "no process of the sandbox left",
        || async { host_pids_with(&name).is_empty() },
    )
    .await;
}

/// `GET /` of an HTTP server through `url` on a fresh connection: the
/// answer, or why there was none within `limit`.
async fn http_get(url: &str, limit: Duration) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(authority(url)).await?;
        s.write_all(b"GET / HTTP/1.0\r\nHost: sandbox\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(text(&answer))
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// Connections to an exposed port of a paused sandbox resume it first
/// (SPEC §17, as E2B's connect does): an HTTP server inside answers
/// through the forward's url, several connections at once and a
/// resume_sandbox racing them included, and the sandbox is running
/// afterwards with a deadline ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_a_forward_resumes_a_paused_sandbox() {
    if !require(root(), "cgroup freezing is set up as root") {
        return;
    }
    let (_home, p, info) = fresh_sandbox(120 * u64::from(patience())).await;
    let id = &info.sandbox_id;
    let out = sh(
        &p,
        id,
        "mkdir -p /tmp/www && echo paused-hello > /tmp/www/index.html && \
         (setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www \
          </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let url = p
        .expose_port(id, sandkeep_provider::Port::new(8000).unwrap())
        .await
        .expect("expose")
        .url;
    until(
        Duration::from_secs(20) * patience(),
        "the server answering through the forward",
        || async {
            http_get(&url, Duration::from_secs(5))
                .await
                .is_ok_and(|a| a.contains("paused-hello"))
        },
    )
    .await;

    let limit = Duration::from_secs(20) * patience();
    let gets = |n: usize| {
        (0..n)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { http_get(&url, limit).await })
            })
            .collect::<Vec<_>>()
    };
    let answered = |answer: Result<String, String>| {
        let answer = answer.expect("an answer from the paused sandbox's server");
        assert!(answer.contains("paused-hello"), "{answer}");
    };

    // The connections alone resume it.
    p.pause(id).await.expect("pause");
    for get in gets(4) {
        answered(get.await.unwrap());
    }
    let now = p.info(id).await.expect("alive");
    assert_eq!(now.state, SandboxState::Running);
    assert!(
        now.expires_at > sandkeep_provider::unix_now(),
        "a deadline ahead: {now:?}"
    );

    // And a resume_sandbox racing them is safe: one of them resumes it.
    p.pause(id).await.expect("pause again");
    let racing = gets(4);
    match p.resume(id, None).await {
        Ok(_) | Err(ProviderError::AlreadyInState { .. }) => {}
        Err(e) => panic!("a resume racing the connections: {e}"),
    }
    for get in racing {
        answered(get.await.unwrap());
    }
    assert_eq!(p.info(id).await.unwrap().state, SandboxState::Running);
}
