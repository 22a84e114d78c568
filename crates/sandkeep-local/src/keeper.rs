//! The per-sandbox keeper: `sandkeep-keeper run HOME ID BUILD` (or
//! `sandkeep __keeper run …`, see `spawn::Keepers`).
//!
//! Started by a provider, it detaches (setsid, so no process-group signal
//! reaches it; the provider does not wait for it), prepares identity and
//! state, forks the init into fresh namespaces (or, where the kernel
//! refuses them, as a subreaper on the host), reports readiness on its
//! stdout, and then waits for one of: the deadline in `meta.json` (re-read
//! whenever it fires, so renewals need no signal), SIGTERM (kill_sandbox),
//! or the init's death. A paused sandbox has no deadline (SPEC §17): its
//! record is read again on SIGUSR1 (a resume) or once a minute; the
//! deadline of an `on_timeout: pause` sandbox pauses it instead. Then it kills the init (the kernel ends every
//! process of the pid namespace; without namespaces the keeper kills the
//! whole process tree itself), releases the sandbox's mount namespace (held
//! so that the teardown of its mounts is not part of the init's exit),
//! removes the sandbox's files and exits. It is single-threaded and runs no
//! async runtime; it never executes sandbox code itself. While it waits it
//! relays the sandbox's port forwards, from inside the sandbox's network
//! namespace, which it joins once the sandbox is ready (see `forward`).

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal};
use rustix::thread::UnshareFlags;
use serde::{Deserialize, Serialize};

use super::cgroup::{self, Resources};
use super::forward::{self, Relay};
use super::init::{self, InitContext, InitReport, Mode, NetPlan};
use super::proxy::{Policy as ProxyPolicy, Proxy};
use super::rootfs::Owner;
use super::state::{self, Home, Meta, SandboxDir, Spec};
use super::step::StepError;
use super::{etc_snapshot, pause, slots, sys, wire};
use sandkeep_proto::record::ProcessIdentity;
use sandkeep_provider::{
    Limits, Network, OnTimeout, ProviderError, SandboxId, SandboxInfo, SandboxState,
};

use self::userns::UsernsChild;

mod teardown;
mod userns;

/// What the keeper prints on its stdout once, for the provider that
/// started it.
#[derive(Debug, Serialize, Deserialize)]
pub enum Readiness {
    Ready {
        isolation: String,
        warnings: Vec<String>,
    },
    /// A parameter this host cannot enforce, and why: nothing was made.
    Unsupported(String),
    Failed(String),
}

/// Why a sandbox was not made: the stage of the setup that failed, with
/// its cause. It reaches the provider as its message in [`Readiness`].
#[derive(Debug, thiserror::Error)]
enum SetupError {
    /// A parameter this host cannot enforce, and why.
    #[error("{0}")]
    Unsupported(String),
    /// A record in the sandbox's directory (`spec.json`, `meta.json`).
    #[error("{step} {file}: {source}")]
    Record {
        step: &'static str,
        file: &'static str,
        #[source]
        source: io::Error,
    },
    /// The identity (pid and start time) of the keeper or its init.
    #[error("read the {whose} process identity: {source}")]
    Identity {
        whose: &'static str,
        #[source]
        source: io::Error,
    },
    /// Root's uid block (see `slots`).
    #[error(transparent)]
    UidSlot(#[from] slots::SlotError),
    /// The snapshotter of the host's `/etc` (see `etc_snapshot`).
    #[error(transparent)]
    EtcSnapshot(#[from] etc_snapshot::EtcSnapshotError),
    /// The sandbox's user namespace (see `userns`).
    #[error(transparent)]
    UserNamespace(#[from] userns::UsernsError),
    /// A limit asked for explicitly that the host's cgroups cannot enforce.
    #[error("`{limit}` cannot be enforced: {why}")]
    Limit { limit: &'static str, why: String },
    #[error("`disk_mib` cannot be enforced without namespaces")]
    DiskWithoutNamespaces,
    /// The egress proxy (see `proxy`).
    #[error(transparent)]
    Proxy(StepError),
    /// The sandbox's files on the host: a process-only sandbox's home and
    /// tmp, the task helper's link, the exec/file socket.
    #[error("{step}: {source}")]
    HostFiles {
        step: String,
        #[source]
        source: io::Error,
    },
    /// A step of the keeper's own: the report socket, forking the init,
    /// its pidfd, the signals it waits for.
    #[error("{step}: {source}")]
    Keeper {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    /// The init reported that building the sandbox failed (in its words).
    #[error("building the sandbox failed: {0}")]
    Init(String),
    #[error("the sandbox init died during setup")]
    InitDied,
    #[error("the init sent no socket for the egress proxy")]
    NoProxySocket,
}

impl SetupError {
    /// A failed step of the keeper's own.
    fn keeper<E: Into<io::Error>>(step: &'static str) -> impl FnOnce(E) -> Self {
        move |e| Self::Keeper {
            step,
            source: e.into(),
        }
    }

    /// A failed step on the sandbox's files on the host.
    fn host_files<E: Into<io::Error>>(step: impl Into<String>) -> impl FnOnce(E) -> Self {
        let step = step.into();
        move |e| Self::HostFiles {
            step,
            source: e.into(),
        }
    }
}

/// The build a keeper must be of: a fingerprint of the sources it is built
/// from (build.rs). The provider names its own, and a keeper of another
/// build (a stale `sandkeep-keeper` beside a new `sandkeep`, or an
/// executable replaced on disk under a running server) refuses to start
/// rather than misread the sandbox's records.
pub const BUILD: &str = env!("SANDKEEP_LOCAL_SOURCE");

/// The exit code of a keeper that refuses its arguments (another build's,
/// or none it knows) before doing anything.
pub const REFUSED: i32 = 2;

/// The signal that tells a keeper its sandbox's record has a new deadline
/// (a resume); every other signal it waits for ends the sandbox.
pub const RECORD_CHANGED: libc::c_int = libc::SIGUSR1;

/// Started ahead of its sandbox (see `spawn::Standby`): reads `HOME<TAB>ID`
/// from stdin up to its end (HOME as the bytes of the path, whatever they
/// are), then is that sandbox's keeper. Nothing before the end means it is
/// not needed.
pub fn standby() -> i32 {
    // Detached first: a Ctrl-C meant for the CLI must not reach it once it
    // has its sandbox.
    if let Err(e) = detach() {
        eprintln!("sandkeep keeper: setsid: {e}");
        return 1;
    }
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let mut job = Vec::new();
    if !matches!(io::stdin().read_to_end(&mut job), Ok(n) if n > 0) {
        return 0;
    }
    // The id has no tab; the path may.
    let Some(tab) = job.iter().rposition(|&b| b == b'\t') else {
        eprintln!("sandkeep keeper: a standby needs HOME<TAB>SANDBOX_ID");
        return REFUSED;
    };
    let id = match SandboxId::parse(&String::from_utf8_lossy(&job[tab + 1..])) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("sandkeep keeper: {e}");
            return REFUSED;
        }
    };
    let home = Home::new(PathBuf::from(std::ffi::OsStr::from_bytes(&job[..tab])));
    // Until now stderr went nowhere: the sandbox's keeper log, as a
    // keeper started for it has.
    if let Ok(log) = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(home.sandbox(&id).log())
    {
        let _ = rustix::stdio::dup2_stderr(&log);
    }
    run(home, id)
}

/// A session of its own, before anything else: no terminal's or server's
/// process-group signal reaches the keeper. It stays the provider's child,
/// which does not wait for it: when the provider exits it goes to the
/// host's init (or subreaper), like any orphan.
pub fn detach() -> rustix::io::Result<()> {
    rustix::process::setsid().map(drop)
}

pub fn run(home: Home, id: SandboxId) -> i32 {
    let dir = home.sandbox(&id);
    // Our stdout is the provider's readiness pipe; keep it aside so that no
    // descendant inherits it as stdio.
    let ready = match rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stdout(), 3) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("sandkeep keeper: {e}");
            return 1;
        }
    };
    if let Ok(null) = fs::File::open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    // Nothing of the server's process state that could pin or skew things:
    // not its working directory (a mount it keeps busy), not its umask.
    let _ = std::env::set_current_dir("/");
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    match start(&home, &dir) {
        Ok(mut sandbox) => {
            report(
                ready,
                &Readiness::Ready {
                    isolation: sandbox.meta.info.isolation.clone(),
                    warnings: sandbox.warnings.clone(),
                },
            );
            start_forwards(&dir, &mut sandbox);
            for &pid in &sandbox.exiting {
                let _ = sys::wait_for(pid);
            }
            watch(&dir, &mut sandbox);
            destroy(&dir, sandbox);
            0
        }
        Err(e) => {
            eprintln!("sandkeep keeper: {e}");
            report(
                ready,
                &match e {
                    SetupError::Unsupported(e) => Readiness::Unsupported(e),
                    e => Readiness::Failed(e.to_string()),
                },
            );
            cgroup::remove_recorded(&dir.path);
            let _ = state::remove_tree(&dir.path);
            slots::release_slot(&dir.path, None);
            1
        }
    }
}

fn report(fd: OwnedFd, readiness: &Readiness) {
    let mut f = fs::File::from(fd);
    let _ = f.write_all(&serde_json::to_vec(readiness).unwrap_or_default());
}

struct Running {
    meta: Meta,
    /// Children done with their work and exiting (the /etc snapshotter, whose
    /// clone of /etc dissolves at its exit, and the user-namespace maker):
    /// reaped once the provider has its answer.
    exiting: Vec<i32>,
    warnings: Vec<String>,
    init_pidfd: OwnedFd,
    signals: OwnedFd,
    /// The egress proxy, killed when dropped.
    proxy: Option<Proxy>,
    /// The sandbox's cgroups, removed once its processes are gone (kept
    /// here too: the sandbox's directory may be removed under us).
    cgroup_dirs: Vec<PathBuf>,
    /// The first host uid of the sandbox's uid block, when it has one:
    /// its slot is released by number.
    uid_base: Option<u32>,
    /// Where servers ask for port forwards, until the relay takes it over
    /// (see [`start_forwards`]).
    ports: Option<OwnedFd>,
    /// The sandbox's network namespace when it has one of its own, from
    /// the init: the relay joins it.
    netns: Option<OwnedFd>,
    /// The port forwards; dropped first at the end.
    relay: Option<Relay>,
    /// The init's mount namespace, held so that its teardown (every mount
    /// and file system of the sandbox, several RCU grace periods) happens
    /// here once the init is dead, not in the init's exit: whoever waits
    /// for the sandbox's processes to be gone does not wait for it too.
    mounts: Option<OwnedFd>,
}

fn start(home: &Home, dir: &SandboxDir) -> Result<Running, SetupError> {
    let spec: Spec = state::read_json(&dir.spec()).map_err(|source| SetupError::Record {
        step: "read",
        file: "spec.json",
        source,
    })?;
    let keeper = ProcessIdentity::own().map_err(|source| SetupError::Identity {
        whose: "keeper's",
        source,
    })?;
    let root = rustix::process::geteuid().is_root();
    // Root never runs a sandbox as itself: it gets a uid block either way.
    let base = if root {
        Some(slots::allocate_slot(home, &spec.sandbox_id)?)
    } else {
        None
    };
    // Root's base template shows a snapshot of what others may read of
    // the host's /etc, found (or made) by a snapshotter forked now, while
    // this process still sees the host's (see `etc_snapshot`); the
    // longest part of a create on a busy machine, it runs while the init
    // builds.
    let mut etc_snapshot = match base {
        Some(base) if spec.template_dir.is_none() && !spec.process_only => {
            Some(etc_snapshot::start(home, base)?)
        }
        _ => None,
    };
    let mut warnings = Vec::new();
    let mut net = net_plan(&spec);
    let userns_child = match base {
        Some(base) if !spec.process_only => Some(userns::fork_userns_child(base)?),
        _ => None,
    };
    // Made before the pid namespace: a child forked after it would be its
    // pid 1, and the namespace would die with it.
    let share_idmaps = match base {
        Some(base) if !spec.process_only => share_idmaps(&spec, base)?,
        _ => Vec::new(),
    };
    // Children that finish their work early and exit on their own: reaped
    // once the provider has its answer, off the create's path.
    let exiting: Vec<i32> = etc_snapshot
        .iter()
        .map(|w| w.pid)
        .chain(userns_child.iter().map(|c| c.pid))
        .collect();
    // Before any namespace: the cgroups are made with the host's view.
    let (cgroups, enforced) = limit_resources(&spec, dir, &mut warnings)?;
    let cgroup_dirs = cgroups.dirs.clone();
    let mut proxy = if net.proxy {
        Some(fork_proxy(&spec, home, base, &cgroups.doors).map_err(SetupError::Proxy)?)
    } else {
        None
    };
    let mode = choose_mode(&spec, base, userns_child, &mut warnings);
    let process_only = matches!(mode, Mode::ProcessOnly { .. });
    if process_only {
        net = NetPlan {
            isolate: false,
            proxy: false,
            ..net
        };
        proxy = None;
    }
    let (etc_snapshot, snapshot_go) = match etc_snapshot.take() {
        Some(s) => (Some(s.answer).filter(|_| !process_only), Some(s.go)),
        None => (None, None),
    };
    if process_only {
        host_dirs(home, dir, base)?;
    }
    let helper = helper_path(&spec, dir, process_only)?;
    let listener = listen(dir)?;
    let ports = forward::listen(dir).map_err(SetupError::host_files("listen for port requests"))?;
    let (report_r, report_w) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(SetupError::keeper("socketpair"))?;
    if process_only {
        // Orphans of the sandbox stay below the keeper even should the
        // init die first, so destroy() can find every one.
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(SetupError::keeper("PR_SET_CHILD_SUBREAPER"))?;
    }
    let mut info = sandbox_info(&spec, enforced, process_only, net)?;
    let memory_cgroup = memory_cgroup(&cgroup_dirs, enforced);
    let cgroup::Doors { mut tasks, v2 } = cgroups.doors;
    let work = cgroups.work;
    let init_pid = match fork_into(v2, &mut tasks).map_err(SetupError::keeper("fork the init"))? {
        sys::Forked::Child => init::run(InitContext {
            spec,
            dir: dir.clone(),
            mode,
            net,
            memory_cgroup,
            etc_snapshot,
            share_idmaps,
            listener,
            cgroups: tasks,
            work,
            report: report_w,
        }),
        sys::Forked::Parent(pid) => pid,
    };
    // From here the keeper only waits while the init builds the sandbox:
    // the snapshotter has a core to itself (see `etc_snapshot`).
    drop(snapshot_go);
    drop(tasks);
    drop(work);
    drop(report_w);
    drop(etc_snapshot);
    drop(listener);
    drop(mode);
    let init_pidfd = rustix::process::pidfd_open(
        Pid::from_raw(init_pid).expect("fork returns a positive pid"),
        PidfdFlags::empty(),
    )
    .map_err(SetupError::keeper("pidfd_open"))?;
    let netns = match read_report(&report_r, &mut info, &mut warnings, &mut proxy) {
        Ok(netns) => netns,
        Err(e) => {
            let _ = rustix::process::pidfd_send_signal(&init_pidfd, Signal::KILL);
            let _ = sys::wait_for(init_pid);
            // Done by now, or soon (the init no longer reads its answer).
            for &pid in &exiting {
                let _ = sys::wait_for(pid);
            }
            return Err(e);
        }
    };
    let init = ProcessIdentity::of(init_pid as u32).map_err(|source| SetupError::Identity {
        whose: "init's",
        source,
    })?;
    let mounts = if process_only {
        None
    } else {
        mount_namespace(init_pid)
    };
    let signals = sys::signalfd(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, RECORD_CHANGED])
        .map_err(SetupError::keeper("signalfd"))?;
    let meta = Meta {
        info,
        keeper,
        init,
        helper,
        process_only,
        ready_ns: sys::file_clock_now_ns(),
    };
    state::write_json(&dir.meta(), &meta).map_err(|source| SetupError::Record {
        step: "write",
        file: "meta.json",
        source,
    })?;
    Ok(Running {
        meta,
        exiting,
        warnings,
        init_pidfd,
        signals,
        proxy,
        cgroup_dirs,
        uid_base: base,
        ports: Some(ports),
        netns,
        relay: None,
        mounts,
    })
}

/// Starts relaying the port forwards, off the create's path (the provider
/// has its answer): the keeper joins the sandbox's network namespace, if
/// it has one. Requests that came meanwhile wait in
/// the listener's queue. Without it the sandbox works, unexposed.
fn start_forwards(dir: &SandboxDir, sandbox: &mut Running) {
    let Some(control) = sandbox.ports.take() else {
        return;
    };
    let netns = sandbox.netns.take();
    match Relay::new(dir, control, netns.as_ref().map(AsFd::as_fd)) {
        Ok(r) => sandbox.relay = Some(r),
        Err(e) => eprintln!("sandkeep keeper: no port forwards: {e}"),
    }
}

/// The egress proxy of `spec`'s sandbox. Forked before any namespace is
/// entered, so it lives on the host, and into the sandbox's cgroups,
/// which bound its work as the sandbox's own.
fn fork_proxy(
    spec: &Spec,
    home: &Home,
    base: Option<u32>,
    doors: &cgroup::Doors,
) -> Result<Proxy, StepError> {
    let policy = ProxyPolicy::new(
        spec.allow_hosts.clone(),
        spec.egress_trust.clone(),
        home.root(),
    );
    Proxy::fork(policy, base.map(slots::proxy_uid), doors)
}

/// Root mode: a user namespace per share to idmap its mount through, one
/// per distinct owner of the share directories (see
/// `userns::share_idmap`); `None` where making it failed: the init then
/// mounts the share unmapped, or refuses it when it is `rw`.
fn share_idmaps(spec: &Spec, base: u32) -> Result<Vec<Option<OwnedFd>>, SetupError> {
    use std::os::unix::fs::MetadataExt;
    let mut made: Vec<((u32, u32), Option<OwnedFd>)> = Vec::new();
    let mut out = Vec::new();
    for share in &spec.shares {
        let md = fs::metadata(&share.path).map_err(SetupError::host_files(format!(
            "stat the share {}",
            share.path
        )))?;
        let owner = (md.uid(), md.gid());
        if !made.iter().any(|(o, _)| *o == owner) {
            let userns = userns::share_idmap(base, owner.0, owner.1).ok();
            made.push((owner, userns));
        }
        let fd = made
            .iter()
            .find(|(o, _)| *o == owner)
            .and_then(|(_, fd)| fd.as_ref());
        out.push(
            fd.map(OwnedFd::try_clone)
                .transpose()
                .map_err(SetupError::keeper("dup"))?,
        );
    }
    Ok(out)
}

/// The sandbox's namespaces, or the process-only mode with a warning
/// saying why when there are none (the configuration asks for it, or the
/// kernel refuses one).
fn choose_mode(
    spec: &Spec,
    base: Option<u32>,
    userns_child: Option<UsernsChild>,
    warnings: &mut Vec<String>,
) -> Mode {
    let why = if spec.process_only {
        "the configuration asks for process-only sandboxes".to_owned()
    } else {
        match namespaces(base, userns_child) {
            Ok(mode) => return mode,
            Err(e) => e.to_string(),
        }
    };
    warnings.push(format!(
        "no namespaces ({why}): sandbox processes share the host's process table, network and \
         read view of the filesystem; run `sandkeep doctor`"
    ));
    Mode::ProcessOnly { uid: base }
}

/// A process-only sandbox's home and TMPDIR on the host (a namespaced
/// sandbox has both on its disk, see `rootfs`), its uid's when it has one.
fn host_dirs(home: &Home, dir: &SandboxDir, base: Option<u32>) -> Result<(), SetupError> {
    for d in [dir.home(), dir.tmp()] {
        fs::create_dir_all(&d).map_err(SetupError::host_files(format!("mkdir {}", d.display())))?;
    }
    fs::set_permissions(dir.home(), fs::Permissions::from_mode(0o700))
        .map_err(SetupError::host_files("chmod home"))?;
    if let Some(base) = base {
        for d in [dir.home(), dir.tmp()] {
            std::os::unix::fs::chown(&d, Some(base), Some(base))
                .map_err(SetupError::host_files(format!("chown {}", d.display())))?;
        }
        // The sandbox's uid must reach its own directory on the host.
        for d in [
            home.root().to_path_buf(),
            home.sandboxes(),
            dir.path.clone(),
        ] {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o711))
                .map_err(SetupError::host_files(format!("chmod {}", d.display())))?;
        }
    }
    Ok(())
}

/// Where the sandbox's processes find the task helper: a link to the
/// executable in a process-only sandbox's directory, else the path the
/// root filesystem binds it to.
fn helper_path(spec: &Spec, dir: &SandboxDir, process_only: bool) -> Result<String, SetupError> {
    Ok(if process_only {
        let bin = dir.path.join("bin");
        fs::create_dir_all(&bin)
            .map_err(SetupError::host_files(format!("mkdir {}", bin.display())))?;
        let link = bin.join(state::HELPER_NAME);
        std::os::unix::fs::symlink(&spec.exe, &link)
            .map_err(SetupError::host_files("link the task helper"))?;
        link.to_string_lossy().into_owned()
    } else {
        format!("/{}/{}", state::HELPER_DIR, state::HELPER_NAME)
    })
}

/// The sandbox's exec/file socket, its owner's alone.
fn listen(dir: &SandboxDir) -> Result<OwnedFd, SetupError> {
    let _ = fs::remove_file(dir.socket());
    let listener = wire::listen(&dir.socket())
        .map_err(SetupError::host_files("listen on the sandbox socket"))?;
    fs::set_permissions(dir.socket(), fs::Permissions::from_mode(0o600))
        .map_err(SetupError::host_files("chmod socket"))?;
    Ok(listener)
}

/// The sandbox's record as far as the keeper knows it before the init
/// reports (no isolation level yet).
fn sandbox_info(
    spec: &Spec,
    enforced: Resources,
    process_only: bool,
    net: NetPlan,
) -> Result<SandboxInfo, SetupError> {
    let mut info = SandboxInfo {
        sandbox_id: spec.sandbox_id.clone(),
        template: spec.template.clone(),
        created_at: spec.created_at,
        expires_at: spec.created_at + spec.timeout,
        timeout: spec.timeout,
        retained: false,
        isolation: String::new(),
        // Filled in by record_network from what is actually enforced.
        network: None,
        allow_hosts: Vec::new(),
        limits: enforced_limits(enforced, spec, process_only)?,
        shares: spec.shares.clone(),
        shares_since_ns: spec.shares_since_ns,
        ports: Vec::new(),
        state: SandboxState::Running,
        on_timeout: spec.on_timeout,
    };
    record_network(&mut info, spec, net)?;
    Ok(info)
}

/// Forks the init, born in the v2 cgroup when there is one; where the
/// kernel cannot fork into it, the init enters it itself by its
/// `cgroup.procs`, added to `tasks`.
fn fork_into(v2: Option<cgroup::V2Door>, tasks: &mut Vec<OwnedFd>) -> io::Result<sys::Forked> {
    match v2 {
        Some(v2) => sys::fork_into(v2.dir.as_fd()).or_else(|e| {
            eprintln!("sandkeep keeper: cannot fork into the cgroup ({e}); the init moves itself");
            tasks.push(v2.procs);
            sys::fork()
        }),
        None => sys::fork(),
    }
}

/// Reads the init's report: its isolation level and warnings into `info`
/// and `warnings`, and the egress proxy's listening socket, with which
/// the proxy starts (or is dropped, when the sandbox got no network
/// namespace). Returns the sandbox's network namespace when it has one.
/// An error is why the sandbox was not made.
fn read_report(
    report: &OwnedFd,
    info: &mut SandboxInfo,
    warnings: &mut Vec<String>,
    proxy: &mut Option<Proxy>,
) -> Result<Option<OwnedFd>, SetupError> {
    let mut buf = vec![0u8; 256 * 1024];
    let (n, mut fds) = wire::recv(report, &mut buf).unwrap_or_default();
    buf.truncate(n);
    info.isolation = match serde_json::from_slice::<InitReport>(&buf) {
        Ok(InitReport::Ready {
            isolation,
            warnings: more,
            network,
        }) => {
            warnings.extend(more);
            if !network {
                // No namespace to isolate: nothing is enforced, no proxy.
                *proxy = None;
                info.network = None;
                info.allow_hosts.clear();
            }
            isolation
        }
        Ok(InitReport::Unsupported(e)) => return Err(SetupError::Unsupported(e)),
        Ok(InitReport::Failed(e)) => return Err(SetupError::Init(e)),
        Err(_) => return Err(SetupError::InitDied),
    };
    if let Some(proxy) = proxy.as_mut() {
        let listener = fds.pop().ok_or(SetupError::NoProxySocket)?;
        proxy.start(listener).map_err(SetupError::Proxy)?;
    }
    // What is left: the namespace, first of the descriptors.
    Ok(fds.pop())
}

/// The init's mount namespace. The init cannot have been reaped (its
/// pidfd is ours, unwaited): the path names it. An ordinary user's keeper
/// may not open it (the init is not dumpable); the teardown then stays in
/// the init's exit.
fn mount_namespace(init_pid: i32) -> Option<OwnedFd> {
    let path = format!("/proc/{init_pid}/ns/mnt");
    let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
    rustix::fs::open(path, flags, rustix::fs::Mode::empty()).ok()
}

/// The resource limits the sandbox asks for, each its default when
/// unset.
fn wanted_resources(spec: &Spec) -> Resources {
    use sandkeep_proto::limits as l;
    let asked = &spec.limits;
    Resources {
        memory_mib: Some(asked.memory_mib.unwrap_or(l::MEMORY_MIB_DEFAULT)),
        milli_cpus: Some(asked.milli_cpus.unwrap_or(l::MILLI_CPUS_DEFAULT)),
        pids: Some(asked.pids.unwrap_or(l::PIDS_DEFAULT)),
    }
}

/// Creates the sandbox's cgroups; returns them and what they enforce. A
/// default limit the host cannot enforce is a warning (`None` in the
/// result), an explicitly requested one an error.
fn limit_resources(
    spec: &Spec,
    dir: &SandboxDir,
    warnings: &mut Vec<String>,
) -> Result<(cgroup::Cgroups, Resources), SetupError> {
    let want = wanted_resources(spec);
    let (cgroups, enforced, failed) =
        cgroup::create(&spec.sandbox_id, &want, &dir.path.join(cgroup::RECORD));
    for (controller, why) in failed {
        let explicit = match controller {
            cgroup::Controller::Memory => spec.limits.memory_mib.is_some(),
            cgroup::Controller::Pids => spec.limits.pids.is_some(),
            cgroup::Controller::Cpu => spec.limits.milli_cpus.is_some(),
        };
        if explicit {
            // run() removes the cgroups already made, with the directory.
            return Err(SetupError::Limit {
                limit: controller.limit(),
                why,
            });
        }
        warnings.push(format!(
            "the {} limit is not enforced: {why}; run `sandkeep doctor`",
            controller.name()
        ));
    }
    Ok((cgroups, enforced))
}

/// The cgroup that carries the sandbox's memory limit, if it has one: the
/// one with the memory controller's OOM-kill counter (v2 `memory.events`,
/// v1 `memory.oom_control`).
fn memory_cgroup(dirs: &[PathBuf], enforced: Resources) -> Option<PathBuf> {
    enforced.memory_mib?;
    dirs.iter()
        .find(|d| d.join("memory.events").exists() || d.join("memory.oom_control").exists())
        .cloned()
}

/// What the sandbox's record says is enforced: the cgroups' limits, and
/// `disk_mib` wherever there is a mount namespace to size its disk in.
fn enforced_limits(
    enforced: Resources,
    spec: &Spec,
    process_only: bool,
) -> Result<Limits, SetupError> {
    let disk_mib = if process_only {
        if spec.limits.disk_mib.is_some() {
            return Err(SetupError::DiskWithoutNamespaces);
        }
        None
    } else {
        Some(
            spec.limits
                .disk_mib
                .unwrap_or(sandkeep_proto::limits::DISK_MIB_DEFAULT),
        )
    };
    Ok(Limits {
        memory_mib: enforced.memory_mib,
        milli_cpus: enforced.milli_cpus,
        pids: enforced.pids,
        disk_mib,
    })
}

/// What the sandbox's network will be (the default is internet).
/// Without namespaces (decided later) there is no isolation at all.
fn net_plan(spec: &Spec) -> NetPlan {
    NetPlan {
        isolate: !spec.process_only,
        proxy: !spec.process_only && spec.network.unwrap_or_default() == Network::Internet,
        explicit: spec.network.is_some() || !spec.allow_hosts.is_empty(),
    }
}

/// What `info` reports as enforced, and the refusal of an explicit
/// network request that a sandbox without namespaces cannot honour.
fn record_network(info: &mut SandboxInfo, spec: &Spec, net: NetPlan) -> Result<(), SetupError> {
    if !net.isolate {
        if net.explicit {
            return Err(SetupError::Unsupported(
                "this host refuses namespaces, so the sandbox would share the host's \
                 network: network and allow_hosts cannot be enforced (run `sandkeep doctor`)"
                    .into(),
            ));
        }
        return Ok(());
    }
    info.network = Some(if net.proxy {
        Network::Internet
    } else {
        Network::None
    });
    if net.proxy {
        info.allow_hosts = spec.allow_hosts.clone();
    }
    Ok(())
}

/// Prepares the namespaced mode: root gets a user namespace shifted to its
/// uid block, an ordinary user moves the keeper into one where it is root;
/// then the pid namespace that the init will be pid 1 of.
fn namespaces(base: Option<u32>, userns_child: Option<UsernsChild>) -> Result<Mode, SetupError> {
    let mode = match base.zip(userns_child) {
        Some((base, child)) => Mode::Namespaces {
            owner: Owner::Shifted { base },
            userns: Some(userns::shifted_userns(child, base)?),
        },
        None => {
            userns::enter_invoker_userns()?;
            Mode::Namespaces {
                owner: Owner::Invoker,
                userns: None,
            }
        }
    };
    // Only children enter the new pid namespace.
    sys::unshare(UnshareFlags::NEWPID).map_err(|source| SetupError::Keeper {
        step: "unshare(CLONE_NEWPID)",
        source,
    })?;
    Ok(mode)
}

/// Waits until the deadline, a kill request or the init's death, relaying
/// the port forwards meanwhile. A paused sandbox has no deadline; one
/// created with `on_timeout: pause` is paused at its deadline.
fn watch(dir: &SandboxDir, sandbox: &mut Running) {
    let mut expires_at = sandbox.meta.info.expires_at;
    let mut paused = sandbox.meta.info.state == SandboxState::Paused;
    let mut reread = false;
    loop {
        if reread {
            reread = false;
            match state::read_json::<Meta>(&dir.meta()) {
                Ok(m) => {
                    expires_at = m.info.expires_at;
                    paused = m.info.state == SandboxState::Paused;
                }
                Err(_) => return,
            }
        }
        let deadline = UNIX_EPOCH + Duration::from_secs(expires_at);
        let left = if paused {
            Duration::MAX
        } else {
            deadline
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        };
        if left.is_zero() {
            // Renewals move the deadline in meta.json, a pause removes
            // it; re-read it before acting on the old one.
            match state::read_json::<Meta>(&dir.meta()) {
                Ok(m) if m.info.state == SandboxState::Paused => {
                    paused = true;
                    continue;
                }
                Ok(m) if m.info.expires_at > expires_at => {
                    expires_at = m.info.expires_at;
                    continue;
                }
                Ok(m) if m.info.on_timeout.pauses() => {
                    let pause = if m.info.on_timeout == OnTimeout::PauseFiles {
                        pause::pause_files_only
                    } else {
                        pause::pause
                    };
                    match pause(dir) {
                        Ok(_) | Err(ProviderError::AlreadyInState { .. }) => paused = true,
                        Err(e) => {
                            eprintln!(
                                "sandkeep keeper: the deadline's pause failed ({e}); ending the sandbox"
                            );
                            return;
                        }
                    }
                    continue;
                }
                _ => return,
            }
        }
        // Wake at least once a minute: wall-clock jumps move the deadline.
        // Connections with more to move than one round moves: no wait.
        let wait = match &sandbox.relay {
            Some(r) if r.busy() => Duration::ZERO,
            _ => left.min(Duration::from_secs(60)),
        };
        let timeout = rustix::event::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let relay_ready = {
            let mut fds = vec![
                PollFd::new(&sandbox.init_pidfd, PollFlags::IN),
                PollFd::new(&sandbox.signals, PollFlags::IN),
            ];
            if let Some(r) = &sandbox.relay {
                fds.push(PollFd::from_borrowed_fd(r.as_fd(), PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) => {
                    if !fds[0].revents().is_empty() {
                        return;
                    }
                    if !fds[1].revents().is_empty() {
                        let signals = sys::drain_signalfd(sandbox.signals.as_fd());
                        if signals.iter().any(|&s| s != RECORD_CHANGED as u32) {
                            return;
                        }
                        reread = !signals.is_empty();
                    }
                    fds.get(2).is_some_and(|f| !f.revents().is_empty())
                }
                Err(e) if e == rustix::io::Errno::INTR => false,
                Err(_) => return,
            }
        };
        if let Some(r) = sandbox.relay.as_mut().filter(|r| relay_ready || r.busy()) {
            r.round();
            continue;
        }
        if left > wait {
            reread |= paused;
            continue;
        }
        reread = true;
    }
}

fn destroy(dir: &SandboxDir, mut sandbox: Running) {
    // meta.json first: from now on no provider lists the sandbox, also
    // while a session end that waits only for its processes has returned
    // and the rest below is still under way.
    let _ = fs::remove_file(dir.meta());
    // Then the forwards: once kill_sandbox returns, no host port leads
    // into the sandbox.
    drop(sandbox.relay.take());
    if sandbox.meta.process_only {
        teardown::kill_descendants();
    }
    // Pid 1's death makes the kernel kill every process in the namespace,
    // including those that called setsid or double-forked. Its mount
    // namespace outlives them in `mounts`, released just below.
    let _ = rustix::process::pidfd_send_signal(&sandbox.init_pidfd, Signal::KILL);
    // A paused sandbox's processes die only once thawed (cgroup v1).
    pause::thaw_for_destruction(&sandbox.cgroup_dirs);
    let _ = sys::wait_for(sandbox.meta.init.pid as i32);
    // Its files are memory charged to its cgroups: gone before those.
    drop(sandbox.mounts.take());
    drop(sandbox.proxy.take());
    while sys::reap_any().is_some() {}
    cgroup::remove(&sandbox.cgroup_dirs);
    if let Err(e) = state::remove_tree(&dir.path) {
        eprintln!("sandkeep keeper: removing {}: {e}", dir.path.display());
    }
    slots::release_slot(&dir.path, sandbox.uid_base);
}
