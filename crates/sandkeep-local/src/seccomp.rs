//! The syscall deny-list every sandbox process runs under, installed by the
//! init as its last setup step (children inherit it).
//!
//! Defence in depth: the namespace design already keeps the mount table out
//! of reach, but a deny-list also closes kernel surface (keys, bpf, perf,
//! modules, kexec, handles) and nested user namespaces, which would give a
//! process a full capability set over new namespaces. It decides nothing
//! else and is the same in every isolation level.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Refused outright with EPERM.
const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_syslog,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_quotactl,
    // The rest of what Docker's default profile denies to a container
    // without extra capabilities: io_uring (its own path around seccomp),
    // process inspection, NUMA placement, clock steering, legacy calls.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_quotactl_fd,
    libc::SYS_clock_adjtime,
    libc::SYS_kcmp,
    libc::SYS_lookup_dcookie,
    libc::SYS_fanotify_init,
    libc::SYS_mbind,
    libc::SYS_set_mempolicy,
    libc::SYS_get_mempolicy,
    libc::SYS_move_pages,
    libc::SYS_migrate_pages,
    libc::SYS_vhangup,
    libc::SYS_uselib,
    libc::SYS_ustat,
    libc::SYS_sysfs,
    libc::SYS_nfsservctl,
];

/// Refused with EPERM when their flags (argument 0) ask for a new user
/// namespace.
const NO_NEW_USERNS: &[i64] = &[libc::SYS_unshare, libc::SYS_clone];

// Classic BPF opcodes for the hand-written filter (seccompiler compiles
// only rule tables).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JGE_K: u16 = 0x35;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// Bit set in x32 syscall numbers, which carry the x86_64 audit arch and
/// so slip past filters that only check the arch.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn deny_list() -> Result<BpfProgram, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    for &nr in NO_NEW_USERNS {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )?;
        rules.insert(nr, vec![SeccompRule::new(vec![cond])?]);
    }
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )?
    .try_into()
}

/// x32 syscalls, and `clone3` (its flags live behind a pointer no filter
/// can read), fail with ENOSYS; libc then falls back to `clone`, which the
/// deny-list does check.
fn guard() -> BpfProgram {
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(BPF_LD_W_ABS, 0, 0, 0),
        ins(BPF_JGE_K, 2, 0, X32_SYSCALL_BIT),
        ins(BPF_JEQ_K, 1, 0, libc::SYS_clone3 as u32),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
        ins(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]
}

/// Installs both filters on the calling process (needs no_new_privs or
/// CAP_SYS_ADMIN).
pub fn install() -> Result<(), String> {
    let deny = deny_list().map_err(|e| format!("compile the seccomp filter: {e}"))?;
    seccompiler::apply_filter(&deny).map_err(|e| format!("install the seccomp filter: {e}"))?;
    seccompiler::apply_filter(&guard()).map_err(|e| format!("install the seccomp guard: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_filters_compile() {
        assert!(deny_list().unwrap().len() > DENIED.len());
        assert_eq!(guard().len(), 5);
    }
}
