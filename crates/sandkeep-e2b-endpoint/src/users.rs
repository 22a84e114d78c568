//! E2B's users in sandboxes made through the endpoint: E2B templates run
//! commands as `user` (home `/home/user`) and as `root` on request (the
//! `Authorization: Basic` user of an RPC, `username=` of `/files`).
//!
//! A create adds the `user` account to the new sandbox (its `/etc` is the
//! sandbox's own copy): a free uid from 1000, the group, the home, and
//! passwordless `sudo` where the sandbox has `sudo`. Only the sandbox's
//! root can do that, and only where the sandbox maps more than one uid
//! (the local provider as root); elsewhere (an unprivileged host, a
//! remote provider) the sandbox keeps its single user and every name but
//! `root` is refused. Sandboxes of the CLI and MCP never get the account.
//!
//! Running as the account is a wrapper around what the endpoint runs as
//! the sandbox's root: `setpriv` to its uid, gid and groups, with `HOME`,
//! `USER` and `LOGNAME` set and its home as the working directory, as
//! envd starts a process for a user.

use axum::http::{HeaderMap, header};
use serde::{Deserialize, Serialize};

use sandkeep_proto::wire::shell_quote;
use sandkeep_provider::Program;

/// E2B's default user name.
pub const DEFAULT_USER: &str = "user";
/// The sandbox's own user, always there.
const ROOT: &str = "root";

/// An account made in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// The script, run as the sandbox's root, that adds the `user` account
/// and prints its uid; it fails where the account cannot be made or used
/// (no second uid mapped, no `setpriv`).
pub fn setup_script() -> String {
    format!(
        "set -e; command -v setpriv >/dev/null; n={DEFAULT_USER}; h=/home/$n; \
         if ! grep -q \"^$n:\" /etc/passwd; then \
           u=1000; while grep -q \"^[^:]*:[^:]*:$u:\" /etc/passwd /etc/group; do u=$((u + 1)); done; \
           echo \"$n:x:$u:$u::$h:/bin/bash\" >> /etc/passwd; \
           echo \"$n:x:$u:\" >> /etc/group; \
         fi; \
         u=$(grep \"^$n:\" /etc/passwd | cut -d: -f3); \
         mkdir -p \"$h\"; chown \"$u:$u\" \"$h\"; chmod 750 \"$h\"; \
         setpriv --reuid=\"$u\" --regid=\"$u\" --init-groups true; \
         if command -v sudo >/dev/null && [ -d /etc/sudoers.d ]; then \
           echo \"$n ALL=(ALL:ALL) NOPASSWD: ALL\" > /etc/sudoers.d/e2b-$n; \
           chmod 440 /etc/sudoers.d/e2b-$n; \
         fi; \
         echo \"$u\""
    )
}

/// The account [`setup_script`] made, from its output.
pub fn account(stdout: &[u8]) -> Option<Account> {
    let uid: u32 = String::from_utf8_lossy(stdout).trim().parse().ok()?;
    Some(Account {
        name: DEFAULT_USER.to_owned(),
        uid,
        gid: uid,
        home: format!("/home/{DEFAULT_USER}"),
    })
}

/// Who an envd request runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The sandbox's own user (root), as the provider runs everything.
    Sandbox,
    Account(Account),
}

/// The user named by an RPC's `Authorization: Basic base64(user:)`.
pub fn basic_user(headers: &HeaderMap) -> Result<Option<String>, String> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("");
    let Some(encoded) = text.strip_prefix("Basic ") else {
        return Err("the Authorization header must be Basic base64(\"user:\")".to_owned());
    };
    let decoded = sandkeep_envd_wire::base64_bytes::decode(encoded.trim())
        .map_err(|e| format!("the Authorization header is not base64: {e}"))?;
    let text =
        String::from_utf8(decoded).map_err(|_| "the Authorization user is not UTF-8".to_owned())?;
    let user = text.split_once(':').map_or(text.as_str(), |(u, _)| u);
    Ok((!user.is_empty()).then(|| user.to_owned()))
}

/// Who runs a request asking for `requested` (none: the sandbox's default,
/// its account if it has one), or why nobody can.
pub fn run_as(account: Option<&Account>, requested: Option<&str>) -> Result<RunAs, String> {
    match (requested, account) {
        (None, Some(a)) => Ok(RunAs::Account(a.clone())),
        (None | Some(ROOT), _) => Ok(RunAs::Sandbox),
        (Some(name), Some(a)) if name == a.name => Ok(RunAs::Account(a.clone())),
        (Some(name), _) => Err(format!(
            "user {name:?} does not exist in this sandbox (it has {})",
            account.map_or_else(
                || format!("{ROOT:?} only"),
                |a| format!("{:?} and {ROOT:?}", a.name)
            )
        )),
    }
}

impl RunAs {
    /// The environment envd gives a process of this user.
    fn env(a: &Account) -> [(&'static str, String); 3] {
        [
            ("HOME", a.home.clone()),
            ("USER", a.name.clone()),
            ("LOGNAME", a.name.clone()),
        ]
    }

    /// `setpriv` to the account, then `argv`.
    fn switch(a: &Account) -> Vec<String> {
        vec![
            "setpriv".to_owned(),
            format!("--reuid={}", a.uid),
            format!("--regid={}", a.gid),
            "--init-groups".to_owned(),
            "--".to_owned(),
        ]
    }

    /// A shell script run as this user from its home (the sandbox's own
    /// user: as it is).
    pub fn shell(&self, script: String) -> String {
        let RunAs::Account(a) = self else {
            return script;
        };
        let env: Vec<String> = Self::env(a)
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(v)))
            .collect();
        let argv: Vec<String> = Self::switch(a).iter().map(|w| shell_quote(w)).collect();
        format!(
            "cd {} && {} exec {} /bin/sh -c {}",
            shell_quote(&a.home),
            env.join(" "),
            argv.join(" "),
            shell_quote(&script)
        )
    }

    /// For an account: a script, run as the sandbox's root after `setup`
    /// (which sets `$d`, an absolute directory, resolved from the account's
    /// home), that creates what is missing of `$d` owned by the account, as
    /// envd (root) makes an upload's parent directories and hands them to
    /// the user. `None` for the sandbox's own user, who makes them itself.
    pub fn parents_as_root(&self, setup: &str) -> Option<String> {
        let RunAs::Account(a) = self else {
            return None;
        };
        Some(format!(
            "cd {} && {setup}[ -d \"$d\" ] && exit 0; set -f; IFS=/; c=; \
             for x in $d; do [ -n \"$x\" ] || continue; c=\"$c/$x\"; \
             [ -e \"$c\" ] || {{ mkdir -- \"$c\" && chown {}:{} -- \"$c\"; }} || exit 1; done",
            shell_quote(&a.home),
            a.uid,
            a.gid
        ))
    }

    /// A process run as this user; its working directory, given (a
    /// relative one from the user's home, as envd takes it) or the home.
    pub fn program(&self, program: Program, cwd: Option<String>) -> (Program, Option<String>) {
        let RunAs::Account(a) = self else {
            return (program, cwd);
        };
        let cwd = Some(match cwd {
            Some(dir) if dir.starts_with('/') => dir,
            Some(dir) => format!("{}/{dir}", a.home),
            None => a.home.clone(),
        });
        let program = match program {
            Program::Argv { argv, env } => {
                // The request's own variables win over the defaults.
                let mut all: Vec<(String, String)> = Self::env(a)
                    .into_iter()
                    .filter(|(k, _)| !env.iter().any(|(n, _)| n == k))
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect();
                all.extend(env);
                Program::Argv {
                    argv: Self::switch(a).into_iter().chain(argv).collect(),
                    env: all,
                }
            }
            Program::Shell(script) => Program::Shell(self.shell(script)),
        };
        (program, cwd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> Account {
        account(b"1001\n").unwrap()
    }

    #[test]
    fn the_default_is_the_account_and_root_is_the_sandboxs_user() {
        let a = user();
        assert_eq!(run_as(Some(&a), None), Ok(RunAs::Account(a.clone())));
        assert_eq!(
            run_as(Some(&a), Some("user")),
            Ok(RunAs::Account(a.clone()))
        );
        assert_eq!(run_as(Some(&a), Some("root")), Ok(RunAs::Sandbox));
        assert_eq!(run_as(None, None), Ok(RunAs::Sandbox));
        assert!(run_as(None, Some("user")).is_err());
        assert!(run_as(Some(&a), Some("mallory")).is_err());
    }

    #[test]
    fn basic_auth_names_the_user() {
        let mut h = HeaderMap::new();
        assert_eq!(basic_user(&h), Ok(None));
        h.insert(header::AUTHORIZATION, "Basic cm9vdDo=".parse().unwrap());
        assert_eq!(basic_user(&h), Ok(Some("root".to_owned())));
        h.insert(header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert!(basic_user(&h).is_err());
    }

    #[test]
    fn a_process_keeps_its_own_variables_over_the_users() {
        let (program, cwd) = RunAs::Account(user()).program(
            Program::Argv {
                argv: vec!["env".into()],
                env: vec![("HOME".into(), "/x".into())],
            },
            None,
        );
        assert_eq!(cwd.as_deref(), Some("/home/user"));
        let Program::Argv { argv, env } = program else {
            panic!("still argv")
        };
        assert_eq!(argv[0], "setpriv");
        assert_eq!(argv.last().map(String::as_str), Some("env"));
        assert_eq!(env.iter().filter(|(k, _)| k == "HOME").count(), 1);
        assert!(env.contains(&("HOME".into(), "/x".into())));
    }
}
