//! gRPC: redline's client against the simulator's Qdrant gRPC listener (answers held
//! against the corpus's ground truth and its REST twin), against servers that answer
//! badly (each a typed outcome), and through the chaos proxy, whose gRPC faults are
//! counted per rule against its own tally.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use redline::chaos::{FaultLog, ProxyConfig, RunningProxy, parse_rules};
use redline::client::grpc::{GrpcTarget, unary};
use redline::client::{HttpClient, RunClock, Timeouts, http_client};
use redline::grpc::qdrant::{self, PointsResponse, QueryPoints, SearchPoints};
use redline::record::{FailStage, Outcome, Phase, Record};
use redline::sim::tiers::{Corpus, TierConfig};
use redline::sim::{EmbeddedSim, Profile, SimConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;

const DIM: usize = 384;

async fn sim(corpus_size: usize) -> EmbeddedSim {
    EmbeddedSim::start(SimConfig {
        profile: Profile::tiny(),
        seed: 3,
        tiers: TierConfig {
            corpus_size,
            warm_corpus: true,
            ..TierConfig::default()
        },
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn target(base: &str) -> GrpcTarget {
    GrpcTarget {
        base: base.to_owned(),
        headers: Vec::new(),
        timeouts: Timeouts {
            total: Duration::from_secs(10),
            first_token: Duration::from_secs(10),
            ..Timeouts::default()
        },
        max_message_bytes: 1 << 20,
    }
}

fn traceparent(n: u64) -> String {
    format!("00-{:032x}-{:016x}-01", n + 1, n + 1)
}

/// One call: its record and answer.
async fn call<M: prost::Message, R: prost::Message + Default>(
    http: &HttpClient,
    target: &GrpcTarget,
    method: &str,
    message: &M,
    n: u64,
) -> (Record, Option<R>) {
    let mut record = Record::unsent(n, 0, Phase::Measure, 0);
    let clock = RunClock::new(Instant::now());
    let answer = unary(
        http,
        target,
        method,
        message,
        &traceparent(n),
        clock,
        &mut record,
    )
    .await;
    if answer.is_some() {
        record.outcome = Outcome::Ok;
    }
    (record, answer)
}

fn search(vector: Vec<f32>, limit: u64) -> SearchPoints {
    SearchPoints {
        collection_name: "docs".into(),
        vector,
        limit,
        with_payload: Some(qdrant::WithPayloadSelector { enable: Some(true) }),
        ..SearchPoints::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_search_and_query_answer_from_the_corpus_as_rest_does() {
    let sim = sim(200).await;
    let corpus = Corpus::generate(3, 200, DIM);
    let http = http_client(&Timeouts::default(), true);
    let grpc = target(&sim.qdrant_grpc_url());
    let queries = corpus.queries(5, 20);
    for (n, q) in queries.iter().enumerate() {
        let vector = redline::sim::embed::embed(&q.prompt, DIM);
        let truth = corpus.search(&vector, 5);
        let (record, answer) = call::<_, PointsResponse>(
            &http,
            &grpc,
            qdrant::SEARCH,
            &search(vector.clone(), 5),
            n as u64,
        )
        .await;
        let answer = answer.unwrap_or_else(|| panic!("{:?}", record.error));
        let ids: Vec<u64> = answer
            .result
            .iter()
            .map(|p| p.id.as_ref().unwrap().text().parse().unwrap())
            .collect();
        assert_eq!(ids, truth.iter().map(|t| t.0).collect::<Vec<_>>());
        let text = &answer.result[0].payload["text"];
        assert_eq!(
            text.to_json(),
            serde_json::json!(corpus.documents[ids[0] as usize].text)
        );
        assert!(record.first_byte_us.is_some() && record.last_byte_us.is_some());

        // `Query` with a nearest vector and an offset: the same order, shifted.
        let query = QueryPoints {
            collection_name: "docs".into(),
            query: Some(qdrant::Query {
                nearest: Some(qdrant::VectorInput {
                    dense: Some(qdrant::DenseVector { data: vector }),
                    id: None,
                }),
            }),
            limit: Some(3),
            offset: Some(1),
            ..QueryPoints::default()
        };
        let (_, answer) = call::<_, PointsResponse>(&http, &grpc, qdrant::QUERY, &query, 99).await;
        let answer = answer.unwrap();
        let ids: Vec<String> = answer
            .result
            .iter()
            .map(|p| p.id.as_ref().unwrap().text())
            .collect();
        let shifted: Vec<String> = truth[1..4].iter().map(|t| t.0.to_string()).collect();
        assert_eq!(ids, shifted);
        assert!(
            answer.result[0].payload.is_empty(),
            "no payload unless asked"
        );
    }

    // The endpoints answer names the port; the search count is the ground truth.
    let endpoints = common::get_text(
        &common::client(),
        format!("{}/redline/endpoints", sim.base_url()),
    )
    .await;
    let endpoints: serde_json::Value = serde_json::from_str(&endpoints).unwrap();
    assert_eq!(endpoints["qdrant_grpc_port"], sim.qdrant_grpc_addr.port());
    let tiers = common::get_text(
        &common::client(),
        format!("{}/redline/tiers", sim.base_url()),
    )
    .await;
    assert!(tiers.contains("\"searches\":40"), "{tiers}");

    // Bad requests are the statuses Qdrant gives.
    let (record, _) =
        call::<_, PointsResponse>(&http, &grpc, qdrant::SEARCH, &search(vec![0.5; 3], 5), 100)
            .await;
    let error = record.error.unwrap();
    assert_eq!(error.kind, "grpc_invalid_argument");
    assert!(
        error.message.contains("expected dim: 384, got 3"),
        "{}",
        error.message
    );
    let (record, _) =
        call::<_, PointsResponse>(&http, &grpc, "/qdrant.Points/Nope", &search(vec![], 1), 101)
            .await;
    assert_eq!(record.error.unwrap().kind, "grpc_unimplemented");
}

/// Frames of a gRPC answer body: data, then trailers when given.
fn grpc_body(data: Vec<u8>, status: Option<(&str, &str)>) -> Body {
    let mut frames = vec![Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(
        data,
    )))];
    if let Some((code, message)) = status {
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", code.parse().unwrap());
        trailers.insert("grpc-message", message.parse().unwrap());
        frames.push(Ok(Frame::trailers(trailers)));
    }
    Body::new(StreamBody::new(futures_util::stream::iter(frames)))
}

fn grpc_answer(body: Body) -> Response {
    Response::builder()
        .header("content-type", "application/grpc")
        .body(body)
        .unwrap()
}

fn prefixed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A server that answers each method badly in its own way, over HTTP/2.
async fn bad_server() -> SocketAddr {
    let good = prefixed(&prost::Message::encode_to_vec(&PointsResponse::default()));
    let app = Router::new()
        .route(
            "/t.S/Garbage",
            post(|| async { grpc_answer(grpc_body(prefixed(&[0x0a, 0x7f, 1]), Some(("0", "")))) }),
        )
        .route(
            "/t.S/NoTrailers",
            post({
                let good = good.clone();
                move || async move { grpc_answer(grpc_body(good, None)) }
            }),
        )
        .route(
            "/t.S/Cut",
            post(|| async { grpc_answer(grpc_body(vec![0, 0, 0, 0, 9, 1, 2], None)) }),
        )
        .route(
            "/t.S/Status",
            post(|| async { grpc_answer(grpc_body(Vec::new(), Some(("8", "slow%20down")))) }),
        )
        .route(
            "/t.S/Http503",
            post(|| async {
                Response::builder()
                    .status(503)
                    .body(Body::from("busy"))
                    .unwrap()
            }),
        )
        .route(
            "/t.S/Json",
            post(|| async {
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from("{}"))
                    .unwrap()
            }),
        )
        .route(
            "/t.S/Huge",
            post(|| async {
                // A prefix announcing 512 MiB, then silence: refused from the prefix alone.
                let prefix = vec![0, 0x20, 0, 0, 0];
                let frames = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
                    Frame::data(Bytes::from(prefix)),
                )])
                .chain(futures_util::stream::pending());
                grpc_answer(Body::new(StreamBody::new(frames)))
            }),
        )
        .route(
            "/t.S/Two",
            post({
                let good = good.clone();
                move || async move {
                    grpc_answer(grpc_body([good.clone(), good].concat(), Some(("0", ""))))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

use futures_util::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grpc_answers_are_typed_outcomes() {
    let addr = bad_server().await;
    let http = http_client(&Timeouts::default(), true);
    let grpc = target(&format!("http://{addr}"));
    let cases = [
        ("/t.S/Garbage", FailStage::Decode, "invalid_protobuf"),
        ("/t.S/NoTrailers", FailStage::Stream, "truncated"),
        ("/t.S/Cut", FailStage::Stream, "truncated"),
        ("/t.S/Status", FailStage::Stream, "grpc_resource_exhausted"),
        ("/t.S/Http503", FailStage::FirstByte, "grpc_unavailable"),
        ("/t.S/Json", FailStage::FirstByte, "not_grpc"),
        ("/t.S/Huge", FailStage::Decode, "too_large"),
        ("/t.S/Two", FailStage::Decode, "invalid_grpc"),
    ];
    for (n, (method, stage, kind)) in cases.into_iter().enumerate() {
        let started = Instant::now();
        let (record, answer) =
            call::<_, PointsResponse>(&http, &grpc, method, &search(vec![1.0], 1), n as u64).await;
        assert!(answer.is_none(), "{method}");
        let error = record
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{method}: no error"));
        assert_eq!(
            (error.stage, error.kind.as_str()),
            (stage, kind),
            "{method}: {}",
            error.message
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{method} failed at once"
        );
    }
    let (record, _) =
        call::<_, PointsResponse>(&http, &grpc, "/t.S/Status", &search(vec![1.0], 1), 50).await;
    assert_eq!(
        record.error.unwrap().message,
        "slow down",
        "grpc-message percent-decoded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_only_http1_is_a_typed_failure() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buffer = [0u8; 1024];
            let _ = tcp.read(&mut buffer).await;
            let _ = tcp
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
            // Open until the client gives up: a server that closed at once would make
            // it a reset while the client still writes.
            while tcp.read(&mut buffer).await.is_ok_and(|n| n > 0) {}
        }
    });
    let http = http_client(&Timeouts::default(), true);
    let (record, answer) = call::<_, PointsResponse>(
        &http,
        &target(&format!("http://{addr}")),
        qdrant::SEARCH,
        &search(vec![1.0], 1),
        0,
    )
    .await;
    assert!(answer.is_none());
    let error = record.error.unwrap();
    assert_eq!(record.outcome, Outcome::Error);
    // Mostly the h2 error itself; when the connection dies before hyper hands it the
    // request, hyper says only that the connection closed.
    let named = error.kind == "invalid_http" && error.message.contains("HTTP/1.1");
    let closed = error.kind == "reset" && error.message.contains("closed");
    assert!(named || closed, "{} {}", error.kind, error.message);
}

async fn grpc_proxy(upstream: &str, rules_yaml: &str) -> RunningProxy {
    let (file, rules) = parse_rules("rules.yaml", rules_yaml).unwrap_or_else(|e| panic!("{e}"));
    RunningProxy::start(ProxyConfig {
        upstreams: vec![upstream.parse().unwrap()],
        balance: Default::default(),
        upstream_http2: true,
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: None,
        rules,
        seed: file.seed,
        allow_header_faults: false,
        log: Arc::new(FaultLog::to_writer(None)),
        tls: None,
        upstream_tls: None,
        tap: None,
        mirror: None,
    })
    .await
    .unwrap()
}

/// The source's fault plan on the gRPC search path: 1.2 % of 20,000 searches over one
/// keep-alive HTTP/2 connection come back empty, each attributed to its rule, as many
/// as the proxy counted; the rest keep their points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_results_over_grpc_hold_their_rate_and_are_attributed() {
    let sim = sim(20).await;
    let proxy = grpc_proxy(
        &sim.qdrant_grpc_url(),
        "seed: 42\nrules:\n  - { name: empty-search, match: { path: /qdrant.Points/Search }, empty_result: { probability: 0.012 } }\n",
    )
    .await;
    let http = http_client(&Timeouts::default(), true);
    let grpc = Arc::new(target(&proxy.base_url()));
    let vector = Arc::new(redline::sim::embed::embed("kalo venta", DIM));
    let total = 20_000u64;
    let mut tasks = Vec::new();
    for worker in 0..64u64 {
        let (http, grpc, vector) = (http.clone(), grpc.clone(), vector.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for n in (worker..total).step_by(64) {
                let (record, answer) = call::<_, PointsResponse>(
                    &http,
                    &grpc,
                    qdrant::SEARCH,
                    &search(vector.to_vec(), 3),
                    n,
                )
                .await;
                out.push((record, answer.map(|a| a.result.len())));
            }
            out
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.extend(task.await.unwrap());
    }
    assert_eq!(results.len(), total as usize);
    assert!(
        results.iter().all(|(r, _)| r.outcome == Outcome::Ok),
        "every call answered"
    );
    let attributed: Vec<_> = results
        .iter()
        .filter(|(r, _)| {
            r.faults
                .iter()
                .any(|f| f.rule == "empty-search" && f.fault == "empty_result")
        })
        .collect();
    let empty = results
        .iter()
        .filter(|(_, points)| *points == Some(0))
        .count();
    assert_eq!(
        attributed.len(),
        empty,
        "each empty answer is attributed, and only those"
    );
    assert!(attributed.iter().all(|(_, points)| *points == Some(0)));
    let stats = proxy.chaos.stats();
    assert_eq!(stats.rules[0].injected, empty as u64);
    assert!(
        stats.connections <= 2,
        "one keep-alive connection: {}",
        stats.connections
    );
    // 1.2 % ± 0.3 %: the standard error at n = 20,000 is 0.077 %, so this is ±3.9 σ.
    let share = empty as f64 / total as f64;
    assert!((share - 0.012).abs() <= 0.003, "empty share {share}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_aborts_and_rate_limits_reach_the_client_as_statuses() {
    let sim = sim(20).await;
    let proxy = grpc_proxy(
        &sim.qdrant_grpc_url(),
        "seed: 1\nrules:\n  - { name: down, match: { path: /qdrant.Points/Query }, abort: { probability: 1, grpc_status: unavailable, grpc_message: \"shard 3 down\" } }\n  - { name: http-style, match: { path: /qdrant.Qdrant/HealthCheck }, abort: { probability: 1, status: 429 } }\n  - { name: limit, match: { path: /qdrant.Points/Search }, rate_limit: { rps: 1, burst: 1 } }\n",
    )
    .await;
    let http = http_client(&Timeouts::default(), true);
    let grpc = target(&proxy.base_url());
    let (record, _) =
        call::<_, PointsResponse>(&http, &grpc, qdrant::QUERY, &QueryPoints::default(), 0).await;
    let error = record.error.clone().unwrap();
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        ("grpc_unavailable", "shard 3 down")
    );
    assert_eq!(record.faults[0].rule, "down");
    let (record, _) = call::<_, qdrant::HealthCheckReply>(
        &http,
        &grpc,
        qdrant::HEALTH_CHECK,
        &qdrant::HealthCheckRequest {},
        1,
    )
    .await;
    assert_eq!(
        record.error.unwrap().kind,
        "grpc_unavailable",
        "HTTP 429 maps to UNAVAILABLE"
    );
    let vector = redline::sim::embed::embed("kalo", DIM);
    let (first, answer) =
        call::<_, PointsResponse>(&http, &grpc, qdrant::SEARCH, &search(vector.clone(), 2), 2)
            .await;
    assert_eq!(first.outcome, Outcome::Ok);
    assert_eq!(answer.unwrap().result.len(), 2);
    let (second, _) =
        call::<_, PointsResponse>(&http, &grpc, qdrant::SEARCH, &search(vector, 2), 3).await;
    assert_eq!(second.error.unwrap().kind, "grpc_resource_exhausted");
    assert_eq!(second.faults[0].fault, "rate_limit");
}

/// gRPC over TLS with a private CA: the same connector as https, so the same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_search_over_tls_trusts_the_private_ca_and_refuses_others() {
    use redline::client::tls::{TlsOptions, TlsSettings};
    use redline::net::tls::{Ca, Validity};
    let ca = Ca::new("grpc test CA").unwrap();
    let leaf = ca
        .issue(&["localhost", "127.0.0.1"], Validity::Current)
        .unwrap();
    let tls = redline::net::ServerTls::from_pem(&leaf.cert_pem, &leaf.key_pem, None).unwrap();
    let sim = EmbeddedSim::start_with(
        SimConfig {
            profile: Profile::tiny(),
            tiers: TierConfig {
                corpus_size: 20,
                ..TierConfig::default()
            },
            ..SimConfig::default()
        },
        Some(tls),
    )
    .await
    .unwrap();
    let url = sim.qdrant_grpc_url();
    assert!(url.starts_with("https://"), "{url}");
    let dir = common::temp_dir("grpc-tls");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let settings = TlsSettings::load(&TlsOptions {
        ca_cert: Some(ca_file),
        ..TlsOptions::default()
    })
    .unwrap();
    let http = redline::client::http_client_with(&Timeouts::default(), true, Some(&settings));
    let vector = redline::sim::embed::embed("kalo", DIM);
    let (record, answer) = call::<_, PointsResponse>(
        &http,
        &target(&url),
        qdrant::SEARCH,
        &search(vector.clone(), 2),
        0,
    )
    .await;
    assert_eq!(
        answer.map(|a| a.result.len()),
        Some(2),
        "{:?}",
        record.error
    );
    assert!(record.tls_us.is_some(), "the handshake is timed");

    let other = Ca::new("someone else").unwrap();
    let other_file = dir.join("other.pem");
    std::fs::write(&other_file, other.cert_pem()).unwrap();
    let settings = TlsSettings::load(&TlsOptions {
        ca_cert: Some(other_file),
        ..TlsOptions::default()
    })
    .unwrap();
    let http = redline::client::http_client_with(&Timeouts::default(), true, Some(&settings));
    let (record, _) =
        call::<_, PointsResponse>(&http, &target(&url), qdrant::SEARCH, &search(vector, 2), 1)
            .await;
    let error = record.error.unwrap();
    assert_eq!(
        (error.stage, error.kind.as_str()),
        (FailStage::Connect, "tls"),
        "{}",
        error.message
    );
}

/// One streamed token response of Triton's `ModelStreamInfer`, framed.
fn token(text: &str) -> Vec<u8> {
    use redline::grpc::kserve::{ModelInferResponse, ModelStreamInferResponse, Tensor};
    let mut raw = (text.len() as u32).to_le_bytes().to_vec();
    raw.extend_from_slice(text.as_bytes());
    let response = ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(ModelInferResponse {
            outputs: vec![Tensor {
                name: "text_output".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                ..Tensor::default()
            }],
            raw_output_contents: vec![raw],
            ..ModelInferResponse::default()
        }),
    };
    redline::grpc::frame(&response).to_vec()
}

fn stream_error(message: &str) -> Vec<u8> {
    let response = redline::grpc::kserve::ModelStreamInferResponse {
        error_message: message.into(),
        infer_response: None,
    };
    redline::grpc::frame(&response).to_vec()
}

/// A Triton stand-in that answers a token stream with `body` (a server per case:
/// every case calls the same method).
async fn triton_like(body: Body) -> SocketAddr {
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    let app = Router::new().route(
        redline::grpc::kserve::MODEL_STREAM_INFER,
        post(move || {
            let body = body.lock().unwrap().take().unwrap_or_default();
            async move { grpc_answer(body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_kserve_grpc_stream_is_a_typed_outcome() {
    use crate::common::llm;
    let ok = || Some(("0", ""));
    let cases: Vec<(&str, Body, FailStage, &str)> = vec![
        (
            "error mid-stream",
            grpc_body(
                [token("a"), stream_error("CUDA out of memory")].concat(),
                ok(),
            ),
            FailStage::Stream,
            "stream_error",
        ),
        (
            "cut, no trailers",
            grpc_body([token("a"), token("b")].concat(), None),
            FailStage::Stream,
            "truncated",
        ),
        (
            "status after tokens",
            grpc_body(token("a"), Some(("14", "draining"))),
            FailStage::Stream,
            "grpc_unavailable",
        ),
        (
            "not the message",
            grpc_body(prefixed(&[0x12, 0x7f]), ok()),
            FailStage::Decode,
            "invalid_protobuf",
        ),
    ];
    for (what, body, stage, kind) in cases {
        let addr = triton_like(body).await;
        let mut target = llm::target(&format!("http://{addr}"), true);
        target.api = redline::client::dialect::LlmApi::KserveGrpc;
        target.uri = format!("http://{addr}{}", redline::grpc::kserve::MODEL_STREAM_INFER)
            .parse()
            .unwrap();
        let record = llm::call_once(&target, "hello", true).await;
        let error = record
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no error"));
        assert_eq!(
            (error.stage, error.kind.as_str()),
            (stage, kind),
            "{what}: {}",
            error.message
        );
    }
    // Tokens and an OK status with no final flag: complete, as Triton ends a stream
    // whose client did not ask for the empty final response.
    let addr = triton_like(grpc_body([token("a"), token("b")].concat(), ok())).await;
    let mut target = llm::target(&format!("http://{addr}"), true);
    target.api = redline::client::dialect::LlmApi::KserveGrpc;
    target.uri = format!("http://{addr}{}", redline::grpc::kserve::MODEL_STREAM_INFER)
        .parse()
        .unwrap();
    let record = llm::call_once(&target, "hello", true).await;
    assert_eq!(record.outcome, Outcome::Ok, "{:?}", record.error);
    assert_eq!(record.content_events, 2);
}
