//! `sandkeep-task serve`: the resident reader. One long-lived process per
//! host and sandbox answers the read-only verbs (`status`, `list`) from
//! request lines on stdin, so a read costs no process start.
//!
//! Its only channel is the pipes it was started with: the host holds their
//! other ends, handed over when the process was made, and no path leads to
//! them. It makes itself non-dumpable first, so that no other process of
//! the sandbox user (which has no `CAP_SYS_PTRACE`) can open its pipes
//! through `/proc/PID/fd` or trace it to answer in its name. (Where the
//! helper's file belongs to a host user the sandbox does not map, root's
//! sandboxes, the kernel already refuses that; an ordinary user's sandbox
//! maps the file's owner, and there this is what refuses it.) Each answer is
//! exactly what the one-shot verb prints, computed afresh from the task
//! directory: nothing is cached between requests, and like every reader it
//! never writes a record nor signals anything.
//!
//! It exits at the end of its stdin, when its stdout is gone, or after
//! [`wire::READER_IDLE_SECS`] without a request; an idle reader sleeps in
//! one `poll` and uses no CPU.

use std::io::Write;

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
    loop {
        let mut fds = [PollFd::from_borrowed_fd(
            rustix::stdio::stdin(),
            PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&idle)) {
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
            answer(&input[start..start + end], &mut answers);
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
            let mut out = std::io::stdout().lock();
            if out.write_all(&answers).and_then(|()| out.flush()).is_err() {
                return 0;
            }
            answers.clear();
        }
    }
}

/// Appends the reply line to one request line. A line without a number
/// cannot be answered to anyone: it is dropped (only the host writes here).
fn answer(line: &[u8], answers: &mut Vec<u8>) {
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
        other => crate::encode::<()>(Err(HelperError::BadRequest(format!(
            "the resident reader answers {} only, not {other:?}",
            wire::READER_VERBS.join(" and ")
        )))),
    };
    answers.extend_from_slice(format!("{id} {code} ").as_bytes());
    answers.extend_from_slice(reply.as_bytes());
    answers.push(b'\n');
}
