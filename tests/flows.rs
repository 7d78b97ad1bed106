//! Flows end to end against the simulator's tiers, held against what the simulator
//! saw (its tier counters, its configured latencies, its engine's own timeline) and
//! against ground truths written for the test.

use crate::common;

use crate::common::{run_to_records, scenario, summary_of, temp_dir};
use axum::Router;
use axum::routing::post;
use redline::record::{FailStage, Outcome, Record, SessionOutcome};
use redline::sim::tiers::{Corpus, LatencySpec, TierConfig};
use redline::sim::{EmbeddedSim, Profile, SimConfig};
use serde_json::{Value, json};

async fn sim_with(profile: Profile, tiers: TierConfig, seed: u64) -> EmbeddedSim {
    EmbeddedSim::start(SimConfig {
        profile,
        model: None,
        seed,
        tiers,
        script: None,
        startup: None,
    })
    .await
    .unwrap()
}

fn fixed(ms: f64) -> LatencySpec {
    LatencySpec {
        ms: Some(ms),
        ..LatencySpec::default()
    }
}

async fn tier_counts(sim: &EmbeddedSim) -> Value {
    let text = common::get_text(
        &common::client(),
        format!("{}/redline/tiers", sim.base_url()),
    )
    .await;
    serde_json::from_str(&text).unwrap()
}

fn of_step<'a>(records: &'a [Record], name: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.step.as_ref().is_some_and(|s| s.name == name))
        .collect()
}

/// Every test here takes this lock: the latency tests compare tiers' sleeps with what the
/// client saw, and with two CPU hogs and five other tests on two cores a woken task
/// waited 15–25 ms for a core (seen in CI: a 30 ms search measured 52 ms at p50).
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The tool answers in 400 ms and the flow waits 100 ms: each call times out, the
/// model (forced to call tools) calls again, and the third timeout opens the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tool_timeouts_open_the_circuit_breaker_and_skip_the_rest() {
    let _serial = TIMING.lock().await;
    let tools = sim_with(
        Profile::tiny(),
        TierConfig {
            tool_latency: fixed(400.0),
            ..TierConfig::default()
        },
        0,
    )
    .await;
    let spec = format!(
        "  seed: 4\n  services:\n    llm: {{ url: embedded, profile: tiny }}\n    tools: {{ url: \"{}\", api: tools }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 20, output_tokens: 8 }} }}\n    flow:\n      - chat: {{ name: agent, service: llm, max_tokens: 64, tool_choice: required, tools: [{{ name: lookup, parameters: {{ type: object, properties: {{ id: {{ type: string }} }} }} }}] }}\n      - tool: {{ name: call, service: tools, timeout: 100ms, max_iterations: 6 }}\n      - http: {{ name: feedback, service: tools, path: /tools/feedback, body: '{{}}' }}\n    circuitBreaker: {{ consecutiveTimeouts: 3 }}\n  load:\n    - {{ concurrency: 2, requests: 4 }}\n",
        tools.base_url()
    );
    let (result, records) = run_to_records(scenario(&spec), "flow-breaker").await;

    let calls = of_step(&records, "call");
    assert_eq!(calls.len(), 12, "3 timed-out calls in each of 4 sessions");
    for call in &calls {
        let e = call.error.as_ref().unwrap();
        assert_eq!(
            (call.outcome, e.stage, e.kind.as_str()),
            (Outcome::Timeout, FailStage::FirstByte, "timeout")
        );
        let step = call.step.as_ref().unwrap();
        assert_eq!(step.tool.as_deref(), Some("lookup"));
        assert_eq!(step.tool_call_hash.as_ref().unwrap().len(), 16);
    }
    assert_eq!(
        of_step(&records, "agent").len(),
        12,
        "a chat turn before each call"
    );
    assert!(of_step(&records, "feedback").is_empty());
    let ends: Vec<_> = records
        .iter()
        .filter_map(|r| r.session_end.as_ref())
        .collect();
    assert_eq!(ends.len(), 4);
    for end in ends {
        assert_eq!(end.outcome, SessionOutcome::Fallback);
        let reason = end.fallback_reason.as_ref().unwrap();
        assert_eq!(reason.rule, "consecutive_tool_timeouts");
        assert_eq!((reason.tool.as_str(), reason.timeouts), ("lookup", 3));
        assert_eq!(reason.skipped, ["feedback"]);
        assert_eq!(end.requests, 6);
    }
    // The sessions' requests share a trace; their steps are numbered in order.
    let first: Vec<&Record> = records
        .iter()
        .filter(|r| r.session.as_ref().unwrap().id == 0)
        .collect();
    assert!(first.iter().all(
        |r| r.session.as_ref().unwrap().trace_id == first[0].session.as_ref().unwrap().trace_id
    ));
    let seqs: Vec<u32> = first
        .iter()
        .map(|r| r.step.as_ref().unwrap().agent_step_seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);

    // What the tool tier saw: every timed-out call arrived; the skipped step never did.
    let seen = tier_counts(&tools).await;
    assert_eq!(seen["tool_calls"]["lookup"], 12);
    assert!(seen["tool_calls"].get("feedback").is_none(), "{seen}");

    let flow = summary_of(&result).flow.unwrap();
    assert_eq!(
        (
            flow.sessions.fallback,
            flow.sessions.failed,
            flow.sessions.ok
        ),
        (4, 0, 0)
    );
    assert_eq!(flow.fallbacks[0].sessions, 4);
    let tool_calls = flow.tool_calls.unwrap();
    assert_eq!((tool_calls.calls, tool_calls.ok), (12, 0));
}

/// Each tier's latency in the report matches what the simulator was set to take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_step_latency_agrees_with_each_tiers_configured_latency() {
    let _serial = TIMING.lock().await;
    // Short vectors: the simulator's own work on an answer (the vectors and their JSON,
    // in a debug build) is not in the profile's cost, and with 384 dimensions it took
    // 2-7 ms more on a busy machine.
    let profile = Profile {
        embedding_dim: 16,
        ..Profile::seven_b()
    };
    let tiers = TierConfig {
        search_latency: fixed(40.0),
        tool_latency: fixed(60.0),
        ..TierConfig::default()
    };
    let sim = sim_with(profile.clone(), tiers, 3).await;
    let url = sim.base_url();
    let spec = format!(
        "  seed: 3\n  services:\n    llm: {{ url: \"{url}\", model: sim-7b }}\n    embed: {{ url: \"{url}\", api: embeddings, model: sim-7b }}\n    vectors: {{ url: \"{url}\", api: qdrant }}\n    tools: {{ url: \"{url}\", api: tools }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 40, output_tokens: 8 }} }}\n    flow:\n      - embed: {{ service: embed }}\n      - search: {{ service: vectors, top_k: 3 }}\n      - chat: {{ service: llm, max_tokens: 6, user: 'use weather: {{{{ prompt }}}}', tools: [{{ name: weather }}] }}\n      - tool: {{ service: tools, timeout: 2s }}\n  load:\n    - {{ concurrency: 2, requests: 12 }}\n"
    );
    let (result, records) = run_to_records(scenario(&spec), "flow-latency").await;
    assert!(
        records.iter().all(|r| r.outcome == Outcome::Ok),
        "{:?}",
        records.iter().find(|r| r.outcome != Outcome::Ok)
    );
    let summary = summary_of(&result);
    let flow = summary.flow.unwrap();
    let step = |name: &str| flow.steps.iter().find(|s| s.step == name).unwrap().clone();
    assert!(
        result.token_settlement.is_none(),
        "every chat answer had usage, and embed, search and tool steps are no answers to count"
    );

    // Search and tools: the configured 40 and 60 ms, plus transport (a few ms).
    let search = step("search").latency_ms;
    assert!(
        (40.0..48.0).contains(&search.p50),
        "search p50 {}",
        search.p50
    );
    let tool = step("tool").latency_ms;
    assert!((60.0..68.0).contains(&tool.p50), "tool p50 {}", tool.p50);
    assert_eq!(step("tool").requests, 12);
    // Embeddings: the profile's fixed cost and per-token cost of the input.
    let embeds = of_step(&records, "embed");
    let expected_ms = profile.embedding_nanos(40) as f64 / 1e6;
    let measured = median(
        embeds
            .iter()
            .map(|r| r.e2e_us().unwrap() as f64 / 1e3)
            .collect(),
    );
    assert!(
        measured >= expected_ms && measured < expected_ms + 6.0,
        "embed median {measured} ms, the profile says {expected_ms} ms"
    );
    // The report's p50 is the records' lower median (HDR's rank), to its precision.
    let mut embed_ms: Vec<f64> = embeds
        .iter()
        .map(|r| r.e2e_us().unwrap() as f64 / 1e3)
        .collect();
    embed_ms.sort_by(f64::total_cmp);
    let lower_median = embed_ms[(embed_ms.len() - 1) / 2];
    let reported = flow.embedding_latency_ms.unwrap().p50;
    assert!(
        (reported - lower_median).abs() < 0.02,
        "report {reported} ms, records {lower_median} ms"
    );
    // Chat: each request's latency against the engine's own timeline for it.
    let gaps: Vec<f64> = of_step(&records, "chat")
        .iter()
        .map(|r| {
            let truth = r.server.unwrap();
            let engine_ms = (truth.finish_us - truth.arrival_us) as f64 / 1e3;
            r.e2e_us().unwrap() as f64 / 1e3 - engine_ms
        })
        .collect();
    assert_eq!(
        gaps.len(),
        24,
        "a first turn and a follow-up in each session"
    );
    let gap = median(gaps);
    assert!(
        (0.0..5.0).contains(&gap),
        "client − engine chat latency, median {gap} ms"
    );
    assert_eq!(flow.sessions.ok, 12);
}

/// Recall@k against a known ground truth, with half the searches answered empty by a
/// fault: those count as recall 0, not as missing samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_counts_empty_answers_as_zero() {
    recall_over("qdrant").await;
}

/// The same over Qdrant's gRPC API: the proxy empties the protobuf answer's points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_over_grpc_counts_empty_answers_as_zero() {
    recall_over("qdrant_grpc").await;
}

async fn recall_over(api: &str) {
    let _serial = TIMING.lock().await;
    let seed = 7;
    let sim = sim_with(Profile::tiny(), TierConfig::default(), seed).await;
    let dir = temp_dir("flow-recall");
    let truth = dir.join("queries.jsonl");
    let queries = Corpus::generate(seed, 1000, 384).queries(seed, 40);
    let lines: Vec<String> = queries
        .iter()
        .map(|q| serde_json::to_string(q).unwrap())
        .collect();
    std::fs::write(&truth, lines.join("\n")).unwrap();
    let url = sim.base_url();
    let search_url = match api {
        "qdrant_grpc" => sim.qdrant_grpc_url(),
        _ => url.clone(),
    };
    let spec = format!(
        "  seed: 1\n  services:\n    embed: {{ url: \"{url}\", api: embeddings, model: sim-tiny }}\n    vectors: {{ url: \"{search_url}\", api: {api} }}\n  payloadTemplate:\n    prompts: {{ dataset: {{ file: \"{0}\", order: sequential }} }}\n    flow:\n      - embed: {{ service: embed }}\n      - search: {{ service: vectors, top_k: 5, ground_truth: \"{0}\", recall_threshold: 0.5 }}\n  faults:\n    - {{ name: empty, service: vectors, empty_result: {{ probability: 0.5, json_path: result }} }}\n  load:\n    - {{ concurrency: 4, requests: 40 }}\n",
        truth.display()
    );
    let (result, records) = run_to_records(scenario(&spec), &format!("flow-recall-{api}")).await;
    let searches = of_step(&records, "search");
    assert_eq!(searches.len(), 40);
    assert_eq!(
        tier_counts(&sim).await["searches"],
        40,
        "every search reached the tier"
    );
    let emptied: Vec<_> = searches.iter().filter(|r| !r.faults.is_empty()).collect();
    assert!(
        (10..=30).contains(&emptied.len()),
        "{} emptied of 40",
        emptied.len()
    );
    for r in &emptied {
        let step = r.step.as_ref().unwrap();
        assert_eq!((step.results, step.recall), (Some(0), Some(0.0)));
    }
    for r in searches.iter().filter(|r| r.faults.is_empty()) {
        let step = r.step.as_ref().unwrap();
        assert_eq!(step.results, Some(5));
        assert_eq!(step.recall, Some(1.0), "a query from one document finds it");
    }
    let recall = summary_of(&result).flow.unwrap().recall.unwrap();
    assert_eq!(recall.queries, 40, "no query skipped");
    let expected = 1.0 - emptied.len() as f64 / 40.0;
    assert!(
        (recall.mean - expected).abs() < 1e-9,
        "{} vs {expected}",
        recall.mean
    );
    assert!((recall.below_threshold - emptied.len() as f64 / 40.0).abs() < 1e-9);
    std::fs::remove_dir_all(dir).unwrap();
}

/// An answer service that paraphrases for one question and changes the subject for
/// the other; a tool that answers text, not JSON.
async fn answers() -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/answer",
            post(|body: axum::Json<Value>| async move {
                let q = body["q"].as_str().unwrap_or_default();
                let answer = if q.contains("password") {
                    "How can I reset the password of my account"
                } else {
                    "Quarterly revenue grew in the northern region"
                };
                axum::Json(json!({"answer": answer}))
            }),
        )
        .route("/tools/broken", post(|| async { "this is not JSON" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semantic_assertion_passes_a_paraphrase_and_fails_an_unrelated_answer() {
    let _serial = TIMING.lock().await;
    let app = answers().await;
    let dir = temp_dir("flow-semantic");
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"How do I reset my account password?\"}\n{\"prompt\": \"How is the quarter going?\"}\n",
    )
    .unwrap();
    let spec = format!(
        "  services:\n    embed: {{ url: embedded, api: embeddings, profile: tiny }}\n    app: {{ url: \"http://{app}\", api: http }}\n  payloadTemplate:\n    service: app\n    prompts: {{ dataset: {{ file: \"{}\", order: sequential }} }}\n    flow:\n      - http: {{ name: ask, service: app, path: /answer, body: '{{\"q\": {{{{ prompt | tojson }}}}}}', assert: {{ field: /answer, similar_to: \"How do I reset my account password?\", threshold: 0.85, embed_service: embed }} }}\n  load:\n    - {{ concurrency: 1, requests: 2 }}\n",
        prompts.display()
    );
    let (_, records) = run_to_records(scenario(&spec), "flow-semantic-run").await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].outcome, Outcome::Ok, "{:?}", records[0].error);
    let e = records[1]
        .error
        .as_ref()
        .expect("the unrelated answer fails");
    assert_eq!((e.stage, e.kind.as_str()), (FailStage::Assert, "assert"));
    assert!(
        e.message.starts_with("step `ask`: similarity 0.")
            && e.message.ends_with("< 0.85 (cosine of `embed` embeddings)"),
        "{}",
        e.message
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_answers_text_is_a_typed_failure_of_its_step() {
    let _serial = TIMING.lock().await;
    let app = answers().await;
    let spec = format!(
        "  services:\n    llm: {{ url: embedded, profile: tiny }}\n    tools: {{ url: \"http://{app}\", api: tools }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 10, output_tokens: 4 }} }}\n    flow:\n      - chat: {{ service: llm, max_tokens: 64, tool_choice: required, tools: [{{ name: broken }}] }}\n      - tool: {{ name: call, service: tools, timeout: 1s, max_iterations: 1 }}\n  load:\n    - {{ concurrency: 1, requests: 2 }}\n"
    );
    let (result, records) = run_to_records(scenario(&spec), "flow-broken-tool").await;
    let calls = of_step(&records, "call");
    assert_eq!(calls.len(), 2);
    for call in calls {
        let e = call.error.as_ref().unwrap();
        assert_eq!(
            (call.outcome, e.stage, e.kind.as_str()),
            (Outcome::Error, FailStage::Decode, "invalid_json")
        );
        assert!(e.message.contains("this is not JSON"), "{}", e.message);
    }
    let flow = summary_of(&result).flow.unwrap();
    assert_eq!(flow.sessions.failed, 2);
    assert_eq!(flow.tool_calls.unwrap().ok, 0);
}

/// redline's own spans, exported over OTLP/HTTP protobuf into `redline collect`'s
/// receiver and decoded there: the graph of the embedded flow has the known topology,
/// exact call counts and the tiers' configured latencies, and the spans carry the
/// gen_ai.* and per-request attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_spans_graph_the_flow_topology() {
    let _serial = TIMING.lock().await;
    let sim = sim_with(
        Profile::tiny(),
        TierConfig {
            search_latency: fixed(30.0),
            tool_latency: fixed(50.0),
            ..TierConfig::default()
        },
        5,
    )
    .await;
    let dir = temp_dir("flow-otlp");
    let collector =
        std::sync::Arc::new(redline::trace::receiver::SpanStore::create(&dir, 100_000).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collect_addr = listener.local_addr().unwrap();
    tokio::spawn(
        axum::serve(listener, redline::trace::receiver::app(collector.clone())).into_future(),
    );
    let url = sim.base_url();
    // The corpus is embedded on the first search: pay for it before the run.
    common::post(
        &common::client(),
        format!("{url}/collections/docs/points/search"),
        json!({"vector": vec![0.0; 384], "limit": 1}),
    )
    .await;
    let spec = format!(
        "  seed: 5\n  services:\n    llm: {{ url: \"{url}\", model: sim-tiny }}\n    embed: {{ url: \"{url}\", api: embeddings, model: sim-tiny }}\n    vectors: {{ url: \"{url}\", api: qdrant }}\n    tools: {{ url: \"{url}\", api: tools }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 20, output_tokens: 8 }} }}\n    flow:\n      - embed: {{ service: embed }}\n      - search: {{ service: vectors }}\n      - chat: {{ service: llm, max_tokens: 16, user: 'use weather: {{{{ prompt }}}}', tools: [{{ name: weather }}] }}\n      - tool: {{ service: tools }}\n      - http: {{ name: feedback, service: tools, path: /tools/feedback, body: '{{}}' }}\n  load:\n    - {{ concurrency: 2, requests: 8 }}\n"
    );
    let out = temp_dir("flow-otlp-run");
    let options = redline::runner::RunOptions {
        otlp_endpoint: Some(format!("http://{collect_addr}/v1/traces").parse().unwrap()),
        ..redline::runner::RunOptions::records_to(out.join("records.jsonl"))
    };
    let result = redline::runner::run(
        scenario(&spec),
        options,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let records: Vec<Record> = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records.iter().all(|r| r.outcome == Outcome::Ok));
    let exported = result.otlp.unwrap();
    assert_eq!(
        (exported.spans_sent, exported.spans_failed),
        (records.len() as u64 + 8, 0),
        "a span per request and per session"
    );

    let text = std::fs::read_to_string(&collector.path).unwrap();
    let spans = redline::trace::graph::parse_spans(&text).unwrap();
    let graph = redline::trace::graph::build(&spans);
    let count = |kind: &str| {
        records
            .iter()
            .filter(|r| r.step.as_ref().unwrap().kind == kind)
            .count() as u64
    };
    let mut edges: Vec<(String, u64)> = graph
        .edges
        .iter()
        .map(|e| {
            assert_eq!(e.source, "redline/session");
            (e.target.clone(), e.calls)
        })
        .collect();
    edges.sort();
    assert_eq!(
        edges,
        [
            ("redline/chat".to_owned(), count("chat")),
            ("redline/embed".to_owned(), 8),
            ("redline/http".to_owned(), 8),
            ("redline/search".to_owned(), 8),
            ("redline/tool".to_owned(), count("tool")),
        ]
    );
    assert_eq!(
        count("chat"),
        16,
        "a first turn and a follow-up per session"
    );
    // The spans say what the records say (send to last byte), which is never below the
    // tier's configured latency. How far above depends on the machine's load, and is
    // `per_step_latency_agrees_with_each_tiers_configured_latency`'s to check.
    let latency = |target: &str| {
        graph
            .edges
            .iter()
            .find(|e| e.target == target)
            .unwrap()
            .latency_ms
    };
    for (kind, configured) in [("search", 30.0), ("tool", 50.0)] {
        let l = latency(&format!("redline/{kind}"));
        let recorded: Vec<f64> = records
            .iter()
            .filter(|r| r.step.as_ref().unwrap().kind == kind)
            .map(|r| r.e2e_us().unwrap() as f64 / 1e3)
            .collect();
        let mean = recorded.iter().sum::<f64>() / recorded.len() as f64;
        assert!(l.p50 >= configured, "{kind} {l:?}");
        assert!(
            (l.mean - mean).abs() < 0.01,
            "{kind} spans {l:?}, records' mean {mean}"
        );
        assert!(
            recorded.iter().any(|v| (v - l.p50).abs() < 0.01),
            "{kind} span p50 {} is one of the recorded latencies {recorded:?}",
            l.p50
        );
    }
    assert_eq!(graph.paths.iter().map(|p| p.traces).sum::<u64>(), 8);
    assert_eq!(graph.orphans, 0);

    // Attributes, as decoded from protobuf by the receiver.
    let of = |kind: &str| {
        spans
            .iter()
            .find(|s| {
                s.attributes
                    .get("llm.operation_type")
                    .and_then(|v| v.as_str())
                    == Some(kind)
            })
            .unwrap()
    };
    let chat = of("chat");
    for key in [
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "llm_request_id",
        "agent_step_seq",
    ] {
        assert!(
            chat.attributes.contains_key(key),
            "chat span lacks {key}: {:?}",
            chat.attributes
        );
    }
    assert_eq!(chat.attributes["gen_ai.request.model"], "sim-tiny");
    assert!(of("tool").attributes.contains_key("tool_call_hash"));
    assert!(of("embed").attributes.contains_key("embedding_latency_ms"));
    assert!(
        text.contains("gen_ai.first_token"),
        "chat spans carry first-token events"
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}
