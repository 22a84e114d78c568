//! A kernel without some namespaces, simulated for this process and every
//! process it starts afterwards (the provider's keepers and inits) with a
//! seccomp filter. Irreversible: call it only in a helper process of its
//! own (see [`super::ignored_test`]).

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Every namespace a kernel may lack.
pub const ALL_NAMESPACES: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// From now on an `unshare` or `clone` naming any of `namespaces` fails
/// with `errno`, as on a kernel built without them (EINVAL) or one that
/// forbids them (EPERM). `clone3` fails with ENOSYS: its flags are out of
/// a filter's reach, and libc then falls back to `clone`. With no
/// namespace named, only `clone3` fails.
pub fn refuse(namespaces: &[libc::c_int], errno: i32) {
    let rules = || {
        namespaces
            .iter()
            .map(|&flag| {
                let flag = flag as u64;
                SeccompRule::new(vec![
                    SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(flag),
                        flag,
                    )
                    .expect("a condition"),
                ])
                .expect("a rule")
            })
            .collect::<Vec<_>>()
    };
    let refused: BpfProgram = SeccompFilter::new(
        [libc::SYS_unshare, libc::SYS_clone]
            .into_iter()
            .map(|call| (call, rules()))
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TargetArch::x86_64,
    )
    .expect("a filter")
    .try_into()
    .expect("a BPF program");
    let no_clone3: BpfProgram = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )
    .expect("a filter")
    .try_into()
    .expect("a BPF program");
    rustix::thread::set_no_new_privs(true).expect("no_new_privs");
    // A syscall with no rules matches always: with no namespace named,
    // there is nothing to refuse but clone3.
    if !namespaces.is_empty() {
        seccompiler::apply_filter(&refused).expect("install the filter");
    }
    seccompiler::apply_filter(&no_clone3).expect("install the filter");
}

/// Runs `future` on a fresh two-thread runtime: the body of a helper
/// process (see [`super::ignored_test`]), which has no runtime of its own.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}
