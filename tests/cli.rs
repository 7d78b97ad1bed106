//! The `redline` binary as a user runs it: exit codes and what it prints for mistakes.

use std::process::Command;

fn redline(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn shorthand_mistakes_name_the_flag() {
    let (code, _, stderr) = redline(&[
        "run",
        "--url",
        "embedded",
        "--rate",
        "0",
        "--duration",
        "5s",
    ]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "1 problem in the spec:\ncommand line: --rate: must be a positive number, got 0\n"
    );
    let (code, _, stderr) = redline(&["run", "--url", "http://127.0.0.1:9", "--requests", "3"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "1 problem in the spec:\ncommand line: --model: is required for a real server\n  fix: name the served model, as GET /v1/models lists it\n"
    );
    let (code, _, stderr) = redline(&["run", "--url", "embedded", "--duration", "5x"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "redline: invalid duration `5x`: write a number and a unit (us, ms, s, m, h), e.g. `30s` or `250ms`\n"
    );
}

#[test]
fn validate_reports_problems_with_exit_2_and_valid_specs_with_0() {
    let (code, stdout, _) = redline(&[
        "validate",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.yaml"),
    ]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("valid — 2 stage(s) against llm"),
        "{stdout}"
    );
    let (code, _, stderr) = redline(&["validate", "/no/such/spec.yaml"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("redline: cannot read the spec file /no/such/spec.yaml"),
        "{stderr}"
    );
}

#[test]
fn help_lists_the_exit_codes_and_the_simulator_refuses_remote_binds() {
    let (code, stdout, _) = redline(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("Exit codes: 0 the run completed"),
        "{stdout}"
    );
    let (code, _, stderr) = redline(&["sim", "--addr", "0.0.0.0:0"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "redline: refusing to listen on 0.0.0.0:0: the simulator binds loopback unless you pass --allow-remote\n"
    );
}
