//! The `sandkeep` binary. It is also the in-sandbox helper: run under the
//! name `sandkeep-task` (the local provider mounts it so), it behaves exactly
//! as the `sandkeep-task` executable. `sandkeep __keeper …` is the local
//! provider's per-sandbox keeper process, started by the provider itself.

#![forbid(unsafe_code)]

fn main() {
    let mut args = std::env::args();
    let argv0 = args.next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some(std::ffi::OsStr::new("sandkeep-task")) {
        std::process::exit(sandkeep_task::main_with_args(args.collect()));
    }
    let rest: Vec<String> = args.collect();
    if rest.first().map(String::as_str) == Some(sandkeep::provider::local::KEEPER_ARG) {
        std::process::exit(sandkeep::provider::local::keeper_main(rest[1..].to_vec()));
    }
    std::process::exit(sandkeep::cli::main());
}
