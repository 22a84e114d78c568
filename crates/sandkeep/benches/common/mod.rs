//! Shared setup of the sandkeep benchmarks: a throwaway state directory, a
//! local provider on it, exec requests, and the median arithmetic. It
//! measures nothing by itself.
#![allow(dead_code)] // each bench uses a different subset

use std::path::Path;
use std::time::Duration;

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
