//! Helpers shared by integration tests: a plain HTTP client (hyper) that records when
//! each SSE event arrived, and a simulator started on an ephemeral loopback port.
#![allow(dead_code)] // each test file uses its own subset

pub mod llm;
pub mod synthetic;

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use std::path::PathBuf;

use redline::record::Record;
use redline::report::{RunInfo, summarize};
use redline::results::RunResult;
use redline::runner::{RunOptions, run};
use redline::scenario::Scenario;
use tokio_util::sync::CancellationToken;

pub use redline::sim::{EmbeddedSim, Profile, SimConfig};

/// Tests that time redline's client against the simulator's truth take this lock, so
/// they do not compete with one another for the two cores.
pub static CLIENT_TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn sim(profile: Profile) -> EmbeddedSim {
    EmbeddedSim::start(SimConfig {
        profile,
        model: None,
        seed: 0,
        tiers: Default::default(),
        script: None,
        startup: None,
    })
    .await
    .expect("start the simulator")
}

/// A whole (non-streaming) response.
pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn header_u64(&self, name: &str) -> u64 {
        self.headers[name].to_str().unwrap().parse().unwrap()
    }
}

pub async fn post(client: &HttpClient, url: String, body: Value) -> Answer {
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client.request(request).await.expect("request sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    Answer {
        status,
        headers,
        body,
    }
}

pub async fn get_text(client: &HttpClient, url: String) -> String {
    let response = client
        .request(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The value of a metric line `name{labels} value` (the first one matching).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in\n{text}"))
}

/// A streamed response: each `data:` payload with the time it arrived.
pub struct Stream {
    pub sent: Instant,
    pub events: Vec<(Instant, String)>,
}

impl Stream {
    /// The JSON events (everything but `[DONE]`).
    pub fn json(&self) -> Vec<(Instant, Value)> {
        self.events
            .iter()
            .filter(|(_, data)| data != "[DONE]")
            .map(|(at, data)| (*at, serde_json::from_str(data).unwrap()))
            .collect()
    }

    /// The ground truth object of the final chunk.
    pub fn truth(&self) -> Value {
        self.json().last().unwrap().1["redline"].clone()
    }

    /// Arrival times of events carrying generated content.
    pub fn content_times(&self) -> Vec<Instant> {
        self.json()
            .into_iter()
            .filter(|(_, v)| {
                let choice = &v["choices"][0];
                choice["delta"]["content"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
                    || choice["text"].as_str().is_some_and(|s| !s.is_empty())
                    || choice["delta"]["tool_calls"].is_array()
            })
            .map(|(at, _)| at)
            .collect()
    }

    pub fn text(&self) -> String {
        self.json()
            .iter()
            .filter_map(|(_, v)| {
                let choice = &v["choices"][0];
                choice["delta"]["content"]
                    .as_str()
                    .or(choice["text"].as_str())
                    .map(str::to_owned)
            })
            .collect()
    }

    pub fn finish_reason(&self) -> String {
        self.json()
            .iter()
            .find_map(|(_, v)| v["choices"][0]["finish_reason"].as_str().map(str::to_owned))
            .unwrap()
    }
}

pub async fn stream(client: &HttpClient, url: String, body: Value) -> Stream {
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let sent = Instant::now();
    let response = client.request(request).await.expect("request sent");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let at = Instant::now();
        let frame = frame.unwrap();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buffer.push_str(std::str::from_utf8(data).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.trim_end().strip_prefix("data: ") {
                events.push((at, data.to_owned()));
            }
        }
    }
    Stream { sent, events }
}

/// A prompt of exactly `n` tokens, distinct for each `seed`.
pub fn prompt(seed: u64, n: usize) -> String {
    (0..n)
        .map(|i| format!(" w{:x}", (seed * 1_000_003 + i as u64) % 0xff_ffff))
        .collect()
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redline-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn scenario(body: &str) -> Scenario {
    let text = format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: t }}\nspec:\n{body}"
    );
    let file = redline::spec::parse("test.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

pub async fn run_to_records(scenario: Scenario, name: &str) -> (RunResult, Vec<Record>) {
    let dir = temp_dir(name);
    let options = RunOptions::records_to(dir.join("records.jsonl"));
    let result = run(scenario, options, CancellationToken::new())
        .await
        .unwrap();
    let records = std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_dir_all(dir).unwrap();
    (result, records)
}

/// The summary of a test run, with the run's stages and no gate.
pub fn summary_of(result: &RunResult) -> redline::report::Summary {
    summarize(
        &result.aggregator,
        RunInfo {
            name: "t",
            target: "",
            model: "",
            interrupted: false,
            warnings: result.warnings.clone(),
            elapsed_s: 0.0,
            stages: result.stages.clone(),
            dataset: None,
            server_metrics: None,
            verdicts: None,
            aborted: None,
            proxies: result.proxies.clone(),
            traces: result.traces.clone(),
            token_settlement: result.token_settlement.clone(),
        },
    )
}

/// The summary of a fixture's records under its spec, as `redline run` would build it
/// (without the live parts: proxies' own counts, scraped metrics, collected traces).
pub fn summary_of_fixture(name: &str) -> redline::report::Summary {
    // Relative to the crate (where cargo runs tests), so paths in the report do not
    // depend on where the repository is checked out.
    let dir = std::path::Path::new("tests/fixtures");
    let spec_path = dir.join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&spec_path).unwrap();
    let file = redline::spec::parse(&spec_path.display().to_string(), &text).unwrap();
    let scenario = Scenario::from_spec(&file, &text).unwrap();
    let mut aggregator = scenario.aggregator();
    let read =
        redline::record::read_records(&dir.join(format!("{name}.records.jsonl")), None, |r| {
            aggregator.add(&r)
        })
        .unwrap();
    assert!(read.records > 100, "{read:?}");
    let verdicts = scenario
        .slos
        .as_ref()
        .map(|s| s.evaluate(&aggregator, None));
    let stages = scenario
        .stages
        .iter()
        .map(|s| redline::schedule::ExecutedStage::of(s, None, scenario.unit()))
        .collect();
    summarize(
        &aggregator,
        RunInfo {
            model: "sim-tiny",
            warnings: scenario.warnings(),
            stages,
            dataset: scenario.dataset_info(),
            ..RunInfo::of_records(&scenario.name, "http://127.0.0.1:8000", 2.0, verdicts)
        },
    )
}

/// Runs the `redline` binary: its exit code, stdout and stderr.
pub fn redline(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redline"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}
