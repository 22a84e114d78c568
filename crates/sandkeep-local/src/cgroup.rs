//! Per-sandbox resource limits with cgroups: where each controller lives
//! on this host (v2 unified, else a v1 hierarchy), creating a sandbox's
//! cgroups with its memory, pids and cpu limits, moving its init into
//! them before it runs anything of the sandbox, and removal once the
//! sandbox's processes are gone.
//!
//! Layout: v2 `BASE/sandkeep/<id>` with the controllers enabled in the
//! `subtree_control` of `BASE` and `BASE/sandkeep` (`BASE` is the v2 mount
//! as root, else the parent of this process's own cgroup when the user may
//! write it: a delegated subtree); v1 `MOUNT/sandkeep/<id>` in each
//! hierarchy that carries a needed controller. The created directories are
//! recorded in the sandbox's directory (`cgroups`), so that whoever cleans
//! up a dead sandbox removes them too. It never signals a process.
//!
//! Freezing (pause, SPEC §17): the leaf that can freeze (the v2 leaf when
//! the sandbox has one, else a v1 `freezer` leaf, else a v2 leaf of its
//! own) has a child, `w` ([`WORK`]), where every command of the sandbox
//! runs; the init, its fork server, stays in the leaf and is never frozen,
//! so the task tools still read a paused sandbox (see [`WorkDoor`]).

use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use sandkeep_provider::{Limits, SandboxId};

/// The CFS period written with a cpu quota (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// Name of the directory below each hierarchy's base that holds sandboxes.
const PARENT: &str = "sandkeep";
/// The record of created cgroup directories, in the sandbox's directory.
pub const RECORD: &str = "cgroups";
/// The child of the freezing leaf where the sandbox's commands run.
pub const WORK: &str = "w";

/// The resource limits of one sandbox: what is asked (`None` = the
/// provider's default) or what is enforced (`None` = not enforced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub memory_mib: Option<u64>,
    pub milli_cpus: Option<u32>,
    pub pids: Option<u64>,
}

/// The controllers sandkeep uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The create_sandbox parameter it enforces.
    pub fn limit(self) -> &'static str {
        match self {
            Controller::Memory => "memory_mib",
            Controller::Pids => "pids",
            Controller::Cpu => "cpus",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// Where one controller is on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The unified hierarchy; sandboxes go below `base`.
    V2 { base: PathBuf },
    /// A v1 hierarchy mounted at `mount`.
    V1 { mount: PathBuf },
    /// Not usable, and why.
    Missing(String),
}

/// The cgroup mounts of `/proc/self/mounts`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    pub v2: Option<PathBuf>,
    /// Each v1 hierarchy's mount point with its controllers.
    pub v1: Vec<(PathBuf, Vec<String>)>,
}

/// Undoes the octal escapes of `/proc/mounts` fields (`\040` = space).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_mounts(text: &str) -> Mounts {
    let mut m = Mounts::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let target = PathBuf::from(unescape(f[1]));
        match f[2] {
            "cgroup2" if m.v2.is_none() => m.v2 = Some(target),
            "cgroup" => {
                let controllers = f[3]
                    .split(',')
                    .filter(|o| {
                        Controller::ALL.iter().any(|c| c.name() == *o)
                            || *o == "cpuacct"
                            || *o == FREEZER
                    })
                    .map(str::to_owned)
                    .collect::<Vec<_>>();
                if !controllers.is_empty() {
                    m.v1.push((target, controllers));
                }
            }
            _ => {}
        }
    }
    m
}

/// The names in a `cgroup.controllers` or `cgroup.subtree_control` file.
pub fn parse_controllers(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// This process's cgroup in the unified hierarchy (`0::/path` of
/// `/proc/self/cgroup`).
pub fn own_v2_path(proc_self_cgroup: &str) -> Option<String> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The `cpu.max` line for `milli` thousandths of a CPU.
pub fn cpu_max_line(milli: u32) -> String {
    format!("{} {CPU_PERIOD_US}", cpu_quota_us(milli))
}

/// The CFS quota for `milli` thousandths of a CPU per [`CPU_PERIOD_US`];
/// the kernel refuses quotas under 1 ms.
pub fn cpu_quota_us(milli: u32) -> u64 {
    (u64::from(milli) * CPU_PERIOD_US / 1000).max(1000)
}

fn writable(p: &Path) -> bool {
    rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok()
}

/// Where each of [`Controller::ALL`] lives on this host, in that order.
pub fn detect() -> [Place; 3] {
    let mounts = fs::read_to_string("/proc/self/mounts")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default();
    let v2_base = v2_base(&mounts);
    let read = |base: &PathBuf, file: &str| {
        fs::read_to_string(base.join(file))
            .map(|t| parse_controllers(&t))
            .unwrap_or_default()
    };
    let mut v2_available = v2_base
        .as_ref()
        .map(|b| read(b, "cgroup.controllers"))
        .unwrap_or_default();
    let v2_busy = v2_base.as_deref().is_some_and(holds_processes);
    if let (Some(base), true) = (&v2_base, v2_busy) {
        // Only what is on already can serve the children.
        let on = read(base, "cgroup.subtree_control");
        v2_available.retain(|c| on.contains(c));
    }
    decide(
        &mounts,
        v2_base.as_deref(),
        &v2_available,
        v2_busy,
        writable,
    )
}

/// The v2 directory sandboxes go below: the mount as root, else a
/// delegated subtree, the parent of this process's own cgroup, where an
/// ordinary user may create cgroups and move processes.
fn v2_base(mounts: &Mounts) -> Option<PathBuf> {
    let mount = mounts.v2.as_ref()?;
    if rustix::process::geteuid().is_root() {
        return Some(mount.clone());
    }
    let own = own_v2_path(&fs::read_to_string("/proc/self/cgroup").ok()?)?;
    let parent = Path::new(own.trim_start_matches('/')).parent()?;
    let base = mount.join(parent);
    (writable(&base) && writable(&base.join("cgroup.procs"))).then_some(base)
}

/// Whether the v2 cgroup `dir` holds processes itself while not being the
/// hierarchy's true root: the kernel then refuses to enable a controller
/// for its children ("no internal processes", EBUSY). This is the root of
/// a container's cgroup namespace, where the container's own processes
/// sit. The true root is exempt, and is the one cgroup without a
/// `cgroup.type` file.
fn holds_processes(dir: &Path) -> bool {
    dir.join("cgroup.type").exists()
        && fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|t| !t.trim().is_empty())
}

/// Where each controller is, given the mounts, the v2 directory sandboxes
/// would go below (if any), the controllers it offers to its children,
/// whether it holds processes itself (see [`holds_processes`]), and which
/// v1 hierarchies this user may write: v2 first, then v1.
pub fn decide(
    mounts: &Mounts,
    v2_base: Option<&Path>,
    v2_available: &[String],
    v2_busy: bool,
    v1_writable: impl Fn(&Path) -> bool,
) -> [Place; 3] {
    Controller::ALL.map(|c| {
        if let Some(base) = v2_base
            && v2_available.iter().any(|n| n == c.name())
        {
            return Place::V2 {
                base: base.to_path_buf(),
            };
        }
        match mounts
            .v1
            .iter()
            .find(|(_, cs)| cs.iter().any(|n| n == c.name()))
        {
            Some((mount, _)) if v1_writable(mount) => Place::V1 {
                mount: mount.clone(),
            },
            Some((mount, _)) => Place::Missing(format!(
                "the cgroup v1 {} hierarchy at {} is not writable by this user",
                c.name(),
                mount.display()
            )),
            None if v2_busy => Place::Missing(format!(
                "the cgroup v2 directory {} holds processes itself (the root of a container's \
                 cgroup namespace?), so the {} controller cannot be enabled below it; move \
                 those processes into a child cgroup first",
                v2_base
                    .map(Path::display)
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                c.name()
            )),
            None if mounts.v2.is_some() && v2_base.is_none() => Place::Missing(format!(
                "no delegated cgroup v2 subtree is writable by this user for the {} controller",
                c.name()
            )),
            None => Place::Missing(format!(
                "the {} controller is neither enabled in cgroup v2 nor mounted as cgroup v1",
                c.name()
            )),
        }
    })
}

/// Why each limit `asked` names explicitly cannot be enforced here (a
/// default that cannot is reported as not enforced instead): the
/// controllers this host lacks, and `disk_mib` without a mount namespace.
pub fn unenforceable(asked: &Limits, process_only: bool) -> Vec<(&'static str, String)> {
    let mut refused = Vec::new();
    let explicit = [
        asked.memory_mib.is_some(),
        asked.pids.is_some(),
        asked.milli_cpus.is_some(),
    ];
    if explicit.contains(&true) {
        for ((c, place), explicit) in Controller::ALL.into_iter().zip(detect()).zip(explicit) {
            if let (Place::Missing(why), true) = (place, explicit) {
                refused.push((c.limit(), why));
            }
        }
    }
    if asked.disk_mib.is_some() && process_only {
        refused.push((
            "disk_mib",
            "process-only sandboxes have no mount namespace to size".to_owned(),
        ));
    }
    refused
}

/// [`unenforceable`] as the message of a refusal, naming each limit and
/// why.
pub fn refuse_unenforceable(asked: &Limits, process_only: bool) -> Result<(), String> {
    let refused = unenforceable(asked, process_only);
    if refused.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = refused
        .iter()
        .map(|(limit, why)| format!("`{limit}` ({why})"))
        .collect();
    Err(format!(
        "this host cannot enforce {}; create the sandbox without {} (`sandkeep doctor` says what to fix)",
        list.join(", "),
        if refused.len() == 1 { "it" } else { "them" }
    ))
}

/// The v1 controller that freezes.
const FREEZER: &str = "freezer";

/// A sandbox's created cgroups.
#[derive(Debug, Default)]
pub struct Cgroups {
    /// Every created directory, children before their parents.
    pub dirs: Vec<PathBuf>,
    /// The doors of the leaves, opened for the init to enter by.
    pub doors: Doors,
    /// Where the init's fork server puts the sandbox's commands; `None`
    /// where this host cannot freeze (pause is then refused).
    pub work: Option<WorkDoor>,
}

/// The init's way into the work cgroup [`WORK`], for each process it
/// forks: born there (v2, `clone3`), or moving its one thread there (v1
/// `tasks`) before it runs anything; and whether the cgroup is frozen,
/// when a process it forks stays in the init's own (unfrozen) leaf
/// instead: only sandkeep's task helper is asked to run on a paused
/// sandbox (every other request resumes it first). The descriptors are
/// the init's alone: the sandbox cannot read its `/proc/1/fd`.
#[derive(Debug)]
pub struct WorkDoor {
    /// v2: the directory, to fork into.
    dir: Option<OwnedFd>,
    /// v1 `tasks`, or v2 `cgroup.procs` where `clone3` is refused.
    enter: OwnedFd,
    /// v1 `freezer.state`, v2 `cgroup.freeze`.
    state: OwnedFd,
}

impl WorkDoor {
    fn open(work: &Path, v2: bool) -> io::Result<Self> {
        let open = |name: &str, write: bool| {
            fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(work.join(name))
                .map(OwnedFd::from)
        };
        Ok(if v2 {
            Self {
                dir: Some(fs::File::open(work)?.into()),
                enter: open("cgroup.procs", true)?,
                state: open("cgroup.freeze", false)?,
            }
        } else {
            Self {
                dir: None,
                enter: open("tasks", true)?,
                state: open("freezer.state", false)?,
            }
        })
    }

    /// Its descriptors, for the init to keep open.
    pub fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let mut fds = vec![self.enter.as_raw_fd(), self.state.as_raw_fd()];
        fds.extend(self.dir.as_ref().map(AsRawFd::as_raw_fd));
        fds
    }

    /// Whether the work cgroup is frozen or freezing.
    pub fn frozen(&self) -> bool {
        let mut buf = [0u8; 32];
        match rustix::io::pread(&self.state, &mut buf, 0) {
            Ok(n) => {
                let text = &buf[..n];
                text.starts_with(b"1") || text.starts_with(b"FR")
            }
            Err(_) => false,
        }
    }

    /// Forks a process into the work cgroup (see [`WorkDoor`]); one that
    /// cannot get there exits with 127 before running anything.
    pub fn fork(&self) -> io::Result<crate::sys::Forked> {
        use crate::sys;
        if let Some(dir) = &self.dir
            && let Ok(forked) = sys::fork_into(std::os::fd::AsFd::as_fd(dir))
        {
            return Ok(forked);
        }
        let forked = sys::fork()?;
        if matches!(forked, sys::Forked::Child) && rustix::io::write(&self.enter, b"0").is_err() {
            sys::exit_now(127);
        }
        Ok(forked)
    }
}

/// How the init gets into its cgroups without waiting on the kernel.
///
/// Moving a process (a pid, or `0` for oneself, written to
/// `cgroup.procs`) takes the cgroup threadgroup lock's writer side, which
/// waits for an RCU grace period: 7-20 ms measured on a cgroup v1 host,
/// once the largest part of a fresh sandbox's create. Two ways skip it:
/// a single-threaded process moving only its one thread (`0` written to a
/// v1 `tasks` file), and a child born in a v2 cgroup (`clone3` with
/// `CLONE_INTO_CGROUP`, see `sys::fork_into`). The init is single-threaded
/// and enters its v1 leaves first thing; the keeper forks it into its v2
/// leaf (or, where the kernel cannot, the init enters that one too, and
/// waits).
#[derive(Debug, Default)]
pub struct Doors {
    /// `tasks` of each v1 leaf.
    pub tasks: Vec<OwnedFd>,
    /// The v2 leaf (the unified hierarchy has one).
    pub v2: Option<V2Door>,
}

#[derive(Debug)]
pub struct V2Door {
    /// The leaf directory, to fork the init into.
    pub dir: OwnedFd,
    /// Its `cgroup.procs`, for the init to enter by (and wait) where the
    /// kernel cannot fork into a cgroup.
    pub procs: OwnedFd,
}

/// Moves the calling thread into the cgroup of each of `doors` (v1
/// `tasks`, or a v2 `cgroup.procs`). Run by the init first thing, while it
/// is single-threaded: the thread is then the whole process, and every
/// process of the sandbox descends from it.
pub fn enter(doors: &[OwnedFd]) -> io::Result<()> {
    for fd in doors {
        rustix::io::write(fd, b"0")?;
    }
    Ok(())
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("write {value:?} to {}: {e}", path.display()),
            )
        })
}

fn mkdir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => {
            other.map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", path.display())))
        }
    }
}

/// Enables `c` for the children of `dir` (v2) unless it is on already.
/// One controller per write: one the kernel refuses (say cpu, with
/// realtime threads about) must not take the others with it.
fn enable(dir: &Path, c: Controller) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let on = parse_controllers(&fs::read_to_string(&file)?);
    if on.iter().any(|o| o == c.name()) {
        return Ok(());
    }
    write(&file, &format!("+{}", c.name()))
}

/// Writes one controller's limit into `dir`.
fn apply(c: Controller, dir: &Path, v2: bool, want: &Resources) -> io::Result<()> {
    match (c, v2) {
        (Controller::Memory, true) => {
            let bytes = want.memory_mib.unwrap_or(0) << 20;
            write(&dir.join("memory.max"), &bytes.to_string())?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
            Ok(())
        }
        (Controller::Memory, false) => {
            let bytes = (want.memory_mib.unwrap_or(0) << 20).to_string();
            write(&dir.join("memory.limit_in_bytes"), &bytes)?;
            // With swap accounting: memory + swap bounded by the same.
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes)?;
            }
            Ok(())
        }
        (Controller::Pids, _) => write(&dir.join("pids.max"), &want.pids.unwrap_or(0).to_string()),
        (Controller::Cpu, true) => write(
            &dir.join("cpu.max"),
            &cpu_max_line(want.milli_cpus.unwrap_or(0)),
        ),
        (Controller::Cpu, false) => {
            write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
            write(
                &dir.join("cpu.cfs_quota_us"),
                &cpu_quota_us(want.milli_cpus.unwrap_or(0)).to_string(),
            )
        }
    }
}

/// Whether `milli` thousandths of a CPU are at least all the CPUs this
/// process may run on (its affinity), so that no quota is needed.
fn cpu_quota_is_moot(milli: u32) -> bool {
    std::thread::available_parallelism().is_ok_and(|n| u64::from(milli) >= 1000 * n.get() as u64)
}

fn wanted(c: Controller, want: &Resources) -> bool {
    match c {
        Controller::Memory => want.memory_mib.is_some(),
        Controller::Pids => want.pids.is_some(),
        Controller::Cpu => want.milli_cpus.is_some(),
    }
}

/// Creates the cgroups of sandbox `id` with the limits of `want` (each
/// `Some`), as far as this host allows; returns them, what is enforced, and
/// for each limit that is not, why. The directories are recorded in
/// `record` before any is created.
pub fn create(
    id: &SandboxId,
    want: &Resources,
    record: &Path,
) -> (Cgroups, Resources, Vec<(Controller, String)>) {
    let places = detect();
    let mut cg = Cgroups::default();
    let mut enforced = Resources::default();
    let mut failed = Vec::new();
    // Leaf directory -> the controllers it carries.
    let mut leaves: Vec<(PathBuf, bool, Vec<Controller>)> = Vec::new();
    for (c, place) in Controller::ALL.into_iter().zip(places) {
        if !wanted(c, want) {
            continue;
        }
        if c == Controller::Cpu && want.milli_cpus.is_some_and(cpu_quota_is_moot) {
            // A quota of every CPU this process may use holds without a
            // cgroup (and spares create a costly migration).
            enforced.milli_cpus = want.milli_cpus;
            continue;
        }
        let (leaf, v2) = match place {
            Place::V2 { base } => (base.join(PARENT).join(id.as_str()), true),
            Place::V1 { mount } => (mount.join(PARENT).join(id.as_str()), false),
            Place::Missing(why) => {
                failed.push((c, why));
                continue;
            }
        };
        match leaves.iter_mut().find(|(l, _, _)| *l == leaf) {
            Some((_, _, cs)) => cs.push(c),
            None => leaves.push((leaf, v2, vec![c])),
        }
    }
    // The leaf that freezes (see the module's doc).
    let freezing = match leaves.iter().position(|(_, v2, _)| *v2) {
        Some(i) => Some(i),
        None => freezer_place(id).map(|(leaf, v2)| {
            leaves.push((leaf, v2, Vec::new()));
            leaves.len() - 1
        }),
    };
    let listed: String = leaves
        .iter()
        .enumerate()
        .map(|(i, (l, _, _))| {
            let work = if Some(i) == freezing {
                format!("{}\n", l.join(WORK).display())
            } else {
                String::new()
            };
            format!("{work}{}\n", l.display())
        })
        .collect();
    if let Err(e) = fs::write(record, listed) {
        for (_, _, cs) in leaves {
            failed.extend(
                cs.into_iter()
                    .map(|c| (c, format!("record the cgroups: {e}"))),
            );
        }
        return (cg, enforced, failed);
    }
    for (i, (leaf, v2, cs)) in leaves.into_iter().enumerate() {
        let made = make_leaf(&leaf, v2, &cs, want);
        let door = made.and_then(|ok| open_door(&leaf, v2).map(|door| (ok, door)));
        let (ok, door) = match door {
            Ok(r) => r,
            Err(e) => {
                let _ = fs::remove_dir(&leaf);
                failed.extend(cs.into_iter().map(|c| (c, e.to_string())));
                continue;
            }
        };
        for (c, result) in cs.iter().zip(ok) {
            match result {
                Ok(()) => match c {
                    Controller::Memory => enforced.memory_mib = want.memory_mib,
                    Controller::Pids => enforced.pids = want.pids,
                    Controller::Cpu => enforced.milli_cpus = want.milli_cpus,
                },
                Err(e) => failed.push((*c, e.to_string())),
            }
        }
        if Some(i) == freezing {
            let work = leaf.join(WORK);
            // Without it the sandbox runs as before and cannot pause.
            if let Ok(door) = mkdir(&work).and_then(|()| WorkDoor::open(&work, v2)) {
                cg.work = Some(door);
            }
            cg.dirs.push(work);
        }
        cg.dirs.push(leaf);
        match door {
            Door::Tasks(fd) => cg.doors.tasks.push(fd),
            Door::V2(v2) => cg.doors.v2 = Some(v2),
        }
    }
    (cg, enforced, failed)
}

/// Where a sandbox without a v2 leaf gets one that freezes: a v1
/// `freezer` leaf where that hierarchy is mounted and writable, else a v2
/// leaf without controllers (`cgroup.freeze` needs none), else nowhere.
fn freezer_place(id: &SandboxId) -> Option<(PathBuf, bool)> {
    let mounts = fs::read_to_string("/proc/self/mounts")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default();
    if let Some((mount, _)) = mounts
        .v1
        .iter()
        .find(|(m, cs)| cs.iter().any(|c| c == FREEZER) && writable(m))
    {
        return Some((mount.join(PARENT).join(id.as_str()), false));
    }
    // Before Linux 5.2 it has no `cgroup.freeze`: opening the work
    // cgroup's door then fails, and the sandbox cannot pause.
    Some((v2_base(&mounts)?.join(PARENT).join(id.as_str()), true))
}

/// Makes `leaf` (and its parent), enabling `cs` on the way for v2; the
/// result of applying each controller's limit, in the order of `cs`.
fn make_leaf(
    leaf: &Path,
    v2: bool,
    cs: &[Controller],
    want: &Resources,
) -> io::Result<Vec<io::Result<()>>> {
    let parent = leaf.parent().expect("a leaf has a parent");
    if !v2 {
        mkdir(parent)?;
        mkdir(leaf)?;
        return Ok(cs.iter().map(|c| apply(*c, leaf, v2, want)).collect());
    }
    let base = parent.parent().expect("the parent has a base");
    let enabled: Vec<io::Result<()>> = cs.iter().map(|c| enable(base, *c)).collect();
    mkdir(parent)?;
    let enabled: Vec<io::Result<()>> = cs
        .iter()
        .zip(enabled)
        .map(|(c, r)| r.and_then(|()| enable(parent, *c)))
        .collect();
    mkdir(leaf)?;
    Ok(cs
        .iter()
        .zip(enabled)
        .map(|(c, r)| r.and_then(|()| apply(*c, leaf, v2, want)))
        .collect())
}

enum Door {
    Tasks(OwnedFd),
    V2(V2Door),
}

fn open_door(leaf: &Path, v2: bool) -> io::Result<Door> {
    let open = |name: &str| {
        fs::OpenOptions::new()
            .write(true)
            .open(leaf.join(name))
            .map(OwnedFd::from)
    };
    if !v2 {
        return open("tasks").map(Door::Tasks);
    }
    Ok(Door::V2(V2Door {
        dir: fs::File::open(leaf)?.into(),
        procs: open("cgroup.procs")?,
    }))
}

/// Removes `dirs` once their processes are gone: dying processes may
/// keep a cgroup busy for a moment after their pid namespace's init was
/// reaped, so EBUSY is retried for a bounded while.
pub fn remove(dirs: &[PathBuf]) {
    for dir in dirs {
        for _ in 0..250 {
            match fs::remove_dir(dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                _ => break,
            }
        }
    }
}

/// Removes the cgroups recorded in a sandbox directory (see [`create`]).
/// Only paths below a `sandkeep` directory named after the sandbox are
/// touched: the record lives in a directory the sandbox cannot write, but
/// a stray record must never make us remove anything else.
pub fn remove_recorded(sandbox_dir: &Path) {
    let Ok(text) = fs::read_to_string(sandbox_dir.join(RECORD)) else {
        return;
    };
    let Some(id) = sandbox_dir.file_name() else {
        return;
    };
    let dirs: Vec<PathBuf> = text
        .lines()
        .map(PathBuf::from)
        .filter(|p| {
            let leaf = if p.file_name() == Some(WORK.as_ref()) {
                p.parent().unwrap_or(p)
            } else {
                p
            };
            leaf.file_name() == Some(id)
                && leaf.parent().and_then(Path::file_name) == Some(PARENT.as_ref())
        })
        .collect();
    remove(&dirs);
}

/// A sandbox's memory cgroup, seen from the host: its OOM-kill counter
/// tells that the memory limit killed a command (the task helper reads the
/// same counter inside).
pub struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// The memory cgroup recorded in a sandbox directory, if it has one.
    pub fn of(sandbox_dir: &Path) -> Option<Self> {
        let text = fs::read_to_string(sandbox_dir.join(RECORD)).ok()?;
        text.lines().map(PathBuf::from).find_map(|dir| {
            (dir.join("memory.events").exists() || dir.join("memory.oom_control").exists())
                .then_some(Self { dir })
        })
    }

    /// How many processes the limit has killed so far (v2
    /// `memory.events`, v1 `memory.oom_control`).
    pub fn kills(&self) -> Option<u64> {
        ["memory.events", "memory.oom_control"]
            .iter()
            .find_map(|f| fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|t| oom_kills(&t))
    }
}

/// The `oom_kill N` line of `memory.events` or `memory.oom_control`.
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_kill_counter_is_read_in_both_formats() {
        assert_eq!(
            oom_kills("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            Some(1)
        );
        assert_eq!(
            oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n"),
            Some(4)
        );
        assert_eq!(oom_kills("oom_kill_disable 0\n"), None);
    }

    const HYBRID: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";

    #[test]
    fn hybrid_mounts_name_each_v1_controller_and_the_v2_mount() {
        let m = parse_mounts(HYBRID);
        assert_eq!(m.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let names: Vec<(String, Vec<String>)> =
            m.v1.iter()
                .map(|(p, c)| (p.display().to_string(), c.clone()))
                .collect();
        assert_eq!(
            names,
            vec![
                ("/sys/fs/cgroup/cpu".into(), vec!["cpu".into()]),
                ("/sys/fs/cgroup/cpuacct".into(), vec!["cpuacct".into()]),
                ("/sys/fs/cgroup/memory".into(), vec!["memory".into()]),
                ("/sys/fs/cgroup/pids".into(), vec!["pids".into()]),
            ]
        );
    }

    #[test]
    fn v2_only_and_comounted_v1_hierarchies() {
        let m = parse_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n");
        assert_eq!(m.v2, Some(PathBuf::from("/sys/fs/cgroup")));
        assert!(m.v1.is_empty());
        let m = parse_mounts(
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n\
             cgroup /a\\040b cgroup rw,memory 0 0\n",
        );
        assert_eq!(m.v2, None);
        assert_eq!(
            m.v1,
            vec![
                (
                    PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"),
                    vec!["cpu".to_owned(), "cpuacct".to_owned()]
                ),
                (PathBuf::from("/a b"), vec!["memory".to_owned()]),
            ]
        );
    }

    #[test]
    fn controllers_and_own_path() {
        assert_eq!(
            parse_controllers("cpuset cpu io memory hugetlb pids rdma misc\n"),
            [
                "cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"
            ]
        );
        assert!(parse_controllers("\n").is_empty());
        assert_eq!(
            own_v2_path("0::/user.slice/user-1000.slice/session-1.scope\n").as_deref(),
            Some("/user.slice/user-1000.slice/session-1.scope")
        );
        assert_eq!(own_v2_path("4:memory:/x\n0::/\n").as_deref(), Some("/"));
        assert_eq!(own_v2_path("4:memory:/x\n"), None);
    }

    fn names(s: &str) -> Vec<String> {
        parse_controllers(s)
    }

    #[test]
    fn each_controller_goes_to_v2_when_offered_there_else_v1() {
        let v2 = Path::new("/sys/fs/cgroup");
        // v2 only, as root: everything below the v2 root.
        let m = parse_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n");
        let places = decide(
            &m,
            Some(v2),
            &names("cpuset cpu io memory pids"),
            false,
            |_| true,
        );
        assert!(places.iter().all(|p| *p == Place::V2 { base: v2.into() }));
        // v2 only without cpu offered: cpu is missing, the others hold.
        let places = decide(&m, Some(v2), &names("memory pids"), false, |_| true);
        assert!(matches!(&places[2], Place::Missing(why) if why.contains("cpu")));
        assert_eq!(places[0], Place::V2 { base: v2.into() });
        // This machine: v1 controllers, an empty v2 hierarchy.
        let m = parse_mounts(HYBRID);
        let unified = Path::new("/sys/fs/cgroup/unified");
        let places = decide(&m, Some(unified), &names("hugetlb"), false, |_| true);
        assert_eq!(
            places,
            [
                Place::V1 {
                    mount: "/sys/fs/cgroup/memory".into()
                },
                Place::V1 {
                    mount: "/sys/fs/cgroup/pids".into()
                },
                Place::V1 {
                    mount: "/sys/fs/cgroup/cpu".into()
                },
            ]
        );
        // A hybrid host whose v2 hierarchy took memory over.
        let places = decide(&m, Some(unified), &names("memory"), false, |_| true);
        assert_eq!(
            places[0],
            Place::V2 {
                base: unified.into()
            }
        );
        // An ordinary user: root's v1 hierarchies are not writable.
        let places = decide(&m, None, &[], false, |_| false);
        assert!(
            places
                .iter()
                .all(|p| matches!(p, Place::Missing(why) if why.contains("not writable")))
        );
        // An ordinary user on v2 without a delegated subtree.
        let m = parse_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n");
        let places = decide(&m, None, &[], false, |_| false);
        assert!(
            places
                .iter()
                .all(|p| matches!(p, Place::Missing(why) if why.contains("delegated")))
        );
        // Root in a container's cgroup namespace whose root holds the
        // container's processes: nothing can be enabled below it.
        let places = decide(&m, Some(v2), &[], true, |_| true);
        assert!(
            places.iter().all(
                |p| matches!(p, Place::Missing(why) if why.contains("holds processes itself"))
            )
        );
    }

    #[test]
    fn cpu_max_is_quota_then_period() {
        assert_eq!(cpu_max_line(1000), "100000 100000");
        assert_eq!(cpu_max_line(2000), "200000 100000");
        assert_eq!(cpu_max_line(100), "10000 100000");
        // Under the kernel's 1 ms minimum: clamped.
        assert_eq!(cpu_max_line(1), "1000 100000");
    }
}
