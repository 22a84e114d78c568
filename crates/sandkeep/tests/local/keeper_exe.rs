//! The small `sandkeep-keeper` executable, built beside `sandkeep`, keeps
//! the sandboxes of a provider running this build of `sandkeep`.

use std::path::Path;

use crate::support::local::*;
use sandkeep::provider::Provider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_runs_from_its_own_executable_when_it_is_of_this_build() {
    let small = Path::new(EXE).with_file_name("sandkeep-keeper");
    assert!(
        small.is_file(),
        "cargo builds {} beside sandkeep",
        small.display()
    );
    let (home, p, info) = fresh_sandbox(60).await;
    let keeper = recorded_pid(home.path(), &info.sandbox_id, "keeper");
    assert_eq!(exe_of(keeper), small);
    let report = p.doctor().await.unwrap();
    let line = report.checks.iter().find(|c| c.name == "keeper executable");
    assert!(
        line.is_some_and(|c| c.ok && c.detail == small.display().to_string()),
        "{line:?}"
    );
    assert!(p.kill(&info.sandbox_id).await.unwrap());
}
