//! Timing one start from outside: the port opening, the ready endpoint answering 2xx,
//! the first token of a probe request and the decode rate after it. A server's own log
//! is not trusted for any of these (vLLM #20264: its log said 34 s, the first answer
//! came at 59 s).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;

use crate::client::dialect::LlmApi;
use crate::client::openai::LlmTarget;
use crate::client::{self, HttpClient, RunClock, Timeouts};
use crate::record::{Outcome, Phase, Record};
use crate::tokenizer::{DEFAULT_MAX_COUNT_BYTES, LocalTokenizer, TokenCounting};
use crate::workload::payload::{Payload, PromptBody};

use crate::launch::ready::{READY_CHECK, cut, get};

/// What the probe asks for: one streamed chat completion.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `…/v1/chat/completions`.
    pub uri: Uri,
    pub model: String,
    pub max_tokens: u32,
}

/// The probe's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeTimes {
    /// Since the clock's start.
    pub first_token_ms: f64,
    pub ttft_ms: f64,
    /// Content events per second after the first.
    pub decode_tokens_per_s: Option<f64>,
    pub tokens: u32,
}

/// `POST uri` with an empty body, expecting 2xx (sleep mode's `/sleep`, `/wake_up`).
pub async fn post(http: &HttpClient, uri: &Uri, deadline: Instant) -> Result<(), String> {
    let request = hyper::Request::post(uri.clone())
        .body(Full::new(Bytes::new()))
        .expect("a URI and no headers make a valid request");
    match client::exchange(http, request, deadline).await? {
        (status, _) if (200..300).contains(&status) => Ok(()),
        (status, body) => Err(format!("POST {uri} answered {status} {}", cut(&body))),
    }
}

/// The first model `GET /v1/models` lists.
pub async fn first_model(http: &HttpClient, models: &Uri) -> Result<String, String> {
    let deadline = Instant::now() + READY_CHECK;
    let (status, body) = client::exchange(http, get(models), deadline).await?;
    let listed: serde_json::Value = serde_json::from_str(&body)
        .map_err(|_| format!("GET {models} answered {status} with no JSON: name the model"))?;
    listed["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("GET {models} lists no model: name it"))
}

/// Sends the probe; its times are on `clock` (which started at the spawn).
pub async fn probe(
    http: &HttpClient,
    probe: &Probe,
    clock: RunClock,
    timeout: Duration,
) -> Result<ProbeTimes, String> {
    let target = LlmTarget {
        uri: probe.uri.clone(),
        api: LlmApi::Chat,
        model: probe.model.clone(),
        stream: true,
        include_usage: true,
        api_key: None,
        headers: Vec::new(),
        extra_body: serde_json::Map::from_iter([("temperature".into(), 0.into())]),
        timeouts: Timeouts {
            first_token: timeout,
            total: timeout,
            ..Timeouts::default()
        },
        max_response_bytes: 1 << 20,
        counting: TokenCounting {
            tokenizer: LocalTokenizer::Sim,
            named: false,
            always: false,
            max_bytes: DEFAULT_MAX_COUNT_BYTES,
        },
    };
    let payload = Payload {
        prompt: PromptBody::Text("Tell the story of a lighthouse keeper in a few lines.".into()),
        max_tokens: Some(probe.max_tokens),
        input_tokens: 12,
        traceparent: None,
        prefix: None,
        previous_response_id: None,
        grade: None,
        fields: None,
    };
    let mut record = Record::unsent(0, 0, Phase::Measure, clock.now_us());
    crate::client::openai::call(http, &target, &payload, clock, &mut record).await;
    times_of(&record).ok_or_else(|| {
        let error = record.error.as_ref();
        let why = error.map_or("no token came".to_owned(), |e| {
            format!("{}: {}", e.kind, e.message)
        });
        format!("the probe request to {} failed: {why}", probe.uri)
    })
}

fn times_of(record: &Record) -> Option<ProbeTimes> {
    if record.outcome != Outcome::Ok {
        return None;
    }
    let gaps_us: u64 = record.itl_us.iter().map(|&g| u64::from(g)).sum();
    Some(ProbeTimes {
        first_token_ms: record.first_token_us? as f64 / 1e3,
        ttft_ms: record.ttft_us()? as f64 / 1e3,
        decode_tokens_per_s: (gaps_us > 0)
            .then(|| record.itl_us.len() as f64 * 1e6 / gaps_us as f64),
        tokens: record.content_events,
    })
}
