//! The init's second life: the fork server. Once the sandbox is built and
//! the init holds the sandbox's identity, it accepts connections on the
//! sandbox's socket and forks one child per request (a command by the
//! shell, an argv, or a file operation), with the caller's pipes as its
//! stdio and nothing else of the init's descriptors, and reports its exit
//! code; it reaps every orphan besides. One request it answers itself, no
//! child forked: a new boot id (see `boot_id`). It changes no namespace,
//! identity or mount: it runs wholly inside what the setup made. Each
//! child goes to the sandbox's work cgroup, the one a pause freezes,
//! unless that is frozen (see `cgroup::WorkDoor`).

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};
use sandkeep_proto::shell::SHELLS;
use sandkeep_provider::ExitStatus;

use crate::boot_id::BootId;
use crate::cgroup::WorkDoor;
use crate::fileops;
use crate::sys;
use crate::wire::{self, Control, Reply, Request};

struct Conn {
    fd: Option<OwnedFd>,
    /// The child serving this connection's request, once forked.
    child: Option<i32>,
}

pub fn serve(
    listener: OwnedFd,
    env: &[CString],
    home: &std::path::Path,
    work: Option<&WorkDoor>,
    boot_id: Option<&BootId>,
) -> ! {
    let Ok(sigchld) = sys::signalfd(&[libc::SIGCHLD]) else {
        sys::exit_now(1)
    };
    // A descriptor leaked into sandbox commands could reach the host (the
    // work cgroup's are closed in each child).
    let mut keep = vec![listener.as_raw_fd(), sigchld.as_raw_fd()];
    keep.extend(work.map(WorkDoor::raw_fds).into_iter().flatten());
    keep.extend(boot_id.map(BootId::as_raw_fd));
    if sys::close_fds_except(&keep).is_err() {
        sys::exit_now(1)
    }
    let _ = rustix::io::ioctl_fionbio(&listener, true);
    let mut conns: Vec<Conn> = Vec::new();
    let mut buf = vec![0u8; wire::MAX_REQUEST];
    loop {
        let ready = {
            let mut fds = vec![
                PollFd::new(&listener, PollFlags::IN),
                PollFd::new(&sigchld, PollFlags::IN),
            ];
            let live: Vec<usize> = (0..conns.len())
                .filter(|&i| conns[i].fd.is_some())
                .collect();
            for &i in &live {
                fds.push(PollFd::new(
                    conns[i].fd.as_ref().expect("live"),
                    PollFlags::IN,
                ));
            }
            if rustix::event::poll(&mut fds, None).is_err() {
                continue;
            }
            let flags: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
            (
                flags[0],
                flags[1],
                live.into_iter()
                    .zip(flags[2..].to_vec())
                    .collect::<Vec<_>>(),
            )
        };
        let (accept, reap, conn_ready) = ready;
        for (i, is_ready) in conn_ready {
            if is_ready {
                on_message(&mut conns[i], &mut buf, env, home, work, boot_id);
            }
        }
        if reap {
            sys::drain_signalfd(sigchld.as_fd());
            while let Some((pid, status)) = sys::reap_any() {
                if let Some(conn) = conns.iter_mut().find(|c| c.child == Some(pid)) {
                    answer(
                        conn,
                        match status {
                            ExitStatus::Code(code) => Reply::Exited(code),
                            ExitStatus::Signal(signal) => Reply::Signaled(signal),
                        },
                    );
                    conn.child = None;
                }
            }
        }
        if accept {
            while let Ok(fd) = rustix::net::accept_with(
                &listener,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            ) {
                conns.push(Conn {
                    fd: Some(fd),
                    child: None,
                });
            }
        }
        conns.retain(|c| c.fd.is_some() || c.child.is_some());
    }
}

fn on_message(
    conn: &mut Conn,
    buf: &mut [u8],
    env: &[CString],
    home: &std::path::Path,
    work: Option<&WorkDoor>,
    boot_id: Option<&BootId>,
) {
    let Some(fd) = conn.fd.as_ref() else { return };
    let received = wire::recv(fd, buf);
    if let Some(pid) = conn.child {
        // Anything but EAGAIN while the child runs (a kill request or the
        // caller hanging up) ends the child's process group.
        if let Err(e) = &received
            && e.kind() == std::io::ErrorKind::WouldBlock
        {
            return;
        }
        if let Ok((n, _)) = &received
            && let Ok(Control::Signal(signal)) = serde_json::from_slice(&buf[..*n])
        {
            // The leader only, as E2B's envd signals a process; a signal
            // number the kernel refuses changes nothing.
            if let (Some(leader), Some(signal)) = (
                rustix::process::Pid::from_raw(pid),
                rustix::process::Signal::from_named_raw(signal),
            ) {
                let _ = rustix::process::kill_process(leader, signal);
            }
            return;
        }
        // A vanished group is not an error worth reporting.
        if let Some(group) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        if !matches!(received, Ok((n, _)) if n > 0) {
            conn.fd = None;
        }
        return;
    }
    let (n, fds) = match received {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
        Err(_) => {
            conn.fd = None;
            return;
        }
    };
    if n == 0 {
        conn.fd = None;
        return;
    }
    let request: Request = match serde_json::from_slice(&buf[..n]) {
        Ok(r) => r,
        Err(e) => return fail(conn, format!("malformed request: {e}")),
    };
    if request == Request::NewBootId {
        return new_boot_id(conn, boot_id);
    }
    let Ok([stdin, stdout, stderr]) = <[OwnedFd; 3]>::try_from(fds) else {
        return fail(conn, "a request needs exactly three descriptors".into());
    };
    let forked = match work {
        Some(work) if !work.frozen() => work.fork(),
        _ => sys::fork(),
    };
    match forked {
        Ok(sys::Forked::Child) => child(request, [stdin, stdout, stderr], env, home),
        Ok(sys::Forked::Parent(pid)) => conn.child = Some(pid),
        Err(e) => fail(conn, format!("fork: {e}")),
    }
}

/// Answers [`Request::NewBootId`]: in the init itself, the only holder of
/// the boot id's writable descriptor.
fn new_boot_id(conn: &mut Conn, boot_id: Option<&BootId>) {
    let reply = match boot_id.map(BootId::renew) {
        Some(Ok(())) => Reply::Exited(0),
        Some(Err(e)) => Reply::Failed(format!("write the sandbox's boot id: {e}")),
        None => Reply::Failed("this sandbox shows the host's boot id".to_owned()),
    };
    answer(conn, reply);
}

fn fail(conn: &mut Conn, message: String) {
    answer(conn, Reply::Failed(message));
}

/// Sends the connection's one reply and closes it.
fn answer(conn: &mut Conn, reply: Reply) {
    if let Some(fd) = conn.fd.take() {
        let reply = serde_json::to_vec(&reply).unwrap_or_default();
        let _ = wire::send(&fd, &reply, &[]);
    }
}

/// The forked child: its own session and process group, the caller's
/// pipes as stdio, nothing else of the init's descriptors.
fn child(request: Request, stdio: [OwnedFd; 3], env: &[CString], home: &std::path::Path) -> ! {
    let _ = sys::set_signal_mask(&[]);
    sys::default_signal_actions();
    let _ = rustix::process::setsid();
    let [stdin, stdout, stderr] = &stdio;
    if rustix::stdio::dup2_stdin(stdin)
        .and_then(|()| rustix::stdio::dup2_stdout(stdout))
        .and_then(|()| rustix::stdio::dup2_stderr(stderr))
        .is_err()
    {
        sys::exit_now(127);
    }
    if let Err(e) = sys::close_fds_except(&[]) {
        eprintln!("sandkeep: cannot close the fork server's descriptors: {e}");
        sys::exit_now(127);
    }
    if std::env::set_current_dir(home).is_err() {
        sys::exit_now(127);
    }
    match request {
        Request::Exec { command, cwd } => {
            enter(cwd);
            let Ok(cmd) = CString::new(command) else {
                eprintln!("sandkeep: the command contains a NUL byte");
                sys::exit_now(127);
            };
            // The same shells, in the same order, as a task's command.
            for shell in SHELLS {
                let path = CString::new(shell).expect("shell paths have no NUL");
                let err = sys::execve(&path, &[path.clone(), c"-c".to_owned(), cmd.clone()], env);
                if err.kind() != std::io::ErrorKind::NotFound || Some(&shell) == SHELLS.last() {
                    eprintln!("sandkeep: cannot run {shell} in the sandbox: {err}");
                    break;
                }
            }
            sys::exit_now(127)
        }
        Request::Run {
            argv,
            env: extra,
            cwd,
        } => {
            enter(cwd);
            run_argv(&argv, env, &extra)
        }
        other => sys::exit_now(fileops::run(other)),
    }
}

/// Changes to the requested working directory (the home otherwise).
fn enter(cwd: Option<String>) {
    if let Some(cwd) = cwd
        && let Err(e) = std::env::set_current_dir(&cwd)
    {
        eprintln!("sandkeep: cannot change to directory {cwd:?}: {e}");
        sys::exit_now(1);
    }
}

/// Runs `argv` directly with the sandbox's environment plus `extra`:
/// `argv[0]` as a path when it has a slash, else the first match on the
/// resulting `PATH`, as `execvp` finds it.
fn run_argv(argv: &[String], base: &[CString], extra: &[(String, String)]) -> ! {
    let fail = |why: String| -> ! {
        eprintln!("sandkeep: {why}");
        sys::exit_now(127)
    };
    let to_c = |s: String| {
        CString::new(s)
            .unwrap_or_else(|_| fail("an argument or variable contains a NUL byte".into()))
    };
    let Some(program) = argv.first() else {
        fail("no program to run".into())
    };
    let replaced = |entry: &CString| {
        let entry = entry.as_bytes();
        extra.iter().any(|(name, _)| {
            entry.len() > name.len()
                && entry.starts_with(name.as_bytes())
                && entry[name.len()] == b'='
        })
    };
    let mut env: Vec<CString> = base.iter().filter(|e| !replaced(e)).cloned().collect();
    env.extend(
        extra
            .iter()
            .map(|(name, value)| to_c(format!("{name}={value}"))),
    );
    let args: Vec<CString> = argv.iter().cloned().map(to_c).collect();
    let candidates: Vec<String> = if program.contains('/') {
        vec![program.clone()]
    } else {
        let path = env
            .iter()
            .find_map(|e| e.to_str().ok()?.strip_prefix("PATH="))
            .unwrap_or("/usr/local/bin:/usr/bin:/bin")
            .to_owned();
        path.split(':')
            .map(|dir| if dir.is_empty() { "." } else { dir })
            .map(|dir| format!("{dir}/{program}"))
            .collect()
    };
    let mut last = std::io::Error::from(std::io::ErrorKind::NotFound);
    for candidate in candidates {
        let err = sys::execve(&to_c(candidate), &args, &env);
        // Like execvp: a miss or a refusal here tries the next directory.
        let next = matches!(
            err.raw_os_error(),
            Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
        );
        last = err;
        if !next {
            break;
        }
    }
    fail(format!("cannot run {program:?} in the sandbox: {last}"))
}
