//! The `redline` binary as a user runs it: exit codes and what it prints for mistakes.

use crate::common;

use crate::common::redline;

use std::process::Command;

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

#[test]
fn a_breached_ttft_slo_fails_the_gate_aborts_early_and_writes_junit() {
    // The fault: four times the load the 7b profile can serve with 1,024-token prompts,
    // so requests queue and P99 TTFT grows far past 350 ms within seconds.
    let dir = common::temp_dir("gate");
    let spec = dir.join("gate.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: gate }\nspec:\n  services:\n    llm: { url: embedded, profile: 7b }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 1024, output_tokens: 64 } }\n  drain_timeout: 1s\n  load:\n    - { arrival: constant, rate: 80, duration: 60s }\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: { name: gate }\nspec:\n  sloThresholds:\n    abort_on_fail: true\n    delay: 2s\n    ttft: { p99: \"<= 350ms\" }\n    pass_rate: \">= 99%\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let started = std::time::Instant::now();
    let (code, stdout, _) = redline(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "abort_on_fail stopped the 60 s run early"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let aborted = &summary["aborted"];
    let at = aborted["at_s"].as_f64().unwrap();
    assert!((2.0..20.0).contains(&at), "aborted at {at} s");
    assert_eq!(aborted["breaches"][0]["slo"], "ttft.p99");
    assert!(stdout.contains("aborted at"), "{stdout}");
    // Nothing lost: every scheduled request has one outcome, in the records too.
    let requests = &summary["requests"];
    let scheduled = requests["scheduled"].as_u64().unwrap();
    let outcomes: u64 = ["ok", "error", "timeout", "cancelled", "dropped"]
        .iter()
        .map(|k| requests[k].as_u64().unwrap())
        .sum();
    assert_eq!(scheduled, outcomes);
    let records = std::fs::read_to_string(out.join("records.jsonl")).unwrap();
    assert_eq!(records.lines().count() as u64, scheduled);
    // The verdicts: TTFT failed with its figures; JUnit says so.
    let ttft = summary["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["slo"] == "ttft.p99")
        .unwrap();
    assert_eq!(ttft["outcome"], "fail");
    assert!(ttft["observed"].as_f64().unwrap() > 350.0);
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(junit.contains("name=\"ttft.p99 &lt;= 350ms\""), "{junit}");
    assert!(
        junit.contains("<failure message=\"fail: observed"),
        "{junit}"
    );
    // `redline check` judges the same records offline, with a looser threshold.
    let loose = dir.join("loose.yaml");
    std::fs::write(
        &loose,
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("p99: \"<= 350ms\"", "p90: \"<= 600s\"")
            .replace("abort_on_fail: true", "abort_on_fail: false"),
    )
    .unwrap();
    let (code, stdout, _) = redline(&[
        "check",
        out.join("records.jsonl").to_str().unwrap(),
        "--spec",
        loose.to_str().unwrap(),
    ]);
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .to_owned()
    };
    // (A p90: the hundred requests that finished are too few to bound a p99 at 95 %.)
    assert!(line("ttft.p90 <= 600s").contains("pass"), "{stdout}");
    // Requests cancelled by the abort were never judged; the rest all succeeded, but a
    // few hundred clean requests cannot prove 99 %: not proven, which fails only under
    // --strict.
    assert!(line("pass_rate >= 99%").contains("not proven"), "{stdout}");
    assert_eq!(code, Some(0), "{stdout}");
    let (code, _, _) = redline(&[
        "check",
        out.join("records.jsonl").to_str().unwrap(),
        "--spec",
        loose.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(code, Some(1));
    std::fs::remove_dir_all(dir).unwrap();
}

/// What the run is about to do is on stdout before the first request, not after the
/// run: a person watching a 20-minute test sees its target and stages at once.
#[test]
fn the_header_is_printed_before_the_run_starts() {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("redline-header-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            "--url",
            "embedded",
            "--rate",
            "2",
            "--duration",
            "6s",
            "--out",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        lines.push(line);
    }
    let header_after = started.elapsed();
    assert!(
        lines[0].starts_with("redline · cli → http://127.0.0.1:"),
        "{lines:?}"
    );
    assert_eq!(lines[1], "  stage 0: open loop, poisson 2 req/s, 6.0s\n");
    assert_eq!(lines[2], "  planned: 6.0s\n");
    assert!(
        header_after < std::time::Duration::from_secs(4),
        "the header came {header_after:?} after the start of a 6 s run"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("  requests: "), "{rest}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `redline run … | head -2` once panicked with "failed printing to stdout: Broken
/// pipe" (exit 101). A closed stdout now ends the printing only: the files are written
/// and the run's own exit code is kept — here 1, from a failed SLO.
#[test]
fn a_closed_stdout_keeps_the_runs_files_and_exit_code() {
    let dir = common::temp_dir("pipe");
    let spec = dir.join("gate.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: pipe }\nspec:\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 8 } }\n  load:\n    - { concurrency: 2, duration: 2s }\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: { name: pipe }\nspec:\n  sloThresholds:\n    ttft: { p50: \"<= 1us\" }\n",
    )
    .unwrap();
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_redline"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close the pipe, as `head -1` does: the report comes 2 s later.
    {
        use std::io::BufRead;
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("redline · pipe"), "{first}");
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(out.join("summary.json").is_file());
    assert!(out.join("junit.xml").is_file());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A run with no SLOs once exited 0 when every request failed with HTTP 404 and when
/// most timed out: green to a CI script. Without SLOs, more than 1 % failed (or none
/// succeeded) is exit 1, and the report says why.
#[test]
fn exit_1_when_requests_fail_and_no_slo_is_set() {
    let dir = common::temp_dir("default-gate");
    let cases = [
        (
            "404",
            "    web: { url: embedded, api: http }\n  payloadTemplate:\n    request: { method: GET, path: /no/such/page }\n",
            "20 of 20 requests failed",
        ),
        (
            "timeouts",
            "    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 400 } }\n  timeouts: { total: 150ms }\n",
            "20 of 20 requests failed",
        ),
        (
            "some-timeouts",
            "    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: { min: 1, max: 400 } } }
  timeouts: { total: 150ms }
",
            "%; without SLOs at most 1% may) — exit 1",
        ),
    ];
    for (name, body, says) in cases {
        let spec = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &spec,
            format!("apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: {name} }}\nspec:\n  services:\n{body}  load:\n    - {{ concurrency: 2, requests: {} }}\n", if name == "some-timeouts" { 30 } else { 20 }),
        )
        .unwrap();
        let out = dir.join(name);
        let (code, stdout, stderr) = redline(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(1), "{name}: {stdout}{stderr}");
        assert!(
            stdout.contains(says) && stdout.contains("exit 1"),
            "{name}: {stdout}"
        );
        if name == "some-timeouts" {
            assert!(!stdout.contains("none succeeded"), "{stdout}");
        }
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["default_gate"]["passed"], false, "{name}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A key with a trailing newline (`export KEY=$(cat key.txt)`) once made every request
/// panic on building its header. It is a spec error now, naming the variable, and the
/// key itself is never printed.
#[test]
fn an_api_key_that_cannot_be_a_header_is_a_spec_error_naming_the_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--requests",
            "1",
        ])
        .args(["--api-key-env", "REDLINE_TEST_KEY"])
        .env("REDLINE_TEST_KEY", "sk-secret-123\n")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "1 problem in the spec:\ncommand line: --api-key-env: the key in `REDLINE_TEST_KEY` holds a newline, so it cannot be sent as a header\n  fix: set it without it, e.g. `export REDLINE_TEST_KEY=\"$(printf %s \"$REDLINE_TEST_KEY\" | tr -d '\\r\\n')\"`\n"
    );
    assert!(!stderr.contains("sk-secret"));
}

/// `--prompts FILE --output-tokens 32` once sent no `max_tokens` at all: on llama.cpp
/// one answer ran 965 tokens for ten minutes. Records without their own max_tokens now
/// get --output-tokens; the simulator's count of what it generated is the proof.
#[test]
fn prompts_file_sends_output_tokens_as_max_tokens() {
    let dir = common::temp_dir("prompts-max");
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"Tell me a long story about load testing.\"}\n{\"prompt\": \"And another.\", \"max_tokens\": 2}\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (code, stdout, stderr) = redline(&[
        "run",
        "--url",
        "embedded",
        "--prompts",
        prompts.to_str().unwrap(),
        "--output-tokens",
        "3",
        "--requests",
        "6",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let records: Vec<serde_json::Value> = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 6);
    for r in &records {
        let asked = if r["seq"].as_u64().unwrap() % 2 == 0 {
            3
        } else {
            2
        };
        assert_eq!(r["max_tokens"], asked, "{r}");
        assert_eq!(
            r["server"]["completion_tokens"], asked,
            "the server generated what was asked: {r}"
        );
        assert_eq!(r["finish_reason"], "length");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `redline check` once judged a run's records differently from the run itself: pooled
/// ITL was not in the records ("not proven: no measured samples"). Every verdict row of
/// `check` on the same records and spec now equals the run's.
#[test]
fn check_judges_the_records_as_the_live_run_did() {
    let dir = common::temp_dir("check-same");
    let spec = dir.join("gate.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: same }\nspec:\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 32, output_tokens: 16 } }\n  load:\n    - { concurrency: 4, requests: 120 }\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: { name: same }\nspec:\n  sloThresholds:\n    itl: { p50: \"< 40ms\" }\n    tpot: { p95: \"< 60ms\" }\n    ttft: { p99: \"<= 2s\" }\n    pass_rate: \">= 90%\"\n    output_throughput: \">= 1 tok/s\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (code, live, _) = redline(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{live}");
    let (code, checked, _) = redline(&[
        "check",
        out.join("records.jsonl").to_str().unwrap(),
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{checked}");
    let rows = |text: &str| -> Vec<String> {
        [
            "itl.p50",
            "tpot.p95",
            "ttft.p99",
            "pass_rate",
            "output_throughput",
        ]
        .iter()
        .map(|slo| {
            text.lines()
                .find(|l| l.trim_start().starts_with(slo))
                .unwrap_or_else(|| panic!("no {slo} in {text}"))
                .to_owned()
        })
        .collect()
    };
    assert_eq!(rows(&checked), rows(&live));
    assert!(rows(&checked)[0].contains("pass"), "{checked}");
    assert!(
        checked.starts_with("redline check · same · 120 records of "),
        "{checked}"
    );
    assert!(!checked.contains("(0.0s)"), "{checked}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// What a user once could not see: a single open-loop stage printed no offered against
/// achieved (2.0 against 0.98 req/s sat only in summary.json), session rates were
/// labelled req/s, and `validate` showed neither the SLOs nor the sessions it parsed.
#[test]
fn offered_against_achieved_units_and_what_validate_parsed_are_shown() {
    let (code, stdout, _) = redline(&[
        "run",
        "--url",
        "embedded",
        "--profile",
        "llamacpp",
        "--rate",
        "6",
        "--duration",
        "2s",
        "--input-tokens",
        "16",
        "--output-tokens",
        "16",
        "--out",
        std::env::temp_dir()
            .join(format!("redline-offered-{}", std::process::id()))
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("offered 6.00 req/s"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("the server did not keep up"), "{line}");
    let (code, stdout, _) = redline(&[
        "validate",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sessions.yaml"),
    ]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("open loop, poisson 2 sessions/s, 20.0s"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  sessions: 2–6 turns each, 500ms think time"),
        "{stdout}"
    );
    let (_, stdout, _) = redline(&[
        "validate",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/redlines.yaml"),
    ]);
    assert!(
        stdout.contains(
            "  SLOs (95% one-sided bounds):\n    pass_rate >= 99.995%\n    ttft.p99 <= 350ms"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("  planned: 20.0s"), "{stdout}");
}

/// The run folder says how the run was started (the command line, the spec, redline's
/// version) and shows its first exchanges, and no file in it holds a secret the spec
/// or the environment gave: header values, an API key, a URL password.
#[test]
fn the_report_shows_the_command_spec_and_first_exchanges_and_no_secret() {
    let dir = common::temp_dir("invocation");
    std::fs::write(
        dir.join("prompts.jsonl"),
        "{\"prompt\": \"Tell me a long story about load testing.\", \"max_tokens\": 4}\n{\"prompt\": \"And another.\", \"max_tokens\": 4}\n",
    )
    .unwrap();
    let spec = dir.join("secret.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: secret }\nspec:\n  # the team's gateway key\n  services:\n    llm:\n      url: embedded\n      api_key_env: REDLINE_TEST_KEY\n      headers:\n        Authorization: Bearer sk-header-7f3a9\n        x-tenant: \"tenant-5d1c\"\n  payloadTemplate:\n    prompts: { file: prompts.jsonl }\n  load:\n    - { concurrency: 1, requests: 4 }\n",
    )
    .unwrap();
    let out = dir.join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .env("REDLINE_TEST_KEY", "sk-env-91be2")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for secret in ["sk-header-7f3a9", "tenant-5d1c", "sk-env-91be2"] {
            assert!(!text.contains(secret), "{} holds {secret}", path.display());
        }
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let run = &summary["invocation"];
    assert_eq!(run["redline"], env!("CARGO_PKG_VERSION"));
    let command = run["command"].as_str().unwrap();
    assert!(
        command.ends_with(&format!("run {} --out {}", spec.display(), out.display())),
        "{command}"
    );
    let shown = run["spec"].as_str().unwrap();
    for kept in [
        "# the team's gateway key",
        "Authorization: [redacted]\n",
        "x-tenant: \"[redacted]\"",
        "api_key_env: REDLINE_TEST_KEY",
        "prompts: { file: prompts.jsonl }",
    ] {
        assert!(shown.contains(kept), "{kept} not in\n{shown}");
    }
    // The first three requests, in order, with the prompts the file holds in turn.
    let samples = summary["samples"].as_array().unwrap();
    let prompts: Vec<&str> = samples
        .iter()
        .map(|s| s["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(
        prompts,
        [
            "Tell me a long story about load testing.",
            "And another.",
            "Tell me a long story about load testing."
        ]
    );
    for s in samples {
        assert_eq!(s["outcome"], "ok");
        assert_eq!(s["output_tokens"], 4);
        assert!(!s["answer"].as_str().unwrap().trim().is_empty(), "{s}");
    }
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    for part in [
        r#"<section id="samples">"#,
        r#"<pre id="command">"#,
        r#"<pre id="spec">"#,
    ] {
        assert!(page.contains(part), "{part} not in the page");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A JSON-lines access log, 20 requests a second for `seconds` from Unix time `t0`:
/// latency 100 ms ± 10 % by a fixed sequence; from `change_s`, every fifth request 600
/// ms slower and every twentieth a 503.
fn access_log(t0: f64, seconds: u64, change_s: u64) -> String {
    let mut out = String::new();
    for i in 0..seconds * 20 {
        let at = i as f64 / 20.0;
        let mut ms = 100.0 + ((i * 7_919) % 21) as f64 - 10.0;
        let mut status = 200;
        if at >= change_s as f64 {
            ms += if i % 5 == 0 { 600.0 } else { 0.0 };
            status = if i % 20 == 3 { 503 } else { 200 };
        }
        out.push_str(&format!(
            "{{\"ts\": {:.3}, \"upstream\": {{\"ms\": {ms}}}, \"status\": {status}}}\n",
            t0 + at
        ));
    }
    out
}

fn watch_spec(dir: &std::path::Path) -> String {
    let spec = dir.join("watch.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: logs }\nspec:\n  services:\n    llm: { url: embedded }\n  payloadTemplate: { prompts: { synthetic: { input_tokens: 8, output_tokens: 8 } } }\n  load:\n    - { rate: 1, duration: 1s }\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: { name: logs }\nspec:\n  sloThresholds:\n    e2e: { p99: \"<= 500ms over 3s for 2 windows\" }\n  streaming:\n    window: 3s\n    step: 1s\n    watch: [e2e.p95, error_rate]\n",
    )
    .unwrap();
    spec.display().to_string()
}

/// `redline watch --log`: a file and stdin give the same episodes, opening after the
/// change and not before; a bad line is left out and said to be; the wrong flags name
/// what is missing.
#[test]
fn watch_reads_a_json_lines_log_from_a_file_or_stdin() {
    let dir = common::temp_dir("watch-log");
    let spec = watch_spec(&dir);
    let log = dir.join("access.jsonl");
    std::fs::write(&log, access_log(1_796_000_000.0, 30, 18) + "GET / 200\n").unwrap();
    let args = |source: &str| {
        let json = dir.join(format!("{}.json", source.replace('/', "_")));
        let (code, stdout, stderr) = redline(&[
            "watch",
            "--spec",
            &spec,
            "--log",
            source,
            "--log-field",
            "e2e=upstream.ms",
            "--log-status",
            "status",
            "--json",
            json.to_str().unwrap(),
        ]);
        let drift: serde_json::Value =
            serde_json::from_slice(&std::fs::read(json).unwrap_or_default()).unwrap_or_default();
        (code, stdout, stderr, drift)
    };
    let (code, stdout, stderr, drift) = args(log.to_str().unwrap());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("t = 0 s is 2026-11-30T00:53:20Z"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: 1 log line(s) left out (the first, line 601: not a JSON object)"),
        "{stdout}"
    );
    let mut opened: Vec<(String, f64)> = drift["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                format!(
                    "{} {}",
                    e["series"].as_str().unwrap(),
                    e["detector"].as_str().unwrap()
                ),
                e["opened_s"].as_f64().unwrap(),
            )
        })
        .collect();
    opened.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = opened.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["e2e.p95 ewma", "e2e.p99 threshold", "error_rate ewma"],
        "{stdout}"
    );
    // The change is at 18 s of the log (t = 0 is on the 1 s grid at its start); every
    // episode opens within three windows of it.
    for (name, at) in &opened {
        assert!(
            (18.0..=21.0).contains(at),
            "{name} opened at {at}s\n{stdout}"
        );
    }
    // stdin: the same.
    let out = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "watch",
            "--spec",
            &spec,
            "--log",
            "-",
            "--log-field",
            "e2e=upstream.ms",
            "--log-status",
            "status",
        ])
        .stdin(std::fs::File::open(&log).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let from_stdin = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        from_stdin.replace("stdin", "FILE"),
        stdout.replace(log.to_str().unwrap(), "FILE")
    );
    for (flags, message) in [
        (vec![], "name what to watch"),
        (vec!["--query", "up"], "`--query` needs `--prometheus URL`"),
        (
            vec!["--log", "-", "--log-unit", "h"],
            "`--log-unit h`: choose from us, ms, s",
        ),
    ] {
        let mut all = vec!["watch", "--spec", spec.as_str()];
        all.extend(flags);
        let (code, _, stderr) = redline(&all);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--follow`: lines appended while redline watches are judged as they come, and
/// `--for` ends it.
#[test]
fn watch_follows_a_growing_log() {
    let dir = common::temp_dir("watch-follow");
    let spec = watch_spec(&dir);
    let log = dir.join("growing.jsonl");
    std::fs::write(&log, "").unwrap();
    let json = dir.join("follow.json");
    let child = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "watch",
            "--spec",
            &spec,
            "--log",
            log.to_str().unwrap(),
            "--log-field",
            "e2e=upstream.ms",
            "--follow",
            "--for",
            "9s",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Seven seconds of lines written as they happen, a second at a time.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let lines: Vec<String> = access_log(start, 7, 100)
        .lines()
        .map(str::to_owned)
        .collect();
    for second in lines.chunks(20) {
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut file, (second.join("\n") + "\n").as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed().as_secs_f64() < 5.0,
        "--for did not end it"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let drift: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // Windows closed while the log grew: 3 s windows over 7 s of lines, every second.
    let track = drift["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["series"] == "e2e.p95")
        .unwrap();
    let counts: Vec<u64> = track["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .collect();
    assert!(
        counts.len() >= 4 && counts.contains(&60),
        "{counts:?}\n{stdout}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
