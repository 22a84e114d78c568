//! A pty task's terminal: the pseudo-terminal pair, its size, and the
//! session the command runs in so that the terminal is its controlling
//! terminal (`^C` reaches the foreground job, `tty` names it).
//!
//! Making a terminal controlling takes `setsid` and `TIOCSCTTY` in the
//! child between fork and exec; std offers that only through an `unsafe`
//! `pre_exec`. Instead the supervisor starts this very executable under a
//! hidden verb ([`SESSION_VERB`]) that does both and then execs the shell:
//! same pid, so the task's process group is still the spawned child's.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use sandkeep_proto::shell::SHELLS;
use sandkeep_proto::wire::TermSize;

/// `sandkeep-task __session COMMAND`, stdin/stdout/stderr on the
/// terminal: a new session on that terminal, then `bash -c COMMAND` (or
/// `sh -c`).
pub const SESSION_VERB: &str = "__session";

/// What a pty task's command sees as `TERM`.
pub const TERM: &str = "xterm-256color";

/// A new pseudo-terminal of `size`: the master (non-blocking) and the
/// slave for the command.
pub fn open(size: TermSize) -> io::Result<(OwnedFd, OwnedFd)> {
    // Close-on-exec for both: only the supervisor may hold the master, and
    // the command gets the slave as its stdio, not as a stray descriptor.
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = match rustix::pty::ioctl_tiocgptpeer(&master, flags) {
        Ok(slave) => slave,
        // Before Linux 4.13: by its name under /dev/pts.
        Err(_) => {
            let name = rustix::pty::ptsname(&master, Vec::new())?;
            rustix::fs::open(
                name.as_c_str(),
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?
        }
    };
    set_size(&master, size)?;
    rustix::io::ioctl_fionbio(&master, true)?;
    Ok((master, slave))
}

/// Sets the terminal's size; the kernel tells its foreground job
/// (SIGWINCH).
pub fn set_size(master: impl AsFd, size: TermSize) -> io::Result<()> {
    rustix::termios::tcsetwinsize(
        master,
        Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// `command` on the terminal whose slave is `slave`, in `cwd` (none: this
/// process's), in a session of its own led by the spawned child (so the
/// child's pid is still the group).
pub fn spawn_session(command: &str, cwd: Option<&str>, slave: &OwnedFd) -> io::Result<Child> {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("sandkeep-task")
        .arg(SESSION_VERB)
        .arg(command)
        .env("TERM", TERM)
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave.try_clone()?);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn()
}

/// Entry point of [`SESSION_VERB`]; returns only on failure (the exit
/// code), the reason on stderr, which is the terminal: the task's output.
pub fn session_main(args: &[String]) -> i32 {
    let [command] = args else {
        eprintln!("sandkeep-task: usage: {SESSION_VERB} COMMAND");
        return 126;
    };
    if let Err(e) = rustix::process::setsid()
        .map_err(io::Error::from)
        .and_then(|_| Ok(rustix::process::ioctl_tiocsctty(io::stdin())?))
    {
        eprintln!("sandkeep-task: could not make the terminal the task's own: {e}");
        return 126;
    }
    crate::oom::volunteer();
    let mut last = None;
    for shell in SHELLS {
        // exec returns only when it failed.
        let e = Command::new(shell).arg("-c").arg(command).exec();
        if e.kind() != io::ErrorKind::NotFound {
            last = Some(e);
            break;
        }
        last = Some(e);
    }
    eprintln!(
        "sandkeep-task: could not run the command with bash or sh: {}",
        last.expect("the loop tries at least one shell")
    );
    127
}
