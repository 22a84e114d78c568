//! `sandkeep doctor`: what isolation this host gives, where state lives,
//! which helper runs in sandboxes, and what to do about what is missing.
//! The probing is the local provider's; this module only prints its report.

use clap::Args;

use crate::provider::local::{DoctorReport, LocalProvider};

use super::Outcome;
use super::context::CliError;
use super::exit;
use super::output::outln;
use super::output::{self, OutputArgs};

/// Isolation level the local provider reports when sandboxes cannot be
/// created at all.
const UNAVAILABLE: &str = "unavailable";

/// Show what isolation this host gives and what to do about what is missing.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what isolation this host gives sandboxes (user, mount and pid \
        namespaces, overlay filesystems, cgroups), the state directory, the task helper \
        binary, and what to do when something is missing.\n\n\
        It only probes (in throwaway child processes); the one thing it may leave behind is \
        the state directory, created if missing. Exit code 0 when sandboxes can be created \
        here, 1 when they cannot."
)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: DoctorArgs) -> Outcome {
    let provider = LocalProvider::from_env().map_err(|e| {
        CliError::new(format!("cannot open the local provider: {e}"))
            .hint("set SANDKEEP_HOME to a directory this user can create and write")
    })?;
    let report = provider.doctor().await.map_err(|e| {
        CliError::new(format!("the isolation probe failed: {e}"))
            .hint("run it again; if it keeps failing, report the message above")
    })?;
    let helper = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("cannot be located ({e})"));
    if args.output.json {
        let mut value = serde_json::to_value(&report).map_err(|e| CliError::new(e.to_string()))?;
        if let Some(map) = value.as_object_mut() {
            map.insert("helper".into(), helper.into());
        }
        output::print_json(&value);
    } else {
        print_human(&report, &helper);
    }
    Ok(if report.isolation == UNAVAILABLE {
        exit::OWN_FAILURE
    } else {
        exit::OK
    })
}

fn print_human(report: &DoctorReport, helper: &str) {
    output::print_fields(&[
        ("isolation", report.isolation.clone()),
        ("why", report.reason.clone()),
        (
            "running as",
            if report.running_as_root {
                "root"
            } else {
                "an ordinary user"
            }
            .to_owned(),
        ),
        ("state dir", report.state_dir.display().to_string()),
        (
            "task helper",
            format!(
                "{helper} (this statically linked binary, placed in every sandbox as sandkeep-task)"
            ),
        ),
    ]);
    outln!();
    let mut table = output::Table::new(&["CHECK", "RESULT", "DETAIL"]);
    for check in &report.checks {
        table.row(vec![
            check.name.clone(),
            if check.ok { "ok" } else { "MISSING" }.to_owned(),
            check.detail.clone(),
        ]);
    }
    table.print();
    if report.remediation.is_empty() {
        outln!("\nnothing to do: sandboxes get full isolation here");
    } else {
        outln!("\nwhat to do:");
        for step in &report.remediation {
            outln!("  - {step}");
        }
    }
}
