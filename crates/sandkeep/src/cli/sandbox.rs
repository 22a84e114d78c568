//! `sandkeep sandbox create|list|kill|pause|resume|expose`: the
//! create_sandbox, list_sandboxes, kill_sandbox, pause_sandbox,
//! resume_sandbox and expose_port tools from a shell (`snapshot` and
//! `fork` are cli::snapshot's).

use std::collections::BTreeMap;

use clap::{Args, Subcommand};

use crate::service::{
    CreateSandboxArgs, ExposePortArgs, KillSandboxArgs, ListSandboxesArgs, PauseSandboxArgs,
    ResumeSandboxArgs,
};

use super::Outcome;
use super::context::{SessionKind, with_context, with_shares};
use super::exit;
use super::output::outln;
use super::output::{self, OutputArgs, Table};

/// Create, list and kill sandboxes.
#[derive(Debug, Subcommand)]
#[command(long_about = "Create, list and kill sandboxes.\n\n\
        A sandbox is an isolated Linux environment on this host. It lives until its deadline \
        (created + timeout; running commands in it pushes the deadline out again) or until you \
        kill it, whichever comes first, and everything in it goes with it.")]
pub enum SandboxCommand {
    Create(CreateArgs),
    List(ListArgs),
    Kill(KillArgs),
    Pause(PauseArgs),
    Resume(ResumeArgs),
    Snapshot(super::snapshot::TakeArgs),
    Fork(super::snapshot::ForkArgs),
    Changes(super::shares::ChangesArgs),
    Apply(super::shares::ApplyArgs),
    Expose(ExposeArgs),
}

impl SandboxCommand {
    pub fn json(&self) -> bool {
        match self {
            Self::Create(a) => a.output.json,
            Self::List(a) => a.output.json,
            Self::Kill(a) => a.output.json,
            Self::Pause(a) => a.output.json,
            Self::Resume(a) => a.output.json,
            Self::Snapshot(a) => a.output.json,
            Self::Fork(a) => a.output.json,
            Self::Changes(a) => a.output.json,
            Self::Apply(a) => a.output.json,
            Self::Expose(a) => a.output.json,
        }
    }
}

/// Create a sandbox and print its id.
#[derive(Debug, Args)]
#[command(
    long_about = "Create a sandbox and print its id on stdout, so `SB=$(sandkeep sandbox create)` \
        works.\n\n\
        The sandbox outlives this command: it lives until its deadline or `sandkeep sandbox kill`.",
    after_help = "Examples:\n  sandkeep sandbox create\n  \
        sandkeep sandbox create --timeout 3600 --env API_KEY=\"$API_KEY\" --env LANG=C.UTF-8\n  \
        sandkeep sandbox create --share \"$PWD:cow\" --share ~/.cargo:ro"
)]
pub struct CreateArgs {
    /// Template (base image) of the sandbox [default: base].
    #[arg(long, value_name = "T")]
    pub template: Option<String>,
    /// Seconds until the sandbox is destroyed, 1-86400 [default: 300].
    /// `exec` in it pushes the deadline to now + this again; tasks do not.
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Environment variable for every process in the sandbox (repeatable).
    /// Values of variables whose names contain KEY, TOKEN, SECRET or
    /// PASSWORD are redacted from task logs.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub envs: Vec<(String, String)>,
    /// `internet` (outbound to public addresses only) or `none` (loopback
    /// only) [default: internet].
    #[arg(long, value_name = "MODE")]
    pub network: Option<String>,
    /// Only this host name or `*.suffix` pattern is reachable (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Memory limit in MiB [default: 2048].
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// CPUs, fractions allowed [default: 2].
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Most processes at once [default: 1024].
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Most MiB the sandbox may write [default: 4096].
    #[arg(long, value_name = "MIB")]
    pub disk_mib: Option<u64>,
    /// What the deadline does: `kill` destroys the sandbox, `pause`
    /// freezes it for `sandkeep sandbox resume` [default: kill].
    #[arg(long, value_name = "ACTION")]
    pub on_timeout: Option<String>,
    #[command(flatten)]
    pub shares: super::shares::ShareArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// List the sandboxes of this state directory.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Kill a sandbox: every process, file and task in it.
#[derive(Debug, Args)]
#[command(
    long_about = "Kill a sandbox: every process in it (also those that detached), its files and \
        its tasks. Killing a sandbox that is already gone is not an error."
)]
pub struct KillArgs {
    /// The sandbox to kill.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Pause a sandbox: freeze every process in it and stop its deadline.
#[derive(Debug, Args)]
#[command(
    long_about = "Pause a sandbox: every process in it is frozen (no CPU used) and its deadline \
        stops; files, processes and tasks stay as they are. `task` commands read it as usual; \
        `exec` and `sandbox resume` resume it. It stays paused across server restarts, not across \
        a reboot of this host."
)]
pub struct PauseArgs {
    /// The sandbox to pause.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Resume a paused sandbox, with a new deadline.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The sandbox to resume.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// Seconds until its new deadline [default: its own timeout].
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Make a port of a sandbox reachable from this host and print its url.
#[derive(Debug, Args)]
#[command(
    long_about = "Make a TCP port a server listens on inside a sandbox reachable from this host, \
        and print its url (http://127.0.0.1:HOSTPORT). The forward lasts as long as the sandbox; \
        the same port again prints the same url. Any local user can connect to it, as to a \
        `docker run -p 127.0.0.1:...` port."
)]
pub struct ExposeArgs {
    /// The sandbox.
    #[arg(value_name = "SANDBOX")]
    pub sandbox_id: String,
    /// The port inside the sandbox (1-65535).
    #[arg(value_name = "PORT")]
    pub port: u64,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `K=V` → (K, V); the value may contain `=`.
fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

pub async fn run(cmd: SandboxCommand) -> Outcome {
    match cmd {
        SandboxCommand::Create(args) => create(args).await,
        SandboxCommand::List(args) => list(args).await,
        SandboxCommand::Kill(args) => kill(args).await,
        SandboxCommand::Pause(args) => pause(args).await,
        SandboxCommand::Resume(args) => resume(args).await,
        SandboxCommand::Snapshot(args) => super::snapshot::take(args).await,
        SandboxCommand::Fork(args) => super::snapshot::fork(args).await,
        SandboxCommand::Changes(args) => super::shares::changes(args).await,
        SandboxCommand::Apply(args) => super::shares::apply(args).await,
        SandboxCommand::Expose(args) => expose(args).await,
    }
}

async fn create(args: CreateArgs) -> Outcome {
    let envs: BTreeMap<String, String> = args.envs.into_iter().collect();
    let shares = args.shares.configured()?;
    let request = CreateSandboxArgs {
        template: args.template,
        shares: None,
        timeout: args.timeout,
        envs: (!envs.is_empty()).then_some(envs),
        network: args.network,
        allow_hosts: (!args.allow_hosts.is_empty()).then_some(args.allow_hosts),
        memory_mib: args.memory_mib,
        cpus: args.cpus,
        pids: args.pids,
        disk_mib: args.disk_mib,
        on_timeout: args.on_timeout,
    };
    // Stateless: the sandbox must not be destroyed when this process ends.
    with_shares(SessionKind::Stateless, shares, async |ctx| {
        let created = ctx.service.create_sandbox(&ctx.session, request).await?;
        if args.output.json {
            output::print_json(&created);
        } else {
            outln!("{}", created.sandbox_id);
            let now = crate::provider::unix_now();
            eprintln!(
                "created sandbox {} (template {}, isolation {}), destroyed {} unless killed earlier \
                 with `sandkeep sandbox kill {}`",
                created.sandbox_id,
                created.template,
                created.isolation,
                output::relative(created.expires_at, now),
                created.sandbox_id
            );
        }
        Ok(exit::OK)
    })
    .await
}

async fn list(args: ListArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let listed = ctx.service.list_sandboxes(ListSandboxesArgs {}).await?;
        if args.output.json {
            output::print_json(&listed);
            return Ok(exit::OK);
        }
        if listed.sandboxes.is_empty() {
            eprintln!("no sandboxes; create one with `sandkeep sandbox create`");
            return Ok(exit::OK);
        }
        let now = crate::provider::unix_now();
        let mut table = Table::new(&[
            "SANDBOX",
            "TEMPLATE",
            "ISOLATION",
            "RETAINED",
            "STATE",
            "CREATED",
            "EXPIRES",
            "PORTS",
        ]);
        for s in &listed.sandboxes {
            table.row(vec![
                s.sandbox_id.clone(),
                s.template.clone(),
                s.isolation.clone(),
                output::yes_no(s.retained),
                s.state.clone(),
                output::relative(s.created_at, now),
                if s.state == "paused" {
                    "-".to_owned()
                } else {
                    output::relative(s.expires_at, now)
                },
                ports_cell(&s.ports),
            ]);
        }
        table.print();
        Ok(exit::OK)
    })
    .await
}

async fn kill(args: KillArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = KillSandboxArgs {
            sandbox_id: args.sandbox_id.clone(),
        };
        let killed = ctx.service.kill_sandbox(&ctx.session, request).await?;
        if args.output.json {
            output::print_json(&killed);
        } else if killed.killed {
            outln!("killed sandbox {}", killed.sandbox_id);
        } else {
            outln!("sandbox {} was already gone", killed.sandbox_id);
        }
        Ok(exit::OK)
    })
    .await
}

async fn pause(args: PauseArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = PauseSandboxArgs {
            sandbox_id: args.sandbox_id.clone(),
        };
        let paused = ctx.service.pause_sandbox(request).await?;
        if args.output.json {
            output::print_json(&paused);
        } else {
            outln!(
                "paused sandbox {}; `sandkeep sandbox resume {}` goes on",
                paused.sandbox_id,
                paused.sandbox_id
            );
        }
        Ok(exit::OK)
    })
    .await
}

async fn resume(args: ResumeArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = ResumeSandboxArgs {
            sandbox_id: args.sandbox_id.clone(),
            timeout: args.timeout,
        };
        let resumed = ctx.service.resume_sandbox(request).await?;
        if args.output.json {
            output::print_json(&resumed);
        } else {
            let now = crate::provider::unix_now();
            outln!(
                "resumed sandbox {}; its deadline is {}",
                resumed.sandbox_id,
                output::relative(resumed.expires_at, now)
            );
        }
        Ok(exit::OK)
    })
    .await
}

/// `3000 http://127.0.0.1:40123, …`, or `-`.
fn ports_cell(ports: &[crate::service::PortEntry]) -> String {
    if ports.is_empty() {
        return "-".into();
    }
    let each: Vec<String> = ports
        .iter()
        .map(|p| format!("{} {}", p.port, p.url))
        .collect();
    each.join(", ")
}

async fn expose(args: ExposeArgs) -> Outcome {
    with_context(SessionKind::Ordinary, async |ctx| {
        let request = ExposePortArgs {
            sandbox_id: Some(args.sandbox_id.clone()),
            port: args.port,
        };
        let exposed = ctx.service.expose_port(&ctx.session, request).await?;
        if args.output.json {
            output::print_json(&exposed);
        } else {
            outln!("{}", exposed.url);
        }
        Ok(exit::OK)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_pairs_split_at_the_first_equals() {
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_env("A="), Ok(("A".into(), String::new())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("nothing").is_err());
    }
}
