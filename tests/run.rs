//! `redline run` end to end against the embedded simulator, checked against the
//! simulator's ground truth and the records file.

use crate::common;

use std::time::Duration;

use crate::common::{run_to_records, scenario, summary_of, temp_dir};
use redline::record::{Outcome, Record};
use redline::scenario::Scenario;
use redline::schedule::SweepRole;

use crate::common::CLIENT_TIMING as TIMING;

fn percentile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_and_ttft_agree_with_the_simulator() {
    let _serial = TIMING.lock().await;
    // 20 streams at the 7b profile's ~13 ms steps: a load even a debug build serves
    // without queueing, so the difference is transport and parsing. (Each step emits
    // every running sequence's token at once; at hundreds of streams on two cores that
    // burst itself delays delivery — measured by bench/, in release builds.)
    let s = scenario(
        "  services:\n    llm: { url: embedded, profile: 7b, always_count_locally: true }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: { min: 20, max: 200 }, output_tokens: { min: 5, max: 30 } } }\n  load:\n    - { concurrency: 20, requests: 300 }\n",
    );
    let (result, records) = run_to_records(s, "truth").await;
    assert_eq!(records.len(), 300);
    assert_eq!(result.aggregator.counts.ok, 300);
    let mut decode_gaps = Vec::new();
    let mut overheads = Vec::new();
    for r in &records {
        let truth = r.server.expect("the simulator reports ground truth");
        assert_eq!(
            r.output_tokens,
            Some(truth.completion_tokens),
            "usage matches the engine"
        );
        assert_eq!(
            r.output_tokens_local, r.output_tokens,
            "local count of the text matches too"
        );
        assert_eq!(
            r.content_events, truth.completion_tokens,
            "one event per token"
        );
        let client_ttft = r.ttft_us().unwrap() as f64;
        let server_ttft = (truth.first_token_us - truth.arrival_us) as f64;
        assert!(
            client_ttft >= server_ttft,
            "the client cannot see a token before it exists"
        );
        overheads.push((client_ttft - server_ttft) / 1e3);
        // First token to last token: the same span seen from both ends.
        let client_decode = (r.last_byte_us.unwrap() - r.first_token_us.unwrap()) as f64;
        let server_decode = (truth.finish_us - truth.first_token_us) as f64;
        decode_gaps.push((client_decode - server_decode).abs() / 1e3);
    }
    // A mismeasured token (the role chunk taken for the first token, a token stamped
    // late) shifts every request by a whole ~13 ms step, so the median catches it. The
    // tail is not asserted: two noisy shared cores running a debug build delay a few
    // deliveries by several ms (release builds: p99 ≈ 0.6 ms; with two CPU hogs and the
    // other tests of this file beside it, p50 ≈ 2 ms and p90 ≈ 5 ms here).
    let decode_p50 = percentile(&mut decode_gaps, 0.5);
    let decode_p90 = percentile(&mut decode_gaps, 0.9);
    assert!(
        decode_p50 < 4.0,
        "|client − server decode span| p50 {decode_p50:.3} ms, p90 {decode_p90:.3} ms"
    );
    let p50 = percentile(&mut overheads, 0.5);
    let p90 = percentile(&mut overheads, 0.9);
    // Loopback transport and request parsing. Release builds: p50 ≈ 0.6 ms, p99 ≈
    // 2.4 ms; a debug build is several times slower at parsing, and with two CPU hogs
    // beside it the tail reaches a step (p90 11.6 ms seen), so only the median, which
    // a token taken a step late would move, is asserted: under half a step (p50 up
    // to 4.9 ms seen with the hogs).
    assert!(
        p50 < 6.5,
        "client TTFT − server TTFT: p50 {p50:.3} ms, p90 {p90:.3} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_keeps_its_schedule_and_accounts_for_every_request() {
    let _serial = TIMING.lock().await;
    let s = scenario(
        "  seed: 3\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    stream: false\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }\n  warmup: 1s\n  load:\n    - { arrival: poisson, rate: 400, duration: 5s }\n",
    );
    let (result, records) = run_to_records(s, "schedule").await;
    let counts = result.aggregator.counts;
    assert!(counts.balanced());
    assert_eq!(records.len() as u64, counts.scheduled);
    let mut seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert!(
        seqs.iter().enumerate().all(|(i, s)| *s == i as u64),
        "one record per scheduled request"
    );
    // Poisson count over 5 s at 400/s: within 4 sigma of 2000.
    assert!(
        (counts.scheduled as f64 - 2000.0).abs() < 4.0 * 2000f64.sqrt(),
        "{}",
        counts.scheduled
    );
    let lag = |r: &Record| (r.sent_us.unwrap() - r.intended_us) as f64 / 1e3;
    let mut lags: Vec<f64> = records.iter().map(lag).collect();
    let p50 = percentile(&mut lags, 0.5);
    // Release builds hold p99 ≈ 2 ms at 2,000 req/s (bench/); a debug build sharing
    // two busy cores with the simulator gets slack, and its tail is the machine's, so
    // the median is asserted, and that the lag does not grow: a pacer that fell
    // behind would drift by the mean gap (2.5 ms) per late send and never come back,
    // so the last fifth of the schedule would lag far more than the first.
    assert!(p50 <= 3.0, "send lag p50 {p50:.3} ms");
    let mut by_time: Vec<&Record> = records.iter().collect();
    by_time.sort_by_key(|r| r.intended_us);
    let fifth = by_time.len() / 5;
    let median_of = |part: &[&Record]| {
        let mut lags: Vec<f64> = part.iter().map(|r| lag(r)).collect();
        percentile(&mut lags, 0.5)
    };
    let (first, last) = (
        median_of(&by_time[..fifth]),
        median_of(&by_time[by_time.len() - fifth..]),
    );
    assert!(
        last - first < 2.5,
        "send lag grew from {first:.3} ms (first fifth) to {last:.3} ms (last fifth)"
    );
    let warmup = records
        .iter()
        .filter(|r| r.phase == redline::record::Phase::Warmup)
        .count();
    assert!(
        (warmup as f64 - 400.0).abs() < 4.0 * 20.0,
        "a fifth of the requests are warm-up: {warmup}"
    );
    let summary = summary_of(&result);
    assert_eq!(summary.measured.scheduled, counts.scheduled - warmup as u64);
    assert!(
        (summary.throughput.requests_per_s - 400.0).abs() < 40.0,
        "{}",
        summary.throughput.requests_per_s
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_schedules_the_same_requests() {
    let body = "  seed: 9\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: { mean: 50, stddev: 20 }, output_tokens: 3 } }\n  load:\n    - { arrival: gamma, burstiness: 0.5, rate: 200, requests: 100 }\n";
    let (_, a) = run_to_records(scenario(body), "seed-a").await;
    let (_, b) = run_to_records(scenario(body), "seed-b").await;
    // The schedule, and the bytes of every request as the simulator received them.
    let key = |records: &[Record]| {
        let mut v: Vec<(u64, u64, Option<u32>, u64)> = records
            .iter()
            .map(|r| {
                let hash = r.server.unwrap().request_hash;
                assert_ne!(hash, 0, "the simulator reports what it received");
                (r.seq, r.intended_us, r.input_tokens, hash)
            })
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(key(&a), key(&b));
    // Conversations too: the same session sends the same bytes turn by turn (which slot
    // runs which session is up to timing; what it sends is not). Later turns carry the
    // answers, so they repeat only when the answers do: temperature 0 here, as on a real
    // server.
    let sessions = "  seed: 9\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    body: { temperature: 0 }\n    prompts: { synthetic: { input_tokens: 30, output_tokens: 6 } }\n    session: { turns: { min: 1, max: 4 } }\n  load:\n    - { concurrency: 3, requests: 40 }\n";
    let (_, a) = run_to_records(scenario(sessions), "seed-sessions-a").await;
    let (_, b) = run_to_records(scenario(sessions), "seed-sessions-b").await;
    let by_turn = |records: &[Record]| {
        let mut v: Vec<(u64, u32, u64)> = records
            .iter()
            .map(|r| {
                let mark = r.session.as_ref().unwrap();
                (mark.id, mark.turn, r.server.unwrap().request_hash)
            })
            .collect();
        v.sort_unstable();
        v
    };
    let (a, b) = (by_turn(&a), by_turn(&b));
    let common = a.len().min(b.len());
    // The budget may cut the last sessions at different turns; all else is identical.
    assert!(common >= 35, "{common}");
    let ids = |v: &[(u64, u32, u64)]| v.iter().map(|(id, _, _)| *id).max().unwrap();
    let full = ids(&a).min(ids(&b)).saturating_sub(3);
    let complete = |v: &[(u64, u32, u64)]| -> Vec<(u64, u32, u64)> {
        v.iter().copied().filter(|(id, _, _)| *id < full).collect()
    };
    assert!(!complete(&a).is_empty());
    assert_eq!(complete(&a), complete(&b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_target_is_a_typed_connect_failure() {
    // Bind and drop a listener: nothing is listening on that port now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: \"http://127.0.0.1:{port}\", model: m }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 8, output_tokens: 2 }} }}\n  load:\n    - {{ concurrency: 2, requests: 10 }}\n"
    ));
    let (result, records) = run_to_records(s, "unreachable").await;
    assert_eq!(records.len(), 10);
    assert!(records.iter().all(|r| r.outcome == Outcome::Error));
    let kinds: Vec<_> = result
        .aggregator
        .failure_counts()
        .into_iter()
        .map(|f| (f.kind, f.count))
        .collect();
    assert_eq!(kinds, [("connect_refused".to_owned(), 10)]);
}

#[test]
fn sigint_leaves_complete_records_and_a_partial_report() {
    let _serial = TIMING.blocking_lock();
    let dir = temp_dir("sigint");
    let spec = dir.join("long.yaml");
    std::fs::write(
        &spec,
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: long }\nspec:\n  services:\n    llm: { url: embedded, profile: 7b }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 64, output_tokens: 400 } }\n  drain_timeout: 500ms\n  load:\n    - { arrival: poisson, rate: 20, duration: 60s }\n",
    )
    .unwrap();
    let out = dir.join("out");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_redline"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true);
    let records: Vec<Record> = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        records.len() as u64,
        summary["requests"]["scheduled"].as_u64().unwrap()
    );
    // 400-token answers take ~5 s: those in flight were cancelled after the 500 ms drain.
    assert!(records.iter().any(|r| r.outcome == Outcome::Cancelled));
    assert!(
        records.len() > 20 && records.len() < 200,
        "{}",
        records.len()
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_shows_in_latency_from_intended_start_and_loses_nothing() {
    let _serial = TIMING.lock().await;
    let sim = common::sim(common::Profile::tiny()).await;
    let base = sim.base_url();
    let s = scenario(&format!(
        "  seed: 5\n  services:\n    llm: {{ url: \"{base}\", model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 8 }} }}\n  goodput: {{ ttft: 500ms }}\n  load:\n    - {{ arrival: poisson, rate: 100, duration: 6s }}\n"
    ));
    let stall = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        common::post(
            &common::client(),
            format!("{base}/redline/stall"),
            serde_json::json!({"ms": 2000}),
        )
        .await
    };
    let ((result, records), stalled) = tokio::join!(run_to_records(s, "stall"), stall);
    assert_eq!(stalled.status, 200);
    assert!(result.aggregator.counts.balanced());
    assert!(
        records.iter().all(|r| r.outcome == Outcome::Ok),
        "a stall is slow, not broken"
    );
    assert!(
        (records.len() as f64 - 600.0).abs() < 4.0 * 600f64.sqrt(),
        "the schedule kept going: {}",
        records.len()
    );
    let ms = |us: u64| us as f64 / 1e3;
    // The open loop kept sending through the stall: no coordinated omission. A client
    // that waited on the stalled server would send the requests due during the stall
    // up to 2,000 ms late. When the stall ends ~200 streams resume at once on two
    // cores, so the bound leaves room for that burst in a debug build.
    let mut stall_lags: Vec<f64> = records
        .iter()
        .filter(|r| (2_000_000..4_000_000).contains(&r.intended_us))
        .map(|r| ms(r.sent_us.unwrap() - r.intended_us))
        .collect();
    assert!(stall_lags.len() > 100, "{}", stall_lags.len());
    let worst_lag = stall_lags.iter().copied().fold(0.0, f64::max);
    let p50_lag = percentile(&mut stall_lags, 0.5);
    assert!(
        p50_lag < 5.0 && worst_lag < 200.0,
        "send lag during the stall: p50 {p50_lag:.3} ms, max {worst_lag:.3} ms"
    );
    // Latency from the intended start shows the stall: requests due during it waited
    // for its end; those due well before it did not.
    let from_intended: Vec<(f64, f64)> = records
        .iter()
        .map(|r| (ms(r.intended_us), ms(r.ttft_intended_us().unwrap())))
        .collect();
    let worst = from_intended.iter().map(|(_, t)| *t).fold(0.0, f64::max);
    assert!(
        worst > 1_800.0,
        "the stall shows: worst TTFT from intended {worst:.0} ms"
    );
    let waited = from_intended.iter().filter(|(_, t)| *t > 1_000.0).count();
    assert!(
        waited >= 50,
        "about a second's worth of requests waited over a second: {waited}"
    );
    // Goodput counts exactly the requests whose TTFT from the intended start met the
    // bound: the stall cost about two seconds' worth of them.
    let good = from_intended.iter().filter(|(_, t)| *t <= 500.0).count() as u64;
    assert_eq!(result.aggregator.good, good);
    assert!(
        good < records.len() as u64 - 100,
        "{good} of {}",
        records.len()
    );
    let mut before: Vec<f64> = from_intended
        .iter()
        .filter(|(at, _)| *at < 1_500.0)
        .map(|(_, t)| *t)
        .collect();
    assert!(
        percentile(&mut before, 0.99) < 100.0,
        "before the stall TTFT was short"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_end_to_end() {
    let _serial = TIMING.lock().await;
    // `http2: true` speaks HTTP/2 only (prior knowledge): every request succeeding means
    // the streams were multiplexed over HTTP/2.
    let sim = common::sim(common::Profile::tiny()).await;
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: \"{}\", model: sim-tiny, http2: true }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 32, output_tokens: 16 }} }}\n  load:\n    - {{ concurrency: 50, requests: 200 }}\n",
        sim.base_url()
    ));
    let (result, records) = run_to_records(s, "h2").await;
    assert_eq!(result.aggregator.counts.ok, 200);
    for r in &records {
        assert_eq!(r.content_events, 16);
        assert_eq!(r.output_tokens, Some(r.server.unwrap().completion_tokens));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_requests_run_through_the_same_engine() {
    let request = |path: &str| {
        format!(
            "  services:\n    web: {{ url: embedded, profile: tiny, api: http }}\n  payloadTemplate:\n    request: {{ method: GET, path: {path}, headers: {{ x-test: yes }} }}\n  load:\n    - {{ concurrency: 4, requests: 100 }}\n"
        )
    };
    let (result, records) = run_to_records(scenario(&request("/health")), "http-ok").await;
    assert_eq!(result.aggregator.counts.ok, 100);
    assert!(
        records
            .iter()
            .all(|r| r.status == Some(200) && r.e2e_us().is_some())
    );
    let (result, records) = run_to_records(scenario(&request("/no-such-page")), "http-404").await;
    assert_eq!(result.aggregator.counts.error, 100);
    let failure = records[0].error.as_ref().unwrap();
    assert_eq!(
        (failure.kind.as_str(), failure.message.as_str()),
        ("http_4xx", "HTTP 404, expected a 2xx status")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_measures_its_bounds_then_rates_between_them_and_finds_a_knee() {
    let _serial = TIMING.lock().await;
    // The 7b profile with 256-token prompts and 32-token answers: synchronous ≈ 2.3
    // req/s, 64 sessions ≈ 40 req/s. Points are bounded by request count, so the test
    // does not depend on how fast the machine is.
    let s = scenario(
        "  seed: 9\n  services:\n    llm: { url: embedded, profile: 7b }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 256, output_tokens: 32 } }\n  goodput: { ttft: 2s }\n  load:\n    - { sweep: { rates: 3, throughput_concurrency: 64 }, arrival: constant, requests: 30 }\n",
    );
    let (result, records) = run_to_records(s, "sweep").await;
    assert!(result.aggregator.counts.balanced());
    assert_eq!(records.len(), 5 * 30, "every point ran its 30 requests");
    let roles: Vec<Option<SweepRole>> = result.stages.iter().map(|s| s.sweep).collect();
    assert_eq!(
        roles,
        [
            Some(SweepRole::Synchronous),
            Some(SweepRole::Throughput),
            Some(SweepRole::Rate),
            Some(SweepRole::Rate),
            Some(SweepRole::Rate)
        ]
    );
    let of_stage = |i: u32| -> Vec<&Record> { records.iter().filter(|r| r.stage == i).collect() };
    // Synchronous means one at a time: each request is sent after the previous ended.
    let mut sync = of_stage(0);
    sync.sort_by_key(|r| r.sent_us);
    assert!(
        sync.windows(2)
            .all(|w| w[1].sent_us.unwrap() >= w[0].last_byte_us.unwrap()),
        "the synchronous point overlapped requests"
    );
    // The rates sit evenly between what the two bounds achieved, and each point's
    // requests finished before the next point began.
    let summary = summary_of(&result);
    let (low, high) = (
        summary.stages[0].achieved_rate_per_s,
        summary.stages[1].achieved_rate_per_s,
    );
    assert!(high > 5.0 * low, "batching: {low:.2} vs {high:.2} req/s");
    let offered: Vec<f64> = summary.stages[2..]
        .iter()
        .map(|s| s.offered_rate_per_s.unwrap())
        .collect();
    for (k, rate) in offered.iter().enumerate() {
        let expected = low + (high - low) * (k + 1) as f64 / 4.0;
        assert!((rate - expected).abs() < 1e-9, "{rate} vs {expected}");
    }
    for i in 1..5u32 {
        let first_sent = of_stage(i)
            .iter()
            .map(|r| r.sent_us.unwrap())
            .min()
            .unwrap();
        let last_done = of_stage(i - 1)
            .iter()
            .map(|r| r.last_byte_us.unwrap())
            .max()
            .unwrap();
        assert!(
            first_sent >= last_done,
            "point {i} began before point {} ended",
            i - 1
        );
    }
    // A constant schedule at each rate: intended starts 1/rate apart.
    for (k, rate) in offered.iter().enumerate() {
        let mut intended: Vec<u64> = of_stage(k as u32 + 2)
            .iter()
            .map(|r| r.intended_us)
            .collect();
        intended.sort_unstable();
        let gap = (intended[29] - intended[0]) as f64 / 29.0 / 1e6;
        assert!((gap - 1.0 / rate).abs() < 1e-4, "{gap} vs {}", 1.0 / rate);
    }
    // Goodput per point agrees with the records, and the knee is the highest point
    // where 95 % of requests met the SLO.
    for (i, stage) in summary.stages.iter().enumerate() {
        let rs = of_stage(i as u32);
        let good = rs
            .iter()
            .filter(|r| r.outcome == Outcome::Ok && r.ttft_intended_us().unwrap() <= 2_000_000)
            .count();
        assert_eq!(stage.goodput_ratio, Some(good as f64 / rs.len() as f64));
    }
    let sweep = summary.sweep.expect("a sweep summary");
    let expected_knee = (2..5)
        .filter(|i| summary.stages[*i].goodput_ratio.unwrap() >= 0.95)
        .max();
    assert_eq!(sweep.knee_stage, expected_knee);
    assert!(
        expected_knee.is_some(),
        "the lowest rate is well within reach"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hugging_face_tokenizer_counts_what_the_server_did_not_report() {
    // The simulator's tokenizer exported as tokenizer.json (what `redline sim
    // --write-tokenizer` writes), and a stream without usage, as llama.cpp sends.
    let dir = temp_dir("hf-tokenizer");
    let file = dir.join("tokenizer.json");
    std::fs::write(
        &file,
        redline::tokenizer::sim::huggingface_tokenizer_json().to_string(),
    )
    .unwrap();
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: embedded, profile: tiny, tokenizer: \"{}\" }}\n  payloadTemplate:\n    include_usage: false\n    prompts: {{ synthetic: {{ input_tokens: {{ min: 5, max: 60 }}, output_tokens: {{ min: 1, max: 40 }} }} }}\n  load:\n    - {{ concurrency: 4, requests: 40 }}\n",
        file.display()
    ));
    assert_eq!(
        s.service().counting.tokenizer.name(),
        file.display().to_string()
    );
    let (_, records) = run_to_records(s, "hf-tokenizer-run").await;
    assert_eq!(records.len(), 40);
    for r in &records {
        let truth = r.server.expect("ground truth");
        // The named tokenizer's count is exact; the run also saw one token per event
        // (answers cut by max_tokens had that many events), which ranks higher.
        assert_eq!(
            r.output_tokens_local,
            Some(truth.completion_tokens),
            "exact, from the model's own tokenizer"
        );
        assert_eq!(r.token_source, Some(redline::record::TokenSource::Events));
        assert_eq!(r.output_tokens, Some(truth.completion_tokens));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_from_learned_templates_are_what_the_server_receives() {
    // A log of eight known families → `redline datagen`'s templates → a spec's prompt
    // source. Without usage in the stream, the input count is the client's own count
    // of the text it sent; the simulator's count of what it received must match.
    let dir = temp_dir("templates");
    let log = dir.join("log.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    redline::workload::datagen::synth::write_log(&mut out, 3_000, 5).unwrap();
    drop(out);
    let options = redline::workload::datagen::Options {
        k: 8,
        field: None,
        min_length: 4,
        max_length: 512,
        seed: 1,
        sample: 3_000,
        skip_invalid: false,
        label_field: None,
        tokenizer: redline::tokenizer::LocalTokenizer::by_name("sim").unwrap(),
        read: None,
    };
    let (file, _) = redline::workload::datagen::learn(&log, &options).unwrap();
    let templates = dir.join("templates.yaml");
    redline::workload::datagen::write(&file, &templates).unwrap();
    let spec = |seed: u64| {
        scenario(&format!(
            "  seed: {seed}\n  services:\n    llm: {{ url: embedded, profile: tiny, api: completions }}\n  payloadTemplate:\n    include_usage: false\n    prompts: {{ templates: {{ file: \"{}\", output_tokens: 8 }} }}\n  load:\n    - {{ concurrency: 4, requests: 60 }}\n",
            templates.display()
        ))
    };
    let (result, records) = run_to_records(spec(3), "templates-run").await;
    assert_eq!(result.aggregator.counts.ok, 60);
    for r in &records {
        let truth = r.server.expect("ground truth");
        assert_eq!(r.input_tokens, Some(truth.prompt_tokens), "seq {}", r.seq);
    }
    // Same spec and seed, same prompts; another seed, other prompts.
    let prompts = |s: Scenario| match s.workload {
        redline::scenario::Workload::Llm { prompts, .. } => (0..60)
            .map(|i| format!("{:?}", prompts.payload(s.seed, i).prompt))
            .collect::<Vec<_>>(),
        _ => unreachable!("an LLM workload"),
    };
    assert_eq!(prompts(spec(3)), prompts(spec(3)));
    assert_ne!(prompts(spec(3)), prompts(spec(4)));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_replays_on_its_own_schedule_with_its_prefixes() {
    let _serial = TIMING.lock().await;
    // 120 requests 40 ms apart in the trace, replayed at 2× speed; every fourth starts
    // a new conversation, whose later requests repeat its first block.
    let dir = temp_dir("replay");
    let trace = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..120u64)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 4, \"hash_ids\": [{}, {}]}}",
                5_000 + i * 40,
                40 + i % 7,
                i / 4,
                1_000 + i
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: embedded, profile: 7b, api: completions }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 8, output_tokens: 4 }} }}\n  load:\n    - {{ replay: {{ file: \"{}\", speed: 2, block_tokens: 16 }} }}\n",
        trace.display()
    ));
    let (result, mut records) = run_to_records(s, "replay-run").await;
    assert_eq!(result.aggregator.counts.ok, 120);
    records.sort_by_key(|r| r.seq);
    for (i, r) in records.iter().enumerate() {
        // Relative to the trace's first request, at twice the speed.
        assert_eq!(r.intended_us, i as u64 * 20_000, "seq {i}");
        // The server counted exactly the trace's input length.
        assert_eq!(r.input_tokens, Some(40 + i as u32 % 7), "seq {i}");
    }
    // Every fourth request starts a conversation whose requests share their first
    // 16-token block. By the server's own clock: a request scheduled after another of
    // its conversation finished prefill hits that block; one scheduled before any other
    // of its conversation was cannot (a busy machine may send a conversation's second
    // request first, so "first" is the server's order, not the trace's).
    let truth = |r: &Record| r.server.unwrap();
    let mut hits = 0;
    for (i, r) in records.iter().enumerate() {
        let conversation = records.iter().skip(i / 4 * 4).take(4);
        let others: Vec<_> = conversation.filter(|o| o.seq != r.seq).map(truth).collect();
        let at = truth(r).scheduled_us;
        let cached = truth(r).cached_prompt_tokens;
        if others.iter().any(|o| o.first_token_us <= at) {
            assert!(
                cached >= 16,
                "seq {i}: {cached} cached tokens after a prefill of its block"
            );
            hits += 1;
        } else if others.iter().all(|o| o.scheduled_us > at) {
            assert_eq!(
                cached, 0,
                "seq {i}: {cached} cached tokens, scheduled first"
            );
        }
    }
    // The schedule leaves 20 ms between a conversation's requests, and a prefill takes
    // a few: most follow-ons find the block computed.
    assert!(
        hits >= 60,
        "{hits} of 90 follow-on requests came after their block's prefill"
    );
    let mut lags: Vec<f64> = records
        .iter()
        .map(|r| (r.sent_us.unwrap() - r.intended_us) as f64 / 1e3)
        .collect();
    assert!(
        percentile(&mut lags, 0.5) < 2.0,
        "the trace's schedule was kept"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_carry_their_history_and_trace_and_later_turns_hit_the_prefix_cache() {
    let s = scenario(
        "  seed: 21\n  services:\n    llm: { url: embedded, profile: 7b }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 64, output_tokens: 16 } }\n    session: { turns: 4 }\n  load:\n    - { concurrency: 3, requests: 24 }\n",
    );
    let (result, records) = run_to_records(s, "sessions").await;
    assert!(result.aggregator.counts.balanced());
    assert_eq!(records.len(), 24);
    assert!(records.iter().all(|r| r.outcome == Outcome::Ok));
    let mut sessions: std::collections::BTreeMap<u64, Vec<&Record>> = Default::default();
    for r in &records {
        let mark = r.session.as_ref().expect("every request is in a session");
        sessions.entry(mark.id).or_default().push(r);
    }
    assert_eq!(sessions.len(), 6, "24 requests, 4 turns each");
    for turns in sessions.values_mut() {
        turns.sort_by_key(|r| r.session.as_ref().unwrap().turn);
        let trace = &turns[0].session.as_ref().unwrap().trace_id;
        assert_eq!(trace.len(), 32);
        for (k, r) in turns.iter().enumerate() {
            let mark = r.session.as_ref().unwrap();
            assert_eq!(mark.turn as usize, k + 1);
            assert_eq!(&mark.trace_id, trace, "one trace per session");
            assert_eq!(mark.snapshot, "t@seed=21");
        }
        // The simulator's view: each turn's prompt holds the previous prompt and the
        // previous answer, plus a new question.
        for pair in turns.windows(2) {
            let (before, after) = (pair[0].server.unwrap(), pair[1].server.unwrap());
            assert!(
                after.prompt_tokens >= before.prompt_tokens + before.completion_tokens + 64,
                "{} vs {} + {}",
                after.prompt_tokens,
                before.prompt_tokens,
                before.completion_tokens
            );
            // The history was computed on the previous turn: the prefix cache has it.
            assert!(
                after.cached_prompt_tokens >= before.prompt_tokens / 2,
                "{} cached of a {}-token history",
                after.cached_prompt_tokens,
                before.prompt_tokens
            );
        }
        assert!(
            turns[1].sent_us.unwrap() >= turns[0].last_byte_us.unwrap(),
            "a turn waits for the answer before it"
        );
    }
    let turns = &result.aggregator.turns;
    assert_eq!(turns.len(), 4);
    assert_eq!(
        turns[&1].cached_prompt_tokens, 0,
        "a first turn has nothing cached"
    );
    assert!(turns[&4].cached_prompt_tokens > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_workload_reports_the_expected_hit_share_next_to_the_servers() {
    // Four 512-token system prompts, one request at a time: every repeat of a prefix
    // finds it cached, so the simulator's share equals the workload's expectation.
    let s = scenario(
        "  seed: 4\n  services:\n    llm: { url: embedded, profile: 7b, api: completions }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: { min: 560, max: 640 }, output_tokens: 2, prefix_tokens: 512, prefixes: 4 } }\n  server_metrics: { interval: 200ms }\n  load:\n    - { concurrency: 1, requests: 40 }\n",
    );
    let (result, records) = run_to_records(s, "prefixes").await;
    // Scraping the simulator's /metrics meanwhile: the hit rate of its prefix-cache
    // counters is the share of prompt tokens its ground truth says were cached.
    let scraped = result.server_metrics.clone().expect("scraped");
    assert_eq!(scraped.failed_scrapes, 0);
    assert!(scraped.samples.len() >= 2);
    assert!(
        scraped
            .found
            .contains(&"vllm:prefix_cache_hits_total".to_owned())
    );
    assert!(
        scraped
            .found
            .contains(&"vllm:kv_cache_usage_perc".to_owned())
    );
    let truth: (u64, u64) = records.iter().fold((0, 0), |(c, p), r| {
        let t = r.server.unwrap();
        (
            c + u64::from(t.cached_prompt_tokens),
            p + u64::from(t.prompt_tokens),
        )
    });
    let truth_share = truth.0 as f64 / truth.1 as f64;
    let scraped_rate = scraped.prefix_hit_rate.expect("counters moved");
    assert!(
        (scraped_rate - truth_share).abs() < 0.02,
        "scraped {scraped_rate:.4} vs ground truth {truth_share:.4}"
    );
    assert_eq!(result.aggregator.counts.ok, 40);
    let summary = summary_of(&result);
    let cache = summary.prefix_cache.expect("a prefix workload");
    // By hand from the records: 512 tokens of every request after each prefix's first.
    let mut seen = std::collections::HashSet::new();
    let (mut repeated, mut total) = (0u64, 0u64);
    let mut by_seq: Vec<&Record> = records.iter().collect();
    by_seq.sort_by_key(|r| r.seq);
    for r in by_seq {
        let prefix = r.prefix.expect("every request has a prefix");
        assert_eq!(prefix.tokens, 512);
        if !seen.insert(prefix.id) {
            repeated += 512;
        }
        total += u64::from(r.input_tokens.unwrap());
    }
    assert_eq!(seen.len(), 4);
    let expected = repeated as f64 / total as f64;
    assert!((cache.expected_hit_share - expected).abs() < 1e-9);
    let server = cache
        .server_hit_share
        .expect("the simulator reports its cache");
    assert!(
        (server - expected).abs() < 0.01,
        "server {server:.4} vs expected {expected:.4}"
    );
}

/// `--metrics-addr`: scraped mid-run, the live counters are consistent with each other
/// and with the records the run ends with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_metrics_agree_with_the_records() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = temp_dir("live-metrics");
    let options = redline::runner::RunOptions {
        metrics_listener: Some(listener),
        ..redline::runner::RunOptions::records_to(dir.join("records.jsonl"))
    };
    let scenario = scenario(
        "  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }\n  load:\n    - { arrival: constant, rate: 40, duration: 3s }\n",
    );
    let run = tokio::spawn(redline::runner::run(
        scenario,
        options,
        tokio_util::sync::CancellationToken::new(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let text = common::get_text(&common::client(), format!("http://{addr}/metrics")).await;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let requests = sum("redline_requests_total{");
    let ok = sum("redline_requests_total{outcome=\"ok\"");
    assert!(
        (20.0..=60.0).contains(&requests),
        "{requests} requests ended by 1.5 s at 40/s\n{text}"
    );
    assert_eq!(ok, requests, "all ok");
    assert_eq!(sum("redline_time_to_first_token_seconds_count"), ok);
    assert_eq!(sum("redline_tokens_total{kind=\"output\"}"), 4.0 * ok);
    run.await.unwrap().unwrap();
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 120);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The terminal's progress bar once held a share of the run's state, and a run ended
/// with a panic whenever the aborted bar had not let go of it yet. Readers of the
/// progress now hold only counters: one that never lets go cannot stop the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_reader_that_holds_on_does_not_stop_the_run() {
    let progress = std::sync::Arc::new(redline::runner::Progress::default());
    let reader = progress.clone();
    let lingering = tokio::spawn(async move {
        loop {
            let _ = reader.snapshot();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let header = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = header.clone();
    let dir = temp_dir("lingering-progress");
    let options = redline::runner::RunOptions {
        progress: Some(progress.clone()),
        on_start: Some(Box::new(move |h| *seen.lock().unwrap() = Some(h.clone()))),
        ..redline::runner::RunOptions::records_to(dir.join("records.jsonl"))
    };
    let s = scenario(
        "  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }\n  load:\n    - { concurrency: 4, requests: 40 }\n",
    );
    let result = redline::runner::run(s, options, tokio_util::sync::CancellationToken::new())
        .await
        .expect("the run ends while a reader still holds the progress");
    assert_eq!(result.aggregator.counts.ok, 40);
    let now = progress.snapshot();
    assert_eq!((now.scheduled, now.done, now.failed), (40, 40, 0));
    let header = header.lock().unwrap().clone().expect("on_start was called");
    assert_eq!(header.stages, ["closed loop, 4 sessions, 40 requests"]);
    assert!(
        header.target.starts_with("http://127.0.0.1:"),
        "{}",
        header.target
    );
    lingering.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Ctrl-C in a closed-loop stage once waited for every slot's request to finish on its
/// own (40 s on a llama.cpp server, past a 5 s drain_timeout); open loops kept it. Now
/// one drain watchdog ends every wait of the run: closed loops, sweep points, sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_in_a_closed_loop_keeps_the_drain_timeout() {
    let sim = common::sim(common::Profile::tiny()).await;
    let base = sim.base_url();
    // The engine stalls for 30 s: every slot's request hangs, as on a busy server.
    let stalled = common::post(
        &common::client(),
        format!("{base}/redline/stall"),
        serde_json::json!({"ms": 30_000}),
    )
    .await;
    assert_eq!(stalled.status, 200);
    for load in [
        "    - { concurrency: 4, duration: 60s }\n",
        "    - { sweep: { rates: 2, throughput_concurrency: 4 }, duration: 20s }\n",
    ] {
        let s = scenario(&format!(
            "  services:\n    llm: {{ url: \"{base}\", model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 8 }} }}\n  drain_timeout: 500ms\n  load:\n{load}"
        ));
        let stop = tokio_util::sync::CancellationToken::new();
        let dir = temp_dir("closed-drain");
        let options = redline::runner::RunOptions::records_to(dir.join("records.jsonl"));
        let started = std::time::Instant::now();
        let stopper = {
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                stop.cancel();
            })
        };
        let result = redline::runner::run(s, options, stop).await.unwrap();
        let took = started.elapsed();
        stopper.await.unwrap();
        // Stop at 1 s + the 500 ms drain; the bound leaves room for a busy machine.
        assert!(
            took < Duration::from_secs(5),
            "{load}: the run took {took:?} after a stop at 1 s"
        );
        let counts = result.aggregator.counts;
        assert!(counts.balanced());
        assert!(counts.cancelled >= 1, "{load}: {counts:?}");
        assert!(result.interrupted);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Every seed-0 run once sent the same `traceparent`s, so runs collided in Jaeger and
/// Tempo. Trace IDs are now new to each run, span IDs still from the seed (the chaos
/// proxy's fault decisions key on them); `trace_ids: seeded` replays the IDs exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_seed_never_share_a_trace_unless_seeded() {
    let ids = |extra: &'static str, name: &'static str| async move {
        let s = scenario(&format!(
            "{extra}  services:\n    llm: {{ url: embedded, profile: tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 8, output_tokens: 2 }} }}\n  load:\n    - {{ concurrency: 1, requests: 5 }}\n"
        ));
        let (_, mut records) = run_to_records(s, name).await;
        records.sort_by_key(|r| r.seq);
        records
            .into_iter()
            .map(|r| {
                let tp = r.traceparent.unwrap();
                let parts: Vec<&str> = tp.split('-').collect();
                (parts[1].to_owned(), parts[2].to_owned())
            })
            .collect::<Vec<_>>()
    };
    let (a, b) = (ids("", "trace-a").await, ids("", "trace-b").await);
    for ((trace_a, span_a), (trace_b, span_b)) in a.iter().zip(&b) {
        assert_ne!(trace_a, trace_b, "two runs, two traces");
        assert_eq!(span_a, span_b, "span IDs from the seed");
    }
    let seeded = "  trace_ids: seeded\n";
    assert_eq!(ids(seeded, "trace-c").await, ids(seeded, "trace-d").await);
}

/// A llama.cpp-like server: no usage in streams, one token per event, one request at
/// a time, a /tokenize endpoint. A fast profile of it, written for the test.
fn llamacpp_like(dir: &std::path::Path) -> std::path::PathBuf {
    let mut profile = common::Profile::tiny();
    profile.name = "llamacpp-fast".into();
    profile.max_num_seqs = 1;
    profile.server = redline::sim::profile::ServerKind::Llamacpp;
    let path = dir.join("llamacpp-fast.yaml");
    std::fs::write(&path, yaml_serde::to_string(&profile).unwrap()).unwrap();
    path
}

/// Without usage, the default estimate (cl100k_base) was ±20 % off what llama.cpp
/// generated (36.9 tokens where it made 32). Now a run that sees one token per event
/// (answers cut by max_tokens had exactly that many events) counts events, and one
/// that cannot see it asks the server's own tokenizer after the run: both exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_usage_the_counts_are_exact_and_say_where_they_came_from() {
    let dir = temp_dir("no-usage");
    let profile = llamacpp_like(&dir);
    let sim = redline::sim::EmbeddedSim::start(redline::sim::SimConfig {
        profile: redline::sim::Profile::load(profile.to_str().unwrap()).unwrap(),
        model: None,
        seed: 0,
        tiers: Default::default(),
        script: None,
        startup: None,
    })
    .await
    .unwrap();
    let url = sim.base_url();
    // Short budgets: most answers are cut by max_tokens (evidence). Prompts with no
    // max_tokens: each answer stops by itself (8–64 tokens in this profile), so there
    // is no evidence, and only the server's /tokenize can say.
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two three\"}\n",
    )
    .unwrap();
    for (prompts, source) in [
        (
            "{ synthetic: { input_tokens: 16, output_tokens: { min: 4, max: 12 } } }".to_owned(),
            redline::record::TokenSource::Events,
        ),
        (
            format!("{{ file: \"{}\" }}", prompts.display()),
            redline::record::TokenSource::ServerTokenizer,
        ),
    ] {
        let s = scenario(&format!(
            "  services:\n    llm: {{ url: \"{url}\", model: sim-tiny }}\n  payloadTemplate:\n    prompts: {prompts}\n  load:\n    - {{ concurrency: 2, requests: 30 }}\n"
        ));
        let (result, records) = run_to_records(s, "no-usage-run").await;
        assert_eq!(result.aggregator.counts.ok, 30);
        for r in &records {
            let truth = r.server.expect("the simulator's own count");
            assert_eq!(r.token_source, Some(source), "{r:?}");
            assert_eq!(
                r.output_tokens,
                Some(truth.completion_tokens),
                "exact: {r:?}"
            );
        }
        let settled = result
            .token_settlement
            .clone()
            .expect("answers came without usage");
        assert_eq!((settled.uncounted, settled.source), (30, source));
        let summary = summary_of(&result);
        assert_eq!(summary.tokens.sources[&source], 30);
        let expected: u64 = records
            .iter()
            .map(|r| u64::from(r.server.unwrap().completion_tokens))
            .sum();
        assert_eq!(
            summary.tokens.output_total, expected,
            "the statistics were rebuilt"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// On a server that serves one request at a time, the throughput point once came out
/// below the synchronous one, the rates between ran in descending order and the knee
/// was luck. The sweep now says the server does not scale and runs its rates upwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_of_a_serial_server_says_it_does_not_scale() {
    let _serial = TIMING.lock().await;
    let dir = temp_dir("serial-sweep");
    let profile = llamacpp_like(&dir);
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: embedded, profile: \"{}\" }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 24 }} }}\n  load:\n    - {{ sweep: {{ rates: 3, throughput_concurrency: 8 }}, requests: 16 }}\n",
        profile.display()
    ));
    let (result, _) = run_to_records(s, "serial-sweep-run").await;
    let summary = summary_of(&result);
    let sweep = summary.sweep.expect("a sweep");
    assert!(
        !sweep.scales,
        "{:?}",
        summary
            .stages
            .iter()
            .map(|s| s.achieved_rate_per_s)
            .collect::<Vec<_>>()
    );
    let rates: Vec<f64> = summary
        .stages
        .iter()
        .filter(|s| s.sweep == Some(SweepRole::Rate))
        .map(|s| s.offered_rate_per_s.unwrap())
        .collect();
    assert_eq!(rates.len(), 3);
    assert!(
        rates.windows(2).all(|w| w[0] < w[1]),
        "ascending: {rates:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
