//! `sandkeep-local-test`: what the `sandkeep` executable is to the local
//! provider (its keeper, and its task helper when run as `sandkeep-task`)
//! without the server and CLI, so that this crate's tests can run real
//! sandboxes without the `sandkeep` crate. Built in test builds only.

#![forbid(unsafe_code)]

fn main() {
    let mut args = std::env::args();
    let argv0 = args.next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some(std::ffi::OsStr::new("sandkeep-task")) {
        std::process::exit(sandkeep_task::main_with_args(args.collect()));
    }
    let rest: Vec<String> = args.collect();
    match rest.split_first() {
        Some((first, keeper_args)) if first == sandkeep_local::KEEPER_ARG => {
            std::process::exit(sandkeep_local::keeper_main(keeper_args.to_vec()))
        }
        _ => {
            eprintln!(
                "sandkeep-local-test is the local provider's keeper and task helper in its tests; \
                 run `sandkeep` instead"
            );
            std::process::exit(2)
        }
    }
}
