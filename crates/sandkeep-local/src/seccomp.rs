//! The syscall deny-list every sandbox process runs under, installed by the
//! init as its last setup step (children inherit it).
//!
//! Defence in depth: the namespace design already keeps the mount table out
//! of reach, but a deny-list also closes kernel surface (keys, bpf, perf,
//! modules, kexec, handles) and nested user namespaces, which would give a
//! process a full capability set over new namespaces. It decides nothing
//! else and is the same in every isolation level.
//!
//! The filter is classic BPF written here, a binary search over the listed
//! syscall numbers, rather than compiled by `seccompiler`, which emits one
//! comparison after another. When a filter is installed the kernel runs it
//! once for every syscall number to find those it always allows (its
//! action cache); a chain of about 120 comparisons made that take 0.25 ms
//! of every sandbox's creation, a search of depth 6 takes a few
//! microseconds (docs/benchmarks.md). libseccomp builds such trees but is
//! a C library and a system package.

use std::io;

use libc::sock_filter;

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

/// Fail with ENOSYS: `clone3` keeps its flags behind a pointer no filter
/// can read, and libc then falls back to `clone`, which is checked.
const UNSUPPORTED: &[i64] = &[libc::SYS_clone3];

/// Set in x32 syscall numbers, which carry the x86_64 audit arch and so
/// would slip past a check of the arch alone: they fail with ENOSYS.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

// Offsets into `struct seccomp_data`: the syscall number, the arch, and
// the low half of argument 0 (CLONE_NEWUSER lies there).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// Where a syscall ends up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Eperm,
    Enosys,
    /// EPERM if argument 0 has CLONE_NEWUSER, else allowed.
    NewUserns,
    /// Another arch than x86_64 (an `int 0x80` call, say).
    Kill,
}

const VERDICTS: [Verdict; 5] = [
    Verdict::NewUserns,
    Verdict::Allow,
    Verdict::Eperm,
    Verdict::Enosys,
    Verdict::Kill,
];

/// A jump's destination while the program is built: the verdicts are laid
/// out after the search, so their offsets are known only at the end.
#[derive(Debug, Clone, Copy)]
enum Target {
    Next,
    At(usize),
    To(Verdict),
}

struct Builder {
    code: Vec<(u16, u32, Target, Target)>,
}

impl Builder {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, k, Target::Next, Target::Next));
    }

    fn jump(&mut self, code: u16, k: u32, yes: Target, no: Target) -> usize {
        self.code.push((code, k, yes, no));
        self.code.len() - 1
    }

    /// A balanced search over `table` (sorted by number); numbers not in
    /// it are allowed.
    fn search(&mut self, table: &[(u32, Verdict)]) {
        if table.len() <= 3 {
            for (i, &(nr, verdict)) in table.iter().enumerate() {
                let miss = if i + 1 == table.len() {
                    Target::To(Verdict::Allow)
                } else {
                    Target::Next
                };
                self.jump(JEQ_K, nr, Target::To(verdict), miss);
            }
            return;
        }
        let mid = table.len() / 2;
        let split = self.jump(JGE_K, table[mid].0, Target::Next, Target::Next);
        self.search(&table[..mid]);
        self.code[split].2 = Target::At(self.code.len());
        self.search(&table[mid..]);
    }

    /// Appends the verdicts and resolves every jump into an offset.
    fn finish(mut self) -> Vec<sock_filter> {
        let mut at = [0usize; VERDICTS.len()];
        for (slot, verdict) in at.iter_mut().zip(VERDICTS) {
            *slot = self.code.len();
            match verdict {
                Verdict::NewUserns => {
                    self.op(LD_W_ABS, ARG0_LOW);
                    self.jump(
                        JSET_K,
                        libc::CLONE_NEWUSER as u32,
                        Target::To(Verdict::Eperm),
                        Target::To(Verdict::Allow),
                    );
                }
                Verdict::Allow => self.op(RET_K, RET_ALLOW),
                Verdict::Eperm => self.op(RET_K, RET_ERRNO | libc::EPERM as u32),
                Verdict::Enosys => self.op(RET_K, RET_ERRNO | libc::ENOSYS as u32),
                Verdict::Kill => self.op(RET_K, RET_KILL_PROCESS),
            }
        }
        let offset = |from: usize, target: Target| -> u8 {
            let to = match target {
                Target::Next => from + 1,
                Target::At(i) => i,
                Target::To(v) => at[VERDICTS.iter().position(|&x| x == v).expect("listed")],
            };
            u8::try_from(to - (from + 1)).expect("a jump of the filter fits in 255 instructions")
        };
        self.code
            .iter()
            .enumerate()
            .map(|(i, &(code, k, yes, no))| sock_filter {
                code,
                jt: offset(i, yes),
                jf: offset(i, no),
                k,
            })
            .collect()
    }
}

/// The whole filter: the arch, x32 numbers, then the search.
fn program() -> Vec<sock_filter> {
    let mut table: Vec<(u32, Verdict)> = DENIED
        .iter()
        .map(|&nr| (nr, Verdict::Eperm))
        .chain(NO_NEW_USERNS.iter().map(|&nr| (nr, Verdict::NewUserns)))
        .chain(UNSUPPORTED.iter().map(|&nr| (nr, Verdict::Enosys)))
        .map(|(nr, verdict)| {
            (
                u32::try_from(nr).expect("syscall numbers are small"),
                verdict,
            )
        })
        .collect();
    table.sort_unstable_by_key(|&(nr, _)| nr);
    let mut b = Builder { code: Vec::new() };
    b.op(LD_W_ABS, ARCH);
    b.jump(
        JEQ_K,
        AUDIT_ARCH_X86_64,
        Target::Next,
        Target::To(Verdict::Kill),
    );
    b.op(LD_W_ABS, NR);
    b.jump(
        JGE_K,
        X32_SYSCALL_BIT,
        Target::To(Verdict::Enosys),
        Target::Next,
    );
    b.search(&table);
    b.finish()
}

/// Installs the filter on the calling process (needs no_new_privs or
/// CAP_SYS_ADMIN).
pub fn install() -> Result<(), String> {
    let filter = program();
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).expect("the filter is small"),
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, alive for the call; the kernel
    // copies the program.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &raw const prog,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "install the seccomp filter: {}",
            io::Error::last_os_error()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel returns for a call, by running the program as it
    /// does (only the instructions the builder emits), and how many
    /// instructions that took.
    fn run(program: &[sock_filter], arch: u32, nr: u32, arg0: u64) -> (u32, usize) {
        let mut acc = 0u32;
        let mut pc = 0usize;
        for steps in 1.. {
            let i = program[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        NR => nr,
                        ARCH => arch,
                        ARG0_LOW => arg0 as u32,
                        k => panic!("load of offset {k}"),
                    }
                }
                JEQ_K => pc += jump(acc == i.k),
                JGE_K => pc += jump(acc >= i.k),
                JSET_K => pc += jump(acc & i.k != 0),
                RET_K => return (i.k, steps),
                code => panic!("opcode {code:#x}"),
            }
        }
        unreachable!()
    }

    #[test]
    fn every_syscall_number_gets_its_verdict() {
        let program = program();
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        let newuser = libc::CLONE_NEWUSER as u64;
        for nr in 0..1024u32 {
            let listed = |list: &[i64]| list.contains(&i64::from(nr));
            let expected = if listed(DENIED) {
                eperm
            } else if listed(UNSUPPORTED) {
                enosys
            } else {
                RET_ALLOW
            };
            for arg0 in [0, newuser | libc::SIGCHLD as u64, u64::MAX] {
                let expected = if listed(NO_NEW_USERNS) && arg0 & newuser != 0 {
                    eperm
                } else {
                    expected
                };
                let (verdict, steps) = run(&program, AUDIT_ARCH_X86_64, nr, arg0);
                assert_eq!(verdict, expected, "syscall {nr}, argument 0 {arg0:#x}");
                // A chain over the 59 listed numbers would take over 60.
                assert!(steps <= 16, "syscall {nr} took {steps} instructions");
            }
            assert_eq!(
                run(&program, AUDIT_ARCH_X86_64, nr | X32_SYSCALL_BIT, 0).0,
                enosys,
                "x32 syscall {nr}"
            );
            assert_eq!(
                run(&program, 0x4000_0003, nr, 0).0,
                RET_KILL_PROCESS,
                "i386 syscall {nr}"
            );
        }
    }
}
