//! `sandkeep-task serve`: the resident reader. One long-lived process per
//! host and sandbox answers the read-only verbs (`status`, `list`, and
//! `changes` without its diff) from request lines on stdin, so a read costs
//! no process start. `changes` walks are answered by a thread of their
//! own, started at the first: a walk may take far longer than a status
//! read, which must not wait behind it.
//!
//! Its only channel is the pipes it was started with: the host holds their
//! other ends, handed over when the process was made, and no path leads to
//! them. It makes itself non-dumpable first, so that no other process of
//! the sandbox user (which has no `CAP_SYS_PTRACE`) can open its pipes
//! through `/proc/PID/fd` or trace it to answer in its name. (Where the
//! helper's file belongs to a host user the sandbox does not map, root's
//! sandboxes, the kernel already refuses that; an ordinary user's sandbox
//! maps the file's owner, and there this is what refuses it.) Each answer is
//! exactly what the one-shot verb prints (a `changes` asking for its diff
//! is refused instead), computed afresh from the task directory or the
//! shares' layers: nothing is cached between requests, and like every
//! reader it never writes a record nor signals anything.
//!
//! It exits at the end of its stdin, when its stdout is gone, or after
//! [`wire::READER_IDLE_SECS`] without a request and no walk running; an
//! idle reader sleeps in one `poll` and uses no CPU.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use rustix::event::{PollFd, PollFlags, Timespec};
use sandkeep_proto::wire::{self, verb};

use crate::HelperError;

/// Serves until the host goes away or stays silent; returns the exit code.
pub fn serve() -> i32 {
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        // Without it another process of the sandbox user could answer for
        // us: refuse, and the host reads with one-shot helpers instead.
        eprintln!("sandkeep-task serve: cannot become non-dumpable: {e}");
        return 1;
    }
    let idle = Timespec {
        tv_sec: i64::try_from(wire::READER_IDLE_SECS).unwrap_or(i64::MAX),
        tv_nsec: 0,
    };
    let mut input: Vec<u8> = Vec::new();
    let mut answers: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut walker = Walker::default();
    loop {
        let mut fds = [PollFd::from_borrowed_fd(
            rustix::stdio::stdin(),
            PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&idle)) {
            // A walk still running is not idleness: its answer is awaited.
            Ok(0) if walker.busy() => continue,
            Ok(0) => return 0,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                eprintln!("sandkeep-task serve: poll: {e}");
                return 1;
            }
        }
        match rustix::io::read(rustix::stdio::stdin(), &mut chunk) {
            Ok(0) => return 0,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
            Err(e) => {
                eprintln!("sandkeep-task serve: read: {e}");
                return 1;
            }
        }
        // Every whole line read so far is answered in one write: under load
        // the host's requests arrive together and leave together.
        let mut start = 0;
        while let Some(end) = input[start..].iter().position(|&b| b == b'\n') {
            answer(&input[start..start + end], &mut answers, &mut walker);
            start += end + 1;
        }
        input.drain(..start);
        if input.len() > wire::READER_REQUEST_MAX {
            eprintln!(
                "sandkeep-task serve: a request line over {} bytes",
                wire::READER_REQUEST_MAX
            );
            return 1;
        }
        if !answers.is_empty() {
            if !write_answers(&answers) {
                return 0;
            }
            answers.clear();
        }
    }
}

/// Writes whole answer lines at once: the lock keeps a walk's answer and
/// the main loop's from mixing. False when stdout is gone.
pub(crate) fn write_answers(answers: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(answers).and_then(|()| out.flush()).is_ok()
}

/// Appends the reply line to one request line. A line without a number
/// cannot be answered to anyone: it is dropped (only the host writes here).
fn answer(line: &[u8], answers: &mut Vec<u8>, walker: &mut Walker) {
    let Some((id, verb_name, json)) = wire::split_reader_line(line) else {
        eprintln!("sandkeep-task serve: ignoring a malformed request line");
        return;
    };
    let json = std::str::from_utf8(json)
        .map_err(|_| HelperError::BadRequest("the request is not UTF-8".into()));
    let (reply, code) = match verb_name {
        verb::STATUS => crate::encode(
            json.and_then(|j| crate::parse(Some(j)))
                .and_then(crate::status::status),
        ),
        verb::LIST => crate::encode(
            json.and_then(|j| crate::no_arguments(Some(j)))
                .and_then(|()| crate::status::list()),
        ),
        verb::CHANGES => {
            walker.walk(id, json.map(str::to_owned));
            return;
        }
        other => crate::encode::<()>(Err(HelperError::BadRequest(format!(
            "the resident reader answers {} only, not {other:?}",
            wire::READER_VERBS.join(", ")
        )))),
    };
    push_answer(answers, id, code, &reply);
}

/// Appends the answer line `ID CODE REPLY`.
pub(crate) fn push_answer(answers: &mut Vec<u8>, id: u64, code: i32, reply: &str) {
    answers.extend_from_slice(format!("{id} {code} ").as_bytes());
    answers.extend_from_slice(reply.as_bytes());
    answers.push(b'\n');
}

/// The thread answering `changes`, in the order asked.
#[derive(Default)]
struct Walker {
    requests: Option<mpsc::Sender<(u64, Result<String, HelperError>)>>,
    /// Walks asked and not yet answered.
    pending: Arc<AtomicUsize>,
}

impl Walker {
    fn busy(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    fn walk(&mut self, id: u64, request: Result<String, HelperError>) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let mut work = (id, request);
        // A walker that is gone (it panicked) is started again.
        for _ in 0..2 {
            let requests = self.requests.get_or_insert_with(|| {
                let (requests, walks) = mpsc::channel();
                let pending = Arc::clone(&self.pending);
                std::thread::spawn(move || walk_all(&walks, &pending));
                requests
            });
            match requests.send(work) {
                Ok(()) => return,
                Err(mpsc::SendError(unsent)) => {
                    work = unsent;
                    self.requests = None;
                }
            }
        }
    }
}

fn walk_all(walks: &mpsc::Receiver<(u64, Result<String, HelperError>)>, pending: &AtomicUsize) {
    for (id, request) in walks {
        // Counted off when done, a walk that panics too.
        let _done = Done(pending);
        let (reply, code) = crate::encode(
            request
                .and_then(|j| crate::parse(Some(&j)))
                .and_then(changes_without_diff),
        );
        let mut line = Vec::new();
        push_answer(&mut line, id, code, &reply);
        // A failed write means the host is gone: the main loop ends at
        // its stdin's end.
        write_answers(&line);
    }
}

struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The diff stays with the one-shot helper: up to 256 KiB of text in one
/// answer line would hold up every answer behind it on a slow channel.
fn changes_without_diff(
    request: sandkeep_proto::shares::ChangesRequest,
) -> Result<sandkeep_proto::shares::ChangesReply, HelperError> {
    if request.diff {
        return Err(HelperError::BadRequest(
            "the resident reader lists changes without their diff; ask the one-shot helper \
             for the diff"
                .into(),
        ));
    }
    crate::changes::changes(request)
}
