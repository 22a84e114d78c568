//! `sandkeep doctor` for the local provider: which isolation level this
//! host gives and why, and whether its sandboxes reach the Internet.
//!
//! The isolation checks fork throwaway children that try each kernel
//! feature for real; they run in the `sandkeep __keeper probe` process
//! (single-threaded, never inside the tokio server), which prints a
//! [`DoctorReport`] as JSON. The egress check needs the provider's
//! configuration: the provider resolves [`EGRESS_NAMES`] on the host and
//! [`egress_check`] judges the answers as a sandbox's proxy would.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rustix::thread::UnshareFlags;
use serde::{Deserialize, Serialize};

use super::netpolicy::{self, EGRESS_TRUST_VAR, EgressTrust, HostNetwork};
use super::sys;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// What `sandkeep doctor` prints for the local provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DoctorReport {
    /// The level sandboxes get here.
    pub isolation: String,
    /// Why that level.
    pub reason: String,
    pub running_as_root: bool,
    pub checks: Vec<Check>,
    pub state_dir: PathBuf,
    /// What to do about what is missing; empty when nothing is.
    pub remediation: Vec<String>,
    /// The `SANDKEEP_EGRESS_TRUST` value that would let sandboxes reach
    /// [`EGRESS_NAMES`], when the host's answers for them are refused and
    /// a trust setting can help.
    #[serde(default)]
    pub suggested_egress_trust: Option<String>,
}

/// The names the egress check resolves: the Python package index and its
/// file host, both of which `pip install` needs.
pub const EGRESS_NAMES: [&str; 2] = ["pypi.org", "files.pythonhosted.org"];

/// What the egress check found: its row, and what to do about it.
pub(crate) struct Egress {
    pub check: Check,
    pub suggested_trust: Option<String>,
    pub remediation: Option<String>,
}

/// Whether sandboxes reach each looked-up name through their egress
/// proxy, judged as the proxy judges them (the host's network, `trust`).
/// When every answer for a name is refused, says so, and names the trust
/// setting with the value that lets it through when one can.
pub(crate) fn egress_check(
    lookups: &[(&str, Result<Vec<IpAddr>, String>)],
    host: &HostNetwork,
    trust: &EgressTrust,
) -> Egress {
    // Names with the same outcome are told together.
    let mut found: Vec<(Vec<&str>, String)> = Vec::new();
    let mut blocked = false;
    let mut needed = EgressTrust::default();
    let mut hopeless = false;
    let list = |ips: &[IpAddr]| {
        ips.iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (name, answers) in lookups {
        let outcome = match answers {
            Ok(answers) if answers.is_empty() => {
                blocked = true;
                "no address on this host".to_owned()
            }
            Err(e) => {
                blocked = true;
                format!("not resolved on this host ({e})")
            }
            Ok(answers) => {
                let judged: Vec<_> = answers
                    .iter()
                    .map(|ip| netpolicy::check_address(*ip, host, trust))
                    .collect();
                let passed: Vec<IpAddr> = answers
                    .iter()
                    .zip(&judged)
                    .filter(|(_, j)| j.is_ok())
                    .map(|(ip, _)| *ip)
                    .collect();
                if passed.is_empty() {
                    blocked = true;
                    for ip in answers {
                        match netpolicy::trust_to_reach(*ip, host, trust) {
                            Some(reach) => needed = needed.merged(&reach),
                            None => hopeless = true,
                        }
                    }
                    let why = judged
                        .iter()
                        .find_map(|j| j.as_ref().err())
                        .map(netpolicy::Refusal::what)
                        .unwrap_or_default();
                    format!(
                        "{} only, which the egress proxy refuses ({why})",
                        list(answers)
                    )
                } else {
                    format!("{}, reachable", list(&passed))
                }
            }
        };
        match found.iter_mut().find(|(_, o)| *o == outcome) {
            Some((names, _)) => names.push(name),
            None => found.push((vec![name], outcome)),
        }
    }
    let found: Vec<String> = found
        .iter()
        .map(|(names, outcome)| format!("{}: {outcome}", names.join(", ")))
        .collect();
    let in_force = if trust.is_empty() {
        String::new()
    } else {
        format!(" ({EGRESS_TRUST_VAR}={trust} in force)")
    };
    let mut detail = format!("{}{in_force}", found.join("; "));
    if !blocked {
        detail.push_str(": sandboxes reach the Internet through their egress proxy");
        return Egress {
            check: Check {
                name: "egress".into(),
                ok: true,
                detail,
            },
            suggested_trust: None,
            remediation: None,
        };
    }
    let (suggested_trust, remediation) = if !needed.is_empty() {
        let value = trust.clone().merged(&needed);
        let neighbours: Vec<String> = host
            .addresses
            .iter()
            .filter(|a| needed.ranges().iter().any(|r| r.overlaps(a)))
            .map(|a| a.to_string())
            .collect();
        let neighbours = if neighbours.is_empty() {
            String::new()
        } else {
            format!(
                " It holds the host's network {}: the neighbours there become reachable too \
                 (never the host's own addresses or gateways); name a narrower range if that \
                 network holds more than the egress.",
                neighbours.join(", ")
            )
        };
        detail.push_str(
            ": this host's DNS or egress answers public names with special-purpose addresses \
             (an intercepting egress, a fake-IP DNS), so sandboxes cannot reach package registries",
        );
        (
            Some(value.to_string()),
            Some(format!(
                "if {needed} leads to the Internet on this host, set {EGRESS_TRUST_VAR}={value} \
                 where sandkeep runs (serve, serve --e2b and the CLI read it; sandboxes created \
                 from then on get it): their egress proxy then takes those addresses as public. \
                 This weakens nothing else: loopback, private, CGNAT and link-local ranges, the \
                 host's own addresses and gateways, and every other range stay refused.{neighbours}"
            )),
        )
    } else if hopeless {
        detail.push_str(": no setting reaches those addresses");
        (
            None,
            Some(
                "make this host's DNS answer public names with their public addresses: it \
                 answers with addresses no sandbox may reach"
                    .into(),
            ),
        )
    } else {
        (None, None)
    };
    Egress {
        check: Check {
            name: "egress".into(),
            ok: false,
            detail,
        },
        suggested_trust,
        remediation,
    }
}

/// Runs `f` in a forked child; its error text comes back through a pipe.
fn in_child(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    match sys::fork().map_err(|e| format!("fork: {e}"))? {
        sys::Forked::Child => {
            drop(r);
            let code = match f() {
                Ok(()) => 0,
                Err(e) => {
                    let _ = std::fs::File::from(w).write_all(e.as_bytes());
                    1
                }
            };
            sys::exit_now(code)
        }
        sys::Forked::Parent(pid) => {
            drop(w);
            let mut msg = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut msg);
            match sys::wait_for(pid) {
                Ok(0) => Ok(()),
                _ if !msg.is_empty() => Err(msg),
                other => Err(format!("probe child ended with {other:?}")),
            }
        }
    }
}

fn self_map() -> Result<(), String> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    sys::unshare(UnshareFlags::NEWUSER).map_err(|e| format!("unshare(CLONE_NEWUSER): {e}"))?;
    sys::write_id_maps(None, uid, gid, 1).map_err(|e| e.to_string())
}

fn check(name: &str, result: Result<(), String>, ok_detail: &str) -> Check {
    Check {
        name: name.into(),
        ok: result.is_ok(),
        detail: result.err().unwrap_or_else(|| ok_detail.into()),
    }
}

fn overlay_probe(root: bool) -> Result<(), String> {
    if !root {
        self_map()?;
    }
    sys::unshare(UnshareFlags::NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    rustix::mount::mount_change(
        "/",
        rustix::mount::MountPropagationFlags::REC | rustix::mount::MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| format!("make / private: {e}"))?;
    let base = Path::new("/tmp");
    rustix::mount::mount(
        "tmpfs",
        base,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| format!("mount tmpfs: {e}"))?;
    for d in ["u", "w", "m"] {
        std::fs::create_dir(base.join(d)).map_err(|e| e.to_string())?;
    }
    let mut opts = "lowerdir=/usr,upperdir=/tmp/u,workdir=/tmp/w".to_owned();
    if !root {
        opts.push_str(",userxattr");
    }
    let data = std::ffi::CString::new(opts).map_err(|e| e.to_string())?;
    rustix::mount::mount(
        "overlay",
        base.join("m"),
        "overlay",
        rustix::mount::MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(|e| format!("overlay over /usr: {e}"))
}

/// One check per resource limit: where its cgroup controller is (v2 or
/// v1), or why sandboxes here go without it.
fn resource_checks() -> Vec<Check> {
    use super::cgroup::{self, Controller, Place};
    let limit = |c: Controller| c.limit();
    Controller::ALL
        .into_iter()
        .zip(cgroup::detect())
        .map(|(c, place)| {
            let (ok, detail) = match place {
                Place::V2 { base } => (
                    true,
                    format!(
                        "cgroup v2 below {}: `{}` is enforced",
                        base.display(),
                        limit(c)
                    ),
                ),
                Place::V1 { mount } => (
                    true,
                    format!(
                        "cgroup v1 at {}: `{}` is enforced",
                        mount.display(),
                        limit(c)
                    ),
                ),
                Place::Missing(why) => (
                    false,
                    format!(
                        "{why}: `{}` is not enforced and create_sandbox refuses it; run as root, \
                         or enable the controller for a delegated cgroup v2 subtree \
                         (systemd: Delegate=yes)",
                        limit(c)
                    ),
                ),
            };
            Check {
                name: format!("{} limit", c.name()),
                ok,
                detail,
            }
        })
        .collect()
}

/// What to say first when sandboxes here go without a memory, pids or cpu
/// limit (`resources` are [`resource_checks`]): nothing else bounds what
/// one sandbox takes of the host, which a row of the table undersells. An
/// ordinary user on a cgroup v1 host is the usual case: v1 hierarchies
/// are root's, and v1 has no delegation.
fn unbounded_warning(resources: &[Check]) -> Option<String> {
    let missing: Vec<&str> = resources
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name.trim_end_matches(" limit"))
        .collect();
    let (last, rest) = missing.split_last()?;
    let names = match rest {
        [] => (*last).to_owned(),
        _ => format!("{} or {last}", rest.join(", ")),
    };
    Some(format!(
        "WARNING: sandboxes here get NO {names} limit, not even the defaults: any one of them can \
         take all of this host's memory, processes or CPU. An ordinary user gets these limits only \
         from a delegated cgroup v2 subtree (systemd: Delegate=yes); on a cgroup v1 host only root \
         can set them: run sandkeep as root"
    ))
}

/// The body of `sandkeep __keeper probe`.
pub fn probe_main() -> i32 {
    let root = rustix::process::geteuid().is_root();
    let userns = check(
        "user namespace",
        in_child(self_map),
        "can create a user namespace and map ids",
    );
    let ns = |flags: UnshareFlags| {
        in_child(move || {
            if !root {
                self_map()?;
            }
            sys::unshare(flags).map_err(|e| format!("unshare: {e}"))
        })
    };
    let checks = vec![
        userns.clone(),
        check("mount namespace", ns(UnshareFlags::NEWNS), "available"),
        check("pid namespace", ns(UnshareFlags::NEWPID), "available"),
        check(
            "uts+ipc namespaces",
            ns(UnshareFlags::NEWUTS | UnshareFlags::NEWIPC),
            "available",
        ),
        check(
            "overlayfs",
            in_child(move || overlay_probe(root)),
            "copy-on-write layers can be mounted",
        ),
        check(
            "network namespace",
            in_child(move || {
                if !root {
                    self_map()?;
                }
                sys::unshare(UnshareFlags::NEWNET)
                    .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
                sys::loopback_up().map_err(|e| format!("bring up loopback: {e}"))
            }),
            "each sandbox has loopback only; \"internet\" goes through a filtering egress proxy",
        ),
    ];
    let landlock = check(
        "landlock",
        in_child(
            || match super::landlock::landlock_writes(Path::new("/tmp")) {
                Ok(true) => Ok(()),
                Ok(false) => Err("not enforced by this kernel".into()),
                Err(e) => Err(e.to_string()),
            },
        ),
        "writes can be confined (used only by the fallback level)",
    );
    let namespaces_ok = checks.iter().take(4).all(|c| c.ok);
    let fallback = if landlock.ok {
        "landlock"
    } else {
        "process-only"
    };
    let mut checks = checks;
    checks.push(landlock);
    let resources = resource_checks();
    let unbounded = unbounded_warning(&resources);
    checks.extend(resources);
    checks.push(Check {
        name: "disk limit".into(),
        ok: namespaces_ok,
        detail: if namespaces_ok {
            "every writable place of a sandbox is on one tmpfs of `disk_mib` (its pages also count \
             against `memory_mib`): `disk_mib` is enforced"
                .into()
        } else {
            "no mount namespace: sandboxes write to the host's disk and `disk_mib` is not enforced"
                .into()
        },
    });
    checks.push(shares_check(namespaces_ok, root));
    let (isolation, reason, mut remediation) = match (namespaces_ok, root) {
        (true, true) => (
            "userns-idmap",
            "running as root: private pid/mount/uts/ipc/network namespaces, sandbox root is an unprivileged \
             65536-id block of host uids, the host's system directories read-only with a writable copy of \
             what others may read of /etc, templates as idmapped copy-on-write overlays (`userns-shifted`, \
             with a template's files read-only, where its file system cannot be idmapped)",
            vec![],
        ),
        (true, false) => (
            "userns-single",
            "running as an ordinary user: private namespaces with the invoking user as sandbox root; \
             host-root-owned system files are read-only inside, directories with sub-mounts are read-only",
            vec!["run sandkeep as root for copy-on-write over every system directory and a separate uid block per sandbox".into()],
        ),
        (false, _) => (
            fallback,
            "the kernel refuses a namespace sandkeep needs (see the failed checks): sandboxes fall back to \
             a weaker level without namespaces. Their processes share the host's process table, network and \
             read view of the filesystem; writes are confined to the sandbox's directory only where Landlock \
             works; kill and expiry still end every process",
            vec![
                "allow unprivileged user namespaces: `sysctl -w kernel.unprivileged_userns_clone=1` (Debian) or `sysctl -w user.max_user_namespaces=15000`".into(),
                "on Ubuntu 24.04+ (AppArmor): add a profile granting `userns,` to the sandkeep executable, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`".into(),
                "inside Docker: run the container with --security-opt seccomp=unconfined (or --privileged)".into(),
            ],
        ),
    };
    // First: the one thing here that lets a sandbox take the whole host.
    remediation.splice(0..0, unbounded);
    let report = DoctorReport {
        isolation: isolation.into(),
        reason: reason.into(),
        running_as_root: root,
        checks,
        state_dir: PathBuf::new(),
        remediation,
        suggested_egress_trust: None,
    };
    println!("{}", serde_json::to_string(&report).unwrap_or_default());
    0
}

/// How host shares (`--share`) are mounted here. Root's sandboxes show a
/// share's owner as their root through an idmapped mount (Linux 5.12+, on
/// a file system that supports one: ext4, xfs, btrfs; tmpfs from 6.3);
/// without one, `rw` shares are refused and `ro`/`cow` show the files as
/// nobody's. An ordinary user's sandboxes are that user already.
fn shares_check(namespaces_ok: bool, root: bool) -> Check {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    let idmap = version >= (5, 12);
    let (ok, detail) = match (namespaces_ok, root, idmap) {
        (false, _, _) => (
            false,
            "no mount namespace: sandboxes cannot mount host shares (`--share`)".to_owned(),
        ),
        (true, true, true) => (
            true,
            format!(
                "idmapped mounts (Linux {release}): a share's owner is the sandbox's root, and what \
                 it makes in an rw share is the owner's on the host; a share on a file system \
                 without idmapped mounts (tmpfs before 6.3) is refused as rw and read as nobody's"
            ),
        ),
        (true, true, false) => (
            false,
            format!(
                "Linux {release} has no idmapped mounts (5.12+): rw shares are refused, ro and cow \
                 shares show their files as nobody's"
            ),
        ),
        (true, false, _) => (
            true,
            "plain bind mounts: this user is the sandbox's root, so its own files are writable \
             inside (rw) and what a sandbox makes is this user's"
                .to_owned(),
        ),
    };
    Check {
        name: "host shares".into(),
        ok,
        detail,
    }
}
