//! Builds a sandbox's root filesystem, run by the init (pid 1) in its fresh
//! mount namespace before it gives up its privileges.
//!
//! The root is a tmpfs populated from an allow-list of the host's top-level
//! directories; everything else (other homes, `/root`, `/run`, `/tmp`,
//! `/mnt`, sandkeep's state) is simply absent. Their host owners stay
//! unmapped in the sandbox, so only the "other" permission bits count and
//! what others cannot read on the host stays unreadable inside, whenever
//! it became so: as root they are the host's directories, read-only; as
//! an ordinary user, copy-on-write overlays. Under root the base
//! template's `/etc` is a copy-on-write overlay of a snapshot instead (see
//! `etc_snapshot`). Host secrets that the allowed directories contain are
//! masked besides. This module only mounts; it decides no identity and
//! runs no sandbox code.
//!
//! Everything the sandbox can write lives on **one** tmpfs of `disk_mib`
//! (the "disk"): the root directory, the overlays' upper and work layers,
//! `/root`, `/tmp`, `/var/tmp`, `/run`, `/dev` and `/dev/shm` are directories of it
//! (bind mounts), so the sandbox's writes together end in ENOSPC at
//! `disk_mib` and never reach the host's disk. Its pages are memory,
//! charged to the writer's memory cgroup: files count against `memory_mib`
//! too. The masks are read-only 4 KiB tmpfs mounts.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};

use super::boot_id::BootId;
use super::etc_snapshot;
use super::state::{HELPER_DIR, HELPER_NAME, SandboxDir, Spec};
use super::sys;
use sandkeep_provider::{Share, ShareMode};

/// Host top-level entries the sandbox sees (as read-only binds or
/// overlays, or as the same symlinks); everything else is left out.
const ALLOWED: &[&str] = &[
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "srv", "var",
];

/// Files replaced by an empty `/dev/null`.
const MASKED_FILES: &[&str] = &[
    "etc/shadow",
    "etc/shadow-",
    "etc/gshadow",
    "etc/gshadow-",
    "etc/sudoers",
    "etc/security/opasswd",
    "proc/kcore",
    "proc/keys",
    "proc/timer_list",
    "proc/sched_debug",
    "proc/sysrq-trigger",
];

/// Directories replaced by an empty read-only tmpfs.
const MASKED_DIRS: &[&str] = &[
    "etc/sudoers.d",
    "etc/ssh",
    "var/lib/sandkeep",
    "var/run/docker",
];

/// Device nodes bound from the host into the sandbox's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The most ptys a sandbox holds at once (its devpts instance's `max=`).
/// Every devpts instance draws on one host-wide pool (`kernel.pty.max`
/// less `kernel.pty.reserve`: 3,072 by default), so without a bound one
/// sandbox could take them all and `openpty` would fail in every other
/// sandbox and for host users. 256 is far beyond what terminals, `script`
/// or test suites open. It bounds each sandbox, not all together: twelve
/// at their bound still drain the default pool (a host that runs many
/// raises `kernel.pty.max`).
const PTYS_MAX: u32 = 256;

/// How the sandbox's files are owned on the host.
#[derive(Debug, Clone, Copy)]
pub enum Owner {
    /// Root mode: sandbox ids 0..65536 are host ids `base..base+65536`.
    Shifted { base: u32 },
    /// Unprivileged mode: the invoking user, seen as root inside.
    Invoker,
}

pub struct Built {
    /// Whether host-owned files appear with their real owners (idmapped
    /// lower layers, as root's `/etc` snapshot is) rather than as `nobody`.
    pub idmapped: bool,
    pub warnings: Vec<String>,
    /// The sandbox's own kernel boot id, where its `/proc` shows one.
    pub boot_id: Option<BootId>,
}

/// Why the root filesystem could not be built: the step that failed (the
/// mount, directory or path it was at) and its cause. The init reports it
/// to the keeper as its message.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: std::io::Error,
    },
    /// A path that the overlay's mount options cannot carry.
    #[error(
        "{}: overlay paths may not contain ',', ':' or '\\'; choose a SANDKEEP_HOME without them",
        .0.display()
    )]
    OverlayPath(PathBuf),
    /// The snapshot of the host's `/etc` (see `etc_snapshot`) is missing.
    #[error(transparent)]
    EtcSnapshot(#[from] crate::etc_snapshot::EtcSnapshotError),
    /// A request this host cannot carry out (a share it cannot mount as
    /// asked); nothing of the sandbox runs.
    #[error("{0}")]
    Unsupported(String),
}

/// What the root filesystem is built from besides the spec and the
/// sandbox's own user namespace.
pub struct Inputs<'a> {
    /// The sandbox's memory cgroup on the host (shown read-only inside).
    pub memory_cgroup: Option<&'a Path>,
    /// Where the snapshot of the host's /etc is answered (root's base).
    pub etc_snapshot: Option<OwnedFd>,
    /// Per share of the spec, the user namespace its mount is idmapped
    /// through.
    pub share_idmaps: Vec<Option<OwnedFd>>,
}

/// Names the step that an I/O or system-call error broke.
fn ctx<E: Into<std::io::Error>>(step: impl Into<String>) -> impl FnOnce(E) -> BuildError {
    let step = step.into();
    move |e| BuildError::Step {
        step,
        source: e.into(),
    }
}

/// Mount options as the C string the kernel takes.
fn mount_data(opts: String) -> Result<std::ffi::CString, BuildError> {
    std::ffi::CString::new(opts).map_err(|e| BuildError::Step {
        step: "mount options".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })
}

fn mount_tmpfs(target: &Path, opts: &str, flags: MountFlags) -> Result<(), BuildError> {
    let data = mount_data(opts.to_owned())?;
    rustix::mount::mount("tmpfs", target, "tmpfs", flags, data.as_c_str())
        .map_err(ctx(format!("mount tmpfs on {}", target.display())))
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), BuildError> {
    rustix::mount::mount_bind(source, target).map_err(ctx(format!(
        "bind {} on {}",
        source.display(),
        target.display()
    )))?;
    if read_only {
        rustix::mount::mount_remount(
            target,
            MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
            "",
        )
        .map_err(ctx(format!("make {} read-only", target.display())))?;
    }
    Ok(())
}

/// Binds `source` on `target` with the mount flags `flags`.
fn bind_with(source: &Path, target: &Path, flags: MountFlags) -> Result<(), BuildError> {
    bind(source, target, false)?;
    rustix::mount::mount_remount(target, MountFlags::BIND | flags, "")
        .map_err(ctx(format!("set the flags of {}", target.display())))
}

/// The size of the sandbox's disk: its `disk_mib`.
fn disk_mib(spec: &Spec) -> u64 {
    spec.limits
        .disk_mib
        .unwrap_or(sandkeep_proto::limits::DISK_MIB_DEFAULT)
}

fn chown(path: &Path, owner: Owner, uid: u32, gid: u32) -> Result<(), BuildError> {
    if let Owner::Shifted { base } = owner {
        std::os::unix::fs::lchown(path, Some(base + uid), Some(base + gid))
            .map_err(ctx(format!("chown {}", path.display())))?;
    }
    Ok(())
}

/// Builds the tree on the sandbox's disk and pivots into it.
pub fn build(
    dir: &SandboxDir,
    spec: &Spec,
    owner: Owner,
    idmap: Option<BorrowedFd<'_>>,
    inputs: Inputs<'_>,
) -> Result<Built, BuildError> {
    let Inputs {
        memory_cgroup,
        etc_snapshot,
        share_idmaps,
    } = inputs;
    // Nothing mounted from here on may propagate back to the host.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(ctx("make / private"))?;
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    // Over the sandbox's own directory, seen so in this mount namespace
    // only: nothing of the sandbox's is made on the host's filesystem
    // (the init needs none of the records it hides).
    mount_tmpfs(
        &dir.path,
        &format!("mode=0700,size={}m", disk_mib(spec)),
        nosuid,
    )?;
    // From here on the disk is the working directory, and named so
    // (`./upper/usr`): an overlay keeps the paths it was given in the
    // mount table, which the sandbox reads, and where its directory lies
    // on the host is none of the sandbox's business.
    std::env::set_current_dir(&dir.path).map_err(ctx("chdir to the sandbox's disk"))?;
    let disk = PathBuf::from(".");
    let root = disk.join("root");
    // The disk's own root is never seen; each of these is, as the
    // directory the comment names, owned by sandbox root.
    for (name, mode) in [
        ("root", 0o755), // `/`
        ("upper", 0o755),
        ("work", 0o700),
        ("lower", 0o700),
        ("home", 0o700), // `/root`
        ("tmp", 0o1777),
        ("vartmp", 0o1777), // `/var/tmp` over a read-only host /var
        ("run", 0o755),
        ("dev", 0o755),
        ("shm", 0o1777), // `/dev/shm`
    ] {
        let p = disk.join(name);
        fs::create_dir(&p).map_err(ctx(format!("mkdir {}", p.display())))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(mode))
            .map_err(ctx(format!("chmod {}", p.display())))?;
        chown(&p, owner, 0, 0)?;
    }
    let mut built = Built {
        idmapped: idmap.is_some(),
        warnings: Vec::new(),
        boot_id: None,
    };
    let mut guess: Option<PathBuf> = None;
    match &spec.template_dir {
        // A template is a whole root filesystem, the sandbox's own: one
        // overlay over it, idmapped so that its owners are the sandbox's.
        Some(template) => overlay(
            &disk,
            "@template",
            template,
            &root,
            owner,
            idmap,
            &mut built,
        )?,
        None => {
            // A mount point of its own, for pivot_root.
            bind_with(&root, &root, nosuid)?;
            for name in ALLOWED {
                match (&etc_snapshot, *name) {
                    (Some(_), "etc") => {
                        mount_point(&root.join("etc"), owner)?;
                        // The latest snapshot, while the snapshotter
                        // checks that it is still the host's /etc.
                        guess = etc_snapshot::latest(&spec.home).filter(|latest| {
                            overlay(
                                &disk,
                                "etc",
                                latest,
                                &root.join("etc"),
                                owner,
                                idmap,
                                &mut built,
                            )
                            .is_ok()
                        });
                    }
                    _ => host_entry(&disk, &root, name, owner, &mut built)?,
                }
            }
        }
    }

    for (name, mode) in [
        ("proc", 0o555),
        ("dev", 0o755),
        ("sys", 0o555),
        ("tmp", 0o1777),
        ("run", 0o755),
        ("root", 0o700),
        ("home", 0o755),
        ("mnt", 0o755),
        (HELPER_DIR, 0o755),
    ] {
        let p = root.join(name);
        match fs::create_dir(&p) {
            // A template's own directories stay as the template has them.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            other => other.map_err(ctx(format!("mkdir {}", p.display())))?,
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(mode))
            .map_err(ctx(format!("chmod {}", p.display())))?;
        chown(&p, owner, 0, 0)?;
    }
    bind_with(&disk.join("tmp"), &root.join("tmp"), nosuid)?;
    if matches!(owner, Owner::Shifted { .. }) && spec.template_dir.is_none() {
        let var_tmp = root.join("var/tmp");
        if fs::symlink_metadata(&var_tmp).is_ok_and(|m| m.is_dir()) {
            bind_with(&disk.join("vartmp"), &var_tmp, nosuid)?;
        }
    }
    bind_with(&disk.join("run"), &root.join("run"), nosuid)?;
    bind_with(&disk.join("home"), &root.join("root"), nosuid)?;
    for (index, share) in spec.shares.iter().enumerate() {
        let idmap = share_idmaps.get(index).and_then(Option::as_ref);
        mount_share(&disk, &root, index, share, owner, idmap, &mut built)?;
    }

    rustix::mount::mount(
        "proc",
        root.join("proc"),
        "proc",
        nosuid | MountFlags::NOEXEC,
        None,
    )
    .map_err(ctx("mount /proc"))?;
    // Read-only kernel knobs: sandbox root must not tune the host kernel.
    for sub in ["sys", "irq", "bus", "fs"] {
        let p = root.join("proc").join(sub);
        if p.is_dir() {
            bind(&p, &p, true)?;
        }
    }
    built.boot_id = own_boot_id(&disk, &root, owner)?;
    build_dev(&disk, &root.join("dev"))?;
    if let Some(cgroup) = memory_cgroup {
        show_cgroup(&root, cgroup)?;
    }

    let helper = root.join(HELPER_DIR).join(HELPER_NAME);
    fs::File::create(&helper).map_err(ctx("create the helper mount point"))?;
    bind(&spec.exe, &helper, true)?;

    // Taken as late as possible: the snapshotter works while all of the
    // above is built.
    if let Some(answer) = etc_snapshot {
        let snapshot = etc_snapshot::collect(answer)?;
        if guess.as_ref() != Some(&snapshot) {
            let etc = root.join("etc");
            if guess.is_some() {
                // Nothing of the sandbox's has run: the guessed layers go
                // unseen, and the new ones are mounted on fresh places.
                rustix::mount::unmount(&etc, UnmountFlags::DETACH).map_err(ctx("unmount /etc"))?;
                for layers in ["upper", "work", "lower"] {
                    let p = disk.join(layers).join("etc");
                    let _ = rustix::mount::unmount(&p, UnmountFlags::DETACH);
                    let _ = fs::remove_dir_all(&p);
                }
            }
            overlay(&disk, "etc", &snapshot, &etc, owner, idmap, &mut built)?;
        }
    }
    mask(&root, spec)?;

    // The tmpfs root itself stays writable: it belongs to the sandbox.
    pivot(&root)?;
    Ok(built)
}

/// The sandbox's own kernel boot id (see [`BootId`]), on the disk and
/// bound read-only over the kernel's, where its `/proc` has one.
fn own_boot_id(disk: &Path, root: &Path, owner: Owner) -> Result<Option<BootId>, BuildError> {
    let target = root.join("proc/sys/kernel/random/boot_id");
    if !target.is_file() {
        return Ok(None);
    }
    let file = disk.join("boot_id");
    let id = BootId::create(&file).map_err(ctx("create the sandbox's boot id"))?;
    chown(&file, owner, 0, 0)?;
    bind(&file, &target, true)?;
    Ok(Some(id))
}

/// Mounts a host share at its own path (SPEC §13): `ro` and `rw` as binds
/// of the directory, `cow` as an overlay with the upper layer on the
/// disk, its two layers shown read-only below `/.sandkeep/shares/INDEX/`
/// for the helper's `changes`. Through `idmap` (root's) the owner of the
/// share directory is the sandbox root; without one, root's sandboxes see
/// the share's files as nobody's and may not have an `rw` share (what
/// they made would be a sandbox uid's on the host).
fn mount_share(
    disk: &Path,
    root: &Path,
    index: usize,
    share: &Share,
    owner: Owner,
    idmap: Option<&OwnedFd>,
    built: &mut Built,
) -> Result<(), BuildError> {
    let host = Path::new(&share.path);
    let target = share_mount_point(root, host, owner)?;
    let shifted = matches!(owner, Owner::Shifted { .. });
    // The share as the sandbox sees it (idmapped), on the disk; without
    // an idmap, the host directory itself.
    let seen = match idmap {
        Some(userns) => match idmapped_lower(disk, &format!("share-{index}"), host, userns.as_fd())
        {
            Ok(lower) => lower,
            Err(e) => {
                built.warnings.push(format!(
                    "share {}: idmapped mount unavailable ({e}); its files are nobody's inside",
                    share.path
                ));
                host.to_path_buf()
            }
        },
        None => host.to_path_buf(),
    };
    if shifted && share.mode == ShareMode::Rw && seen == host {
        return Err(BuildError::Unsupported(format!(
            "the rw share {} needs an idmapped mount (Linux 5.12+ and a filesystem that supports \
             them), which this host refused; share it as cow or ro, or run `sandkeep doctor`",
            share.path
        )));
    }
    let flags = MountFlags::NOSUID | MountFlags::NODEV;
    match share.mode {
        ShareMode::Ro => bind_with(&seen, &target, flags | MountFlags::RDONLY),
        ShareMode::Rw => bind_with(&seen, &target, flags),
        ShareMode::Cow => {
            let name = format!("share-{index}");
            let (upper, work) = (
                disk.join("upper").join(&name),
                disk.join("work").join(&name),
            );
            for d in [&upper, &work] {
                fs::create_dir_all(d).map_err(ctx(format!("mkdir {}", d.display())))?;
                chown(d, owner, 0, 0)?;
            }
            let md = fs::metadata(&seen).map_err(ctx(format!("stat {}", share.path)))?;
            fs::set_permissions(&upper, fs::Permissions::from_mode(md.mode() & 0o7777))
                .map_err(ctx("chmod a share's upper layer"))?;
            mount_overlay(&seen, &upper, &work, &target, !shifted)?;
            let shown = root.join(HELPER_DIR).join("shares").join(index.to_string());
            for (layer, from) in [("upper", &upper), ("lower", &seen)] {
                let at = shown.join(layer);
                fs::create_dir_all(&at).map_err(ctx(format!("mkdir {}", at.display())))?;
                bind(from, &at, true)?;
            }
            Ok(())
        }
    }
}

/// The directory a share is mounted on inside: the host path below the
/// new root, made where the root does not show it (below `/home`, say),
/// each level a real directory (a symlink there would take the mount
/// elsewhere).
fn share_mount_point(root: &Path, host: &Path, owner: Owner) -> Result<PathBuf, BuildError> {
    let mut at = root.to_path_buf();
    for part in host.strip_prefix("/").unwrap_or(host).components() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(BuildError::Unsupported(format!(
                    "cannot mount the share {}: {} is not a directory in the sandbox",
                    host.display(),
                    at.strip_prefix(root).unwrap_or(&at).display()
                )));
            }
            Err(_) => {
                fs::create_dir(&at).map_err(ctx(format!("mkdir {}", at.display())))?;
                fs::set_permissions(&at, fs::Permissions::from_mode(0o755))
                    .map_err(ctx(format!("chmod {}", at.display())))?;
                chown(&at, owner, 0, 0)?;
            }
        }
    }
    Ok(at)
}

/// An empty directory owned by the sandbox's root, to mount on.
fn mount_point(target: &Path, owner: Owner) -> Result<(), BuildError> {
    fs::create_dir(target).map_err(ctx(format!("mkdir {}", target.display())))?;
    chown(target, owner, 0, 0)
}

/// One allowed top-level entry of the host: the same symlink, or an
/// overlay of the directory.
fn host_entry(
    disk: &Path,
    root: &Path,
    name: &str,
    owner: Owner,
    built: &mut Built,
) -> Result<(), BuildError> {
    let host = Path::new("/").join(name);
    let Ok(md) = fs::symlink_metadata(&host) else {
        return Ok(());
    };
    let target = root.join(name);
    if md.file_type().is_symlink() {
        let link = fs::read_link(&host).map_err(ctx(format!("read {}", host.display())))?;
        return symlink(&link, &target).map_err(ctx(format!("symlink {}", target.display())));
    }
    if !md.is_dir() {
        return Ok(());
    }
    fs::create_dir(&target).map_err(ctx(format!("mkdir {}", target.display())))?;
    match owner {
        // Root's sandboxes see the host's directory itself, read-only,
        // its owners unmapped: every access is checked against the live
        // host file's "other" bits. An overlay mounted by host root would
        // check a file made private on the host after it first looked it
        // up against the mode it saw then, with host root's rights.
        Owner::Shifted { .. } => bind(&host, &target, true),
        Owner::Invoker => {
            chown(&target, owner, 0, 0)?;
            overlay(disk, name, &host, &target, owner, None, built)
        }
    }
}

fn overlay(
    disk: &Path,
    name: &str,
    host: &Path,
    target: &Path,
    owner: Owner,
    idmap: Option<BorrowedFd<'_>>,
    built: &mut Built,
) -> Result<(), BuildError> {
    let upper = disk.join("upper").join(name);
    let work = disk.join("work").join(name);
    fs::create_dir_all(&upper).map_err(ctx(format!("mkdir {}", upper.display())))?;
    fs::create_dir_all(&work).map_err(ctx(format!("mkdir {}", work.display())))?;
    // The overlay's root directory takes the upper directory's owner and
    // mode; give it the host directory's, as the sandbox sees them.
    let md = fs::metadata(host).map_err(ctx(format!("stat {}", host.display())))?;
    {
        use std::os::unix::fs::MetadataExt;
        fs::set_permissions(&upper, fs::Permissions::from_mode(md.mode() & 0o7777))
            .map_err(ctx("chmod upper"))?;
        chown(&upper, owner, md.uid(), md.gid())?;
    }
    let unprivileged = matches!(owner, Owner::Invoker);
    if let Some(userns) = idmap {
        match idmapped_lower(disk, name, host, userns)
            .and_then(|lower| mount_overlay(&lower, &upper, &work, target, false))
        {
            Ok(()) => return Ok(()),
            Err(e) => {
                // Kernels or filesystems without idmapped overlay layers:
                // host-owned files then show as nobody (read-only).
                built.idmapped = false;
                built.warnings.push(format!(
                    "idmapped lower layers unavailable ({e}); host-owned files are read-only inside"
                ));
            }
        }
    }
    match mount_overlay(host, &upper, &work, target, unprivileged) {
        Ok(()) => Ok(()),
        Err(e) if unprivileged => {
            // Unprivileged overlays refuse lower dirs with mounts below
            // them (locked sub-mounts); show those read-only instead.
            built
                .warnings
                .push(format!("/{name} is read-only: overlay refused ({e})"));
            rustix::mount::mount_bind_recursive(host, target)
                .map_err(ctx(format!("bind /{name}")))?;
            rustix::mount::mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")
                .map_err(ctx(format!("make /{name} read-only")))
        }
        Err(e) => Err(e),
    }
}

fn idmapped_lower(
    disk: &Path,
    name: &str,
    host: &Path,
    userns: BorrowedFd<'_>,
) -> Result<PathBuf, BuildError> {
    let lower = disk.join("lower").join(name);
    fs::create_dir_all(&lower).map_err(ctx(format!("mkdir {}", lower.display())))?;
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        host,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(ctx(format!("open_tree {}", host.display())))?;
    sys::idmap_mount(tree.as_fd(), userns).map_err(ctx("mount_setattr(IDMAP)"))?;
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        rustix::fs::CWD,
        &lower,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(ctx("move_mount"))?;
    Ok(lower)
}

fn mount_overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
    unprivileged: bool,
) -> Result<(), BuildError> {
    for p in [lower, upper, work] {
        let s = p.to_string_lossy();
        if s.contains(',') || s.contains(':') || s.contains('\\') {
            return Err(BuildError::OverlayPath(p.to_path_buf()));
        }
    }
    let mut opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    if unprivileged {
        opts.push_str(",userxattr");
    }
    let data = mount_data(opts)?;
    rustix::mount::mount(
        "overlay",
        target,
        "overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    )
    .map_err(ctx(format!("overlay on {}", target.display())))
}

/// Shows the sandbox's own memory cgroup read-only where programs look for
/// their limits: `/sys/fs/cgroup` (v2) or `/sys/fs/cgroup/memory` (v1).
/// The task supervisor reads its OOM-kill counter there to tell that the
/// limit killed a task. Nothing of the host's other cgroups is shown.
fn show_cgroup(root: &Path, cgroup: &Path) -> Result<(), BuildError> {
    let mut target = root.join("sys/fs/cgroup");
    if !cgroup.join("memory.events").exists() {
        target.push("memory");
    }
    fs::create_dir_all(&target).map_err(ctx(format!("mkdir {}", target.display())))?;
    bind(cgroup, &target, true)
}

fn build_dev(disk: &Path, dev: &Path) -> Result<(), BuildError> {
    bind_with(
        &disk.join("dev"),
        dev,
        MountFlags::NOSUID | MountFlags::NOEXEC,
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if !host.exists() {
            continue;
        }
        let p = dev.join(name);
        fs::File::create(&p).map_err(ctx(format!("create {}", p.display())))?;
        bind(&host, &p, false)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        symlink(target, dev.join(name)).map_err(ctx(format!("symlink /dev/{name}")))?;
    }
    let pts = dev.join("pts");
    fs::create_dir(&pts).map_err(ctx("mkdir /dev/pts"))?;
    let options = std::ffi::CString::new(format!(
        "newinstance,ptmxmode=0666,mode=0620,max={PTYS_MAX}"
    ))
    .expect("no NUL");
    rustix::mount::mount(
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        options.as_c_str(),
    )
    .map_err(ctx("mount devpts"))?;
    let shm = dev.join("shm");
    fs::create_dir(&shm).map_err(ctx("mkdir /dev/shm"))?;
    bind_with(
        &disk.join("shm"),
        &shm,
        MountFlags::NOSUID | MountFlags::NODEV,
    )
}

/// Hides host secrets that the allowed directories contain, and
/// sandkeep's own state wherever it lives.
fn mask(root: &Path, spec: &Spec) -> Result<(), BuildError> {
    for rel in MASKED_FILES {
        let p = root.join(rel);
        if fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            bind(Path::new("/dev/null"), &p, false)?;
        }
    }
    let home_rel = spec
        .home
        .strip_prefix("/")
        .unwrap_or(&spec.home)
        .to_path_buf();
    let dirs = MASKED_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(std::iter::once(home_rel))
        .chain(other_state_dirs(&spec.home));
    for rel in dirs {
        let p = root.join(&rel);
        // metadata() would follow a symlink out of the sandbox root; only
        // real directories inside the overlays are masked.
        if fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            mount_tmpfs(
                &p,
                "mode=0755,size=4k",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            )?;
        }
    }
    Ok(())
}

/// The state directories of root's other live sandboxes on this host, as
/// paths relative to `/`: each holds a uid slot naming its sandbox's
/// directory (`HOME/sb/ID`). Their contents are private already; masking
/// them keeps even their names out of sight.
fn other_state_dirs(own: &Path) -> Vec<PathBuf> {
    let Ok(slots) = fs::read_dir(super::slots::UID_SLOTS) else {
        return Vec::new();
    };
    let mut homes: Vec<PathBuf> = Vec::new();
    for slot in slots.flatten() {
        let Ok(sandbox) = fs::read_to_string(slot.path()) else {
            continue;
        };
        let home = Path::new(sandbox.trim()).ancestors().nth(2);
        if let Some(rel) = home.and_then(|h| h.strip_prefix("/").ok())
            && home != Some(own)
            && !rel.as_os_str().is_empty()
            && !homes.iter().any(|h| h == rel)
        {
            homes.push(rel.to_path_buf());
        }
    }
    homes
}

fn pivot(root: &Path) -> Result<(), BuildError> {
    std::env::set_current_dir(root).map_err(ctx("chdir to the new root"))?;
    rustix::process::pivot_root(".", ".").map_err(ctx("pivot_root"))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).map_err(ctx("detach the host root"))?;
    std::env::set_current_dir("/").map_err(ctx("chdir /"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages the keeper's report quotes: the step, then its cause.
    #[test]
    fn a_build_error_names_its_step_and_cause() {
        let e = ctx(format!("mount tmpfs on {}", "/x"))(rustix::io::Errno::PERM);
        assert_eq!(
            e.to_string(),
            format!("mount tmpfs on /x: {}", rustix::io::Errno::PERM)
        );
        assert!(std::error::Error::source(&e).is_some());
        let e = mount_overlay(
            Path::new("/a,b"),
            Path::new("u"),
            Path::new("w"),
            Path::new("t"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/a,b: overlay paths may not contain ',', ':' or '\\'; choose a SANDKEEP_HOME without them"
        );
    }
}
