//! The command line's surface: bad arguments exit 2 with a message that
//! names the problem (whether clap or the service refuses them), help texts
//! and completions. These tests create no sandbox.

use crate::support;

use support::Home;
use support::cli::describe;

const TASK: &str = "0123456789abcdef0123456789abcdef";

/// Runs `args`, asserts exit code 2, nothing on stdout, and a message on
/// stderr containing every one of `expect`.
fn usage_error(home: &Home, args: &[&str], expect: &[&str]) {
    let out = home.run(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "sandkeep {args:?}: {}",
        describe(&out)
    );
    assert!(
        out.stdout.is_empty(),
        "sandkeep {args:?} printed on stdout: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for e in expect {
        assert!(
            stderr.contains(e),
            "sandkeep {args:?}: stderr should mention {e:?}: {stderr}"
        );
    }
}

#[test]
fn bad_arguments_exit_2_with_a_message_naming_them() {
    let home = Home::new();
    usage_error(
        &home,
        &["frobnicate"],
        &["unrecognized subcommand", "frobnicate"],
    );
    usage_error(&home, &["task", "start", "--", "ls"], &["--sandbox"]);
    usage_error(&home, &["exec"], &["COMMAND"]);
    usage_error(
        &home,
        &["exec", "--timeout", "soon", "--", "ls"],
        &["invalid value", "soon", "--timeout"],
    );
    usage_error(
        &home,
        &["sandbox", "create", "--env", "NOEQUALS"],
        &["NAME=VALUE", "NOEQUALS"],
    );
    usage_error(&home, &["sandbox", "kill"], &["SANDBOX"]);
    usage_error(&home, &["task", "get", "sb-1"], &["TASK"]);
    usage_error(
        &home,
        &["task", "logs", "sb-1", TASK, "--folow"],
        &["--folow", "--follow"],
    );
    usage_error(&home, &["completions", "tcsh"], &["tcsh", "bash"]);
}

#[test]
fn values_the_service_refuses_exit_2_and_run_nothing() {
    let home = Home::new();
    usage_error(
        &home,
        &["sandbox", "create", "--timeout", "0"],
        &["timeout", "86400"],
    );
    usage_error(
        &home,
        &["sandbox", "create", "--timeout", "86401", "--json"],
        &["timeout"],
    );
    usage_error(
        &home,
        &["task", "get", "sb-1", "NOT-A-TASK-ID"],
        &["task_id", "NOT-A-TASK-ID"],
    );
    usage_error(
        &home,
        &["task", "get", "sb-1", TASK, "--limit", "0"],
        &["limit"],
    );
    usage_error(
        &home,
        &["task", "get", "sb-1", TASK, "--stdout-offset", "1048577"],
        &["stdout_offset"],
    );
    usage_error(&home, &["task", "wait", "Not/An/Id", TASK], &["sandbox_id"]);
    usage_error(
        &home,
        &[
            "task",
            "start",
            "--sandbox",
            "sb-1",
            "--timeout",
            "3601",
            "--",
            "true",
        ],
        &["timeout"],
    );
    let listed = home.json(&["sandbox", "list", "--json"]);
    assert_eq!(
        listed["sandboxes"],
        serde_json::json!([]),
        "a refused create made a sandbox"
    );
}

#[test]
fn failures_exit_1_or_125_with_a_next_step() {
    let home = Home::new();
    let out = home.run(&["sandbox", "kill", "sb-gone"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "killing a gone sandbox is not an error: {}",
        describe(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("already gone"));

    let out = home.run(&["task", "get", "sb-gone", TASK]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no such sandbox sb-gone"), "{stderr}");
    assert!(
        stderr.contains("sandkeep sandbox list"),
        "the next step is a command: {stderr}"
    );

    // An HTTP registration before any server made a token says how to get one.
    let out = home.run(&[
        "mcp-config",
        "cursor",
        "--http",
        "http://127.0.0.1:8765/mcp",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("http-token") && stderr.contains("sandkeep serve --http"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{}", describe(&out));

    // Commands that forward a task's status use 125 for their own failure.
    for args in [
        &["task", "wait", "sb-gone", TASK][..],
        &["task", "logs", "sb-gone", TASK, "--follow"],
        &["exec", "--sandbox", "sb-gone", "--", "true"],
    ] {
        let out = home.run(args);
        assert_eq!(
            out.status.code(),
            Some(125),
            "sandkeep {args:?}: {}",
            describe(&out)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("no such sandbox"));
    }
}

/// The e2b provider without its key: the error names the variable to set,
/// with no hint about the local provider's state directory.
#[test]
fn the_e2b_provider_without_a_key_names_the_variable_to_set() {
    let home = Home::local();
    let out = home
        .command(&["sandbox", "list"])
        .env("SANDKEEP_PROVIDER", "e2b")
        .env_remove("E2B_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("E2B_API_KEY is not set"), "{stderr}");
    assert!(!stderr.contains("SANDKEEP_HOME"), "{stderr}");
}

#[test]
fn help_texts_explain_commands_to_a_newcomer() {
    let home = Home::new();
    let root = home.ok(&["--help"]);
    for phrase in [
        "background tasks",
        "SANDKEEP_HOME",
        "sandbox",
        "task",
        "doctor",
        "completions",
        "75",
        "unknown",
    ] {
        assert!(
            root.contains(phrase),
            "`sandkeep --help` should mention {phrase:?}:\n{root}"
        );
    }
    let short = home.ok(&["-h"]);
    assert!(
        short.lines().count() < root.lines().count(),
        "-h is the short form"
    );

    let pages: &[(&[&str], &[&str])] = &[
        (
            &["sandbox", "--help"],
            &["create", "list", "kill", "deadline"],
        ),
        (
            &["sandbox", "create", "--help"],
            &["--template", "--timeout", "--env", "86400", "redacted"],
        ),
        (&["sandbox", "list", "--help"], &["--json"]),
        (&["sandbox", "kill", "--help"], &["SANDBOX", "already gone"]),
        (
            &["exec", "--help"],
            &["--sandbox", "destroyed", "exit", "124", "125"],
        ),
        (
            &["task", "--help"],
            &[
                "start",
                "get",
                "cancel",
                "list",
                "logs",
                "wait",
                "SANDBOX TASK",
            ],
        ),
        (
            &["task", "start", "--help"],
            &["--sandbox", "retain", "unknown", "75", "do not start"],
        ),
        (
            &["task", "get", "--help"],
            &["unknown", "--stdout-offset", "--limit"],
        ),
        (&["task", "cancel", "--help"], &["TERM", "KILL", "3 s"]),
        (&["task", "list", "--help"], &["SANDBOX"]),
        (
            &["task", "logs", "--help"],
            &["--follow", "--stderr", "tail -f", "terminal", "75"],
        ),
        (&["task", "wait", "--help"], &["--timeout", "76", "75"]),
        (
            &["doctor", "--help"],
            &["namespaces", "overlay", "state directory", "helper"],
        ),
        (&["completions", "--help"], &["bash", "zsh", "fish"]),
    ];
    // Every page is checked before failing, so one gap does not hide others.
    let mut gaps = Vec::new();
    for (args, phrases) in pages {
        let text = home.ok(args);
        let missing: Vec<_> = phrases.iter().filter(|p| !text.contains(*p)).collect();
        if !missing.is_empty() || text.contains("TODO") {
            gaps.push(format!(
                "`sandkeep {}` lacks {missing:?} or says TODO:\n{text}",
                args.join(" ")
            ));
        }
    }
    assert!(gaps.is_empty(), "{}", gaps.join("\n\n"));
}

#[test]
fn completions_cover_every_command() {
    let home = Home::new();
    for shell in ["bash", "zsh", "fish"] {
        let script = home.ok(&["completions", shell]);
        for word in [
            "sandbox", "exec", "task", "logs", "wait", "doctor", "follow", "json",
        ] {
            assert!(
                script.contains(word),
                "{shell} completions should know {word:?}"
            );
        }
    }
}

/// Asks the generated bash completion what it offers for `words` (the last
/// one being completed), in a real bash.
fn bash_completes(script: &std::path::Path, words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _sandkeep sandkeep '{}' '{}'; echo \"${{COMPREPLY[*]}}\"",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "-c", &program])
        .output()
        .expect("run bash");
    assert!(out.status.success(), "bash failed: {}", describe(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn bash_completion_completes_commands_and_options() {
    let home = Home::new();
    let script = home.path().join("sandkeep.bash");
    std::fs::write(&script, home.ok(&["completions", "bash"])).unwrap();
    assert_eq!(bash_completes(&script, &["sandkeep", "ta"]), "task");
    assert_eq!(
        bash_completes(&script, &["sandkeep", "task", "logs", "--fo"]),
        "--follow"
    );
    assert_eq!(
        bash_completes(&script, &["sandkeep", "sandbox", "cr"]),
        "create"
    );
}

#[test]
fn doctor_reports_isolation_state_directory_and_helper() {
    let home = Home::new();
    let out = home.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for field in [
        "isolation",
        "state dir",
        "task helper",
        "user namespace",
        "pid namespace",
        "overlayfs",
        "network namespace",
        "memory limit",
        "pids limit",
        "cpu limit",
        "disk limit",
        "host shares",
    ] {
        assert!(
            text.contains(field),
            "doctor should show {field:?}:\n{text}"
        );
    }
    assert!(text.contains(home.path().to_str().unwrap()), "{text}");
    let json = home.run(&["doctor", "--json"]);
    let report = support::cli::parse_one(&String::from_utf8_lossy(&json.stdout), &["doctor"]);
    assert_eq!(
        json.status.code(),
        out.status.code(),
        "--json keeps the exit code"
    );
    let expected = if report["isolation"] == "unavailable" {
        1
    } else {
        0
    };
    assert_eq!(out.status.code(), Some(expected), "{}", describe(&out));
}

#[test]
fn doctor_json_has_every_documented_key() {
    let home = Home::new();
    let out = home.run(&["doctor", "--json"]);
    let doctor = support::cli::parse_one(&String::from_utf8_lossy(&out.stdout), &["doctor"]);
    for key in [
        "isolation",
        "reason",
        "checks",
        "state_dir",
        "remediation",
        "suggested_egress_trust",
        "helper",
    ] {
        assert!(
            doctor.get(key).is_some(),
            "doctor --json lacks {key}: {doctor}"
        );
    }
    assert_eq!(doctor["state_dir"], home.path().to_str().unwrap());
}

/// The codes of the exit-code table: the first word of each row that starts
/// with a code, en dashes read as hyphens.
fn exit_codes<'a>(rows: impl Iterator<Item = &'a str>) -> Vec<String> {
    rows.filter_map(|row| row.split_whitespace().next())
        .filter(|code| code.starts_with(|c: char| c.is_ascii_digit()))
        .map(|code| code.replace('–', "-"))
        .collect()
}

#[test]
fn readme_lists_the_exit_codes_the_help_prints() {
    let help = Home::new().ok(&["task", "wait", "--help"]);
    let (_, table) = help
        .split_once("Exit codes of exec")
        .expect("`task wait --help` prints the exit-code table");
    // Rows start with two spaces and a code; wrapped text is indented more.
    let from_help = exit_codes(
        table
            .lines()
            .take_while(|l| !l.starts_with("Other commands"))
            .filter(|l| l.starts_with("  ") && !l.starts_with("   ")),
    );

    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("read README.md");
    let (_, table) = readme
        .split_once("Exit codes of `exec`")
        .expect("README.md has the exit-code table");
    let from_readme = exit_codes(
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.trim_start_matches('|')),
    );

    assert!(from_help.contains(&"141".to_owned()), "{from_help:?}");
    assert_eq!(
        from_readme, from_help,
        "README.md's exit codes against exit::TABLE"
    );
}
