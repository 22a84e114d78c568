//! Thin, checked wrappers over the few syscalls that rustix does not cover
//! (fork, signal masks and signalfd, mount_setattr, close_range, ids) used
//! by the keeper and the init. Every function here is single-purpose and
//! safe to call in a single-threaded process; nothing here may be called
//! from the tokio server.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub enum Forked {
    Child,
    Parent(i32),
}

/// `fork()`, refused unless this process has a single thread. The child
/// of a threaded process holds only the calling thread and may find locks
/// (the allocator's) held forever; the keeper, its probes and the init are
/// single-threaded, so their children may use the allocator freely.
pub fn fork() -> io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "fork refused: this process has {threads} threads, not one"
        )));
    }
    // SAFETY: this process is single-threaded (checked above; only a
    // thread of it could have started another since); the child continues
    // with a consistent copy of the whole address space.
    let pid = check(unsafe { libc::fork() })?;
    Ok(if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid)
    })
}

/// Leaves the process without running destructors or atexit handlers, as a
/// forked child must.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

pub fn setsid() -> io::Result<()> {
    // SAFETY: no pointers involved.
    check(unsafe { libc::setsid() }).map(drop)
}

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Replaces the signal mask with exactly `signals`.
pub fn set_signal_mask(signals: &[libc::c_int]) -> io::Result<()> {
    let set = sigset(signals);
    // SAFETY: `set` is initialised; the old mask is not wanted.
    let ret = unsafe { libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
    check(ret).map(drop)
}

/// Blocks `signals` and returns a signalfd delivering them.
pub fn signalfd(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    set_signal_mask(signals)?;
    let set = sigset(signals);
    // SAFETY: `set` is initialised; -1 asks for a new descriptor.
    let fd = check(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: signalfd returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads every pending signal from a signalfd; returns their numbers.
pub fn drain_signalfd(fd: BorrowedFd<'_>) -> Vec<u32> {
    let mut out = Vec::new();
    loop {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: the buffer is exactly one siginfo record.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut info).cast(), size) };
        if n != size as isize {
            return out;
        }
        out.push(info.ssi_signo);
    }
}

/// Reaps one exited child without blocking: `Some((pid, exit code))`.
pub fn reap_any() -> Option<(i32, i32)> {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then(|| (pid, exit_code(status)))
}

/// Waits for one specific child; returns its exit code.
pub fn wait_for(pid: i32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == pid {
            return Ok(exit_code(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Exit status, or 128+N for a death by signal N (the shell convention).
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    }
}

pub fn kill_group(pgid: i32, signal: libc::c_int) {
    // SAFETY: no pointers; a vanished group is not an error worth reporting.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Makes `target` (a detached mount from `open_tree`) show every owner
/// through the user namespace `userns` (`mount_setattr` with
/// `MOUNT_ATTR_IDMAP`; rustix has no wrapper yet, hence the raw syscall).
pub fn idmap_mount(target: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: the path is a valid C string, attr is initialised and its
    // size is passed along.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            target.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw mut attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Drops every supplementary group and sets all three uids and gids.
pub fn become_id(uid: u32, gid: u32, clear_groups: bool) -> io::Result<()> {
    // SAFETY: plain id syscalls; the null pointer goes with a zero count.
    unsafe {
        if clear_groups {
            check(libc::setgroups(0, std::ptr::null()))?;
        }
        check(libc::setresgid(gid, gid, gid))?;
        check(libc::setresuid(uid, uid, uid))?;
    }
    Ok(())
}

/// Closes every descriptor from 3 up except those in `keep`.
pub fn close_fds_except(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd >= 3).collect();
    keep.sort_unstable();
    let mut from: RawFd = 3;
    for fd in keep.into_iter().chain(std::iter::once(RawFd::MAX)) {
        if fd > from {
            close_span(from, fd - 1, close_range)?;
        }
        from = fd.saturating_add(1);
    }
    Ok(())
}

/// `close_range(2)` over `first..=last`.
fn close_range(first: RawFd, last: RawFd) -> io::Result<()> {
    // SAFETY: closing a range of descriptors this process owns.
    check(unsafe { libc::close_range(first as u32, last as u32, 0) }).map(drop)
}

/// Closes `first..=last` with `close_range`, or, where the kernel lacks it
/// (before 5.9: ENOSYS) or refuses it (EINVAL), each descriptor of the
/// range that `/proc/self/fd` lists.
fn close_span(
    first: RawFd,
    last: RawFd,
    close_range: impl FnOnce(RawFd, RawFd) -> io::Result<()>,
) -> io::Result<()> {
    match close_range(first, last) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {}
        other => return other,
    }
    // Collected before closing: the listing's own descriptor is open while
    // it is read, and closed (EBADF below, ignored) once it is done.
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| (first..=last).contains(fd))
        .collect();
    for fd in open {
        // SAFETY: the caller gives up every descriptor of the range; none
        // is used again.
        unsafe {
            libc::close(fd);
        }
    }
    Ok(())
}

/// Puts `fd` at `target` (dup2); used on stdio in a forked child.
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: both are descriptor numbers; dup2 validates them.
    check(unsafe { libc::dup2(fd.as_raw_fd(), target) }).map(drop)
}

/// `execve`; returns only on failure.
pub fn execve(path: &CString, argv: &[CString], envp: &[CString]) -> io::Error {
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: both arrays are null-terminated and outlive the call.
    unsafe { libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
    io::Error::last_os_error()
}

/// Removes every capability not in `keep` from the bounding set, so no
/// exec can ever regain it (needs CAP_SETPCAP: call before dropping it).
pub fn drop_bounding_set(keep: rustix::thread::CapabilitySet) -> io::Result<()> {
    for cap in 0..64u32 {
        if keep.bits() & (1u64 << cap) != 0 {
            continue;
        }
        // SAFETY: PR_CAPBSET_DROP takes a capability number; EINVAL past
        // the last capability the kernel knows is expected and ignored.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if ret < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Keeps only `keep` in the bounding, permitted and effective sets, and
/// clears the inheritable and ambient sets.
pub fn restrict_capabilities(keep: rustix::thread::CapabilitySet) -> io::Result<()> {
    drop_bounding_set(keep)?;
    rustix::thread::clear_ambient_capability_set()?;
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: rustix::thread::CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels before 5.9 have no close_range: the descriptors must be
    /// closed all the same.
    #[test]
    fn descriptors_are_closed_where_close_range_is_missing() {
        let null = std::fs::File::open("/dev/null").unwrap();
        // High numbers no other test thread uses.
        let fds: Vec<RawFd> = (0..3)
            .map(|_| {
                let fd = rustix::io::fcntl_dupfd_cloexec(&null, 1000).unwrap();
                std::os::fd::IntoRawFd::into_raw_fd(fd)
            })
            .collect();
        let open = |fd: RawFd| std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists();
        assert!(fds.iter().all(|&fd| open(fd)));
        close_span(fds[0], fds[2], |_, _| {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        })
        .unwrap();
        let left: Vec<RawFd> = fds.iter().copied().filter(|&fd| open(fd)).collect();
        assert!(left.is_empty(), "still open: {left:?}");
    }

    /// fork(2) copies only the calling thread: a child of a threaded
    /// process may find the allocator's lock held forever.
    #[test]
    fn fork_refuses_a_multi_threaded_process() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        match fork() {
            Ok(Forked::Child) => exit_now(0),
            Ok(Forked::Parent(pid)) => {
                let _ = wait_for(pid);
                panic!("forked a multi-threaded process");
            }
            Err(e) => assert!(e.to_string().contains("thread"), "{e}"),
        }
        drop(tx);
        let _ = other.join();
    }
}
