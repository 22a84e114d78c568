//! `sandkeep doctor`: which provider this configuration uses; for the
//! local one, what isolation this host gives, where state lives, which
//! helper runs in sandboxes; for the e2b one, whether the credentials and
//! the API work; and what to do about what is missing. The probing is the
//! providers'; this module only prints their reports.

use clap::Args;

use crate::provider::e2b::{E2bProvider, HelperOrigin};
use crate::provider::local::{DoctorReport, LocalProvider};
use crate::provider::{self, Kind};

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
    let kind = Kind::from_env().map_err(|e| CliError::new(e.to_string()))?;
    match kind {
        Kind::Local => local(args).await,
        Kind::E2b => e2b(args).await,
    }
}

/// The e2b provider: its configuration (never the key), one call to the
/// API with these credentials, and the task helper it would upload.
async fn e2b(args: DoctorArgs) -> Outcome {
    let provider = E2bProvider::from_env().map_err(|e| {
        CliError::new(format!("cannot open the e2b provider: {e}"))
            .hint("set E2B_API_KEY (and E2B_DOMAIN or E2B_API_URL for a self-hosted E2B)")
    })?;
    let config = provider.config();
    let check = provider.check().await;
    let api = match &check {
        Ok(()) => "ok: the API answered with these credentials".to_owned(),
        Err(e) => format!("FAILED: {e}"),
    };
    let sandbox_url = config
        .sandbox_url
        .clone()
        .unwrap_or_else(|| config.envd_url("<id>", None));
    let helper = provider.helper_choice().await;
    let helper_line = match &helper {
        Ok(chosen) if matches!(chosen.origin, HelperOrigin::Fallback(_)) => {
            format!("WARNING: {chosen}")
        }
        Ok(chosen) => chosen.to_string(),
        Err(e) => format!("FAILED: {e}"),
    };
    if args.output.json {
        let (path, bytes, origin) = match &helper {
            Ok(c) => (
                Some(c.path.display().to_string()),
                Some(c.size),
                Some(match c.origin {
                    HelperOrigin::Configured => "configured",
                    HelperOrigin::Beside => "beside",
                    HelperOrigin::Fallback(_) => "fallback",
                }),
            ),
            Err(_) => (None, None, None),
        };
        output::print_json(&serde_json::json!({
            "provider": provider::e2b::KIND,
            "api_url": config.api_url,
            "domain": config.domain,
            "sandbox_url": sandbox_url,
            "api_ok": check.is_ok(),
            "api": api,
            "helper": path,
            "helper_bytes": bytes,
            "helper_origin": origin,
            "helper_detail": helper_line,
        }));
    } else {
        output::print_fields(&[
            ("provider", "e2b (SANDKEEP_PROVIDER)".to_owned()),
            ("api url", config.api_url.clone()),
            ("domain", config.domain.clone()),
            ("envd url", sandbox_url),
            ("api key", "set (E2B_API_KEY)".to_owned()),
            ("api", api),
            ("task helper", helper_line),
        ]);
    }
    Ok(if check.is_ok() && helper.is_ok() {
        exit::OK
    } else {
        exit::OWN_FAILURE
    })
}

async fn local(args: DoctorArgs) -> Outcome {
    let provider = LocalProvider::from_env().map_err(|e| {
        let error = CliError::new(format!("cannot open the local provider: {e}"));
        if provider::is_bad_setting(&e) {
            return error;
        }
        error.hint("set SANDKEEP_HOME to a directory this user can create and write")
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
            map.insert("provider".into(), "local".into());
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
        ("provider", "local (SANDKEEP_PROVIDER)".to_owned()),
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
