//! The sandbox's pid 1: builds the root filesystem, takes the sandbox
//! identity, then serves as the fork server for exec and file operations
//! (`fork_server`); this module is the setup, and what the keeper hands it.
//!
//! It is forked from the keeper (never exec'd, so its memory stays owned by
//! the host's user namespace and sandbox root cannot ptrace it), reaps every
//! orphan, and dies with the keeper (`PR_SET_PDEATHSIG`). When it dies the
//! kernel kills every process of the sandbox. It trusts only requests on its
//! listening socket, which lives in the 0700 state directory on the host.
//! In the weaker process-only mode it is a subreaper on the host instead of
//! a pid 1, and the keeper kills its whole process tree.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};

use rustix::thread::{CapabilitySet, UnshareFlags};
use sandkeep_proto::shell::USER_OOM_SCORE_ADJ;

use super::boot_id::BootId;
use super::cgroup;
use super::landlock;
use super::rootfs::{self, Owner};
use super::seccomp;
use super::state::{SandboxDir, Spec};
use super::step::{Step, StepError};
use super::sys;
use super::wire;

mod fork_server;

/// The capabilities sandbox root keeps (Docker's default set): enough to
/// install packages in its copy of the system, nothing that reaches the
/// kernel or the mount table.
const KEPT_CAPS: CapabilitySet = CapabilitySet::CHOWN
    .union(CapabilitySet::DAC_OVERRIDE)
    .union(CapabilitySet::FOWNER)
    .union(CapabilitySet::FSETID)
    .union(CapabilitySet::KILL)
    .union(CapabilitySet::SETGID)
    .union(CapabilitySet::SETUID)
    .union(CapabilitySet::SETPCAP)
    .union(CapabilitySet::NET_BIND_SERVICE)
    .union(CapabilitySet::SYS_CHROOT)
    .union(CapabilitySet::MKNOD)
    .union(CapabilitySet::AUDIT_WRITE)
    .union(CapabilitySet::SETFCAP);

/// The sandbox user's home inside a namespaced sandbox.
pub const HOME: &str = "/root";

/// How the sandbox is confined.
pub enum Mode {
    /// Fresh pid, mount, uts and ipc namespaces and a user namespace.
    Namespaces {
        owner: Owner,
        /// Root mode: the user namespace (sandbox ids shifted to the uid
        /// block) to join, also used to idmap the lower layers.
        userns: Option<OwnedFd>,
    },
    /// The kernel refuses namespaces (or the configuration asks for this):
    /// a subreaper init on the host, writes confined by Landlock, as `uid`
    /// when given (root must not run sandboxes as itself).
    ProcessOnly { uid: Option<u32> },
}

/// The sandbox's network, as the keeper decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetPlan {
    /// A network namespace of its own (loopback only).
    pub isolate: bool,
    /// An egress proxy listening on the namespace's 127.0.0.1.
    pub proxy: bool,
    /// The request names `network` or `allow_hosts`: a kernel without
    /// network namespaces refuses it rather than drop it.
    pub explicit: bool,
}

/// The egress proxy's listening socket and its port, when there is one.
type ProxySocket = Option<(OwnedFd, u16)>;

/// The sandbox's network namespace and its egress proxy's socket, for
/// the keeper; nothing when it has no namespace of its own.
type NetworkFds = Option<(OwnedFd, ProxySocket)>;

/// What the keeper hands its forked init.
pub struct InitContext {
    pub spec: Spec,
    pub dir: SandboxDir,
    pub mode: Mode,
    pub net: NetPlan,
    /// The sandbox's memory cgroup on the host, when it has a memory
    /// limit: shown read-only inside (see [`rootfs::build`]).
    pub memory_cgroup: Option<std::path::PathBuf>,
    /// Where the snapshot of the host's /etc is answered (root, `base`):
    /// see [`super::etc_snapshot`].
    pub etc_snapshot: Option<OwnedFd>,
    /// Root mode: per share of `spec.shares`, the user namespace its
    /// mount is idmapped through (see `keeper::userns::share_idmap`);
    /// `None` where there is none.
    pub share_idmaps: Vec<Option<OwnedFd>>,
    pub listener: OwnedFd,
    /// The doors of the cgroups the init enters itself, first thing
    /// (see [`cgroup::Doors`]); it was born in the others.
    pub cgroups: Vec<OwnedFd>,
    /// Where the fork server puts the sandbox's commands (see
    /// [`cgroup::WorkDoor`]); `None` where the host cannot freeze.
    pub work: Option<cgroup::WorkDoor>,
    /// A seqpacket socket: one JSON [`InitReport`], with the sandbox's
    /// network namespace attached when it has one of its own (the keeper
    /// relays port forwards from inside it) and then the proxy's listening
    /// socket when there is one, then closed.
    pub report: OwnedFd,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub enum InitReport {
    Ready {
        isolation: String,
        warnings: Vec<String>,
        /// Whether the sandbox got a network namespace of its own.
        network: bool,
    },
    /// A parameter of the request this host cannot enforce, and why.
    Unsupported(String),
    Failed(String),
}

impl From<String> for InitReport {
    fn from(e: String) -> Self {
        InitReport::Failed(e)
    }
}

/// A failed step crosses to the keeper as its message.
impl From<StepError> for InitReport {
    fn from(e: StepError) -> Self {
        InitReport::Failed(e.to_string())
    }
}

/// The root filesystem's failure crosses to the keeper as its message.
impl From<rootfs::BuildError> for InitReport {
    fn from(e: rootfs::BuildError) -> Self {
        match e {
            rootfs::BuildError::Unsupported(why) => InitReport::Unsupported(why),
            e => InitReport::Failed(e.to_string()),
        }
    }
}

/// Runs as the sandbox's init; never returns.
pub fn run(ctx: InitContext) -> ! {
    let InitContext {
        spec,
        dir,
        mode,
        net,
        memory_cgroup,
        etc_snapshot,
        share_idmaps,
        listener,
        cgroups,
        work,
        report,
    } = ctx;
    let entered = cgroup::enter(&cgroups);
    drop(cgroups);
    let home = match &mode {
        Mode::Namespaces { .. } => std::path::PathBuf::from(HOME),
        Mode::ProcessOnly { .. } => dir.home(),
    };
    let mut network_fds = None;
    let mut boot_id = None;
    let setup = match (entered, mode) {
        (Err(e), _) => Err(InitReport::Failed(format!(
            "enter the sandbox's cgroups: {e}"
        ))),
        (Ok(()), Mode::Namespaces { owner, userns }) => {
            let memory_cgroup = memory_cgroup.as_deref();
            let inputs = rootfs::Inputs {
                memory_cgroup,
                etc_snapshot,
                share_idmaps,
            };
            setup(&spec, &dir, owner, userns, net, inputs).map(|made| {
                network_fds = made.network_fds;
                boot_id = made.boot_id;
                (made.isolation, made.warnings)
            })
        }
        (Ok(()), Mode::ProcessOnly { uid }) => setup_process_only(&dir, uid),
    };
    let (ok, message) = match setup {
        Ok((isolation, warnings)) => (
            true,
            InitReport::Ready {
                isolation,
                warnings,
                network: network_fds.is_some(),
            },
        ),
        Err(e) => (false, e),
    };
    let (netns, proxy) = network_fds.unzip();
    let proxy = proxy.flatten();
    let attached: Vec<_> = netns
        .iter()
        .map(AsFd::as_fd)
        .chain(proxy.iter().map(|(fd, _)| fd.as_fd()))
        .collect();
    let delivered = wire::send(
        &report,
        &serde_json::to_vec(&message).unwrap_or_default(),
        &attached,
    )
    .is_ok();
    drop(report);
    // The keeper's now; nothing of the sandbox may ever hold it.
    drop(netns);
    if !ok || !delivered {
        sys::exit_now(1);
    }
    let proxy_port = proxy.map(|(_, port)| port);
    let env = environment(&spec, &home, proxy_port);
    fork_server::serve(listener, &env, &home, work.as_ref(), boot_id.as_ref())
}

fn setup(
    spec: &Spec,
    dir: &SandboxDir,
    owner: Owner,
    userns: Option<OwnedFd>,
    net: NetPlan,
    inputs: rootfs::Inputs<'_>,
) -> Result<Namespaced, InitReport> {
    sys::set_signal_mask(&[]).map_err(|e| format!("signal mask: {e}"))?;
    // The cgroup namespace roots each hierarchy at the cgroups the init
    // has just entered: the sandbox sees `/`, not the host's path of its
    // cgroups.
    let flags =
        UnshareFlags::NEWNS | UnshareFlags::NEWUTS | UnshareFlags::NEWIPC | UnshareFlags::NEWCGROUP;
    sys::unshare(flags).map_err(|e| format!("unshare mount/uts/ipc/cgroup namespaces: {e}"))?;
    let mut warnings = Vec::new();
    let isolated = net.isolate && own_network(spec, net, &mut warnings)?;
    let network_fds = if isolated {
        // Opened by the init itself: the keeper of an ordinary user may
        // not join it through the init's pidfd (that asks for ptrace
        // rights over a process that is not dumpable).
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let netns = rustix::fs::open("/proc/thread-self/ns/net", flags, rustix::fs::Mode::empty())
            .map_err(|e| format!("open the network namespace: {e}"))?;
        Some((netns, network(net)?))
    } else {
        None
    };
    rustix::system::sethostname(spec.sandbox_id.as_str().as_bytes())
        .map_err(|e| format!("sethostname: {e}"))?;
    let idmap = userns.as_ref().map(|f| f.as_fd());
    let built = rootfs::build(dir, spec, owner, idmap, inputs)?;
    retitle(spec.sandbox_id.as_str());
    first_for_the_oom_killer(&mut warnings);
    enter_sandbox_identity(owner, userns)?;
    // The keeper's death must end the sandbox. Set only now: credential
    // changes clear it. Should the keeper already be gone, the report
    // write below fails and the init exits.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    sys::restrict_capabilities(KEPT_CAPS).map_err(|e| format!("drop capabilities: {e}"))?;
    rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("non-dumpable: {e}"))?;
    seccomp::install()?;
    let isolation = match (owner, built.idmapped) {
        (Owner::Shifted { .. }, true) => "userns-idmap",
        (Owner::Shifted { .. }, false) => "userns-shifted",
        (Owner::Invoker, _) => "userns-single",
    };
    warnings.extend(built.warnings);
    Ok(Namespaced {
        isolation: isolation.to_owned(),
        warnings,
        network_fds,
        boot_id: built.boot_id,
    })
}

/// What the setup of a namespaced sandbox leaves its init.
struct Namespaced {
    isolation: String,
    warnings: Vec<String>,
    network_fds: NetworkFds,
    boot_id: Option<BootId>,
}

/// Overwrites the init's command line (the keeper's argument strings, in
/// this process's memory) with `sandkeep-init ID` and NULs, through
/// /proc/self/mem: no privilege needed (PR_SET_MM would want
/// CAP_SYS_RESOURCE over the host) and no raw pointer. The keeper's
/// arguments name its executable's path, its build and (when started
/// for one sandbox) the state directory, all of which `/proc/1/cmdline`
/// showed inside; the sandbox id is the sandbox's own hostname, and lets
/// the host tell inits apart. Best effort: a sandbox showing the keeper's
/// arguments still works.
fn retitle(id: &str) {
    let _ = rustix::thread::set_name(c"sandkeep-init");
    let Some((start, end)) = argument_range() else {
        return;
    };
    let Ok(len) = usize::try_from(end.saturating_sub(start)) else {
        return;
    };
    // Ending in a NUL, so that the kernel shows the range as it is (the
    // keeper's path alone is longer than the title).
    let title = format!("sandkeep-init {id}");
    let shown = title.len().min(len.saturating_sub(1));
    let mut args = vec![0u8; len];
    args[..shown].copy_from_slice(&title.as_bytes()[..shown]);
    if let Ok(mem) = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")
    {
        use std::os::unix::fs::FileExt;
        let _ = mem.write_all_at(&args, start);
    }
}

/// `arg_start` and `arg_end` of this process (fields 48 and 49 of
/// /proc/self/stat, counted after the parenthesised command name, which
/// may hold spaces).
fn argument_range() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some((start, end))
}

/// Unshares the network namespace. A kernel without network namespaces
/// refuses a request that names `network` or `allow_hosts` (SPEC.md §10);
/// without them the sandbox shares the host's network and says so.
/// Puts the init, and so every process it forks, at the user processes'
/// `oom_score_adj` (see `USER_OOM_SCORE_ADJ`), for the helper's processes
/// to stand back from. Before the init takes the sandbox's identity: a
/// change of credentials makes a process non-dumpable, and one that is not
/// dumpable cannot write its own score, nor can the fork server's children,
/// which share that; so the init stays at the users' level, compared by
/// size. Written without `CAP_SYS_RESOURCE` in effect (nothing after this
/// needs it): a writer holding it also makes the value the minimum of
/// every descendant, and the helper could not stand back below it.
fn first_for_the_oom_killer(warnings: &mut Vec<String>) {
    let written = rustix::thread::capabilities(None)
        .and_then(|mut caps| {
            caps.effective.remove(CapabilitySet::SYS_RESOURCE);
            rustix::thread::set_capabilities(None, caps)
        })
        .map_err(std::io::Error::from)
        .and_then(|()| std::fs::write("/proc/self/oom_score_adj", USER_OOM_SCORE_ADJ));
    if let Err(e) = written {
        warnings.push(format!(
            "cannot set the sandbox's oom_score_adj ({e}): the memory limit's OOM kill may take a task's supervisor, and the task then reads unknown"
        ));
    }
}

fn own_network(spec: &Spec, net: NetPlan, warnings: &mut Vec<String>) -> Result<bool, InitReport> {
    let Err(e) = sys::unshare(UnshareFlags::NEWNET) else {
        return Ok(true);
    };
    if net.explicit {
        let named = if spec.allow_hosts.is_empty() {
            "`network`"
        } else {
            "`allow_hosts`"
        };
        return Err(InitReport::Unsupported(format!(
            "this host refuses network namespaces (unshare(CLONE_NEWNET): {e}), so {named} cannot \
             be enforced; create the sandbox without `network` and `allow_hosts` (it then shares \
             the host's network) or see `sandkeep doctor`"
        )));
    }
    warnings.push(format!(
        "no network namespace (unshare(CLONE_NEWNET): {e}): the sandbox shares the host's \
         network; run `sandkeep doctor`"
    ));
    Ok(false)
}

/// Inside the fresh network namespace: loopback up, and the proxy's
/// listening socket on its 127.0.0.1 (an ephemeral port, so no sandbox
/// program can have taken it) for the keeper to hand to the proxy.
fn network(net: NetPlan) -> Result<ProxySocket, StepError> {
    sys::loopback_up().step(|| "bring up the loopback interface".into())?;
    if !net.proxy {
        return Ok(None);
    }
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .step(|| "listen for the egress proxy".into())?;
    let port = listener
        .local_addr()
        .step(|| "read the egress proxy's port".into())?
        .port();
    Ok(Some((OwnedFd::from(listener), port)))
}

/// The weaker mode: no namespaces. Orphans stay below this subreaper (so
/// the keeper can find and kill every one), the identity is unprivileged,
/// and Landlock confines writes to the sandbox's directory and keeps
/// signals and abstract sockets inside the sandbox where the kernel
/// supports it.
fn setup_process_only(
    dir: &SandboxDir,
    uid: Option<u32>,
) -> Result<(String, Vec<String>), InitReport> {
    sys::set_signal_mask(&[]).step(|| "signal mask".into())?;
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .step(|| "PR_SET_CHILD_SUBREAPER".into())?;
    let mut warnings = Vec::new();
    first_for_the_oom_killer(&mut warnings);
    if let Some(uid) = uid {
        // Bounding set first, while root still may; changing to a non-zero
        // uid then clears the permitted, effective and ambient sets.
        sys::drop_bounding_set(CapabilitySet::empty()).step(|| "drop capabilities".into())?;
        sys::become_id(uid, uid, true).step(|| format!("become uid {uid}"))?;
    }
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .step(|| "PR_SET_PDEATHSIG".into())?;
    rustix::thread::set_no_new_privs(true).step(|| "no_new_privs".into())?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .step(|| "non-dumpable".into())?;
    let isolation = match landlock::landlock_writes(&dir.path) {
        Ok(true) => "landlock",
        Ok(false) => {
            warnings.push(
                "Landlock is unavailable: sandbox processes can write wherever their user may"
                    .into(),
            );
            "process-only"
        }
        Err(e) => return Err(InitReport::Failed(format!("Landlock: {e}"))),
    };
    seccomp::install()?;
    Ok((isolation.to_owned(), warnings))
}

/// Leaves the user namespace that owns the mount namespace, so that no
/// sandbox process can ever mount or unmount anything in it.
fn enter_sandbox_identity(owner: Owner, userns: Option<OwnedFd>) -> Result<(), InitReport> {
    match (owner, userns) {
        (Owner::Shifted { .. }, Some(ns)) => {
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::User),
            )
            .step(|| "join the sandbox user namespace".into())?;
            sys::become_id(0, 0, true).step(|| "become sandbox root".into())?;
        }
        (Owner::Invoker, None) => {
            sys::unshare(UnshareFlags::NEWUSER)
                .step(|| "unshare the inner user namespace".into())?;
            sys::write_id_maps(None, 0, 0, 1).step(|| "map the inner user namespace".into())?;
            sys::become_id(0, 0, false).step(|| "become sandbox root".into())?;
        }
        _ => {
            return Err(InitReport::Failed(
                "internal error: identity mode and user namespace disagree".into(),
            ));
        }
    }
    Ok(())
}

/// The clean environment of every sandbox process: fixed basics, then the
/// create-time `envs`.
fn environment(spec: &Spec, home: &std::path::Path, proxy_port: Option<u16>) -> Vec<CString> {
    let namespaced = home == std::path::Path::new(HOME);
    let user = if namespaced { "root" } else { "sandbox" };
    let home = home.to_string_lossy();
    let mut env: BTreeMap<String, String> = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", home.as_ref()),
        ("USER", user),
        ("LOGNAME", user),
        ("SHELL", "/bin/sh"),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if !namespaced {
        // The host's /tmp is not writable under Landlock; the sandbox has
        // its own next to its home.
        let tmp = std::path::Path::new(home.as_ref()).with_file_name("tmp");
        env.insert("TMPDIR".into(), tmp.to_string_lossy().into_owned());
    }
    if let Some(port) = proxy_port {
        let url = format!("http://127.0.0.1:{port}");
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
            env.insert(name.into(), url.clone());
            env.insert(name.to_ascii_lowercase(), url.clone());
        }
        let local = "localhost,127.0.0.1,::1".to_owned();
        env.insert("NO_PROXY".into(), local.clone());
        env.insert("no_proxy".into(), local);
    }
    env.extend(spec.envs.clone());
    env.into_iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect()
}
