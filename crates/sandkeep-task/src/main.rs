fn main() {
    std::process::exit(sandkeep_task::main_with_args(
        std::env::args().skip(1).collect(),
    ));
}
