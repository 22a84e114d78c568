//! `pty`: the attached terminal of the E2B endpoint's PTY processes.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandkeep_proto::wire::{PtyFrame, PtyRequest, TermSize};

use crate::common::HELPER;

fn relay(command: &str) -> std::process::Child {
    let request = PtyRequest {
        command: command.to_owned(),
        size: TermSize { cols: 80, rows: 24 },
    };
    Command::new(HELPER)
        .arg("pty")
        .arg(serde_json::to_string(&request).unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the helper")
}

/// Frames typed in order (a resize before the line that reads the size),
/// the terminal's output relayed, and the command's own exit code.
#[test]
fn input_and_resizes_reach_the_terminal_and_the_exit_is_the_commands() {
    let mut child = relay("read x; echo got:$x; stty size; tty; exit 5");
    let mut stdin = child.stdin.take().unwrap();
    for frame in [
        PtyFrame::Resize(TermSize {
            cols: 100,
            rows: 30,
        }),
        PtyFrame::Input(b"hi\n".to_vec()),
    ] {
        stdin.write_all(&frame.encode()).unwrap();
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "{out:?}");
    assert!(out.contains("got:hi\r\n30 100\r\n/dev/pts/"), "{out:?}");
}

/// A caller that goes away (its end of stdout closed) ends the relay and,
/// hung up, the session.
#[test]
fn a_caller_gone_ends_the_relay_and_its_session() {
    let mut child = relay("echo ready; exec sleep 1000");
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(stdout.read(&mut byte).unwrap(), 1, "the relay ended early");
        seen.push(byte[0]);
    }
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the relay outlived its caller by 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The command was hung up (SIGHUP), and the relay ended as it did.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(1), "{status:?}");
}
