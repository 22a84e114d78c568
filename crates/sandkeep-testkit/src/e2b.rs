//! A local E2B-compatible endpoint (`sandkeep serve --e2b`) for the tests
//! and benchmarks of the e2b provider and the endpoint: started on a free
//! loopback port, its address read from its log.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `exe serve --e2b 127.0.0.1:0 --api-key key` on the state directory
/// `home` (its local sandboxes live there), its log in
/// `home/endpoint.log`, its environment adding `vars`. Returns the
/// process and the endpoint's URL once the log names it (bounded: 20 s).
pub fn start_endpoint(
    exe: &Path,
    home: &Path,
    key: &str,
    vars: &[(&str, &str)],
) -> (Child, String) {
    let log = home.join("endpoint.log");
    let child = Command::new(exe)
        .args(["serve", "--e2b", "127.0.0.1:0", "--api-key", key])
        .env("SANDKEEP_HOME", home)
        .env_remove("SANDKEEP_PROVIDER")
        .env("SANDKEEP_LOG", "sandkeep=info")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("endpoint log"))
        .spawn()
        .expect("spawn sandkeep serve --e2b");
    let started = Instant::now();
    let url = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Only whole lines: the address may be read half written.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        if let Some(url) = complete
            .lines()
            .find_map(|l| l.split("E2B-compatible endpoint at ").nth(1))
        {
            break url.trim().to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "sandkeep serve --e2b did not print its address within 20 s; its log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (child, url)
}
