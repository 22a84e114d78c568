//! The static `sandkeep-task` executable: the helper verbs and, re-run
//! under a hidden verb, the supervisor. All logic lives in the library.

#![forbid(unsafe_code)]

fn main() {
    std::process::exit(sandkeep_task::main_with_args(
        std::env::args().skip(1).collect(),
    ));
}
