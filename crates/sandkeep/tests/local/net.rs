//! A local sandbox's network, tried from inside as its root: nothing of
//! the host (loopback, its other addresses, abstract unix sockets) and
//! nothing of another sandbox is reachable; the egress proxy refuses
//! private, loopback, metadata and every other non-global destination
//! (also carried in an IPv6 form), and the host's own subnets and
//! gateways, with a 403 naming the rule; it reaches a public host end to
//! end (through the operator's `SANDKEEP_EGRESS_TRUST` where the host's
//! answers are special-purpose addresses, and only the trusted part),
//! sends the request-URI's Host, works within the sandbox's own cgroups
//! and under an identity no host account can signal, and is gone with the
//! sandbox.

use crate::support;

use std::net::{IpAddr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::time::Duration;

use sandkeep::provider::local::{EGRESS_TRUST_VAR, EgressTrust, LocalConfig, LocalProvider};
use sandkeep::provider::{CreateSpec, Network, Provider, SandboxId};
use support::local::*;
use support::{host_pids_where, until};

/// Runs `command` with bash in the sandbox; (exit code, stdout, stderr).
async fn bash(p: &LocalProvider, id: &SandboxId, command: &str) -> (Option<i32>, String, String) {
    let out = sh(p, id, command).await;
    (out.exit_code, text(&out.stdout), text(&out.stderr))
}

/// A bash line that connects to HOST:PORT and prints CONNECTED on success.
fn tcp_probe(host: &str, port: u16) -> String {
    format!("timeout 10 bash -c 'exec 3<>/dev/tcp/{host}/{port}' && echo CONNECTED || echo REFUSED")
}

/// The host's address on its default route (no packet is sent).
fn host_address() -> Option<IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.255:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
}

/// Sends a raw request to the sandbox's proxy and prints the answer.
fn via_proxy(request: &str) -> String {
    format!(
        "exec 3<>/dev/tcp/127.0.0.1/${{HTTPS_PROXY##*:}} && printf '{request}' >&3 && timeout 20 cat <&3"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_listeners_on_loopback_and_other_addresses_are_unreachable() {
    let host_lo = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_any = TcpListener::bind("0.0.0.0:0").unwrap();
    host_lo.set_nonblocking(true).unwrap();
    host_any.set_nonblocking(true).unwrap();
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;

    let lo_port = host_lo.local_addr().unwrap().port();
    let (_, out, err) = bash(&p, id, &tcp_probe("127.0.0.1", lo_port)).await;
    assert_eq!(
        out, "REFUSED\n",
        "the host's 127.0.0.1:{lo_port} was reachable from the sandbox ({err})"
    );
    let any_port = host_any.local_addr().unwrap().port();
    let mut targets = vec!["127.0.0.1".to_owned()];
    if let Some(ip) = host_address() {
        targets.push(ip.to_string());
    } else {
        eprintln!("NOTE: the host has no non-loopback address; only loopback was tried");
    }
    for host in &targets {
        let (_, out, err) = bash(&p, id, &tcp_probe(host, any_port)).await;
        assert_eq!(
            out, "REFUSED\n",
            "the host's {host}:{any_port} was reachable from the sandbox ({err})"
        );
    }
    for l in [&host_lo, &host_any] {
        assert!(
            l.accept().is_err(),
            "a host listener accepted a connection from the sandbox"
        );
    }
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_abstract_unix_socket_is_unreachable() {
    let name = format!("sk-net-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let host = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    host.set_nonblocking(true).unwrap();
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let probe = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(b\"\\0{name}\"); print(\"CONNECTED\")' || echo REFUSED"
    );
    let (_, out, err) = bash(&p, id, &probe).await;
    assert_eq!(
        out, "REFUSED\n",
        "the host's abstract socket @{name} was reachable ({err})"
    );
    assert!(host.accept().is_err(), "the host socket accepted");
    // The probe itself works: an abstract socket inside the sandbox is
    // reachable from inside.
    let inside = format!(
        "python3 -c 'import socket; l = socket.socket(socket.AF_UNIX); l.bind(b\"\\0{name}\"); l.listen(); s = socket.socket(socket.AF_UNIX); s.connect(b\"\\0{name}\"); print(\"CONNECTED\")'"
    );
    let (_, out, err) = bash(&p, id, &inside).await;
    assert_eq!(out, "CONNECTED\n", "the probe is broken: {err}");
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_in_another_sandbox_is_unreachable() {
    let home = state_dir();
    let p = provider(home.path());
    let a = create(&p, 120).await;
    let b = create(&p, 120).await;
    let port = 20000 + (std::process::id() % 10000) as u16;
    // B listens on every address of its namespace, and reaches itself.
    let listen = format!(
        "setsid python3 -c 'import socket,time; l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind((\"0.0.0.0\", {port})); l.listen(); open(\"/tmp/ready\", \"w\").close(); time.sleep(1000)' </dev/null >/dev/null 2>&1 & \
         for i in $(seq 100); do [ -e /tmp/ready ] && break; timeout 0.1 tail -f /dev/null; done; {}",
        tcp_probe("127.0.0.1", port)
    );
    let (_, out, err) = bash(&p, &b.sandbox_id, &listen).await;
    assert_eq!(
        out, "CONNECTED\n",
        "the listener in sandbox B did not come up: {err}"
    );
    let (_, out, err) = bash(&p, &a.sandbox_id, &tcp_probe("127.0.0.1", port)).await;
    assert_eq!(
        out, "REFUSED\n",
        "sandbox A reached sandbox B's listener ({err})"
    );
    // Nor can A take the port from B, or B from A: each has its own.
    let (_, out, err) = bash(
        &p,
        &a.sandbox_id,
        &format!(
            "python3 -c 'import socket; l = socket.socket(); l.bind((\"127.0.0.1\", {port})); print(\"BOUND\")'"
        ),
    )
    .await;
    assert_eq!(out, "BOUND\n", "A could not bind its own port: {err}");
    assert!(p.kill(&a.sandbox_id).await.unwrap());
    assert!(p.kill(&b.sandbox_id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_has_only_loopback_and_the_proxy_in_its_environment() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let (_, out, err) = bash(&p, id, "ls /sys/class/net 2>/dev/null || cat /proc/net/dev").await;
    assert!(
        !out.contains("eth") && !out.contains("ifb"),
        "the host's interfaces are visible: {out} {err}"
    );
    let (_, out, _) = bash(&p, id, "cat /proc/net/route | tail -n +2 | wc -l").await;
    assert_eq!(out.trim(), "0", "the sandbox has a route");
    let (_, out, _) = bash(&p, id, "env | grep -i _proxy= | sort").await;
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{name}=http://127.0.0.1:"))),
            "{name} missing: {out}"
        );
    }
    assert!(out.contains("NO_PROXY=localhost,127.0.0.1,::1"), "{out}");
    assert!(out.contains("no_proxy=localhost,127.0.0.1,::1"), "{out}");
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_refuses_private_loopback_and_metadata_destinations() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let mut cases = vec![
        ("127.0.0.1:22".to_owned(), "127.0.0.1 is a loopback address"),
        ("10.0.0.5:443".to_owned(), "10.0.0.5 is a private address"),
        (
            "169.254.169.254:80".to_owned(),
            "169.254.169.254 is a link-local (cloud metadata) address",
        ),
        ("localhost:80".to_owned(), "is a loopback address"),
        ("[::1]:80".to_owned(), "::1 is a loopback address"),
        (
            "[::ffff:192.168.0.1]:80".to_owned(),
            "192.168.0.1 is a private address",
        ),
    ];
    let own;
    if let Some(ip) = host_address() {
        // A host on a private network hears the range rule first; either
        // way the answer names the address and why it is refused.
        own = format!("{ip} is ");
        let target = match ip {
            IpAddr::V4(v4) => format!("{v4}:80"),
            IpAddr::V6(v6) => format!("[{v6}]:80"),
        };
        cases.push((target, own.as_str()));
    }
    for (target, rule) in &cases {
        let request = format!("CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n");
        let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
        assert!(
            out.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "CONNECT {target} was not refused: {out:?} {err}"
        );
        assert!(
            out.contains(rule) && out.contains("sandboxes reach public addresses only"),
            "CONNECT {target}: the answer does not name the rule {rule:?}: {out:?}"
        );
    }
    // Plain http:// forwarding is checked the same way; curl shows the body.
    let (_, out, err) = bash(
        &p,
        id,
        "curl --noproxy '' -sS -w ' %{http_code}' http://10.1.2.3/ http://localhost:8080/",
    )
    .await;
    assert_eq!(
        out,
        "sandkeep: 10.1.2.3 is a private address; sandboxes reach public addresses only\n 403\
         sandkeep: 127.0.0.1 is a loopback address; sandboxes reach public addresses only\n 403",
        "{err}"
    );
    // The same port speaks SOCKS5 under the same policy.
    let (code, _, err) = bash(
        &p,
        id,
        "curl --noproxy '' -sS --socks5-hostname 127.0.0.1:${HTTPS_PROXY##*:} http://169.254.169.254/",
    )
    .await;
    assert_eq!(code, Some(97), "SOCKS5 to the metadata address: {err}");
    assert!(
        err.contains("SOCKS5 connection to 169.254.169.254. (2)"),
        "{err}"
    );
    assert!(p.kill(id).await.unwrap());
}

/// The package index pip is configured with, else pypi.org.
fn package_index_host() -> String {
    let out = std::process::Command::new("pip")
        .args(["config", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.contains("index-url="))
        .find_map(|l| {
            let url = l.split_once('=')?.1.trim_matches(|c| c == '\'' || c == '"');
            let rest = url.split_once("://")?.1;
            let host = rest.split(['/', ':', '@']).next()?;
            (!host.is_empty()).then(|| host.to_owned())
        })
        .unwrap_or_else(|| "pypi.org".to_owned())
}

/// Whether the host itself reaches `url` (200); if not, skips the test
/// loudly (and fails under CI=true).
fn host_reaches(url: &str) -> bool {
    let direct = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "60",
            url,
        ])
        .output()
        .expect("run curl on the host");
    let code = String::from_utf8_lossy(&direct.stdout).into_owned();
    support::require(
        code == "200",
        &format!(
            "this test needs the network, and the host itself cannot fetch {url} (http code {code:?}: {})",
            String::from_utf8_lossy(&direct.stderr).trim()
        ),
    )
}

/// Fetches `url` inside the sandbox through its proxy (curl honours
/// HTTPS_PROXY), and makes sure nothing reaches it without the proxy.
async fn fetch_through_the_proxy(p: &LocalProvider, id: &SandboxId, url: &str) {
    let fetch = format!("curl -sS -o /dev/null -w '%{{http_code}}' --max-time 60 {url}");
    let out = p
        .exec(
            id,
            sandkeep::provider::ExecRequest {
                timeout: Duration::from_secs(90),
                ..request(&fetch)
            },
        )
        .await
        .expect("exec");
    assert_eq!(
        text(&out.stdout),
        "200",
        "{url} through the proxy: {}",
        text(&out.stderr)
    );
    let (_, out, _) = bash(
        p,
        id,
        &format!("curl --noproxy '*' -sS -o /dev/null -w '%{{http_code}}' --max-time 10 {url}"),
    )
    .await;
    assert_eq!(out, "000", "{url} was reached without the proxy");
    let (_, out, err) = bash(
        p,
        id,
        &format!(
            "curl --noproxy '' --socks5-hostname 127.0.0.1:${{HTTPS_PROXY##*:}} -sS -o /dev/null -w '%{{http_code}}' --max-time 60 {url}"
        ),
    )
    .await;
    assert_eq!(out, "200", "{url} through SOCKS5: {err}");
    // Plain http:// is forwarded: the sandbox gets what the host gets.
    let plain = url.replacen("https://", "http://", 1);
    let direct = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "30",
            &plain,
        ])
        .output()
        .expect("run curl on the host");
    let (_, out, err) = bash(
        p,
        id,
        &format!("curl -sS -o /dev/null -w '%{{http_code}}' --max-time 30 {plain}"),
    )
    .await;
    assert_eq!(
        out,
        String::from_utf8_lossy(&direct.stdout),
        "{plain} through the proxy answers differently than directly: {err}"
    );
}

/// The `SANDKEEP_EGRESS_TRUST` the package-index tests run with, as an
/// operator of this host would set it: this process's, else what
/// `sandkeep doctor` reports this host needs. A test machine whose egress
/// is intercepted answers every public name with an address of a
/// documentation or benchmarking range (this one says 203.0.113.80),
/// which the proxy refuses unless the operator trusts it.
fn index_egress_trust() -> EgressTrust {
    static TRUST: std::sync::OnceLock<EgressTrust> = std::sync::OnceLock::new();
    TRUST
        .get_or_init(|| {
            if std::env::var_os(EGRESS_TRUST_VAR).is_some() {
                return LocalConfig::egress_trust_from_env().unwrap_or_else(|e| panic!("{e}"));
            }
            let home = state_dir();
            let out = std::process::Command::new(EXE)
                .args(["doctor", "--json"])
                .env("SANDKEEP_HOME", home.path())
                .output()
                .expect("run sandkeep doctor");
            let report: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                    panic!(
                        "sandkeep doctor --json: {e}: {}",
                        support::cli::describe(&out)
                    )
                });
            let Some(value) = report["suggested_egress_trust"].as_str() else {
                return EgressTrust::default();
            };
            let egress = report["checks"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["name"] == "egress"))
                .map(|c| c["detail"].to_string())
                .unwrap_or_default();
            eprintln!(
                "NOTE: sandkeep doctor reports that sandboxes here cannot reach the package index \
                 ({egress}); the package-index tests run with {EGRESS_TRUST_VAR}={value}, as it \
                 advises"
            );
            value
                .parse()
                .unwrap_or_else(|e| panic!("doctor suggested {value:?}: {e}"))
        })
        .clone()
}

/// A provider whose sandboxes fetch from the package index: configured
/// with [`index_egress_trust`].
fn package_index_provider(home: &std::path::Path) -> LocalProvider {
    LocalProvider::new(LocalConfig::new(home, EXE).with_egress_trust(index_egress_trust()))
        .expect("local provider")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_host_is_reached_through_the_proxy() {
    let url = format!("https://{}/simple/", package_index_host());
    if !host_reaches(&url) {
        return;
    }
    let home = state_dir();
    let p = package_index_provider(home.path());
    let info = create(&p, 120).await;
    fetch_through_the_proxy(&p, &info.sandbox_id, &url).await;
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    if index_egress_trust().is_empty() {
        return;
    }
    // Where the trust is needed, a sandbox made without it is refused,
    // and told which setting its host's operator can change.
    let untrusted = provider(home.path());
    let info = create(&untrusted, 120).await;
    let (_, out, err) = bash(
        &untrusted,
        &info.sandbox_id,
        &format!("curl -sS -w ' %{{http_code}}' --max-time 60 {url}"),
    )
    .await;
    assert!(
        err.contains("CONNECT tunnel failed, response 403"),
        "{url} without {EGRESS_TRUST_VAR}: {out:?} {err}"
    );
    let (_, out, err) = bash(
        &untrusted,
        &info.sandbox_id,
        &via_proxy(&format!(
            "CONNECT {}:443 HTTP/1.1\\r\\n\\r\\n",
            package_index_host()
        )),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 403 Forbidden\r\n") && out.contains(EGRESS_TRUST_VAR),
        "{out:?} {err}"
    );
    assert!(untrusted.kill(&info.sandbox_id).await.unwrap());
}

/// The throwaway account the unprivileged run uses (its own name, so
/// that other suites creating and deleting theirs do not interfere).
const USER: &str = "sknet";

/// The same guarantees when an ordinary user runs the provider: root
/// re-runs this binary's ignored `unprivileged_inner` as `sknet`.
#[test]
fn an_ordinary_users_sandboxes_are_isolated_too() {
    if !rustix::process::geteuid().is_root() {
        return unprivileged_inner();
    }
    let _user = ThrowawayUser::ensure(USER);
    let id = |flag: &str| {
        let out = std::process::Command::new("id")
            .args([flag, USER])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        &format!("--reuid={}", id("-u")),
        &format!("--regid={}", id("-g")),
        "--init-groups",
        "--",
    ])
    .arg(std::env::current_exe().unwrap())
    .args(support::ignored_test_args("net::unprivileged_inner"))
    .env_clear()
    .env("HOME", "/var/tmp")
    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
    .env("SK_NET_INNER", "1")
    .env(EGRESS_TRUST_VAR, index_egress_trust().to_string());
    if let Ok(ci) = std::env::var("CI") {
        cmd.env("CI", ci);
    }
    let out = cmd.output().expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the unprivileged run as {USER} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
#[ignore = "run by an_ordinary_users_sandboxes_are_isolated_too as an ordinary user"]
fn unprivileged_inner() {
    if std::env::var_os("SK_NET_INNER").is_none() && rustix::process::geteuid().is_root() {
        return;
    }
    support::fake_kernel::block_on(async {
        let host_lo = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = host_lo.local_addr().unwrap().port();
        let home = state_dir();
        let p = package_index_provider(home.path());
        let info = create(&p, 120).await;
        let id = &info.sandbox_id;
        assert_eq!(info.isolation, "userns-single");
        let (_, out, err) = bash(&p, id, &tcp_probe("127.0.0.1", port)).await;
        assert_eq!(out, "REFUSED\n", "host loopback reachable ({err})");
        let request = "CONNECT 169.254.169.254:80 HTTP/1.1\\r\\n\\r\\n";
        let (_, out, err) = bash(&p, id, &via_proxy(request)).await;
        assert!(
            out.starts_with("HTTP/1.1 403 Forbidden\r\n") && out.contains("cloud metadata"),
            "{out:?} {err}"
        );
        let url = format!("https://{}/simple/", package_index_host());
        if host_reaches(&url) {
            fetch_through_the_proxy(&p, id, &url).await;
        }
        let sid = id.clone();
        let mine = move || host_pids_where(|cmd| cmd.contains(sid.as_str()));
        assert!(mine().len() >= 3, "keeper, init and proxy: {:?}", mine());
        assert!(p.kill(id).await.unwrap());
        until(
            Duration::from_secs(10),
            "every process of the sandbox gone after kill",
            || async { mine().is_empty() },
        )
        .await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_is_gone_after_kill() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = info.sandbox_id.clone();
    let mine = || host_pids_where(|cmd| cmd.contains(id.as_str()));
    // The keeper, the init and the proxy.
    let before = mine();
    assert!(
        before.len() >= 3,
        "expected keeper, init and proxy for {id}: {before:?}"
    );
    let proxy = proxy_of(&id);
    assert!(before.contains(&proxy), "{proxy} not of {before:?}");
    let netns = std::fs::read_link(format!("/proc/{}/ns/net", proxy_or_init(&before)))
        .expect("the sandbox's network namespace");
    assert!(p.kill(&id).await.unwrap());
    until(
        Duration::from_secs(10),
        "every process of the sandbox gone after kill",
        || async { mine().is_empty() },
    )
    .await;
    // No host process is left in, or holds a descriptor of, that namespace.
    let holders = host_pids_where(|_| true)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == netns)
                || std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == netns))
                })
        })
        .collect::<Vec<_>>();
    assert!(holders.is_empty(), "{netns:?} is still held by {holders:?}");
}

/// A pid of `pids` inside the sandbox's network namespace: the one whose
/// namespace differs from this test's.
fn proxy_or_init(pids: &[i32]) -> i32 {
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    *pids
        .iter()
        .find(|pid| std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l != ours))
        .expect("a process of the sandbox in its own network namespace")
}

/// A sandbox of `p` created with these network parameters.
async fn create_with(
    p: &LocalProvider,
    network: Option<Network>,
    allow_hosts: &[&str],
) -> sandkeep::provider::SandboxInfo {
    p.create(CreateSpec {
        network,
        allow_hosts: allow_hosts.iter().map(|h| h.to_string()).collect(),
        ..spec(120)
    })
    .await
    .expect("create sandbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_none_is_loopback_only_without_a_proxy() {
    let home = state_dir();
    let p = provider(home.path());
    let info = create_with(&p, Some(Network::None), &[]).await;
    let id = &info.sandbox_id;
    assert_eq!(info.network, Some(Network::None));
    assert!(info.allow_hosts.is_empty());
    let listed = p.list().await.unwrap();
    let me = listed.iter().find(|s| &s.sandbox_id == id).expect("listed");
    assert_eq!(
        me.network,
        Some(Network::None),
        "list says what is enforced"
    );

    let (_, out, _) = bash(
        &p,
        id,
        "env | grep -ci proxy; cat /proc/net/route | tail -n +2 | wc -l",
    )
    .await;
    assert_eq!(
        out, "0\n0\n",
        "proxy variables or a route in a none sandbox"
    );
    let (_, out, err) = bash(
        &p,
        id,
        "curl -sS --max-time 10 -o /dev/null https://1.1.1.1/ 2>&1; echo; ip route get 1.1.1.1 2>&1 || true",
    )
    .await;
    assert!(
        !out.contains("200"),
        "a none sandbox reached the outside: {out} {err}"
    );
    // Loopback works inside.
    let (_, out, err) = bash(
        &p,
        id,
        "python3 -c 'import socket; l = socket.socket(); l.bind((\"127.0.0.1\", 0)); l.listen(); s = socket.create_connection(l.getsockname()); print(\"LOOPBACK\")'",
    )
    .await;
    assert_eq!(out, "LOOPBACK\n", "{err}");
    // Keeper and init, no proxy.
    let sid = id.clone();
    let mine = host_pids_where(|cmd| cmd.contains(sid.as_str()));
    assert_eq!(mine.len(), 2, "keeper and init only: {mine:?}");
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_hosts_lets_only_the_listed_names_through() {
    let index = package_index_host();
    let home = state_dir();
    let p = package_index_provider(home.path());
    let info = create_with(&p, None, &[index.as_str(), "*.pythonhosted.org"]).await;
    let id = &info.sandbox_id;
    assert_eq!(info.network, Some(Network::Internet));
    assert_eq!(info.allow_hosts, [index.as_str(), "*.pythonhosted.org"]);
    for target in ["example.com:443", "pythonhosted.org:443", "1.1.1.1:443"] {
        let request = format!("CONNECT {target} HTTP/1.1\\r\\n\\r\\n");
        let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
        assert!(
            out.starts_with("HTTP/1.1 403 Forbidden\r\n") && out.contains("not in allow_hosts"),
            "CONNECT {target}: {out:?} {err}"
        );
    }
    // A listed name that resolves to loopback is still refused.
    let info2 = create_with(&p, None, &["localhost"]).await;
    let (_, out, err) = bash(
        &p,
        &info2.sandbox_id,
        &via_proxy("CONNECT localhost:80 HTTP/1.1\\r\\n\\r\\n"),
    )
    .await;
    assert!(out.contains("is a loopback address"), "{out:?} {err}");
    assert!(p.kill(&info2.sandbox_id).await.unwrap());

    let url = format!("https://{index}/simple/");
    if host_reaches(&url) {
        fetch_through_the_proxy(&p, id, &url).await;
    }
    assert!(p.kill(id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_is_internet_and_process_only_reports_no_isolation() {
    let (_home, p, info) = fresh_sandbox(120).await;
    assert_eq!(info.network, Some(Network::Internet));
    assert!(info.allow_hosts.is_empty());
    assert!(p.kill(&info.sandbox_id).await.unwrap());

    let home = state_dir();
    let p = LocalProvider::new(
        sandkeep::provider::local::LocalConfig::new(home.path(), EXE).with_process_only(true),
    )
    .unwrap();
    let info = create(&p, 60).await;
    assert_eq!(
        info.network, None,
        "a process-only sandbox shares the host's network"
    );
    assert!(p.kill(&info.sandbox_id).await.unwrap());
    for (network, hosts) in [
        (Some(Network::None), vec![]),
        (None, vec!["pypi.org".to_owned()]),
    ] {
        let err = p
            .create(CreateSpec {
                network,
                allow_hosts: hosts,
                ..spec(60)
            })
            .await
            .expect_err("process-only cannot enforce a network request");
        assert!(
            matches!(err, sandkeep::provider::ProviderError::Unsupported(_)),
            "{err:?}"
        );
        assert!(err.to_string().contains("network"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_the_network_namespace() {
    let home = state_dir();
    let report = provider(home.path()).doctor().await.unwrap();
    let check = report
        .checks
        .iter()
        .find(|c| c.name == "network namespace")
        .expect("a network namespace check");
    assert!(check.ok, "{}", check.detail);
}

/// Run by `without_network_namespaces_network_is_refused_and_the_default_says_so`
/// in a child process.
#[test]
#[ignore = "helper process of without_network_namespaces_network_is_refused_and_the_default_says_so"]
fn no_network_namespaces_inner() {
    if std::env::var_os("SK_NO_NETNS").is_none() {
        return;
    }
    // A kernel built without network namespaces.
    support::fake_kernel::refuse(&[libc::CLONE_NEWNET], libc::EINVAL);
    let out = std::process::Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .unwrap();
    assert!(
        !out.success(),
        "the simulation must refuse network namespaces"
    );
    support::fake_kernel::block_on(async {
        let home = state_dir();
        let p = provider(home.path());
        // The default sandbox is made, and says it has no network of its own.
        let info = create(&p, 60).await;
        assert_eq!(info.network, None, "{info:?}");
        assert!(info.allow_hosts.is_empty());
        let (_, out, err) = bash(&p, &info.sandbox_id, "echo works").await;
        assert_eq!(out, "works\n", "{err}");
        assert!(p.kill(&info.sandbox_id).await.unwrap());
        // A request naming the network is refused as unsupported, naming
        // the parameter and why; nothing is made.
        for (network, hosts, named) in [
            (Some(Network::None), vec![], "`network`"),
            (Some(Network::Internet), vec![], "`network`"),
            (None, vec!["pypi.org".to_owned()], "`allow_hosts`"),
        ] {
            let err = p
                .create(CreateSpec {
                    network,
                    allow_hosts: hosts,
                    ..spec(60)
                })
                .await
                .expect_err("no network namespace: the request cannot be enforced");
            assert!(
                matches!(err, sandkeep::provider::ProviderError::Unsupported(_)),
                "{err:?}"
            );
            let message = err.to_string();
            assert!(
                message.contains(named) && message.contains("network namespaces"),
                "{message}"
            );
        }
        assert!(
            p.list().await.unwrap().is_empty(),
            "a refused create left a sandbox"
        );
        println!("NO-NETNS CHECKED");
    });
}

#[test]
fn without_network_namespaces_network_is_refused_and_the_default_says_so() {
    let stdout = support::run_ignored_test("net::no_network_namespaces_inner", "SK_NO_NETNS");
    assert!(stdout.contains("NO-NETNS CHECKED"), "{stdout}");
}

/// Test builds' proxies answer the names of this file of the state
/// directory as public hosts (the `test-hooks` feature of sandkeep-local):
/// how a listener of this test on loopback stands in for a host of the
/// Internet.
const TEST_HOSTS: &str = "test-hosts";

/// The sandbox's egress proxy, on the host: the process of the sandbox
/// named `sandkeep-proxy`.
fn proxy_of(id: &SandboxId) -> i32 {
    let id = id.clone();
    support::poll(
        Duration::from_secs(10),
        "the sandbox's egress proxy",
        || {
            let pids = host_pids_where(|cmd| cmd.contains(id.as_str()));
            pids.into_iter().find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sandkeep-proxy")
            })
        },
    )
}

/// A field of `/proc/PID/status`, like `Threads` or `Uid`.
fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_refuses_every_ipv6_form_that_carries_a_refused_ipv4_address() {
    let host_lo = TcpListener::bind("127.0.0.1:0").unwrap();
    host_lo.set_nonblocking(true).unwrap();
    let port = host_lo.local_addr().unwrap().port();
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    for (target, carried) in [
        // IPv4-translated (RFC 2765): the form that slipped through.
        ("[::ffff:0:7f00:1]", "127.0.0.1"),
        // IPv4-compatible, NAT64, 6to4, Teredo (server, then the inverted
        // client), ISATAP.
        ("[::7f00:1]", "127.0.0.1"),
        ("[64:ff9b::a9fe:a9fe]", "169.254.169.254"),
        ("[2002:a00:1::1]", "10.0.0.1"),
        ("[2001:0:7f00:1::]", "127.0.0.1"),
        ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "127.0.0.1"),
        ("[2606:4700:1:2:0:5efe:7f00:1]", "127.0.0.1"),
    ] {
        let request = format!("CONNECT {target}:{port} HTTP/1.1\\r\\n\\r\\n");
        let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
        assert!(
            out.starts_with("HTTP/1.1 403 Forbidden\r\n")
                && out.contains(&format!("carries the IPv4 address {carried}, which is")),
            "CONNECT {target}:{port} was not refused for {carried}: {out:?} {err}"
        );
    }
    // Plain http:// and SOCKS5 (an IPv6 address of type 4) alike.
    let (_, out, err) = bash(
        &p,
        id,
        &format!("curl --noproxy '' -sS -w ' %{{http_code}}' 'http://[::ffff:0:7f00:1]:{port}/'"),
    )
    .await;
    assert!(
        out.ends_with(" 403") && out.contains("carries the IPv4 address 127.0.0.1"),
        "{out:?} {err}"
    );
    let (code, _, err) = bash(
        &p,
        id,
        &format!(
            "curl --noproxy '' -sS --socks5 127.0.0.1:${{HTTPS_PROXY##*:}} 'http://[::ffff:0:7f00:1]:{port}/'"
        ),
    )
    .await;
    assert_eq!(code, Some(97), "SOCKS5 to the translated loopback: {err}");
    assert!(err.contains("(2)"), "not refused by the ruleset: {err}");
    assert!(
        host_lo.accept().is_err(),
        "the host's loopback listener was reached"
    );
    assert!(p.kill(id).await.unwrap());
}

/// The gateways of this host's routing tables (as `ip route` shows them).
fn host_gateways() -> Vec<IpAddr> {
    let out = std::process::Command::new("ip")
        .args(["-j", "route", "show", "table", "all"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut found: Vec<IpAddr> = out
        .split("\"gateway\":\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect();
    let out = std::process::Command::new("ip")
        .args(["-j", "-6", "route", "show", "table", "all"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    found.extend(
        out.split("\"gateway\":\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next()?.parse::<IpAddr>().ok()),
    );
    found
}

fn connect_line(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_refuses_special_purpose_ranges_and_the_hosts_gateways() {
    let (_home, p, info) = fresh_sandbox(120).await;
    let id = &info.sandbox_id;
    let mut cases: Vec<(String, String)> = [
        (
            "192.0.2.77:80",
            "192.0.2.77 is a documentation (192.0.2.0/24) address",
        ),
        (
            "198.18.0.1:80",
            "198.18.0.1 is a benchmarking (198.18.0.0/15) address",
        ),
        ("198.51.100.1:443", "is a documentation (198.51.100.0/24)"),
        ("203.0.113.1:443", "is a documentation (203.0.113.0/24)"),
        ("192.88.99.1:80", "6to4 relay anycast"),
        (
            "[2001:db8::1]:80",
            "2001:db8::1 is a documentation (2001:db8::/32)",
        ),
        ("[64:ff9b:1::a00:1]:80", "local-use NAT64 (64:ff9b:1::/48)"),
        ("[3fff::1]:80", "documentation (3fff::/20)"),
        ("[100::1]:80", "discard-only (100::/64)"),
        ("[5f00::1]:80", "SRv6"),
    ]
    .iter()
    .map(|(t, r)| (t.to_string(), r.to_string()))
    .collect();
    // Whatever range they are in (here the VM's documentation subnet),
    // the host's routers are refused.
    let gateways = host_gateways();
    if gateways.is_empty() {
        eprintln!("NOTE: this host has no gateway; only the ranges were tried");
    }
    for gw in gateways {
        cases.push((connect_line(gw, 80), format!("{gw} is ")));
    }
    for (target, rule) in &cases {
        let request = format!("CONNECT {target} HTTP/1.1\\r\\n\\r\\n");
        let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
        assert!(
            out.starts_with("HTTP/1.1 403 Forbidden\r\n")
                && out.contains(rule.as_str())
                && out.contains("sandboxes reach public addresses only"),
            "CONNECT {target}: not refused naming {rule:?}: {out:?} {err}"
        );
    }
    assert!(p.kill(id).await.unwrap());
}

/// A host whose own network is in ranges the registries call public (a
/// VM on its provider's subnet): in a network namespace of this test's
/// own, the host gets such addresses and a gateway, and a sandbox's proxy
/// refuses each, naming why.
#[test]
fn the_hosts_subnets_and_gateways_are_refused_whatever_their_range() {
    if !support::require(
        rustix::process::geteuid().is_root(),
        "a network namespace of the test's own needs root",
    ) {
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["--net", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(support::ignored_test_args("net::host_network_inner"))
        .env("SK_HOST_NETWORK_INNER", "1")
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the run in a network namespace of its own failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
#[ignore = "run by the_hosts_subnets_and_gateways_are_refused_whatever_their_range in a network namespace"]
fn host_network_inner() {
    if std::env::var_os("SK_HOST_NETWORK_INNER").is_none() {
        return;
    }
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .expect("run ip");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // This namespace is the host now: it has a "public" subnet and a
    // gateway (on lo, which every kernel has).
    for args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", "93.184.1.7/24", "dev", "lo"],
        &[
            "route", "add", "default", "via", "81.2.3.4", "dev", "lo", "onlink",
        ],
    ] {
        let (ok, err) = ip(args);
        assert!(ok, "ip {args:?}: {err}");
    }
    let (v6, why) = ip(&["-6", "addr", "add", "2a00:1450:4001:7::2/64", "dev", "lo"]);
    if !v6 {
        eprintln!("NOTE: no IPv6 here ({why}); only the IPv4 network was tried");
    }
    support::fake_kernel::block_on(async {
        let (_home, p, info) = fresh_sandbox(120).await;
        let id = &info.sandbox_id;
        let mut cases = vec![
            (
                "93.184.1.200:80",
                "93.184.1.200 is on the host's network 93.184.1.0/24",
            ),
            ("93.184.1.7:443", "93.184.1.7 is an address of the host"),
            ("81.2.3.4:80", "81.2.3.4 is a gateway of the host"),
            (
                "[64:ff9b::5102:304]:80",
                "81.2.3.4 is a gateway of the host",
            ),
        ];
        if v6 {
            cases.push((
                "[2a00:1450:4001:7::99]:80",
                "2a00:1450:4001:7::99 is on the host's network 2a00:1450:4001:7::/64",
            ));
        }
        for (target, rule) in cases {
            let request = format!("CONNECT {target} HTTP/1.1\\r\\n\\r\\n");
            let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
            assert!(
                out.starts_with("HTTP/1.1 403 Forbidden\r\n") && out.contains(rule),
                "CONNECT {target}: not refused naming {rule:?}: {out:?} {err}"
            );
        }
        assert!(p.kill(id).await.unwrap());
    });
}

/// `sandkeep ARGS` with this state directory and `SANDKEEP_EGRESS_TRUST`
/// (unset for `None`), bounded.
fn sandkeep_with_trust(
    home: &std::path::Path,
    trust: Option<&str>,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = assert_cmd::Command::new(EXE);
    cmd.env("SANDKEEP_HOME", home)
        .env_remove(EGRESS_TRUST_VAR)
        .args(args)
        .timeout(Duration::from_secs(60));
    if let Some(trust) = trust {
        cmd.env(EGRESS_TRUST_VAR, trust);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("sandkeep {args:?}: {e}"))
}

/// A trust setting that is malformed, or names what no sandbox may reach
/// (SPEC.md §10), stops every entry point before anything is made, and
/// the error names the variable, the entry and what to write.
#[test]
fn a_bad_egress_trust_is_refused_at_start_naming_it() {
    let home = state_dir();
    for (value, says) in [
        (
            "203.0.113.0/33",
            "\"203.0.113.0/33\" is not an address range",
        ),
        (
            "198.18.0.0/15,pypi.org",
            "\"pypi.org\" is not an address range",
        ),
        ("203.0.113.80/24", "write 203.0.113.0/24"),
        ("127.0.0.0/8", "127.0.0.0/8 (loopback)"),
        ("203.0.113.0/24,::1", "::1/128 (loopback)"),
        (
            "169.254.169.254",
            "link-local (with the cloud metadata address)",
        ),
        ("fe80::/10", "fe80::/10 (link-local)"),
        ("10.0.0.0/8", "a private range"),
        ("0.0.0.0/0", "0.0.0.0/8 (the unspecified range"),
    ] {
        for args in [
            &["exec", "--", "true"][..],
            &["sandbox", "create"],
            &["doctor"],
            &["serve"],
            &["serve", "--http", "127.0.0.1:0"],
            &["serve", "--e2b", "127.0.0.1:0"],
            &["mcp-config", "json"],
        ] {
            let out = sandkeep_with_trust(home.path(), Some(value), args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success()
                    && err.contains(&format!("{EGRESS_TRUST_VAR}={value:?}: "))
                    && err.contains(says)
                    && err.contains(&format!("fix or unset {EGRESS_TRUST_VAR}")),
                "sandkeep {args:?} with {EGRESS_TRUST_VAR}={value}: {}",
                support::cli::describe(&out)
            );
            assert!(
                !err.contains("SANDKEEP_HOME to a directory"),
                "a hint about the state directory misleads: {err}"
            );
        }
    }
    let made: Vec<_> = std::fs::read_dir(home.path().join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(made.is_empty(), "refused at start, yet made {made:?}");
}

/// A host behind a fake-IP egress, as Clash and its kind set one up: in a
/// network and mount namespace of this test's own, the host's only link
/// (and default route) is a TUN-like interface 198.18.0.1/15 whose far
/// end answers every address it is asked for, and the names resolve to
/// addresses of 198.18.0.0/15. The operator trusts half of the block: that
/// half is reached by name and by address, through every proxy protocol,
/// while the other half, the host's own address and its gateway there
/// stay refused; without the setting everything is refused, naming it;
/// and `sandkeep doctor` tells the operator the value that helps.
#[test]
fn a_trusted_range_is_reached_and_the_rest_of_its_block_is_not() {
    if !support::require(
        rustix::process::geteuid().is_root(),
        "network and mount namespaces of the test's own need root",
    ) {
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["--net", "--mount", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(support::ignored_test_args("net::egress_trust_inner"))
        .env("SK_EGRESS_TRUST_INNER", "1")
        .env_remove(EGRESS_TRUST_VAR)
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the run in namespaces of its own failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// Runs `program ARGS`, which must succeed.
fn run_ok(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A listener in the network namespace at `ns` on every address there:
/// answers each request `200` with the address it was reached at, and
/// records that address. A thread of this process enters the namespace
/// to make the socket, which stays there.
fn far_listener(ns: &str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<IpAddr>>>) {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let ns = std::fs::File::open(ns).unwrap();
    let reached = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let record = reached.clone();
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("enter the far namespace");
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        port_tx.send(listener.local_addr().unwrap().port()).unwrap();
        for mut conn in listener.incoming().flatten() {
            let at = conn.local_addr().unwrap().ip();
            record.lock().unwrap().push(at);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let body = format!("far:{at}");
            let _ = conn.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the far listener's port");
    (port, reached)
}

#[test]
#[ignore = "run by a_trusted_range_is_reached_and_the_rest_of_its_block_is_not in namespaces of its own"]
fn egress_trust_inner() {
    if std::env::var_os("SK_EGRESS_TRUST_INNER").is_none() {
        return;
    }
    // Named network namespaces and the hosts file live in this mount
    // namespace only: nothing is left on the host.
    run_ok("mkdir", &["-p", "/run/netns"]);
    run_ok("mount", &["-t", "tmpfs", "tmpfs", "/run/netns"]);
    run_ok("ip", &["link", "set", "lo", "up"]);
    run_ok("ip", &["netns", "add", "skfar"]);
    run_ok(
        "ip",
        &[
            "link", "add", "sk-tun", "type", "veth", "peer", "name", "sk-far", "netns", "skfar",
        ],
    );
    run_ok("ip", &["addr", "add", "198.18.0.1/15", "dev", "sk-tun"]);
    run_ok("ip", &["link", "set", "sk-tun", "up"]);
    for addr in ["198.18.0.2/15", "198.18.7.7/15", "198.19.7.7/15"] {
        run_ok("ip", &["-n", "skfar", "addr", "add", addr, "dev", "sk-far"]);
    }
    run_ok("ip", &["-n", "skfar", "link", "set", "sk-far", "up"]);
    run_ok(
        "ip",
        &[
            "route",
            "add",
            "default",
            "via",
            "198.18.0.2",
            "dev",
            "sk-tun",
        ],
    );
    // The fake-IP DNS: each name an address of its own in the block.
    let hosts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        hosts.path(),
        "127.0.0.1 localhost\n198.18.7.7 pypi.org files.pythonhosted.org\n198.19.7.7 other.example\n",
    )
    .unwrap();
    std::fs::set_permissions(
        hosts.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    run_ok(
        "mount",
        &["--bind", &hosts.path().to_string_lossy(), "/etc/hosts"],
    );
    let (port, reached) = far_listener("/run/netns/skfar");

    let home = state_dir();
    // Doctor sees the host's answers refused and names the value.
    let doctor = |trust: Option<&str>| {
        let out = sandkeep_with_trust(home.path(), trust, &["doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", support::cli::describe(&out)));
        let egress = report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "egress"))
            .cloned()
            .unwrap_or_else(|| panic!("no egress check: {report}"));
        (report, egress)
    };
    let (report, egress) = doctor(None);
    let detail = egress["detail"].as_str().unwrap();
    assert_eq!(egress["ok"], false, "{egress}");
    assert!(
        detail.contains("pypi.org, files.pythonhosted.org: 198.18.7.7 only, which the egress proxy refuses (198.18.7.7 is a benchmarking (198.18.0.0/15) address)"),
        "{detail}"
    );
    assert_eq!(
        report["suggested_egress_trust"], "198.18.0.0/15",
        "{report}"
    );
    let advice = report["remediation"].to_string();
    for part in [
        "set SANDKEEP_EGRESS_TRUST=198.18.0.0/15",
        "This weakens nothing else",
        "the host's network 198.18.0.0/15",
    ] {
        assert!(
            advice.contains(part),
            "doctor's advice lacks {part:?}: {advice}"
        );
    }
    let (report, egress) = doctor(Some("198.18.0.0/16"));
    assert_eq!(egress["ok"], true, "{egress}");
    assert!(report["suggested_egress_trust"].is_null(), "{report}");

    let fetch = |sandbox: &str, how: &str, target: &str| -> (String, String) {
        let script = format!(
            "curl --noproxy '' {how} -sS --max-time 20 -w '\n%{{http_code}}' http://{target}:{port}/"
        );
        let out = sandkeep_with_trust(
            home.path(),
            None,
            &["exec", "--sandbox", sandbox, "--", &script],
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        (
            code.to_owned(),
            format!("{body} {}", String::from_utf8_lossy(&out.stderr)),
        )
    };
    let create = |trust: Option<&str>| -> String {
        let out = sandkeep_with_trust(home.path(), trust, &["sandbox", "create", "--json"]);
        let created: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("sandbox create: {e}: {}", support::cli::describe(&out)));
        created["sandbox_id"].as_str().unwrap().to_owned()
    };

    // The trust is the sandbox's from its creation.
    let trusted = create(Some("198.18.0.0/16"));
    for how in [
        "",
        "--proxytunnel",
        "--socks5-hostname 127.0.0.1:${HTTPS_PROXY##*:}",
    ] {
        for target in ["pypi.org", "198.18.7.7"] {
            let (code, said) = fetch(&trusted, how, target);
            assert_eq!(code, "200", "{target} {how:?} is trusted: {said}");
            assert!(
                said.starts_with("far:198.18.7.7"),
                "{target} {how:?}: {said}"
            );
        }
    }
    for (target, rule) in [
        (
            "198.19.7.7",
            "198.19.7.7 is a benchmarking (198.18.0.0/15) address",
        ),
        (
            "other.example",
            "198.19.7.7 is a benchmarking (198.18.0.0/15) address",
        ),
        ("198.18.0.1", "198.18.0.1 is an address of the host"),
        ("198.18.0.2", "198.18.0.2 is a gateway of the host"),
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
    ] {
        let (code, said) = fetch(&trusted, "", target);
        assert!(
            code == "403"
                && said.contains(rule)
                && said.contains("sandboxes reach public addresses only"),
            "{target}: {code} {said}"
        );
        assert_eq!(
            said.contains(EGRESS_TRUST_VAR),
            rule.contains("benchmarking"),
            "{target}: the setting is named where it can help only: {said}"
        );
    }
    // Made without the setting, a sandbox reaches none of it.
    let untrusted = create(None);
    for target in ["pypi.org", "198.18.7.7"] {
        let (code, said) = fetch(&untrusted, "", target);
        assert!(
            code == "403"
                && said.contains("is a benchmarking (198.18.0.0/15) address")
                && said.contains(EGRESS_TRUST_VAR),
            "{target} without the setting: {code} {said}"
        );
    }
    let reached = reached.lock().unwrap().clone();
    assert!(
        !reached.is_empty()
            && reached
                .iter()
                .all(|ip| *ip == "198.18.7.7".parse::<IpAddr>().unwrap()),
        "the far side was reached at {reached:?}"
    );
    for id in [&trusted, &untrusted] {
        let out = sandkeep_with_trust(home.path(), None, &["sandbox", "kill", id]);
        assert!(out.status.success(), "{}", support::cli::describe(&out));
    }
}

/// An HTTP/1 listener of this test: answers each request `200 ok` and
/// sends the heads it heard, in order.
async fn origin() -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (heard, heads) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let heard = heard.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = heard.send(String::from_utf8_lossy(&head).into_owned());
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_reaches_the_origin_with_the_request_uris_host() {
    let (port, mut heads) = origin().await;
    let home = state_dir();
    std::fs::write(home.path().join(TEST_HOSTS), "upstream.test 127.0.0.1\n").unwrap();
    let p = provider(home.path());
    let info = create_with(&p, None, &["upstream.test"]).await;
    let id = &info.sandbox_id;
    // An allowed name, and the Host of a name allow_hosts does not list
    // (the domain front), from curl and from a raw request with two.
    let (_, out, err) = bash(
        &p,
        id,
        &format!(
            "curl -sS -w ' %{{http_code}}' -H 'Host: files.pythonhosted.org' http://upstream.test:{port}/simple/"
        ),
    )
    .await;
    assert_eq!(out, "ok 200", "{err}");
    let request = format!(
        "GET http://upstream.test:{port}/x HTTP/1.1\\r\\nHost: other.test\\r\\nhost: evil.test\\r\\n\\r\\n"
    );
    let (_, out, err) = bash(&p, id, &via_proxy(&request)).await;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out:?} {err}");
    for path in ["/simple/", "/x"] {
        let head = tokio::time::timeout(Duration::from_secs(10), heads.recv())
            .await
            .expect("the origin heard a request")
            .expect("the origin is listening");
        let hosts: Vec<&str> = head
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
            .collect();
        assert!(
            head.starts_with(&format!("GET {path} HTTP/1.1\r\n")),
            "{head:?}"
        );
        assert_eq!(
            hosts,
            [format!("Host: upstream.test:{port}")],
            "the origin heard another host than the request-URI's: {head:?}"
        );
    }
    // The test name is a name, not a door: its address by number is the
    // host's loopback, refused.
    let (_, out, err) = bash(
        &p,
        id,
        &via_proxy(&format!("CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n")),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{out:?} {err}"
    );
    assert!(p.kill(id).await.unwrap());
}

/// Each way through the proxy (an HTTP CONNECT tunnel, SOCKS5, plain
/// `http://`) carries a request to an origin and its answer back, also a
/// body larger than any buffer of the relay, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_through_the_proxy_relays_both_directions() {
    let (port, mut heads) = origin().await;
    let home = state_dir();
    std::fs::write(home.path().join(TEST_HOSTS), "upstream.test 127.0.0.1\n").unwrap();
    let p = provider(home.path());
    let info = create(&p, 120).await;
    let id = &info.sandbox_id;
    let url = format!("http://upstream.test:{port}/");
    for (way, curl) in [
        ("CONNECT", format!("curl -sS -p -w ' %{{http_code}}' {url}")),
        (
            "SOCKS5",
            format!(
                "curl --noproxy '' -sS --socks5-hostname 127.0.0.1:${{HTTPS_PROXY##*:}} -w ' %{{http_code}}' {url}"
            ),
        ),
        (
            "plain http://",
            format!("curl -sS -w ' %{{http_code}}' {url}"),
        ),
    ] {
        let (_, out, err) = bash(&p, id, &curl).await;
        assert_eq!(out, "ok 200", "{way}: {err}");
        let head = tokio::time::timeout(Duration::from_secs(10), heads.recv())
            .await
            .expect("the origin heard the request")
            .expect("the origin is listening");
        assert!(
            head.starts_with("GET / HTTP/1.1\r\n")
                && head.contains(&format!("Host: upstream.test:{port}\r\n")),
            "{way}: {head:?}"
        );
    }
    // A megabyte up and back through a tunnel to an echo of this test.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        if let Ok((s, _)) = echo.accept().await {
            let (mut r, mut w) = s.into_split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    });
    let (_, out, err) = bash(
        &p,
        id,
        &format!(
            "python3 -c '
import os, socket
port = int(os.environ[\"HTTPS_PROXY\"].rsplit(\":\", 1)[1])
s = socket.create_connection((\"127.0.0.1\", port))
s.sendall(b\"CONNECT upstream.test:{echo_port} HTTP/1.1\\r\\n\\r\\n\")
answer = b\"\"
while not answer.endswith(b\"\\r\\n\\r\\n\"):
    answer += s.recv(1)
data = os.urandom(1 << 20)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
back = b\"\"
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    back += chunk
print(answer.split(b\"\\r\\n\")[0].decode(), back == data)
'"
        ),
    )
    .await;
    assert_eq!(out, "HTTP/1.1 200 Connection established True\n", "{err}");
    assert!(p.kill(id).await.unwrap());
}

/// Tunnels to a listener of this test that stay open: how many it
/// accepted, shared.
async fn tunnel_sink() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    (port, accepted)
}

/// A sandbox of `pids: 64` holds 250 connections to its proxy at once:
/// 100 tunnels, 100 requests it never finishes and 50 names to resolve
/// (refused, as loopback). The proxy
/// keeps to a constant three threads, all in the sandbox's own cgroups
/// (memory, pids, cpu), so its work is the sandbox's and cannot exceed
/// the sandbox's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_cannot_make_its_proxy_outgrow_its_own_limits() {
    let (port, accepted) = tunnel_sink().await;
    let home = state_dir();
    std::fs::write(home.path().join(TEST_HOSTS), "upstream.test 127.0.0.1\n").unwrap();
    let p = provider(home.path());
    let info = p
        .create(CreateSpec {
            limits: sandkeep::provider::Limits {
                pids: Some(64),
                milli_cpus: Some(500),
                ..Default::default()
            },
            ..spec(120)
        })
        .await
        .expect("create with pids 64");
    let id = &info.sandbox_id;
    assert_eq!(info.limits.pids, Some(64));
    let open = format!(
        "setsid python3 -c '
import os, socket, time
port = int(os.environ[\"HTTPS_PROXY\"].rsplit(\":\", 1)[1])
def connect(request):
    s = socket.create_connection((\"127.0.0.1\", port))
    s.sendall(request)
    return s
unfinished = [connect(b\"CONNECT upstream.test:{port} HTTP/1.1\\r\\n\") for i in range(100)]
tunnels = [connect(b\"CONNECT upstream.test:{port} HTTP/1.1\\r\\n\\r\\n\") for i in range(100)]
lookups = [connect(b\"CONNECT localhost:1 HTTP/1.1\\r\\n\\r\\n\") for i in range(50)]
answers = [s.recv(100) for s in tunnels]
refused = [s.recv(100) for s in lookups]
ok = sum(a.startswith(b\"HTTP/1.1 200\") for a in answers)
no = sum(a.startswith(b\"HTTP/1.1 403\") for a in refused)
open(\"/tmp/answers\", \"w\").write(f\"{{ok}} {{no}}\")
time.sleep(1000)
' </dev/null >/tmp/open.log 2>&1 &
         for i in $(seq 300); do [ -e /tmp/answers ] && break; timeout 0.1 tail -f /dev/null; done; cat /tmp/answers /tmp/open.log"
    );
    let mut r = request(&open);
    r.timeout = Duration::from_secs(60);
    let out = p.exec(id, r).await.expect("exec");
    let proxy = proxy_of(id);
    let threads: usize = status_field(proxy, "Threads").parse().unwrap();
    assert!(
        threads <= 3,
        "the proxy runs {threads} threads for 250 connections of a sandbox of pids 64"
    );
    // In the sandbox's cgroups, every hierarchy: the init's.
    assert_proxy_in_the_sandboxs_cgroups(home.path(), id);
    assert_eq!(
        text(&out.stdout),
        "100 50",
        "100 tunnels and 50 refused lookups through the proxy: {}",
        text(&out.stderr)
    );
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 100);
    // The sandbox still has its own processes to spend.
    let (_, out, err) = bash(
        &p,
        id,
        "for i in $(seq 20); do sleep 0 & done; wait; echo forked",
    )
    .await;
    assert_eq!(out, "forked\n", "{err}");
    assert!(p.kill(id).await.unwrap());
}

/// The proxy's cgroups are the init's: `cgroup` lines of each.
fn assert_proxy_in_the_sandboxs_cgroups(home: &std::path::Path, id: &SandboxId) {
    let proxy = proxy_of(id);
    let init = support::local::recorded_pid(home, id, "init");
    let cgroups = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        cgroups(init).contains(&format!("/sandkeep/{id}")),
        "the init is not in the sandbox's cgroups: {}",
        cgroups(init)
    );
    assert_eq!(
        cgroups(proxy),
        cgroups(init),
        "the proxy is outside the sandbox's cgroups"
    );
}

/// Run by `without_clone3_the_proxy_still_enters_the_sandboxs_cgroups`
/// in a child process.
#[test]
#[ignore = "helper process of without_clone3_the_proxy_still_enters_the_sandboxs_cgroups"]
fn no_clone3_inner() {
    if std::env::var_os("SK_NO_CLONE3").is_none() {
        return;
    }
    // clone3 refused (ENOSYS): a v2 host cannot fork the proxy into the
    // sandbox's cgroup, and it moves itself in.
    support::fake_kernel::refuse(&[], 0);
    support::fake_kernel::block_on(async {
        let home = state_dir();
        let p = provider(home.path());
        let info = create(&p, 60).await;
        assert_proxy_in_the_sandboxs_cgroups(home.path(), &info.sandbox_id);
        assert!(p.kill(&info.sandbox_id).await.unwrap());
    });
    println!("NO-CLONE3 CHECKED");
}

#[test]
fn without_clone3_the_proxy_still_enters_the_sandboxs_cgroups() {
    if !support::require(
        rustix::process::geteuid().is_root(),
        "cgroup limits are set up as root",
    ) {
        return;
    }
    let stdout = support::run_ignored_test("net::no_clone3_inner", "SK_NO_CLONE3");
    assert!(stdout.contains("NO-CLONE3 CHECKED"), "{stdout}");
}

/// Root's proxies run each as a uid of their own that no sandbox maps:
/// a host process running as `nobody` (or any other account) cannot
/// signal one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_host_account_can_signal_a_proxy() {
    if !support::require(
        rustix::process::geteuid().is_root(),
        "root's proxies have identities of their own; an ordinary user's run as that user",
    ) {
        return;
    }
    let home = state_dir();
    let p = provider(home.path());
    let a = create(&p, 120).await;
    let b = create(&p, 120).await;
    let mut uids = Vec::new();
    for info in [&a, &b] {
        let proxy = proxy_of(&info.sandbox_id);
        let probe = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                "sh",
                "-c",
            ])
            .arg(format!(
                "kill -0 {proxy} 2>/dev/null; echo proxy=$?; kill -0 $$; echo self=$?"
            ))
            .output()
            .expect("run setpriv");
        assert_eq!(
            String::from_utf8_lossy(&probe.stdout),
            "proxy=1\nself=0\n",
            "nobody signalled the proxy {proxy}: {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        let ids: Vec<u32> = status_field(proxy, "Uid")
            .split_whitespace()
            .map(|u| u.parse().unwrap())
            .collect();
        let uid = ids[0];
        assert!(
            ids.iter().all(|&u| u == uid),
            "real, effective, saved, fs: {ids:?}"
        );
        assert!(uid != 0 && uid != 65534, "the proxy runs as {uid}");
        // Outside the ids the sandbox maps.
        let init = support::local::recorded_pid(home.path(), &info.sandbox_id, "init");
        let map = std::fs::read_to_string(format!("/proc/{init}/uid_map")).unwrap();
        for line in map.lines() {
            let f: Vec<u64> = line
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(
                !(f[1]..f[1] + f[2]).contains(&u64::from(uid)),
                "the proxy's uid {uid} is mapped into the sandbox: {map}"
            );
        }
        uids.push(uid);
    }
    assert_ne!(uids[0], uids[1], "two sandboxes' proxies share a uid");
    assert!(p.kill(&a.sandbox_id).await.unwrap());
    assert!(p.kill(&b.sandbox_id).await.unwrap());
}
