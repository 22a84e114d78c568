//! The async runtime every server runs on: `serve` over stdio and HTTP
//! (MCP) and `serve --e2b`. One builder, so each gets the same room for
//! concurrent sandbox calls (blocking threads, open files).

/// How many sandbox calls a server runs at once (see [`serve_runtime`]).
const BLOCKING_THREADS: usize = 4096;

/// The multi-thread runtime every server runs on; `None` after telling
/// the user on stderr why it could not start.
pub fn serve_runtime() -> Option<tokio::runtime::Runtime> {
    raise_open_file_limit();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A sandbox call holds a blocking thread while it runs, asleep in
        // poll(2) (a wait_task for up to 300 s). Tokio's default of 512
        // would queue the 513th concurrent waiter behind the others; idle
        // threads cost no CPU and exit after 10 s unused.
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .inspect_err(|e| eprintln!("sandkeep serve: cannot start the async runtime: {e}"))
        .ok()
}

/// Lifts the soft limit on open files to the hard one: each running
/// sandbox call holds about six descriptors (socket, pipes), and the
/// common soft limit of 1,024 would fail the 170th concurrent waiter with
/// EMFILE. What the hard limit allows is the administrator's choice.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!("cannot raise the open-file limit: {e}");
        }
    }
}
