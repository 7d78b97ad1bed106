//! Streaming SLOs on real runs of the simulator, judged against the ground truth of
//! when the chaos proxy's fault window opened: an episode within three windows of
//! the change and none before it; none at all on a stationary run; the degrade
//! webhook called once per episode with the episode, a failing one retried a bounded
//! number of times and reported; `abort` stopping the run.
//!
//! The windows are scaled down from the default 30 s / 10 s to 3 s / 1 s so that a run
//! takes 20 s; the fault opens at 12 s.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::post;
use redline::results::RunResult;
use redline::runner::{RunOptions, run};
use redline::scenario::Scenario;
use redline::slo::streaming::Severity;
use tokio_util::sync::CancellationToken;

const FAULT_FROM_S: f64 = 12.0;
const STEP_S: f64 = 1.0;

/// The tests of this file run one at a time: a run starting beside another is a real
/// change in what the other measures (on two cores), and drift detectors see it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A 20 s run at a constant 20 req/s against the 7B profile (E2E ~250 ms: latencies of
/// the scale real servers have, not the tiny profile's 2 ms that a scheduler hiccup
/// doubles), with the source's fault
/// (10 % of requests delayed 300–800 ms) from 12 s when `faulty`, and `extra` added to
/// the `streaming:` block.
fn spec(seed: u64, faulty: bool, extra: &str) -> Scenario {
    let fault = if faulty {
        format!(
            "  faults:\n    - {{ service: llm, name: slow-llm, window: {{ from: {FAULT_FROM_S}s }}, delay: {{ probability: 0.1, min_ms: 300, max_ms: 800 }} }}\n"
        )
    } else {
        String::new()
    };
    let watch = if extra.contains("watch:") {
        ""
    } else {
        "    watch: [ttft.p95, e2e.p95]\n"
    };
    let text = format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: drift }}\nspec:\n  seed: {seed}\n  services:\n    llm: {{ url: embedded, profile: 7b }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 64, output_tokens: 16 }} }}\n  load:\n    - {{ arrival: constant, rate: 20, duration: 20s }}\n{fault}---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: {{ name: drift }}\nspec:\n  streaming:\n    window: 3s\n    step: 1s\n{watch}    critical_after: 3s\n{extra}"
    );
    let file = redline::spec::parse("drift.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// A run, and when its first faulted request completed (seconds): when the change
/// became visible in records placed by completion time.
async fn run_spec(
    scenario: Scenario,
    name: String,
    stop: CancellationToken,
) -> (RunResult, Option<f64>) {
    let dir = common::temp_dir(&name);
    let result = run(
        scenario,
        RunOptions::records_to(dir.join("records.jsonl")),
        stop,
    )
    .await
    .unwrap();
    let lines = std::fs::read_to_string(dir.join("drift.jsonl")).unwrap();
    let drift = result.drift.as_ref().unwrap();
    // drift.jsonl has a line per change: an opening per episode at least.
    assert!(lines.lines().filter(|l| l.contains("\"opened\"")).count() == drift.episodes.len());
    let mut first_fault: Option<f64> = None;
    redline::record::read_records(&dir.join("records.jsonl"), None, |r| {
        if !r.faults.is_empty() {
            let done = r.done_us() as f64 / 1e6;
            first_fault = Some(first_fault.map_or(done, |f| f.min(done)));
        }
    })
    .unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    (result, first_fault)
}

/// The end of the first window (of `STEP_S` steps) holding a record completed at `s`.
fn first_window_holding(s: f64) -> f64 {
    (s / STEP_S).floor() * STEP_S + STEP_S
}

/// Counts the calls and keeps their bodies; answers `status`.
#[derive(Clone)]
struct Hook {
    calls: Arc<AtomicU64>,
    bodies: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    status: u16,
}

async fn hook_server(status: u16) -> (String, Hook) {
    let hook = Hook {
        calls: Arc::default(),
        bodies: Arc::default(),
        status,
    };
    let app = axum::Router::new()
        .route(
            "/degrade",
            post(|State(h): State<Hook>, body: String| async move {
                h.calls.fetch_add(1, Ordering::Relaxed);
                if let Ok(v) = serde_json::from_str(&body) {
                    h.bodies.lock().unwrap().push(v);
                }
                axum::http::StatusCode::from_u16(h.status).unwrap()
            }),
        )
        .with_state(hook.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/degrade", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, hook)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fault_window_opens_an_episode_within_three_windows_and_none_before() {
    let _serial = SERIAL.lock().await;
    let (url, hook) = hook_server(200).await;
    let extra = format!(
        "    on_violation:\n      webhook: {{ url: \"{url}\", body: '{{\"degrade\": true, \"series\": \"{{{{ episode.series }}}}\", \"episode\": {{{{ episode|tojson }}}}}}' }}\n"
    );
    let (result, first_fault) = run_spec(
        spec(7, true, &extra),
        "drift-fault".into(),
        CancellationToken::new(),
    )
    .await;
    let drift = result.drift.unwrap();
    // The fault window opens at 12 s; a delayed request completes 300–800 ms after it
    // is sent, so the change shows in the records a little later.
    let change = first_window_holding(first_fault.unwrap());
    assert!(
        (FAULT_FROM_S..FAULT_FROM_S + 3.0).contains(&change),
        "{change}"
    );
    assert!(!drift.episodes.is_empty(), "no episode: {drift:#?}");
    for e in &drift.episodes {
        // Opened by the third window holding the change (EWMA confirms drift after 3).
        assert!(
            e.opened_s >= change && e.opened_s <= change + 2.0 * STEP_S,
            "{} opened at {}s, the change showed in the window ending at {change}s",
            e.series,
            e.opened_s
        );
        // The fault lasts to the end: it escalates after 3 s.
        assert_eq!(e.severity, Severity::Critical, "{e:?}");
        assert!(e.peak >= 300.0, "{e:?}");
    }
    // No window before the change was judged over.
    for track in &drift.tracks {
        for p in track.points.iter().filter(|p| p.end_s < change) {
            assert_ne!(p.state, Some(redline::slo::streaming::State::Over), "{p:?}");
        }
    }
    // The webhook: once per episode, the episode in the body, all calls succeeded.
    assert_eq!(
        hook.calls.load(Ordering::Relaxed),
        drift.episodes.len() as u64
    );
    assert_eq!(
        (drift.webhook_calls, drift.webhook_failures),
        (drift.episodes.len() as u64, 0)
    );
    let bodies = hook.bodies.lock().unwrap().clone();
    let mut series: Vec<&str> = bodies
        .iter()
        .map(|b| b["series"].as_str().unwrap())
        .collect();
    series.sort();
    let mut expected: Vec<&str> = drift.episodes.iter().map(|e| e.series.as_str()).collect();
    expected.sort();
    assert_eq!(series, expected);
    assert!(
        bodies
            .iter()
            .all(|b| b["degrade"] == true && b["episode"]["opened_s"].is_number())
    );
}

/// Ten seeded stationary runs would take 200 s; four run here (80 s of records, 2 series
/// × 13 judged windows each). The server is stationary but the machine is not: client
/// and simulator share two busy cores, and a stall of a second is a real excursion in
/// what the client measures — TTFT and E2E together (CI saw e2e p95 287 ms against a
/// 283 ms threshold for one window). So the claim is a stated false-alarm rate: at most
/// one of the four runs opens episodes, each a warning of one window; a detector that
/// alarms on jitter alarms in several runs, or for longer, or escalates.
#[tokio::test(flavor = "multi_thread")]
async fn stationary_runs_open_no_episode_beyond_one_runs_one_window_warning() {
    let _serial = SERIAL.lock().await;
    let mut alarmed = Vec::new();
    for seed in 1..=4 {
        let scenario = spec(seed, false, "");
        let (result, _) = run_spec(
            scenario,
            format!("drift-calm-{seed}"),
            CancellationToken::new(),
        )
        .await;
        let drift = result.drift.unwrap();
        assert!(drift.windows_judged >= 20, "{}", drift.windows_judged);
        if !drift.episodes.is_empty() {
            alarmed.push((seed, drift.episodes));
        }
    }
    assert!(alarmed.len() <= 1, "{alarmed:#?}");
    for e in alarmed.iter().flat_map(|(_, episodes)| episodes) {
        assert_eq!((e.severity, e.windows), (Severity::Warn, 1), "{alarmed:#?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_webhook_is_retried_a_bounded_number_of_times_and_abort_stops_the_run() {
    let _serial = SERIAL.lock().await;
    let (url, hook) = hook_server(503).await;
    let extra = format!(
        "    watch: [ttft.p95]\n    on_violation:\n      webhook: {{ url: \"{url}\", retries: 2, timeout: 1s }}\n      abort: true\n"
    );
    let started = std::time::Instant::now();
    let (result, first_fault) = run_spec(
        spec(7, true, &extra),
        "drift-abort".into(),
        CancellationToken::new(),
    )
    .await;
    let drift = result.drift.unwrap();
    let aborted = result.aborted.expect("the episode stopped the run");
    let episode = aborted.episode.expect("stopped by an episode");
    let change = first_window_holding(first_fault.unwrap());
    assert!(
        episode.opened_s >= change && episode.opened_s <= change + 2.0 * STEP_S,
        "{episode:?}"
    );
    // Stopped within the drain timeout of the episode, long before the 20 s schedule.
    assert!(
        started.elapsed().as_secs_f64() < 19.0,
        "{:?}",
        started.elapsed()
    );
    assert!(!result.interrupted);
    // One episode, one call: the first try and two retries, then reported as failed.
    assert_eq!(drift.episodes.len(), 1);
    assert_eq!(hook.calls.load(Ordering::Relaxed), 3);
    assert_eq!((drift.webhook_calls, drift.webhook_failures), (1, 1));
}

/// A change of prompt mix is not drift: prompts double from 1,000 to 2,000 tokens at
/// 12 s (same server, same rate). TTFT rises with the longer prefill, and CUSUM (a
/// level-shift detector) opens a raw `ttft.p95` episode; TTFT per 1,000 prompt tokens
/// falls (a step's fixed cost is spread over more tokens) and opens none.
#[tokio::test(flavor = "multi_thread")]
async fn a_longer_prompt_mix_moves_raw_ttft_and_not_ttft_per_1k_input() {
    let _serial = SERIAL.lock().await;
    let dir = common::temp_dir("drift-mix");
    // 20 req/s for 20 s; each request's blocks its own, so the prefix cache never hits.
    let lines: Vec<String> = (0..400u64)
        .map(|i| {
            let (tokens, blocks) = if i * 50 < 12_000 { (1_000, 2) } else { (2_000, 4) };
            let ids: Vec<String> = (0..blocks).map(|b| (i * 10 + b).to_string()).collect();
            format!(
                "{{\"timestamp\": {}, \"input_length\": {tokens}, \"output_length\": 16, \"hash_ids\": [{}]}}",
                i * 50,
                ids.join(", ")
            )
        })
        .collect();
    let trace = dir.join("trace.jsonl");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let text = format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: mix }}\nspec:\n  seed: 3\n  services:\n    llm: {{ url: embedded, profile: 7b }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 8, output_tokens: 16 }} }}\n  load:\n    - {{ replay: {{ file: \"{}\" }} }}\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: {{ name: mix }}\nspec:\n  streaming:\n    window: 3s\n    step: 1s\n    detector: cusum\n    watch: [ttft.p95, ttft_per_1k_input.p95]\n",
        trace.display()
    );
    let file = redline::spec::parse("mix.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let scenario = Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"));
    let (result, _) = run_spec(scenario, "drift-mix-run".into(), CancellationToken::new()).await;
    let drift = result.drift.unwrap();
    let mean_before_after = |series: &str| {
        let track = drift.tracks.iter().find(|t| t.series == series).unwrap();
        let mean = |points: Vec<f64>| points.iter().sum::<f64>() / points.len() as f64;
        let of = |keep: &dyn Fn(f64) -> bool| {
            mean(
                track
                    .points
                    .iter()
                    .filter(|p| keep(p.end_s))
                    .filter_map(|p| p.value)
                    .collect(),
            )
        };
        (of(&|end| end <= 12.0), of(&|end| end >= 16.0))
    };
    let (raw_before, raw_after) = mean_before_after("ttft.p95");
    let (per_before, per_after) = mean_before_after("ttft_per_1k_input.p95");
    eprintln!(
        "mix: ttft.p95 {raw_before:.1} → {raw_after:.1} ms; ttft_per_1k_input.p95 {per_before:.1} → {per_after:.1} ms; episodes {:?}",
        drift
            .episodes
            .iter()
            .map(|e| (&e.series, e.opened_s))
            .collect::<Vec<_>>()
    );
    // The raw series moves up by a good part; the normalised one does not rise.
    assert!(
        raw_after > 1.2 * raw_before,
        "ttft.p95 {raw_before} → {raw_after}"
    );
    assert!(
        per_after < per_before,
        "ttft_per_1k_input.p95 {per_before} → {per_after}"
    );
    let raw: Vec<_> = drift
        .episodes
        .iter()
        .filter(|e| e.series == "ttft.p95")
        .collect();
    assert!(
        raw.first()
            .is_some_and(|e| e.opened_s >= 12.0 && e.opened_s <= 16.0),
        "{:#?}",
        drift.episodes
    );
    assert!(
        drift
            .episodes
            .iter()
            .all(|e| e.series != "ttft_per_1k_input.p95"),
        "{:#?}",
        drift.episodes
    );
}
