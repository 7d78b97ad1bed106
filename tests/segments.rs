//! Segmented runs as a user runs them: one process against four workers (`run
//! --workers 4`) and hand-split segments joined by `redline merge`, held to what one
//! process sent. The simulator answers at temperature 0, so a request's tokens follow
//! from what was sent; timing differs between two runs, so the checks on timing are
//! that nothing was lost or counted twice, not that two runs took the same time.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::common::{redline, temp_dir};

/// An open-loop stage whose arrivals the segments share, then a closed loop whose
/// slots and budget they split.
const SPEC: &str = r#"apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: segments }
spec:
  seed: SEED
  trace_ids: seeded
  services:
    llm: { url: embedded, profile: 7b }
  payloadTemplate:
    prompts:
      synthetic:
        input_tokens: { mean: 64, stddev: 16, min: 16, max: 128 }
        output_tokens: { min: 4, max: 12 }
  load:
    - { arrival: poisson, rate: 150, requests: 240 }
    - { concurrency: 8, requests: 80 }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: segments }
spec:
  sloThresholds:
    ttft: { p50: "< 2s" }
"#;

fn write_spec(dir: &Path, seed: u64) -> String {
    let path = dir.join(format!("spec-{seed}.yaml"));
    std::fs::write(&path, SPEC.replace("SEED", &seed.to_string())).unwrap();
    path.display().to_string()
}

fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// What identifies an open-loop request whatever process sent it: its place, its
/// intended time, its trace ID and the prompt the server hashed.
fn open_loop_requests(records: &[Value]) -> BTreeSet<(u64, u64, String, u64)> {
    records
        .iter()
        .filter(|r| r["stage"] == 0)
        .map(|r| {
            (
                r["seq"].as_u64().unwrap(),
                r["intended_us"].as_u64().unwrap(),
                r["traceparent"].as_str().unwrap().to_owned(),
                r["server"]["request_hash"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn tokens(records: &[Value], field: &str) -> u64 {
    records.iter().map(|r| r[field].as_u64().unwrap()).sum()
}

#[test]
fn four_workers_merged_send_what_one_process_sends() {
    let dir = temp_dir("segments-workers");
    let spec = write_spec(&dir, 7);
    let (whole_dir, merged_dir) = (dir.join("whole"), dir.join("merged"));
    let (code, _, stderr) = redline(&[
        "run",
        &spec,
        "--out",
        whole_dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = redline(&[
        "run",
        &spec,
        "--workers",
        "4",
        "--out",
        merged_dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let (whole, merged) = (records(&whole_dir), records(&merged_dir));

    // The open loop: request for request the same.
    let open = open_loop_requests(&whole);
    assert_eq!(open.len(), 240);
    assert_eq!(open_loop_requests(&merged), open);
    // Each worker sent its quarter of the arrivals, spread over the stage.
    for k in 1..=4 {
        let part = records(&merged_dir.join(format!("workers/{k}-of-4")));
        let arrivals = part.iter().filter(|r| r["stage"] == 0).count();
        assert!(
            (55..=65).contains(&arrivals),
            "worker {k}: {arrivals} of 240"
        );
        // The closed loop: two of the eight slots and a quarter of the budget.
        assert_eq!(
            part.iter().filter(|r| r["stage"] == 1).count(),
            20,
            "worker {k}"
        );
    }
    // Closed-loop requests are numbered as they happen; no two workers share a number.
    let seqs: BTreeSet<u64> = merged.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), merged.len(), "a seq given twice");
    // Every request ok in both, and the same tokens (temperature 0: they follow from
    // the prompts and the max_tokens sent).
    for (name, run) in [("whole", &whole), ("merged", &merged)] {
        assert_eq!(run.len(), 320, "{name}");
        assert!(run.iter().all(|r| r["outcome"] == "ok"), "{name}");
    }
    let open_only = |run: &[Value]| {
        run.iter()
            .filter(|r| r["stage"] == 0)
            .cloned()
            .collect::<Vec<_>>()
    };
    for field in ["input_tokens", "output_tokens"] {
        assert_eq!(
            tokens(&open_only(&merged), field),
            tokens(&open_only(&whole), field),
            "{field}"
        );
    }

    // One summary, judged on all of it; the counts those of the records.
    let (whole_summary, merged_summary) = (summary(&whole_dir), summary(&merged_dir));
    for count in ["scheduled", "ok", "failed"] {
        assert_eq!(
            merged_summary["requests"][count], whole_summary["requests"][count],
            "{count}"
        );
    }
    assert_eq!(merged_summary["latency_ms"]["ttft"]["count"], 320);
    assert_eq!(merged_summary["verdicts"][0]["outcome"], "pass");
    assert!(
        merged_summary.get("segment").is_none(),
        "every share is there"
    );
    assert!(merged_dir.join("junit.xml").is_file() && merged_dir.join("report.html").is_file());
    assert_eq!(
        summary(&merged_dir.join("workers/2-of-4"))["segment"],
        "1/4:1/2"
    );
}

/// The merged run in `dir` holds the shares `held` and names `missing` as missing.
fn assert_share_missing(dir: &Path, held: &str, missing: &str) {
    let summary = summary(dir);
    assert_eq!(summary["segment"], held);
    let warnings = summary["warnings"].to_string();
    let said = format!("the share {missing} of the run is missing");
    assert!(warnings.contains(&said), "{warnings}");
}

/// Runs `spec`'s `segment` into `out`, which it returns; the run must pass.
fn run_segment(spec: &str, segment: &str, out: &Path) -> String {
    let out = out.display().to_string();
    let (code, _, stderr) = redline(&["run", spec, "--segment", segment, "--out", &out, "--quiet"]);
    assert_eq!(code, Some(0), "{stderr}");
    out
}

#[test]
fn a_missing_share_is_named_and_the_rest_is_judged() {
    let dir = temp_dir("segments-missing");
    let spec = write_spec(&dir, 11);
    let mut dirs = Vec::new();
    let mut sent = 0;
    for part in ["1/4", "2/4", "4/4"] {
        let out = run_segment(&spec, part, &dir.join(part.replace('/', "-of-")));
        sent += records(Path::new(&out)).len();
        dirs.push(out);
    }
    let merged = dir.join("merged");
    let mut args = vec!["merge", "--out", merged.to_str().unwrap(), "--quiet"];
    args.extend(dirs.iter().map(String::as_str));
    let (code, stdout, stderr) = redline(&args);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(records(&merged).len(), sent, "no record of the others lost");
    assert_share_missing(&merged, "0:1/4,1/4:1/2,3/4:1", "1/2:3/4");
    assert!(stdout.contains("1/2:3/4"), "{stdout}");
}

/// Merging the workers' `aggregate.json` files (HDR histograms and counts) gives the
/// figures and verdicts that merging their records gives, and is what a merge falls
/// back to when a folder kept no records.
#[test]
fn the_workers_aggregates_merge_to_the_figures_of_their_records() {
    let dir = temp_dir("segments-aggregates");
    let spec = write_spec(&dir, 5);
    let halves: Vec<String> = ["1/2", "2/2"]
        .iter()
        .map(|part| run_segment(&spec, part, &dir.join(part.replace('/', "-of-"))))
        .collect();
    let merge = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args = vec!["merge", "--out", out.to_str().unwrap(), "--quiet"];
        args.extend(extra);
        args.extend(halves.iter().map(String::as_str));
        let (code, stdout, stderr) = redline(&args);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        (summary(&out), out)
    };
    let (from_records, _) = merge("from-records", &[]);
    let (from_aggregates, out) = merge("from-aggregates", &["--without-records"]);
    assert!(!out.join("records.jsonl").exists() && !out.join("report.html").exists());
    assert!(
        out.join("aggregate.json").is_file(),
        "a merge can be merged again"
    );
    let warnings = from_aggregates["warnings"].to_string();
    assert!(
        warnings.contains("aggregate.json files, no records"),
        "{warnings}"
    );
    assert!(warnings.contains("report.html"), "{warnings}");
    for figure in ["requests", "latency_ms", "tokens", "verdicts"] {
        assert_eq!(from_aggregates[figure], from_records[figure], "{figure}");
    }
    assert_eq!(from_records["requests"]["scheduled"], 320);
    // A folder without records: the merge reads the aggregates by itself.
    std::fs::remove_file(Path::new(&halves[1]).join("records.jsonl")).unwrap();
    let (fallen_back, _) = merge("one-without-records", &[]);
    assert_eq!(fallen_back["latency_ms"], from_records["latency_ms"]);
    // A folder with neither is refused by name.
    std::fs::remove_file(Path::new(&halves[1]).join("aggregate.json")).unwrap();
    let out = dir.join("refused");
    let (code, _, stderr) = redline(&[
        "merge",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        &halves[0],
        &halves[1],
    ]);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("neither records.jsonl nor aggregate.json"),
        "{stderr}"
    );
}

#[test]
fn merge_refuses_other_specs_and_overlapping_shares() {
    let dir = temp_dir("segments-refused");
    let run = |spec: &str, segment: &str, name: &str| run_segment(spec, segment, &dir.join(name));
    let (seven, eight) = (write_spec(&dir, 7), write_spec(&dir, 8));
    let first = run(&seven, "0:1/2", "first");
    let other_seed = run(&eight, "1/2:1", "other-seed");
    let overlapping = run(&seven, "1/4:3/4", "overlapping");
    let merged = dir.join("merged").display().to_string();
    let (code, _, stderr) = redline(&["merge", "--out", &merged, &first, &other_seed]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("ran different specs"), "{stderr}");
    let (code, _, stderr) = redline(&["merge", "--out", &merged, &first, &overlapping]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("overlaps"), "{stderr}");
}

#[test]
fn a_sweep_is_not_split() {
    let (code, _, stderr) = redline(&[
        "run",
        "examples/sweep.yaml",
        "--segment",
        "1/2",
        "--out",
        temp_dir("segments-sweep").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("a sweep cannot be split"), "{stderr}");
    let (code, _, stderr) = redline(&["run", "examples/quickstart.yaml", "--segment", "5/4"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("there is no part 5 of 4"), "{stderr}");
    // --segment-of N takes its index from an Indexed Job's pod, and only from there.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redline"))
        .args(["run", "examples/quickstart.yaml", "--segment-of", "4"])
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("JOB_COMPLETION_INDEX is not set"),
        "{stderr}"
    );
}

/// The workers `redline run --workers` started, by segment (`K/N`), from /proc.
fn workers_of(parent: u32) -> Vec<(String, u32)> {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|pid| {
            let pid: u32 = pid.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let at = args.iter().position(|a| a == "--segment")?;
            Some((args.get(at + 1)?.clone(), pid))
        })
        .collect()
}

#[test]
fn a_killed_worker_s_share_is_named_missing_and_nothing_of_the_others_is_lost() {
    let dir = temp_dir("segments-killed");
    let spec = dir.join("spec.yaml");
    let text = SPEC
        .replace("SEED", "5")
        .replace("rate: 150, requests: 240", "rate: 60, duration: 6s")
        .replace("    - { concurrency: 8, requests: 80 }\n", "");
    std::fs::write(&spec, text).unwrap();
    let out = dir.join("merged");
    let parent = std::process::Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--workers",
            "4",
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--quiet"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once worker 2 has written records, kill it as a lost machine dies.
    let started = std::time::Instant::now();
    let victim = loop {
        let written =
            std::fs::metadata(out.join("workers/2-of-4/records.jsonl")).map_or(0, |m| m.len());
        let workers = workers_of(parent.id());
        if let Some((_, pid)) = workers.iter().find(|(segment, _)| segment == "2/4")
            && written > 0
        {
            break *pid;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "worker 2 never wrote: {workers:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let pid = rustix::process::Pid::from_raw(victim as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let output = parent.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("worker 2/4 ended with signal: 9"),
        "{stderr}"
    );
    assert_share_missing(&out, "0:1/4,1/2:3/4,3/4:1", "1/4:1/2");
    let kept: usize = [1, 3, 4]
        .iter()
        .map(|k| records(&out.join(format!("workers/{k}-of-4"))).len())
        .sum();
    assert_eq!(records(&out).len(), kept);
    assert!(kept > 200, "three quarters of 6 s at 60 a second: {kept}");
}

/// One slot, held by the last of four segments only, whose answers breach the TTFT
/// SLO at once; the other three wait for the open-loop stage after it, which would take
/// them 10 s more if nobody stopped them.
const ABORT_SPEC: &str = r#"apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: segments-abort }
spec:
  seed: 3
  services:
    llm: { url: embedded, profile: 7b }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 64, output_tokens: 8 } }
  drain_timeout: 1s
  load:
    - { concurrency: 1, duration: 10s }
    - { arrival: constant, rate: 20, duration: 10s }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: segments-abort }
spec:
  sloThresholds:
    abort_on_fail: true
    delay: 1s
    ttft: { p50: "< 1ms" }
"#;

#[test]
fn the_workers_coordinator_stops_them_all_on_the_whole_run_s_breach() {
    let dir = temp_dir("segments-abort");
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, ABORT_SPEC).unwrap();
    let out = dir.join("merged");
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = redline(&[
        "run",
        spec.to_str().unwrap(),
        "--workers",
        "4",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let took = started.elapsed().as_secs_f64();
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    // Without the stop the run takes 20 s; with it, the abort (about 2 s in) and a drain.
    assert!(took < 12.0, "took {took:.1} s");
    let summary = summary(&out);
    assert_eq!(summary["interrupted"], false);
    assert_eq!(summary["aborted"]["breaches"][0]["slo"], "ttft.p50");
    // The workers' coordinator judged the whole run and stopped every worker.
    let warnings = summary["warnings"].to_string();
    assert!(
        warnings.contains("4 of 4 workers were stopped by their coordinator"),
        "{warnings}"
    );
    // The others started no request of the second stage.
    assert!(records(&out).iter().all(|r| r["stage"] == 0));
}

/// Workers started by hand, as on four machines, with `redline coordinate`: they wait
/// for each other, and when the merged figures make a breach certain the coordinator
/// stops every one of them, including the three whose own shares have no requests.
#[test]
fn a_coordinator_stops_every_worker_when_the_whole_run_breaches() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = temp_dir("segments-coordinator");
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, ABORT_SPEC).unwrap();
    let spec = spec.to_str().unwrap();
    let mut coordinator = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "coordinate",
            spec,
            "--workers",
            "4",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(coordinator.stdout.take().unwrap());
    let mut first = String::new();
    said.read_line(&mut first).unwrap();
    let url = first.split_whitespace().nth(2).unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    let started = std::time::Instant::now();
    let workers: Vec<_> = (1..=4)
        .map(|k| {
            let out = dir.join(format!("w{k}"));
            let child = Command::new(env!("CARGO_BIN_EXE_redline"))
                .args([
                    "run",
                    spec,
                    "--segment",
                    &format!("{k}/4"),
                    "--coordinator",
                    &url,
                ])
                .args(["--out", out.to_str().unwrap(), "--quiet"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let (mut dirs, mut stopped_at) = (Vec::new(), Vec::<f64>::new());
    for (out, child) in workers {
        let done = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(1), "{}: {stderr}", out.display());
        let summary = summary(&out);
        assert_eq!(
            summary["aborted"]["breaches"][0]["slo"],
            "ttft.p50",
            "{}",
            out.display()
        );
        stopped_at.push(summary["aborted"]["at_s"].as_f64().unwrap());
        assert!(
            records(&out).iter().all(|r| r["stage"] == 0),
            "no second stage"
        );
        dirs.push(out.display().to_string());
    }
    // Without the stop the run takes 20 s; with it, the first push after the breach
    // (pushes every 2 s, the SLO's delay 1 s) and a 1 s drain.
    let took = started.elapsed().as_secs_f64();
    assert!(took < 12.0, "took {took:.1} s");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    let status = coordinator.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(rest.contains("ttft.p50"), "{rest}");
    assert_eq!(rest.matches(": done after").count(), 4, "{rest}");
    // Each worker stopped within a push interval (2 s) of the coordinator's decision:
    // the workers' clocks start at the start it gave them.
    let decided: f64 = rest
        .split("stopped every worker at ")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no stop in {rest}"));
    for at in stopped_at {
        assert!(
            at < decided + 3.0,
            "a worker stopped at {at:.1} s, decided at {decided:.1} s"
        );
    }
    // The four folders merge into one aborted run.
    let merged = dir.join("merged");
    let mut args = vec!["merge", "--out", merged.to_str().unwrap(), "--quiet"];
    args.extend(dirs.iter().map(String::as_str));
    let (code, stdout, stderr) = redline(&args);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let merged = summary(&merged);
    assert_eq!(merged["aborted"]["breaches"][0]["slo"], "ttft.p50");
    let warnings = merged["warnings"].to_string();
    assert!(
        warnings.contains("4 of 4 workers were stopped by their coordinator"),
        "{warnings}"
    );
}
