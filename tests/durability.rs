//! What a run leaves when it is killed: records flushed at least every 200 ms, so a
//! SIGKILL loses at most the requests that completed in the last flush interval (and
//! those in flight); `redline check` and `redline report` read what is left. SIGTERM
//! stops a run the way Ctrl-C does.

use crate::common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::redline;
use redline::record::Record;

/// 4 req/s of short streamed answers for 30 s, with an SLO to check.
const SPEC: &str = "apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: durability }
spec:
  seed: 7
  services:
    llm: { url: embedded, profile: tiny }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 16, output_tokens: 8 } }
  load:
    - { arrival: constant, rate: 4, duration: 30s }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: durability }
spec:
  sloThresholds:
    ttft: { p50: \"<= 2s\" }
";

fn start(dir: &std::path::Path) -> Child {
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, SPEC).unwrap();
    Command::new(env!("CARGO_BIN_EXE_redline"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The whole lines of `records.jsonl` as records, and the cut-short last line if any.
fn read(path: &std::path::Path) -> (Vec<Record>, Option<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (whole, partial) = match text.rfind('\n') {
        Some(end) => (&text[..end], &text[end + 1..]),
        None => ("", text.as_str()),
    };
    let records = whole
        .lines()
        .map(|line| serde_json::from_str(line).expect("every whole line is a record"))
        .collect();
    (records, (!partial.is_empty()).then(|| partial.to_owned()))
}

/// Waits until the file has just grown (a flush) past `at_least` records; returns the
/// latest completion in it (run clock, µs) and when it was seen.
fn anchor(path: &std::path::Path, at_least: usize) -> (u64, Instant) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while Instant::now() < deadline {
        let (records, _) = read(path);
        if records.len() > seen && seen >= at_least {
            let latest = records.iter().map(Record::done_us).max().unwrap();
            return (latest, Instant::now());
        }
        seen = seen.max(records.len());
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("records.jsonl did not grow past {at_least} records in 30 s");
}

/// At 4 req/s a record is written every 250 ms and the 8 KiB write buffer holds about
/// 3 s of them: without the timed flush a kill 2.5 s after a flush would find the file
/// as it was then. With it, the last record in the file completed at most a flush
/// interval and an arrival gap (450 ms, 1 s allowed for a busy machine) before the kill.
#[test]
fn sigkill_mid_run_loses_at_most_the_last_flush_interval() {
    let dir = common::temp_dir("sigkill");
    let records = dir.join("out").join("records.jsonl");
    let mut child = start(&dir);
    let (anchor_us, anchored) = anchor(&records, 8);
    std::thread::sleep(Duration::from_millis(2500));
    child.kill().unwrap(); // SIGKILL
    let killed = anchored.elapsed();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), None, "killed by a signal");
    let (kept, partial) = read(&records);
    // The run's clock at the kill was at least the anchor plus the wall time since.
    let clock_at_kill = anchor_us + killed.as_micros() as u64;
    let last = kept.iter().map(Record::done_us).max().unwrap();
    assert!(
        last + 1_000_000 >= clock_at_kill,
        "the last record kept completed at {last} µs, the kill came at ≥ {clock_at_kill} µs"
    );
    let mut seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), kept.len(), "no record written twice");
    assert!(!dir.join("out").join("summary.json").exists());

    // A kill during a write leaves half a line: append one, as it would be.
    let whole = kept.len();
    if partial.is_none() {
        let line = serde_json::to_string(&kept[0]).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&records)
            .unwrap();
        file.write_all(&line.as_bytes()[..line.len() / 2]).unwrap();
    }
    let spec = dir.join("spec.yaml");
    let (code, stdout, stderr) = redline(&[
        "check",
        records.to_str().unwrap(),
        "--spec",
        spec.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("{whole} records of")), "{stdout}");
    assert!(stdout.contains("the last line was cut short"), "{stdout}");

    let out = dir.join("out");
    let (code, _, stderr) = redline(&["report", out.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--spec SPEC"), "{stderr}");
    let (code, stdout, stderr) = redline(&[
        "report",
        out.to_str().unwrap(),
        "--spec",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(
        summary["requests"]["scheduled"], whole as u64,
        "{summary:#}"
    );
    let warnings = summary["warnings"].to_string();
    assert!(warnings.contains("cut short"), "{warnings}");
    assert!(out.join("report.html").is_file());
    std::fs::remove_dir_all(dir).unwrap();
}

/// SIGTERM (what Kubernetes and systemd send) drains and writes the partial report,
/// exit 130, as Ctrl-C does.
#[test]
fn sigterm_stops_a_run_as_ctrl_c_does() {
    let dir = common::temp_dir("sigterm");
    let records = dir.join("out").join("records.jsonl");
    let child = start(&dir);
    anchor(&records, 4);
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let sent = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(12),
        "the drain is at most 10 s"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stdout}{stderr}");
    assert!(stderr.contains("stopping — draining"), "{stderr}");
    assert!(stdout.contains("interrupted: partial results"), "{stdout}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["interrupted"], true);
    let (kept, partial) = read(&records);
    assert_eq!(partial, None, "a drained run ends on a whole line");
    assert_eq!(summary["requests"]["scheduled"], kept.len() as u64);
    std::fs::remove_dir_all(dir).unwrap();
}
