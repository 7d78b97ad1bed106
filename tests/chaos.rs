//! The chaos proxy, held against its own fault log (ground truth of what it injected)
//! and against what the client measured: rates over many requests on a keep-alive
//! pool, the typed outcome of each stream fault, the admin API, and bad input.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{client, run_to_records, scenario, summary_of};
use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use redline::chaos::{FaultLog, ProxyConfig, RunningProxy, parse_rules};
use redline::record::{FailStage, Outcome, Record};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A stand-in for a vector database: answers every search at once with one hit.
async fn search_upstream() -> SocketAddr {
    let app = Router::new()
        .route(
            "/collections/{name}/points/search",
            post(|| async {
                axum::Json(json!({
                    "result": [{"id": 7, "score": 0.91, "payload": {"text": "the passage"}}],
                    "status": "ok",
                    "time": 0.0001
                }))
            }),
        )
        .route("/health", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Headers the upstream saw, one entry per request.
type Seen = Arc<std::sync::Mutex<Vec<hyper::HeaderMap>>>;

/// An upstream that answers `GET /echo` and keeps each request's headers.
async fn recording_upstream() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let record = seen.clone();
    let app = Router::new().route(
        "/echo",
        get(move |headers: hyper::HeaderMap| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push(headers);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

async fn proxy(upstream: SocketAddr, rules_yaml: &str, header_faults: bool) -> RunningProxy {
    let (file, rules) = parse_rules("rules.yaml", rules_yaml).unwrap_or_else(|e| panic!("{e}"));
    RunningProxy::start(ProxyConfig {
        upstreams: vec![format!("http://{upstream}").parse().unwrap()],
        balance: Default::default(),
        upstream_http2: false,
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        rules,
        seed: file.seed,
        allow_header_faults: header_faults,
        log: Arc::new(FaultLog::to_writer(None)),
        tls: None,
        upstream_tls: None,
        tap: None,
        mirror: None,
    })
    .await
    .unwrap()
}

fn faulted<'a>(records: &'a [Record], rule: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.faults.iter().any(|f| f.rule == rule))
        .collect()
}

/// 20,000 searches over a keep-alive pool of 64 connections, with a 5 % delay rule
/// and a 1.2 % empty-result rule. Per-request decisions keep both rates whatever the
/// pool does; with toxiproxy's per-connection toxicity, 64 connections would give
/// 0 or 64 delayed connections, not 5 % of requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_hold_per_request_over_a_keep_alive_pool() {
    let upstream = search_upstream().await;
    let spec = format!(
        "  seed: 11\n  services:\n    vectors: {{ url: \"http://{upstream}\", api: http }}\n  payloadTemplate:\n    request: {{ method: POST, path: /collections/docs/points/search, body: '{{\"vector\": [0.1, 0.2], \"limit\": 5}}' }}\n  faults:\n    - {{ name: slow-search, service: vectors, delay: {{ probability: 0.05, min_ms: 300, max_ms: 800 }} }}\n    - {{ name: empty-search, service: vectors, match: {{ path: /collections/*/points/search }}, empty_result: {{ probability: 0.012, json_path: result }} }}\n  load:\n    - {{ concurrency: 64, requests: 20000 }}\n"
    );
    let (result, records) = run_to_records(scenario(&spec), "chaos-rates").await;
    assert_eq!(records.len(), 20_000);
    assert!(
        records.iter().all(|r| r.outcome == Outcome::Ok),
        "searches all answer 200"
    );

    let proxy = result.proxies[0].clone();
    assert!(
        proxy.connections <= 70,
        "a keep-alive pool: {} connections for {} requests",
        proxy.connections,
        proxy.requests
    );
    assert_eq!(proxy.requests, 20_000);
    assert_eq!(
        proxy.unclaimed_faults, 0,
        "every injection joined to a record"
    );

    // 5 % ± 0.6 %: the standard error at n = 20,000 is 0.15 %, so this is ±3.9 σ.
    let delayed = faulted(&records, "slow-search");
    let share = delayed.len() as f64 / 20_000.0;
    assert!((share - 0.05).abs() <= 0.006, "delayed share {share}");
    let proxy_count = |rule: &str| proxy.rules.iter().find(|r| r.0 == rule).unwrap().3;
    assert_eq!(delayed.len() as u64, proxy_count("slow-search"));
    for r in &delayed {
        let added = r.faults.iter().find_map(|f| f.added_ms).unwrap();
        assert!((300.0..=800.0).contains(&added), "added {added} ms");
        // The client felt it: send to last byte is at least the added delay.
        let e2e_ms = r.e2e_us().unwrap() as f64 / 1e3;
        assert!(e2e_ms >= added - 1.0, "e2e {e2e_ms} ms < added {added} ms");
    }
    let mut undelayed: Vec<u64> = records
        .iter()
        .filter(|r| r.faults.iter().all(|f| f.rule != "slow-search"))
        .map(|r| r.e2e_us().unwrap())
        .collect();
    undelayed.sort_unstable();
    let median = undelayed[undelayed.len() / 2];
    assert!(median < 100_000, "undelayed median {median} µs");
    let added: Vec<f64> = delayed
        .iter()
        .filter_map(|r| r.faults.iter().find_map(|f| f.added_ms))
        .collect();
    let mean = added.iter().sum::<f64>() / added.len() as f64;
    assert!(
        (mean - 550.0).abs() < 25.0,
        "uniform 300–800 has mean 550: {mean}"
    );

    // 1.2 % ± 0.25 % (standard error 0.077 %).
    let emptied = faulted(&records, "empty-search");
    let share = emptied.len() as f64 / 20_000.0;
    assert!((share - 0.012).abs() <= 0.0025, "emptied share {share}");
    assert_eq!(emptied.len() as u64, proxy_count("empty-search"));

    // The report attributes exactly the injected set.
    let summary = summary_of(&result);
    let faults = summary.faults.expect("a faults section");
    let reported = |rule: &str| faults.rules.iter().find(|r| r.rule == rule).unwrap();
    assert_eq!(reported("slow-search").requests, delayed.len() as u64);
    assert_eq!(reported("empty-search").requests, emptied.len() as u64);
    let either: BTreeSet<u64> = delayed.iter().chain(&emptied).map(|r| r.seq).collect();
    assert_eq!(faults.requests_with_faults, either.len() as u64);
    assert_eq!(faults.failed_with_faults + faults.failed_without_faults, 0);
    let added_ms = reported("slow-search").added_ms.unwrap();
    assert!(
        added_ms.p50 >= 300.0 && added_ms.max <= 801.0,
        "{added_ms:?}"
    );
}

/// Aborts fail requests; the report puts those failures on the rule, and the same
/// seed picks the same requests again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_failures_are_told_apart_and_replay_with_the_seed() {
    let upstream = search_upstream().await;
    let spec = format!(
        "  seed: 5\n  services:\n    vectors: {{ url: \"http://{upstream}\", api: http }}\n  payloadTemplate:\n    request: {{ method: GET, path: /health }}\n  faults:\n    - {{ name: flaky, service: vectors, abort: {{ probability: 0.1, status: 503 }} }}\n  load:\n    - {{ concurrency: 8, requests: 1000 }}\n"
    );
    let failed_seqs = |records: &[Record]| -> BTreeSet<u64> {
        records
            .iter()
            .filter(|r| r.outcome != Outcome::Ok)
            .map(|r| r.seq)
            .collect()
    };
    let (result, records) = run_to_records(scenario(&spec), "chaos-replay-a").await;
    let first = failed_seqs(&records);
    assert!(
        (70..=130).contains(&first.len()),
        "{} of 1000 at 10 %",
        first.len()
    );
    for r in records.iter().filter(|r| first.contains(&r.seq)) {
        assert_eq!(r.status, Some(503));
        assert_eq!(r.error.as_ref().unwrap().kind, "http_5xx");
        assert_eq!(r.faults[0].rule, "flaky");
    }
    let faults = summary_of(&result).faults.unwrap();
    assert_eq!(faults.failed_with_faults, first.len() as u64);
    assert_eq!(faults.failed_without_faults, 0);
    assert_eq!(
        faults.rules[0].failures["first_byte/http_5xx"],
        first.len() as u64
    );

    let (_, again) = run_to_records(scenario(&spec), "chaos-replay-b").await;
    assert_eq!(failed_seqs(&again), first, "same seed, same faults");
}

/// Each stream fault reaches the client as its typed outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_faults_become_typed_outcomes() {
    let run_with = |fault: &'static str, name: &'static str| async move {
        let spec = format!(
            "  seed: 3\n  services:\n    llm: {{ url: embedded, profile: tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 12 }} }}\n  timeouts: {{ first_token: 400ms }}\n  faults:\n    - {{ name: {name}, service: llm, {fault} }}\n  load:\n    - {{ concurrency: 4, requests: 12 }}\n"
        );
        let (_, records) = run_to_records(scenario(&spec), name).await;
        assert_eq!(records.len(), 12);
        for r in &records {
            assert_eq!(r.faults.len(), 1, "{name}: {r:?}");
            assert_eq!(r.faults[0].rule, name);
        }
        records
    };
    let outcome = |r: &Record| {
        let e = r.error.as_ref().expect("a failure");
        (r.outcome, e.stage, e.kind.clone())
    };

    for r in run_with("cut_stream: { probability: 1, after_events: 4 }", "cut").await {
        assert_eq!(
            outcome(&r),
            (Outcome::Error, FailStage::Stream, "truncated".into())
        );
        assert_eq!(r.content_events, 3, "the role event, then 3 tokens");
    }
    for r in run_with(
        "cut_stream: { probability: 1, after_events: 4, reset: true }",
        "reset",
    )
    .await
    {
        // HTTP/1.1: the connection closes mid-body. Events still in the proxy's write
        // buffer go with it, as with a server that crashed: at most the 3 before the cut.
        assert_eq!(
            outcome(&r),
            (Outcome::Error, FailStage::Stream, "reset".into())
        );
        assert!(r.content_events <= 3, "{r:?}");
    }
    for r in run_with("corrupt_event: { probability: 1, event: 3 }", "corrupt").await {
        assert_eq!(
            outcome(&r),
            (Outcome::Error, FailStage::Decode, "invalid_json".into())
        );
    }
    for r in run_with("stall_first_token: { probability: 1, ms: 1500 }", "stall").await {
        assert_eq!(
            outcome(&r),
            (Outcome::Timeout, FailStage::FirstToken, "timeout".into())
        );
    }
    for r in run_with("drop_done: { probability: 1 }", "nodone").await {
        assert_eq!(
            outcome(&r),
            (Outcome::Error, FailStage::Stream, "missing_done".into())
        );
    }
    for r in run_with(
        "cut_stream: { probability: 1, after_events: 4, done: true }",
        "cleancut",
    )
    .await
    {
        // A clean early stop: no finish_reason, but [DONE]. The answer is short, not
        // broken; the record shows it by its token count.
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!(r.content_events, 3);
    }
    // Writes of 1–3 bytes split every event and every UTF-8 character: the decoder
    // still reads every token.
    for r in run_with("slice: { probability: 1, max_bytes: 3 }", "sliced").await {
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!(r.output_tokens, Some(12));
        assert_eq!(r.content_events, 12);
    }
    for r in run_with("token_drip: { probability: 1, ms: 30 }", "drip").await {
        assert_eq!(r.outcome, Outcome::Ok);
        // The simulator's tiny profile steps in ~1 ms; 30 ms a token is the drip.
        let itl_ms = r.itl_mean_us.unwrap() as f64 / 1e3;
        assert!((25.0..60.0).contains(&itl_ms), "mean gap {itl_ms} ms");
    }
}

/// The same stream faults on Ollama's newline-delimited JSON: a line is an event, the
/// line with `"done": true` the end marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_faults_cut_and_corrupt_ndjson_lines_too() {
    let run_with = |fault: &'static str, name: &'static str| async move {
        let spec = format!(
            "  seed: 3\n  services:\n    llm: {{ url: embedded, profile: tiny, api: ollama }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 12 }} }}\n  faults:\n    - {{ name: {name}, service: llm, {fault} }}\n  load:\n    - {{ concurrency: 4, requests: 8 }}\n"
        );
        let (_, records) = run_to_records(scenario(&spec), name).await;
        assert_eq!(records.len(), 8);
        records
    };
    let kind = |r: &Record| r.error.as_ref().map(|e| (e.stage, e.kind.clone()));
    for r in run_with("cut_stream: { probability: 1, after_events: 4 }", "ndcut").await {
        assert_eq!(kind(&r), Some((FailStage::Stream, "truncated".into())));
        assert_eq!(r.content_events, 4, "four token lines, then the cut");
        assert_eq!(r.faults[0].rule, "ndcut");
    }
    for r in run_with("corrupt_event: { probability: 1, event: 3 }", "ndcorrupt").await {
        assert_eq!(kind(&r), Some((FailStage::Decode, "invalid_json".into())));
    }
    for r in run_with("drop_done: { probability: 1 }", "nddone").await {
        // All twelve tokens came; the line that ends the answer did not.
        assert_eq!(kind(&r), Some((FailStage::Stream, "truncated".into())));
        assert_eq!(r.content_events, 12);
    }
}

/// The same stream faults on a gRPC token stream (Triton's `ModelStreamInfer` over
/// HTTP/2): a message is an event, the OK status in the trailers the end marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_faults_cut_and_corrupt_grpc_messages_too() {
    let run_with = |fault: &'static str, name: &'static str| async move {
        let spec = format!(
            "  seed: 3\n  services:\n    llm: {{ url: embedded, profile: tiny, api: kserve_grpc }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 12 }} }}\n  timeouts: {{ first_token: 400ms }}\n  faults:\n    - {{ name: {name}, service: llm, {fault} }}\n  load:\n    - {{ concurrency: 4, requests: 8 }}\n"
        );
        let (_, records) = run_to_records(scenario(&spec), name).await;
        assert_eq!(records.len(), 8);
        for r in &records {
            assert_eq!(r.faults.len(), 1, "{name}: {r:?}");
            assert_eq!(r.faults[0].rule, name);
        }
        records
    };
    let kind = |r: &Record| r.error.as_ref().map(|e| (e.stage, e.kind.clone()));
    for r in run_with("cut_stream: { probability: 1, after_events: 4 }", "gcut").await {
        assert_eq!(kind(&r), Some((FailStage::Stream, "truncated".into())));
        assert_eq!(r.content_events, 4, "four token messages, then no status");
    }
    for r in run_with(
        "cut_stream: { probability: 1, after_events: 4, done: true }",
        "gcleancut",
    )
    .await
    {
        // An early OK status: short, not broken, as with SSE's early [DONE].
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!(r.content_events, 4);
    }
    // A server aborting mid-stream: a status in the trailers, or a reset stream.
    for r in run_with(
        "cut_stream: { probability: 1, after_events: 4, grpc_status: unavailable, grpc_message: draining }",
        "gabort",
    )
    .await
    {
        assert_eq!(kind(&r), Some((FailStage::Stream, "grpc_unavailable".into())));
        assert!(r.error.as_ref().unwrap().message.contains("draining"));
        assert_eq!(r.content_events, 4);
    }
    for r in run_with(
        "cut_stream: { probability: 1, after_events: 4, reset: true }",
        "greset",
    )
    .await
    {
        // A reset discards the frames still queued for the stream (h2 clears them), so
        // the client sees at most the 4 messages before the cut; a client slower than
        // the reset loses the head too, and the reset meets it still sending.
        let (stage, what) = kind(&r).unwrap();
        assert_eq!(what, "reset", "{r:?}");
        assert_eq!(stage == FailStage::Send, r.headers_us.is_none(), "{r:?}");
        assert!(r.content_events <= 4, "{r:?}");
    }
    for r in run_with("corrupt_event: { probability: 1, event: 3 }", "gcorrupt").await {
        assert_eq!(
            kind(&r),
            Some((FailStage::Decode, "invalid_protobuf".into()))
        );
        assert_eq!(r.content_events, 2);
    }
    for r in run_with("drop_done: { probability: 1 }", "gnostatus").await {
        // Every token and the final response came; the status did not, and a gRPC
        // call without one failed.
        assert_eq!(kind(&r), Some((FailStage::Stream, "missing_done".into())));
        assert_eq!(r.content_events, 12);
    }
    for r in run_with("stall_first_token: { probability: 1, ms: 1500 }", "gstall").await {
        assert_eq!(r.outcome, Outcome::Timeout);
        assert_eq!(kind(&r), Some((FailStage::FirstToken, "timeout".into())));
    }
    for r in run_with("slice: { probability: 1, max_bytes: 3 }", "gsliced").await {
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!((r.output_tokens, r.content_events), (Some(12), 12));
    }
}

async fn send(
    http: &common::HttpClient,
    method: &str,
    url: String,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, hyper::HeaderMap, String) {
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = http
        .request(
            request
                .body(Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn the_admin_api_changes_rules_while_traffic_flows() {
    let upstream = search_upstream().await;
    let proxy = proxy(upstream, "rules: []\n", false).await;
    let admin = format!("http://{}", proxy.admin_addr.unwrap());
    let search = format!("{}/collections/docs/points/search", proxy.base_url());
    let http = client();

    let (status, _, body) = send(&http, "POST", search.clone(), &[], "{}").await;
    assert_eq!(status, 200);
    assert!(body.contains("the passage"));

    let rule = r#"{"name": "empty", "match": {"path": "/collections/*/points/search"}, "empty_result": {"probability": 1, "json_path": "result"}}"#;
    let (status, _, _) = send(&http, "POST", format!("{admin}/rules"), &[], rule).await;
    assert_eq!(status, 201);
    let (status, headers, body) = send(&http, "POST", search.clone(), &[], "{}").await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-redline-fault"], "empty=empty_result");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json, json!({"result": [], "status": "ok", "time": 0.0001}));

    let (status, _, _) = send(&http, "POST", format!("{admin}/rules"), &[], rule).await;
    assert_eq!(status, 409, "names are unique");

    // Replace it with a 503 abort, then read the counters.
    let abort = r#"{"abort": {"probability": 1, "status": 503}}"#;
    let (status, _, _) = send(&http, "PUT", format!("{admin}/rules/empty"), &[], abort).await;
    assert_eq!(status, 200);
    let (status, headers, _) = send(&http, "POST", search.clone(), &[], "{}").await;
    assert_eq!(
        (status, &headers["x-redline-fault"]),
        (503, &"empty=abort".parse().unwrap())
    );
    let (_, _, stats) = send(&http, "GET", format!("{admin}/stats"), &[], "").await;
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["requests"], 3);
    assert_eq!(stats["rules"][0]["fault"], "abort");
    assert_eq!(stats["rules"][0]["injected"], 1);

    let (status, _, _) = send(&http, "POST", format!("{admin}/reset"), &[], "").await;
    assert_eq!(status, 204);
    let (_, _, stats) = send(&http, "GET", format!("{admin}/stats"), &[], "").await;
    assert_eq!(
        serde_json::from_str::<Value>(&stats).unwrap()["rules"][0]["injected"],
        0
    );

    let (status, _, _) = send(&http, "DELETE", format!("{admin}/rules/empty"), &[], "").await;
    assert_eq!(status, 204);
    let (status, _, _) = send(&http, "DELETE", format!("{admin}/rules/empty"), &[], "").await;
    assert_eq!(status, 404);
    let (status, headers, _) = send(&http, "POST", search, &[], "{}").await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("x-redline-fault"));
}

#[tokio::test]
async fn invalid_rules_get_400_with_the_reason() {
    let upstream = search_upstream().await;
    let proxy = proxy(upstream, "rules: []\n", false).await;
    let rules = format!("http://{}/rules", proxy.admin_addr.unwrap());
    let http = client();
    for (body, reason) in [
        (
            r#"{"name": "p", "delay": {"probability": 1.5, "ms": 10}}"#,
            "rule.delay.probability: probability 1.5 is not between 0 and 1",
        ),
        (
            r#"{"name": "r", "delay": {"probability": 0.5, "min_ms": 800, "max_ms": 300}}"#,
            "rule.delay.min_ms: min_ms 800 and max_ms 300 do not make a range",
        ),
        (
            r#"{"name": "u", "explode": {"probability": 0.5}}"#,
            "unknown field `explode`",
        ),
        (r#"{"name": "n"}"#, "rule: the rule names no fault"),
        ("not json", "the body is not a rule"),
    ] {
        let (status, _, answer) = send(&http, "POST", rules.clone(), &[], body).await;
        assert_eq!(status, 400, "{body}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(reason), "{error}");
    }
    let (_, _, listed) = send(&http, "GET", rules, &[], "").await;
    assert_eq!(listed, "[]", "nothing invalid was added");
}

#[tokio::test]
async fn header_faults_work_only_when_allowed_and_never_reach_the_upstream() {
    let (upstream, seen) = recording_upstream().await;
    let http = client();
    let ask = [("x-redline-fault-abort", "418")];

    let closed = proxy(upstream, "rules: []\n", false).await;
    let (status, _, _) = send(
        &http,
        "GET",
        format!("{}/echo", closed.base_url()),
        &ask,
        "",
    )
    .await;
    assert_eq!(status, 200, "header faults are off by default");

    let open = proxy(upstream, "rules: []\n", true).await;
    let (status, headers, _) =
        send(&http, "GET", format!("{}/echo", open.base_url()), &ask, "").await;
    assert_eq!(status, 418);
    assert_eq!(headers["x-redline-fault"], "header=abort");
    let start = Instant::now();
    let delay = [("x-redline-fault-delay-ms", "150")];
    let (status, _, _) = send(
        &http,
        "GET",
        format!("{}/echo", open.base_url()),
        &delay,
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(start.elapsed() >= Duration::from_millis(150));
    let bad = [("x-redline-fault-delay-ms", "soon")];
    let (status, _, body) = send(&http, "GET", format!("{}/echo", open.base_url()), &bad, "").await;
    assert_eq!(status, 400);
    assert!(body.contains("`soon` is not a number"), "{body}");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the 418 never reached the upstream");
    for headers in seen.iter() {
        assert!(
            headers
                .keys()
                .all(|k| !k.as_str().starts_with("x-redline-fault"))
        );
    }
}

/// Resets and hangs, as the client records them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_and_hangs_are_typed_failures() {
    let upstream = search_upstream().await;
    let spec = |fault: &str| {
        format!(
            "  services:\n    vectors: {{ url: \"http://{upstream}\", api: http }}\n  payloadTemplate:\n    request: {{ method: GET, path: /health }}\n  timeouts: {{ first_token: 300ms }}\n  faults:\n    - {{ name: f, service: vectors, abort: {{ probability: 1, {fault}: true }} }}\n  load:\n    - {{ concurrency: 2, requests: 4 }}\n"
        )
    };
    let (_, records) = run_to_records(scenario(&spec("reset")), "chaos-reset").await;
    for r in &records {
        let e = r.error.as_ref().unwrap();
        assert_eq!(
            (r.outcome, e.stage, e.kind.as_str()),
            (Outcome::Error, FailStage::Send, "reset"),
            "{e:?}"
        );
        assert_eq!(r.faults[0].fault, "abort");
    }
    let (_, records) = run_to_records(scenario(&spec("timeout")), "chaos-hang").await;
    for r in &records {
        let e = r.error.as_ref().unwrap();
        assert_eq!(
            (r.outcome, e.stage),
            (Outcome::Timeout, FailStage::FirstByte),
            "{e:?}"
        );
        // It ends where it was given up, a timeout after its send, not at the send.
        let waited = r.failed_us.unwrap() - r.sent_us.unwrap();
        assert!((300_000..3_000_000).contains(&waited), "{waited} µs");
        assert_eq!((r.last_byte_us, r.done_us()), (None, r.failed_us.unwrap()));
    }
}

#[tokio::test]
async fn a_rate_limit_answers_429_with_retry_after() {
    let upstream = search_upstream().await;
    let proxy = proxy(
        upstream,
        "rules:\n  - name: limit\n    rate_limit: { rps: 0.5, burst: 2 }\n",
        false,
    )
    .await;
    let http = client();
    let url = format!("{}/health", proxy.base_url());
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..4 {
        let (status, headers, _) = send(&http, "GET", url.clone(), &[], "").await;
        statuses.push(status);
        retry_after = retry_after.or(headers.get("retry-after").cloned());
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(retry_after.unwrap(), "2", "one token every 2 s");
}

/// An upstream that answers garbage, or dies mid-body: the proxy reports it and
/// keeps serving.
#[tokio::test]
async fn a_broken_upstream_is_reported_and_the_proxy_survives() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((mut tcp, _)) = listener.accept().await else {
                break;
            };
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let answer: &[u8] = if n % 2 == 0 {
                b"this is not HTTP\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"
            };
            let _ = tcp.write_all(answer).await;
        }
    });
    let proxy = proxy(
        upstream,
        "rules:\n  - name: slices\n    slice: { max_bytes: 3 }\n",
        false,
    )
    .await;
    let http = client();
    let url = format!("{}/x", proxy.base_url());
    let (status, headers, body) = send(&http, "GET", url.clone(), &[], "").await;
    assert_eq!(status, 502);
    assert_eq!(headers["x-redline-proxy-error"], "1");
    assert!(body.contains("the upstream did not answer"), "{body}");
    // The short body: the client sees its body break, not a hang or a crash.
    let response = http
        .request(
            Request::get(url.clone())
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.into_body().collect().await.is_err());
    let (status, _, _) = send(&http, "GET", url, &[], "").await;
    assert_eq!(status, 502, "still serving");
    assert_eq!(proxy.chaos.stats().upstream_errors, 2);
}

/// The source's fault plan (examples/fault-plan.yaml) on the embedded chain, with the
/// tool outage spanning the whole (shortened) run: every session meets three
/// consecutive tool timeouts, and the circuit breaker ends it as `fallback`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_plan_example_trips_the_circuit_breaker() {
    let path = "examples/fault-plan.yaml";
    let text = std::fs::read_to_string(path).unwrap();
    let mut file = redline::spec::parse(path, &text).unwrap_or_else(|e| panic!("{e}"));
    let spec = &mut file.inference;
    spec.load = vec![redline::spec::StageSpec {
        concurrency: Some(4),
        requests: Some(12),
        ..Default::default()
    }];
    let outage = spec
        .faults
        .iter_mut()
        .find(|r| r.name == "tool-outage")
        .unwrap();
    outage.window = None;
    let scenario =
        redline::scenario::Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"));
    let (result, records) = run_to_records(scenario, "chaos-fault-plan").await;

    let ends: Vec<_> = records
        .iter()
        .filter_map(|r| r.session_end.as_ref())
        .collect();
    assert_eq!(ends.len(), 12);
    for end in &ends {
        assert_eq!(end.outcome, redline::record::SessionOutcome::Fallback);
        let reason = end.fallback_reason.as_ref().unwrap();
        assert_eq!((reason.tool.as_str(), reason.timeouts), ("lookup_order", 3));
        assert_eq!(reason.skipped, ["feedback"]);
    }
    let calls: Vec<_> = records
        .iter()
        .filter(|r| r.step.as_ref().is_some_and(|s| s.kind == "tool"))
        .collect();
    assert_eq!(calls.len(), 36);
    assert!(
        calls
            .iter()
            .all(|r| r.outcome == Outcome::Timeout && r.faults[0].rule == "tool-outage")
    );
    assert!(
        records
            .iter()
            .all(|r| r.step.as_ref().unwrap().name != "feedback")
    );

    let summary = summary_of(&result);
    let flow = summary.flow.unwrap();
    assert_eq!((flow.sessions.fallback, flow.sessions.failed), (12, 0));
    let faults = summary.faults.unwrap();
    let outage = faults
        .rules
        .iter()
        .find(|r| r.rule == "tool-outage")
        .unwrap();
    assert_eq!((outage.requests, outage.failed), (36, 36));
    assert_eq!(outage.failures["first_byte/timeout"], 36);
    assert_eq!(faults.failed_without_faults, 0);
    let services: Vec<&str> = faults.proxies.iter().map(|p| p.service.as_str()).collect();
    assert_eq!(services, ["llm", "tools", "vectors"]);
}

/// A stream fault on an answer that is not a stream, or an `empty_result` on one that
/// holds no list, does nothing and is not counted as injected.
#[tokio::test]
async fn faults_the_answer_cannot_take_are_not_counted() {
    let upstream = search_upstream().await;
    let proxy = proxy(
        upstream,
        "rules:\n  - { name: cut, cut_stream: { probability: 1, after_events: 1 } }\n  - { name: empty, empty_result: { probability: 1, json_path: hits } }\n",
        false,
    )
    .await;
    let http = client();
    let url = format!("{}/collections/docs/points/search", proxy.base_url());
    let (status, headers, body) = send(&http, "POST", url, &[], "{}").await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("x-redline-fault"), "{headers:?}");
    assert!(body.contains("the passage"));
    let stats = proxy.chaos.stats();
    assert_eq!(
        stats
            .rules
            .iter()
            .map(|r| (r.matched, r.injected))
            .collect::<Vec<_>>(),
        [(1, 0), (1, 0)]
    );
}

/// HTTP/2 on both sides of the proxy: streams multiplexed on one connection still get
/// their own faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_apply_per_request_over_http2() {
    let spec = "  seed: 8\n  services:\n    llm: { url: embedded, profile: tiny, http2: true }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 6 } }\n  faults:\n    - { name: half, service: llm, cut_stream: { probability: 0.5, after_events: 3 } }\n  load:\n    - { concurrency: 8, requests: 200 }\n";
    let (result, records) = run_to_records(scenario(spec), "chaos-h2").await;
    let cut = faulted(&records, "half");
    assert!(
        (70..=130).contains(&cut.len()),
        "{} of 200 at 50 %",
        cut.len()
    );
    for r in &records {
        let was_cut = r.faults.iter().any(|f| f.fault == "cut_stream");
        assert_eq!(r.outcome == Outcome::Ok, !was_cut, "{r:?}");
    }
    assert!(
        result.proxies[0].connections <= 2,
        "one multiplexed connection (and a spare)"
    );
}

/// Every request carries W3C baggage naming the run and scenario; the proxy adds the
/// rule that fired, so the service's own spans can be joined to the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baggage_names_the_run_and_the_fault() {
    let (upstream, seen) = recording_upstream().await;
    let spec = format!(
        "  seed: 2\n  services:\n    web: {{ url: \"http://{upstream}\", api: http }}\n  payloadTemplate:\n    request: {{ path: /echo }}\n  faults:\n    - {{ name: slow one, service: web, max: 1, delay: {{ probability: 1, ms: 1 }} }}\n  load:\n    - {{ concurrency: 1, requests: 3 }}\n"
    );
    run_to_records(scenario(&spec), "chaos-baggage").await;
    let seen: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| {
            h.get("baggage")
                .map_or(String::new(), |v| v.to_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(seen.len(), 3);
    let run_id = seen[0].split(',').next().unwrap().to_owned();
    assert!(
        run_id.starts_with("redline.run_id=") && run_id.len() == 15 + 16,
        "{run_id}"
    );
    for baggage in seen.iter() {
        assert!(
            baggage.starts_with(&format!("{run_id},redline.scenario=t")),
            "{baggage}"
        );
    }
    assert!(
        seen[0].ends_with(",redline.fault=slow%20one"),
        "{}",
        seen[0]
    );
    assert!(seen[1..].iter().all(|b| !b.contains("redline.fault")));
}
