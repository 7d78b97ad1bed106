//! Availability under rolling restarts, against ground truth: three `redline sim
//! --startup` replicas behind the run's balancer, one restarted every 10 s of a
//! 2-minute run at 20 req/s. The simulator's start-up is known (1 GB at 2 GB/s, three
//! allocations, 1 s of warm-up: about 1.54 s unready after each restart, answering 503
//! "Loading model"), so the failures a balancer without health checks must let through
//! are known too: a third of the requests during each replica's unready time.
//!
//! Both runs go side by side (two minutes, not four): health checks on (ejection and
//! resending what a replica did not take) and off.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const RATE: f64 = 20.0;
const DURATION_S: f64 = 120.0;
const EVERY_S: f64 = 10.0;

/// Three free loopback ports (bound and let go: a replica takes each at once).
fn free_ports() -> Vec<u16> {
    let held: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn spec(dir: &Path, health: bool) -> PathBuf {
    let redline = env!("CARGO_BIN_EXE_redline");
    let replicas: Vec<String> = free_ports()
        .into_iter()
        .map(|port| {
            format!(
                "        - {{ url: \"http://127.0.0.1:{port}\", command: [\"{redline}\", sim, --profile, tiny, --addr, \"127.0.0.1:{port}\", --startup, --weights-size, 1GB, --warmup-ms, \"1000\"] }}"
            )
        })
        .collect();
    let balance = if health {
        "{ policy: round_robin }"
    } else {
        "{ policy: round_robin, eject: false, retry: false }"
    };
    let text = format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: rolling }}\nspec:\n  seed: 3\n  services:\n    llm:\n      url: balanced\n      model: sim-tiny\n      replicas:\n{}\n      balance: {balance}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 32, output_tokens: 16 }} }}\n  load:\n    - {{ arrival: constant, rate: {RATE}, duration: {DURATION_S}s }}\n  disruptions:\n    - restart: {{ service: llm, every: {EVERY_S}s }}\n",
        replicas.join("\n")
    );
    let path = dir.join("spec.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the spec with the binary, as a user would; the summary and every record.
fn run(dir: PathBuf, health: bool) -> (Value, Vec<Value>) {
    std::fs::create_dir_all(&dir).unwrap();
    let spec = spec(&dir, health);
    let out = dir.join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json"))
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&status.stderr))),
    )
    .unwrap();
    let records = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (summary, records)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[test]
fn rolling_restarts_lose_nothing_and_health_checks_hide_them_while_round_robin_alone_fails() {
    let base = std::env::temp_dir().join(format!("redline-availability-{}", std::process::id()));
    let on = {
        let dir = base.join("on");
        std::thread::spawn(move || run(dir, true))
    };
    let off = run(base.join("off"), false);
    let on = on.join().unwrap();
    let scheduled = (RATE * DURATION_S) as u64;
    for (name, (summary, records)) in [("on", &on), ("off", &off)] {
        // Nothing lost: a record for every scheduled request, every one sent.
        assert_eq!(records.len() as u64, scheduled, "{name}");
        assert_eq!(summary["requests"]["scheduled"], scheduled, "{name}");
        assert_eq!(summary["requests"]["dropped"], 0, "{name}");
        let a = &summary["disruptions"];
        let steps = a["steps"].as_array().unwrap();
        // Restarts at 10, 20, … 110 s, one replica at a time in turn, each back.
        assert_eq!(steps.len(), 11, "{name}: {a:#}");
        for (k, s) in steps.iter().enumerate() {
            assert_eq!(s["replica"], k % 3, "{name}: {s}");
            assert!(s["error"].is_null(), "{name}: {s}");
        }
        // Ground truth: 0.5 s of weights, 36 ms of allocations, 1 s of warm-up.
        let unready = unready_of(steps);
        assert!((1.5..1.8).contains(&unready), "{name}: {unready} s");
        // Every failure is put down to a restart.
        assert_eq!(a["unattributed_failures"], 0, "{name}: {a:#}");
        assert_eq!(a["requests"].as_u64().unwrap(), scheduled, "{name}");
    }
    // Health checks on: a restarting replica is ejected after 3 gateway failures in a
    // row, each resent (refused) or failed (sent on a connection the stop closed);
    // what fails is that, or an answer cut mid-stream by the stop: one a step as a
    // rule, both in the same step at most (a busy CI machine, 114 ms to the headers,
    // once had a stream in flight at the stop and the next request on its connection).
    let a = &on.0["disruptions"];
    let steps = a["steps"].as_array().unwrap();
    for s in steps {
        let (resent, failed) = (
            s["retried"].as_u64().unwrap(),
            s["failed"].as_u64().unwrap(),
        );
        assert!(resent + failed >= 3 && resent >= 2 && failed <= 2, "{s:#}");
    }
    let failed = steps.iter().map(|s| s["failed"].as_f64().unwrap());
    assert!(median(failed.collect()) <= 1.0, "{a:#}");
    let failover = median(
        steps
            .iter()
            .map(|s| s["failover_ms"].as_f64().unwrap())
            .collect(),
    );
    // Three requests at a third of 20 req/s: about 150 ms (arrivals are 50 ms apart).
    assert!((50.0..600.0).contains(&failover), "{failover} ms");
    assert!(a["lower_bound"].as_f64().unwrap() > 0.99, "{a:#}");
    // Health checks off: a third of the requests in each unready time fail, and their
    // records name the restart as their fault.
    let a = &off.0["disruptions"];
    let steps = a["steps"].as_array().unwrap();
    let expected = RATE / 3.0 * unready_of(steps);
    let failed = median(
        steps
            .iter()
            .map(|s| s["failed"].as_f64().unwrap())
            .collect(),
    );
    assert!(
        (expected * 0.6..expected * 1.4).contains(&failed),
        "median {failed} failed a step, expected {expected:.1}"
    );
    let named = off
        .1
        .iter()
        .filter(|r| r["outcome"] != "ok")
        .filter(|r| {
            r["faults"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["fault"] == "replica_restart_failed"))
        })
        .count() as u64;
    let failed_total = a["failed"].as_u64().unwrap();
    assert!(
        failed_total > 0 && named * 10 >= failed_total * 9,
        "{named} of {failed_total}"
    );
    assert!(
        a["availability"].as_f64().unwrap() < on.0["disruptions"]["availability"].as_f64().unwrap()
    );
    let _ = std::fs::remove_dir_all(base);
}

fn unready_of(steps: &[Value]) -> f64 {
    median(
        steps
            .iter()
            .map(|s| s["ended_s"].as_f64().unwrap() - s["down_s"].as_f64().unwrap())
            .collect(),
    )
}
