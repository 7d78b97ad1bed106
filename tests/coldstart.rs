//! `redline coldstart` against `redline sim --startup`, whose phase times are set on
//! its command line: the ground truth each measured phase is held to. And the
//! fragmentation that hot restarts leave, seen by a run as allocation failures.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use crate::common::*;
use redline::record::Outcome;
use redline::sim::startup::StartupModel;
use serde_json::Value;

/// Weights loaded by the simulated server: 200 ms from the disk at 2 GB/s, 33 ms from
/// the page cache at 12 GB/s, 17 ms from host memory at 24 GB/s.
const WEIGHTS_BYTES: u64 = 400_000_000;
const WARMUP_MS: f64 = 100.0;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn sim_command(port: u16, weights: &Path) -> Vec<String> {
    [
        env!("CARGO_BIN_EXE_redline"),
        "sim",
        "--profile",
        "tiny",
        "--addr",
        &format!("127.0.0.1:{port}"),
        "--startup",
        "--weights",
        &weights.display().to_string(),
        "--weights-size",
        &WEIGHTS_BYTES.to_string(),
        "--warmup-ms",
        &WARMUP_MS.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs `redline coldstart ARGS -- COMMAND`: exit code, coldstart.json, stderr.
fn coldstart(args: &[&str], command: &[String], out: &Path) -> (Option<i32>, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_redline"))
        .arg("coldstart")
        .args(args)
        .args(["--out", &out.display().to_string(), "--"])
        .args(command)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = std::fs::read_to_string(out.join("coldstart.json"))
        .map(|text| serde_json::from_str(&text).unwrap())
        .unwrap_or(Value::Null);
    (output.status.code(), json, stderr)
}

fn weights_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("weights.bin");
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(&path, data).unwrap();
    path
}

/// A weights file in `dir`, the command of a simulated server loading it on a free
/// port, and that server's ready URL.
fn simulated_server(dir: &Path) -> (std::path::PathBuf, Vec<String>, String) {
    let weights = weights_file(dir);
    let command = sim_command(free_port(), &weights);
    let ready = format!("http://{}/health", &command[5]);
    (weights, command, ready)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One start as the simulated server's log says it modelled it.
struct Modelled {
    kind: String,
    resident: f64,
    total_ms: f64,
}

/// The starts the simulator logged, in order: `server-N.log` in `out` is the N-th
/// server `redline coldstart` started, each saying `ready after a cold start (0.0 % of
/// the weights resident): … = 336.0 ms modelled`.
fn modelled_starts(out: &Path, servers: usize) -> Vec<Modelled> {
    (1..=servers)
        .map(|n| {
            let log = std::fs::read_to_string(out.join(format!("server-{n}.log"))).unwrap();
            let line = log
                .lines()
                .find_map(|line| line.strip_prefix("redline sim: ready after a "))
                .unwrap_or_else(|| panic!("server {n} never said it was ready:\n{log}"));
            let between = |from: &str, to: &str| -> &str {
                let rest = &line[line.find(from).unwrap() + from.len()..];
                &rest[..rest.find(to).unwrap()]
            };
            Modelled {
                kind: line.split(' ').next().unwrap().to_owned(),
                resident: between("(", " %").parse::<f64>().unwrap() / 100.0,
                total_ms: between("= ", " ms modelled").parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn cold_and_warm_restarts_are_timed_as_the_simulator_loads() {
    let dir = temp_dir("coldstart-restart");
    let (weights, command, ready) = simulated_server(&dir);
    let (code, json, stderr) = coldstart(
        &[
            "--ready",
            &ready,
            "--cold",
            "10",
            "--warm",
            "10",
            "--weights",
            &weights.display().to_string(),
        ],
        &command,
        &dir.join("out"),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let model = StartupModel {
        weights_bytes: WEIGHTS_BYTES,
        warmup_ms: WARMUP_MS,
        ..StartupModel::default()
    };
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 20);
    // A cold start's weights are dropped until gone; a warm start's are what the last
    // start read, which a kernel short of memory may have begun to evict (one run in 24
    // under a disk-writing stress): warm is held by its median, and each start by what
    // its own server found, below.
    let mut warm_resident = Vec::new();
    for run in runs {
        let resident = run["resident_before"].as_f64().unwrap();
        match run["kind"].as_str().unwrap() {
            "cold" => assert!(resident < 0.1, "{run}"),
            _ => warm_resident.push(resident),
        }
        // The probe's first token follows ready: the tiny profile answers in ms.
        let after_ready =
            run["first_token_ms"].as_f64().unwrap() - run["ready_ms"].as_f64().unwrap();
        assert!((0.0..200.0).contains(&after_ready), "{run}");
        assert!(
            run["peak_rss_bytes"].as_u64().unwrap() >= run["steady_rss_bytes"].as_u64().unwrap()
        );
        assert!(run["steady_rss_bytes"].as_u64().unwrap() > 1 << 20, "{run}");
    }
    assert!(median(warm_resident.clone()) > 0.9, "{warm_resident:?}");
    // Each start is held to what its server says it modelled, and a cold start's
    // server must have found its weights gone from the page cache.
    let modelled = modelled_starts(&dir.join("out"), runs.len());
    let cold_resident: Vec<f64> = (modelled.iter())
        .filter(|m| m.kind == "cold")
        .map(|m| m.resident)
        .collect();
    assert_eq!(cold_resident.len(), 10, "{cold_resident:?}");
    assert!(median(cold_resident.clone()) < 0.05, "{cold_resident:?}");
    let full_cold = model.process_start(0.0).1.total_ms();
    assert!(
        modelled
            .iter()
            .any(|m| (m.total_ms - full_cold).abs() < 0.1),
        "no start modelled as fully cold ({full_cold:.1} ms)"
    );
    // Ready is polled every 5 ms and the port every 2 ms: the measured load may run a
    // few ms past the model's, and under two CPU hogs a little more; never much short.
    for kind in ["cold", "warm"] {
        let errors: Vec<f64> = (runs.iter().zip(&modelled))
            .filter(|(run, _)| run["kind"] == kind)
            .map(|(run, m)| {
                let measured =
                    run["ready_ms"].as_f64().unwrap() - run["port_open_ms"].as_f64().unwrap();
                measured - m.total_ms
            })
            .collect();
        let error = median(errors.clone());
        assert!((-5.0..=25.0).contains(&error), "{kind}: errors {errors:?}");
    }
    let cold = &json["summary"][0];
    assert_eq!(cold["kind"], "cold");
    let shares: f64 = cold["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["share"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 0.01, "{cold}");
}

#[test]
fn wakes_from_sleep_are_timed_as_the_simulator_reloads() {
    let dir = temp_dir("coldstart-wake");
    let (_, command, ready) = simulated_server(&dir);
    let (code, json, stderr) = coldstart(
        &[
            "--ready",
            &ready,
            "--cold",
            "1",
            "--warm",
            "10",
            "--warm-mode",
            "wake",
        ],
        &command,
        &dir.join("out"),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let model = StartupModel {
        weights_bytes: WEIGHTS_BYTES,
        ..StartupModel::default()
    };
    let wakes: Vec<f64> = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "wake")
        .map(|r| r["wake_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(wakes.len(), 10);
    let modelled = model.wake().total_ms();
    let error = median(wakes.clone()) - modelled;
    assert!(
        (-2.0..=15.0).contains(&error),
        "modelled {modelled:.1} ms, measured {wakes:?}"
    );
    let kinds: Vec<&str> = json["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["cold", "wake"]);
}

#[tokio::test]
async fn hot_restarts_fragment_memory_and_the_run_records_the_allocation_failures() {
    let sim = EmbeddedSim::start(SimConfig {
        profile: Profile::tiny(),
        startup: Some(StartupModel {
            weights_bytes: 24_000_000,
            warmup_ms: 0.0,
            ..StartupModel::default()
        }),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let base = sim.base_url();
    let http = client();
    let until_ready = std::time::Instant::now();
    while !get_text(&http, format!("{base}/health"))
        .await
        .contains("ok")
    {
        assert!(until_ready.elapsed().as_secs() < 10, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for _ in 0..50 {
        post(&http, format!("{base}/sleep?level=1"), Value::Null).await;
        post(&http, format!("{base}/wake_up"), Value::Null).await;
    }
    let before: Value =
        serde_json::from_str(&get_text(&http, format!("{base}/redline/startup")).await).unwrap();
    assert_eq!(before["hot_restarts"], 50);
    assert!((before["largest_free_gib"].as_f64().unwrap() - 12.4).abs() < 1e-6);

    let requests = 1000;
    let scenario = scenario(&format!(
        "  seed: 5\n  services:\n    llm: {{ url: \"{base}\", model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 4 }} }}\n  load:\n    - {{ concurrency: 8, requests: {requests} }}\n"
    ));
    let (_, records) = run_to_records(scenario, "coldstart-fragmentation").await;
    let truth: Value =
        serde_json::from_str(&get_text(&http, format!("{base}/redline/startup")).await).unwrap();
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.outcome != Outcome::Ok)
        .collect();
    assert_eq!(records.len(), requests);
    assert_eq!(
        failed.len() as u64,
        truth["allocation_failures"].as_u64().unwrap()
    );
    for record in &failed {
        assert_eq!(record.status, Some(500));
        let error = record.error.as_ref().unwrap();
        assert!(error.message.contains("CUDA out of memory"), "{error:?}");
        assert!(error.message.contains("after 50 hot restarts"), "{error:?}");
    }
    // 18 % of 1000: a binomial spread of 1.2 points; ±3 points is 2.5σ.
    let rate = failed.len() as f64 / requests as f64;
    assert!((rate - 0.18).abs() <= 0.03, "{rate}");
}

/// Answers every request with `status` until the test ends.
fn answering(status: u16) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head);
            let body = "internal error";
            let _ = write!(
                stream,
                "HTTP/1.1 {status} Oops\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn a_server_that_fails_to_start_gets_a_clear_error_and_a_bounded_wait() {
    let dir = temp_dir("coldstart-bad");
    let sleeper = ["sleep".to_owned(), "30".to_owned()];
    let silent = format!("http://127.0.0.1:{}/health", free_port());
    let cases = [
        (silent.as_str(), sleeper.to_vec(), "nothing listened on"),
        (
            silent.as_str(),
            vec![
                "sh".into(),
                "-c".into(),
                "echo no model here >&2; exit 3".into(),
            ],
            "the server exited (exit status: 3) before it was ready",
        ),
    ];
    for (n, (ready, command, expected)) in cases.into_iter().enumerate() {
        let started = std::time::Instant::now();
        let (code, json, stderr) = coldstart(
            &[
                "--ready",
                ready,
                "--timeout",
                "2s",
                "--cold",
                "1",
                "--warm",
                "0",
            ],
            &command,
            &dir.join(format!("out-{n}")),
        );
        assert_eq!(code, Some(3), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(json["failure"].as_str().unwrap().contains(expected));
        assert!(started.elapsed().as_secs() < 15, "{stderr}");
    }
    let (_, _, stderr) = coldstart(
        &[
            "--ready",
            &silent,
            "--timeout",
            "2s",
            "--cold",
            "1",
            "--warm",
            "0",
        ],
        &[
            "sh".into(),
            "-c".into(),
            "echo no model here >&2; exit 3".into(),
        ],
        &dir.join("out-log"),
    );
    assert!(stderr.contains("no model here"), "{stderr}");
    let broken = format!("http://127.0.0.1:{}/health", answering(500));
    let (code, _, stderr) = coldstart(
        &[
            "--ready",
            &broken,
            "--timeout",
            "20s",
            "--cold",
            "1",
            "--warm",
            "0",
        ],
        &sleeper,
        &dir.join("out-500"),
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("answered 500 internal error"), "{stderr}");
}

/// The spec `redline advise` reads: a small sweep (for the knee) with a ModelLoadSpec
/// and a ScaleSpec bounding the advice.
const ADVISE_SPEC: &str = r#"apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: { name: chat-7b }
spec:
  seed: 9
  services:
    llm: { url: embedded, profile: 7b }
  payloadTemplate:
    prompts: { synthetic: { input_tokens: 256, output_tokens: 32 } }
  goodput: { ttft: 2s }
  load:
    - { sweep: { rates: 3, throughput_concurrency: 64 }, arrival: constant, requests: 30 }
---
apiVersion: redline.dev/v1alpha1
kind: ModelLoadSpec
metadata: { name: chat-7b }
spec:
  modelRef: sim-tiny
  cachePolicy: POLICY
  resourceLimits: { memory: 1Gi }
---
apiVersion: redline.dev/v1alpha1
kind: ScaleSpec
metadata: { name: chat-7b }
spec:
  minReplicas: 2
  maxReplicas: 40
"#;

fn redline(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

#[test]
fn advice_follows_from_the_measured_peaks_and_the_knee_by_the_documented_rules() {
    let dir = temp_dir("coldstart-advise");
    let (weights, command, ready) = simulated_server(&dir);
    let starts = dir.join("starts");
    let weights_arg = weights.display().to_string();
    let args = [
        "--ready",
        &ready,
        "--cold",
        "3",
        "--warm",
        "3",
        "--weights",
        &weights_arg,
    ];
    let (code, json, stderr) = coldstart(&args, &command, &starts);
    assert_eq!(code, Some(0), "{stderr}");
    let sweep = dir.join("sweep");
    let (code, _, stderr) = {
        let spec = dir.join("sweep.yaml");
        std::fs::write(&spec, ADVISE_SPEC.replace("POLICY", "cold")).unwrap();
        let (spec, out) = (spec.display().to_string(), sweep.display().to_string());
        redline(&["run", &spec, "--out", &out, "--quiet"])
    };
    assert!(matches!(code, Some(0 | 1)), "{stderr}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(sweep.join("summary.json")).unwrap())
            .unwrap();
    let knee = summary["sweep"]["knee_rate_per_s"]
        .as_f64()
        .or(summary["sweep"]["highest_rate_per_s"].as_f64())
        .unwrap();
    let runs = json["runs"].as_array().unwrap();
    let of = |kind: &str, field: &str| -> Vec<u64> {
        let mut v: Vec<u64> = runs
            .iter()
            .filter(|r| (r["kind"] == "cold") == (kind == "cold"))
            .map(|r| r[field].as_u64().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    let mib_up = |bytes: f64| format!("{}Mi", (bytes.ceil() as u64).div_ceil(1 << 20));
    let cold_need = mib_up(*of("cold", "peak_rss_bytes").last().unwrap() as f64 * 1.3);
    let steady = of("warm", "steady_rss_bytes");
    let warm_need = mib_up(steady[(steady.len() - 1) / 2] as f64 * 1.05);
    let rate = 7.5 * knee;
    for (policy, min_allowed) in [("cold", &cold_need), ("warm", &warm_need)] {
        let spec = dir.join(format!("{policy}.yaml"));
        std::fs::write(&spec, ADVISE_SPEC.replace("POLICY", policy)).unwrap();
        let (spec, starts, sweep) = (
            spec.display().to_string(),
            starts.display().to_string(),
            sweep.display().to_string(),
        );
        let rate = rate.to_string();
        let (code, yaml, stderr) = redline(&[
            "advise",
            &starts,
            &sweep,
            "--spec",
            &spec,
            "--target-rate",
            &rate,
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        let vpa: Value = yaml_serde::from_str(&yaml).unwrap();
        let container = &vpa["spec"]["resourcePolicy"]["containerPolicies"][0];
        assert_eq!(vpa["kind"], "VerticalPodAutoscaler");
        assert_eq!(vpa["metadata"]["name"], "chat-7b");
        assert_eq!(container["minAllowed"]["memory"], *min_allowed, "{yaml}");
        assert_eq!(container["maxAllowed"]["memory"], "1024Mi", "{yaml}");
        // The simulated server is ready in well under 30 s: resizing by eviction is cheap.
        assert_eq!(vpa["spec"]["updatePolicy"]["updateMode"], "Recreate");
        assert!(yaml.contains("8 = ⌈"), "{yaml}");
        assert!(yaml.contains("HPA scale-up lead time"), "{yaml}");
    }
}

#[test]
fn a_spec_names_the_probe_model_and_a_peak_over_its_memory_limit_fails() {
    let dir = temp_dir("coldstart-spec");
    let (_, command, ready) = simulated_server(&dir);
    let spec = dir.join("spec.yaml");
    let tight = ADVISE_SPEC
        .replace("POLICY", "cold")
        .replace("memory: 1Gi", "memory: 1Mi");
    std::fs::write(&spec, tight).unwrap();
    let spec_arg = spec.display().to_string();
    let args = [
        "--ready", &ready, "--cold", "1", "--warm", "0", "--spec", &spec_arg,
    ];
    let (code, json, stderr) = coldstart(&args, &command, &dir.join("tight"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("is over resourceLimits.memory 1Mi"),
        "{stderr}"
    );
    assert!(
        json["runs"][0]["first_token_ms"].as_f64().is_some(),
        "{json}"
    );

    // modelRef is what the probe asks for: a model the server does not serve fails.
    let wrong = ADVISE_SPEC
        .replace("POLICY", "cold")
        .replace("modelRef: sim-tiny", "modelRef: nope");
    std::fs::write(&spec, wrong).unwrap();
    let (code, _, stderr) = coldstart(&args, &command, &dir.join("wrong"));
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("the probe request to"), "{stderr}");

    std::fs::write(&spec, ADVISE_SPEC.split("---").next().unwrap()).unwrap();
    let (code, _, stderr) = coldstart(&args, &command, &dir.join("none"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no `kind: ModelLoadSpec` document"),
        "{stderr}"
    );
}
