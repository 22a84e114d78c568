//! The keeper's user namespaces: root's, owned by the sandbox's first
//! uid and mapped onto its uid block by a throwaway child, and an ordinary
//! user's, which the keeper itself enters to be root there. Only user
//! namespaces and their id maps: the other namespaces are the keeper's
//! and the init's.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;

use rustix::thread::UnshareFlags;

use crate::step::{Step, StepError};
use crate::{slots, sys};

/// Why a user namespace could not be made or entered.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error(transparent)]
    Step(#[from] StepError),
    /// The kernel refused the namespace itself (the throwaway child only
    /// says whether it could).
    #[error(
        "unshare(CLONE_NEWUSER) failed{}; user namespaces are disabled or restricted on this host (run `sandkeep doctor`)",
        .0.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
    )]
    Refused(Option<io::Error>),
}

/// Root mode's user-namespace maker: a throwaway child that unshares a
/// user namespace and stays until the keeper has mapped it. Forked early,
/// so that its unshare overlaps the keeper's own work.
pub struct UsernsChild {
    pub pid: i32,
    /// One byte: whether its unshare worked.
    unshared: OwnedFd,
    /// Closed once the keeper holds the namespace: then it exits.
    done: OwnedFd,
}

pub fn fork_userns_child(base: u32) -> Result<UsernsChild, UsernsError> {
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .step(|| "make a pipe to the user-namespace child".into())
    };
    let (go_r, go_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    match sys::fork().step(|| "fork the user-namespace child".into())? {
        sys::Forked::Child => {
            drop(go_r);
            drop(done_w);
            let ok = unshare_owned_by(base).is_ok();
            let _ = rustix::io::write(&go_w, if ok { b"y" } else { b"n" });
            let mut b = [0u8; 1];
            let _ = rustix::io::read(&done_r, &mut b);
            sys::exit_now(0)
        }
        sys::Forked::Parent(pid) => Ok(UsernsChild {
            pid,
            unshared: go_r,
            done: done_w,
        }),
    }
}

/// Unshares a user namespace whose owner is host uid `base`, the sandbox
/// root's own, rather than host root. The kernel counts what processes of
/// a user namespace hold (inotify instances and watches, user
/// namespaces...) against their uid there and against the owner of each
/// namespace up the chain, under the host's per-user limits: owned by
/// host root, every sandbox's inotify instances were host root's, and one
/// sandbox could take all 128 of `fs.inotify.max_user_instances` from
/// host root and every other sandbox. Owned by `base`, a sandbox spends
/// only its own uid's. No host process runs as `base` (it is the first
/// uid of the sandbox's block), so the owner's rights in the namespace
/// are nobody's. Only the effective ids change, every capability kept (no
/// setuid fixup), which creating a user namespace needs where
/// unprivileged ones are restricted. This throwaway child's credentials
/// are all it changes.
fn unshare_owned_by(base: u32) -> io::Result<()> {
    use rustix::process::{Gid, Uid};
    use rustix::thread::CapabilitiesSecureBits;
    rustix::thread::set_capabilities_secure_bits(CapabilitiesSecureBits::NO_SETUID_FIXUP)?;
    rustix::thread::set_thread_res_gid(None, Gid::from_raw(base), None)?;
    rustix::thread::set_thread_res_uid(None, Uid::from_raw(base), None)?;
    sys::unshare(UnshareFlags::NEWUSER)
}

/// Root mode: a user namespace mapping sandbox ids 0..65536 to the block at
/// `base`, made by `child` and kept alive by the returned fd (the child
/// exits once it is released; the keeper reaps it later). The init joins
/// it after building the root, and idmaps lower layers through it.
pub fn shifted_userns(child: UsernsChild, base: u32) -> Result<OwnedFd, UsernsError> {
    let count = slots::BLOCK;
    map(
        child,
        &format!("0 {base} {count}"),
        &format!("0 {base} {count}"),
        "the sandbox user namespace",
    )
}

/// Root mode, a host share (SPEC §13): a user namespace in which the share
/// directory's owner `uid`/`gid` are the sandbox root's host ids `base`.
/// Idmapped through it, the share shows the owner's files as the sandbox
/// root's, and what sandbox root makes there belongs to the owner on the
/// host, never to a sandbox uid.
pub fn share_idmap(base: u32, uid: u32, gid: u32) -> Result<OwnedFd, UsernsError> {
    let child = fork_userns_child(base)?;
    let pid = child.pid;
    let userns = map(
        child,
        &format!("{uid} {base} 1"),
        &format!("{gid} {base} 1"),
        "a share's user namespace",
    );
    let _ = sys::wait_for(pid);
    userns
}

/// Writes `child`'s id maps and holds its namespace (`what`) by an fd;
/// the child is released to exit.
fn map(
    child: UsernsChild,
    uid_map: &str,
    gid_map: &str,
    what: &str,
) -> Result<OwnedFd, UsernsError> {
    let pid = child.pid;
    let mut b = [0u8; 1];
    let answered = rustix::io::read(&child.unshared, &mut b).is_ok_and(|n| n == 1 && b[0] == b'y');
    if !answered {
        return Err(UsernsError::Refused(None));
    }
    let userns = sys::write_id_map_lines(Some(pid), uid_map, gid_map)
        .and_then(|()| fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from))
        .step(|| format!("map {what}"))
        .map_err(UsernsError::from);
    // Released only now: the namespace lives on through its fd.
    drop(child.done);
    userns
}

/// Unprivileged mode: the keeper itself moves into a user namespace where
/// the invoking user is root, so it may create the other namespaces.
pub fn enter_invoker_userns() -> Result<(), UsernsError> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    sys::unshare(UnshareFlags::NEWUSER).map_err(|e| UsernsError::Refused(Some(e)))?;
    sys::write_id_maps(None, uid, gid, 1).step(|| "map the user namespace".into())?;
    sys::become_id(0, 0, false).step(|| "become root in the user namespace".into())?;
    Ok(())
}
