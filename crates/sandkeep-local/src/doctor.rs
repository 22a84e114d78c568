//! `sandkeep doctor` for the local provider: which isolation level this
//! host gives and why.
//!
//! The checks fork throwaway children that try each kernel feature for
//! real; they run in the `sandkeep __keeper probe` process (single-threaded,
//! never inside the tokio server), which prints a [`DoctorReport`] as JSON.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rustix::thread::UnshareFlags;
use serde::{Deserialize, Serialize};

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
    /// What to do to get full isolation; empty when nothing is missing.
    pub remediation: Vec<String>,
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
    // SAFETY: probe children are single-threaded.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }
        .map_err(|e| format!("unshare(CLONE_NEWUSER): {e}"))?;
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
    // SAFETY: probe children are single-threaded.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }
        .map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
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
            // SAFETY: probe children are single-threaded.
            unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(|e| format!("unshare: {e}"))
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
                // SAFETY: probe children are single-threaded.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }
                    .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
                sys::loopback_up().map_err(|e| format!("bring up loopback: {e}"))
            }),
            "each sandbox has loopback only; \"internet\" goes through a filtering egress proxy",
        ),
    ];
    let landlock = check(
        "landlock",
        in_child(|| match super::init::landlock_writes(Path::new("/tmp")) {
            Ok(true) => Ok(()),
            Ok(false) => Err("not enforced by this kernel".into()),
            Err(e) => Err(e.to_string()),
        }),
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
    checks.extend(resource_checks());
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
    let (isolation, reason, remediation) = match (namespaces_ok, root) {
        (true, true) => (
            "userns-idmap",
            "running as root: private pid/mount/uts/ipc/network namespaces, sandbox root is an unprivileged \
             65536-id block of host uids, copy-on-write overlays over the host's system directories \
             (idmapped where the kernel allows; `userns-shifted`, with host-owned files read-only, otherwise)",
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
    let report = DoctorReport {
        isolation: isolation.into(),
        reason: reason.into(),
        running_as_root: root,
        checks,
        state_dir: PathBuf::new(),
        remediation,
    };
    println!("{}", serde_json::to_string(&report).unwrap_or_default());
    0
}
