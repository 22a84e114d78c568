//! Thin, checked wrappers over the few syscalls that rustix does not cover
//! safely (fork, unshare, _exit, execve, signal masks and signalfd,
//! mount_setattr, close_range), and the process-wide uses of the ones it does (waiting,
//! ids, id maps), for the keeper and the init. Every function here is
//! single-purpose and safe to call in a single-threaded process; nothing
//! here may be called from the tokio server. Whatever rustix offers safely
//! is called through rustix, never through libc.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rustix::process::{Gid, Pid, Uid, WaitOptions, WaitStatus};
use rustix::thread::UnshareFlags;
use sandkeep_proto::record::exit_code_of;
use sandkeep_provider::ExitStatus;

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
    single_threaded("fork")?;
    // SAFETY: this process is single-threaded (checked above; only a
    // thread of it could have started another since); the child continues
    // with a consistent copy of the whole address space.
    let pid = check(unsafe { libc::fork() })?;
    Ok(forked(pid))
}

/// `clone3`'s flag for a child born in a cgroup (Linux 5.7). libc's
/// constant is a 32-bit integer that cannot hold it.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// [`fork`], the child born in the cgroup v2 directory `cgroup`: nobody
/// has to move it there, and a move waits for an RCU grace period (see
/// `cgroup::Doors`). Fails where the kernel refuses it (before 5.7, or a
/// seccomp filter that denies clone3); the caller then forks and moves.
pub fn fork_into(cgroup: BorrowedFd) -> io::Result<Forked> {
    single_threaded("fork")?;
    // SAFETY: clone_args is plain integers; zero is "unset" for each.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = libc::SIGCHLD as u64;
    args.cgroup = cgroup.as_raw_fd() as u64;
    // glibc has no clone3 wrapper. Without CLONE_VM clone3 is fork: the
    // child continues on a copy of this stack. What glibc's fork would do
    // besides is moot here: its atfork resets concern locks that only
    // another thread could hold, and the thread's cached tid, left stale in
    // the child, is not what glibc (2.34+) uses to signal itself.
    // SAFETY: single-threaded (checked above), and `args` outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &raw const args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    let pid = check(i32::try_from(ret).unwrap_or(-1))?;
    Ok(forked(pid))
}

/// `unshare(flags)`, refused unless this process has a single thread. The
/// namespaces and tables it unshares are the calling thread's alone: in a
/// threaded process another thread would go on in the old ones (sharing
/// descriptors across the split with `FILES`), and the kernel refuses a
/// new user namespace there anyway. The keeper, its probes and the init
/// are single-threaded.
pub fn unshare(flags: UnshareFlags) -> io::Result<()> {
    single_threaded("unshare")?;
    // SAFETY: this process is single-threaded (checked above; only a
    // thread of it could have started another since): no other thread
    // can observe the descriptors, namespaces or attributes it unshares.
    unsafe { rustix::thread::unshare_unsafe(flags) }?;
    Ok(())
}

fn single_threaded(what: &str) -> io::Result<()> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "{what} refused: this process has {threads} threads, not one"
        )));
    }
    Ok(())
}

fn forked(pid: i32) -> Forked {
    if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid)
    }
}

/// Leaves the process without running destructors or atexit handlers, as a
/// forked child must.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// Now, in Unix nanoseconds, on the clock the kernel stamps file changes
/// with (`CLOCK_REALTIME_COARSE`, up to a tick behind the precise one): a
/// file changed later never has an older change time.
pub fn file_clock_now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; this clock
    // exists on every Linux since 2.6.32, and on failure `t` stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
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

/// Puts every signal back to its default action. Ignored dispositions
/// survive `execve`: without this a sandbox's programs would inherit
/// whatever the server was started with (Rust ignores SIGPIPE, `nohup`
/// SIGHUP, a shell's background job SIGQUIT), and `yes | head` or a
/// `kill -HUP` would not end a program there as they do elsewhere.
pub fn default_signal_actions() {
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is always a valid disposition; signals the
        // kernel refuses (glibc's reserved ones) just fail.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
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
    const RECORD: usize = std::mem::size_of::<libc::signalfd_siginfo>();
    let mut out = Vec::new();
    let mut record = [0u8; RECORD];
    // The kernel hands out whole records; `ssi_signo` is the first field.
    while rustix::io::read(fd, &mut record).is_ok_and(|n| n == RECORD) {
        let signo: [u8; 4] = record[..4].try_into().expect("a record is 128 bytes");
        out.push(u32::from_ne_bytes(signo));
    }
    out
}

/// Reaps one exited child without blocking: `Some((pid, how it ended))`.
pub fn reap_any() -> Option<(i32, ExitStatus)> {
    match rustix::process::wait(WaitOptions::NOHANG) {
        Ok(Some((pid, status))) => Some((pid.as_raw_nonzero().get(), exit_status(status))),
        _ => None,
    }
}

/// How a reaped child ended: its code, or the signal that killed it.
fn exit_status(status: WaitStatus) -> ExitStatus {
    // Without WUNTRACED a wait reports only exits and deaths, so one of the
    // two is always there.
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// Waits for one specific child; returns its exit code.
pub fn wait_for(pid: i32) -> io::Result<i32> {
    let target = Pid::from_raw(pid).ok_or_else(|| io::Error::other("no such child: pid 0"))?;
    loop {
        match rustix::process::waitpid(Some(target), WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(exit_code(status)),
            Ok(None) => return Err(io::Error::other(format!("child {pid} was not reaped"))),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Exit status, or 128+N for a death by signal N (the shell convention).
fn exit_code(status: WaitStatus) -> i32 {
    // Without WUNTRACED a wait reports only exits and deaths, so one of the
    // two is always there.
    exit_code_of(status.exit_status(), status.terminating_signal()).unwrap_or(-1)
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

/// Drops every supplementary group and sets all three uids and gids. The
/// raw syscalls act on the calling thread only, which is the whole
/// process in the single-threaded callers.
pub fn become_id(uid: u32, gid: u32, clear_groups: bool) -> io::Result<()> {
    if clear_groups {
        rustix::thread::set_thread_groups(&[])?;
    }
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}

/// Maps ids `0..count` of a user namespace onto the host's `uid..` and
/// `gid..`. `pid` names a child whose namespace a privileged parent maps
/// (it may keep setgroups); `None` is this process mapping its own fresh
/// namespace, which the kernel allows only after setgroups is denied.
pub fn write_id_maps(pid: Option<i32>, uid: u32, gid: u32, count: u32) -> io::Result<()> {
    write_id_map_lines(
        pid,
        &format!("0 {uid} {count}"),
        &format!("0 {gid} {count}"),
    )
}

/// Writes `uid_map` and `gid_map` lines (`INSIDE OUTSIDE COUNT`) of
/// `pid`'s user namespace (this process's when `None`, denying
/// `setgroups` first as the kernel requires of an unprivileged writer).
pub fn write_id_map_lines(pid: Option<i32>, uid_map: &str, gid_map: &str) -> io::Result<()> {
    let proc = pid.map_or_else(|| "/proc/self".to_owned(), |p| format!("/proc/{p}"));
    let setgroups = pid.is_none().then_some(("setgroups", "deny".to_owned()));
    for (file, content) in setgroups.into_iter().chain([
        ("uid_map", uid_map.to_owned()),
        ("gid_map", gid_map.to_owned()),
    ]) {
        let path = format!("{proc}/{file}");
        std::fs::write(&path, content)
            .map_err(|e| io::Error::new(e.kind(), format!("write {path}: {e}")))?;
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
        let one = rustix::thread::CapabilitySet::from_bits_retain(1u64 << cap);
        if keep.contains(one) {
            continue;
        }
        // EINVAL past the last capability the kernel knows is expected.
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
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

/// Brings the loopback interface of this process's network namespace up
/// (`SIOCSIFFLAGS` on `lo`, which a fresh namespace has down).
pub fn loopback_up() -> io::Result<()> {
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads one ifreq, which `req` is, with the name
    // NUL-terminated and the flags member set; the socket is open.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) }).map(drop)
}

/// Every address of the host's interfaces with its prefix length (the
/// netmask's; a full-length one without a netmask), from `getifaddrs`.
pub fn interface_addresses() -> io::Result<Vec<(std::net::IpAddr, u8)>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    /// The address of a sockaddr of the family it names, if IP.
    ///
    /// SAFETY: `sa` is null or points to a sockaddr of the family it
    /// names, big enough for that family's struct.
    unsafe fn ip_of(sa: *const libc::sockaddr) -> Option<IpAddr> {
        if sa.is_null() {
            return None;
        }
        // SAFETY: as the caller promises.
        unsafe {
            match i32::from((*sa).sa_family) {
                libc::AF_INET => {
                    let sin = &*(sa as *const libc::sockaddr_in);
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(sa as *const libc::sockaddr_in6);
                    Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                }
                _ => None,
            }
        }
    }
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that we free below.
    check(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet
        // freed; its `ifa_addr` and `ifa_netmask` are null or sockaddrs of
        // the family they name.
        let (addr, mask) = unsafe {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            (ip_of(ifa.ifa_addr), ip_of(ifa.ifa_netmask))
        };
        let Some(addr) = addr else { continue };
        let prefix = match (addr, mask) {
            (IpAddr::V4(_), Some(IpAddr::V4(m))) => m.to_bits().leading_ones(),
            (IpAddr::V6(_), Some(IpAddr::V6(m))) => m.to_bits().leading_ones(),
            (IpAddr::V4(_), _) => 32,
            (IpAddr::V6(_), _) => 128,
        };
        out.push((addr, prefix as u8));
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
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

    /// unshare(2) splits only the calling thread off: the others would go
    /// on in the old namespaces.
    #[test]
    fn unshare_refuses_a_multi_threaded_process() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        // No flags: should the check fail, nothing is unshared.
        let e = unshare(UnshareFlags::empty()).unwrap_err();
        assert!(e.to_string().contains("thread"), "{e}");
        drop(tx);
        let _ = other.join();
    }
}
