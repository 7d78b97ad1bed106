//! Replay: each recorded request sent to the primary, the candidate and the
//! secondary (a second copy of the primary's version, or the primary again), at the
//! same moment, on the recording's own schedule or at a chosen rate; each answer read
//! whole (an event stream assembled into the answer it adds up to) and timed on the
//! client's one send path, so the three are aligned by trace ID and comparable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::recording::{Exchange, REDACTED, Recording};
use crate::client::sse::{DEFAULT_MAX_EVENT_BYTES, SseDecoder};
use crate::client::{HttpClient, RunClock, Timeouts};
use crate::record::{FailStage, Outcome, Phase, Record};

/// The three versions a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Primary,
    Candidate,
    /// The noise baseline: the primary's version a second time.
    Secondary,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::Primary, Side::Candidate, Side::Secondary];

    pub fn name(self) -> &'static str {
        match self {
            Side::Primary => "primary",
            Side::Candidate => "candidate",
            Side::Secondary => "secondary",
        }
    }
}

/// When requests are sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// At the recorded offsets, `speed` times as fast.
    AsRecorded { speed: f64 },
    /// At a fixed rate per second, in recorded order.
    Rate(f64),
}

/// How to replay.
pub struct ReplayConfig {
    /// Base URLs (scheme and authority, maybe a path prefix), by side.
    pub urls: BTreeMap<Side, String>,
    pub clients: BTreeMap<Side, HttpClient>,
    pub pace: Pace,
    pub timeouts: Timeouts,
    /// Sent as `Authorization: Bearer …` in place of the recording's redacted one.
    pub api_key: Option<HeaderValue>,
    /// Largest answer read, in bytes.
    pub max_response_bytes: usize,
    /// Most requests (of all three sides) in flight; a request past it waits.
    pub max_in_flight: usize,
}

/// One side's answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The answer as JSON (an event stream assembled into the answer it adds up
    /// to), when it is JSON.
    pub json: Option<Value>,
    /// The body as text, when it is not JSON.
    pub text: Option<String>,
    /// Timing and outcome, as any run's record.
    pub record: Record,
}

/// The three answers to one recorded request.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub seq: u64,
    pub trace_id: String,
    /// `METHOD path` without the query.
    pub endpoint: String,
    pub answers: BTreeMap<Side, Answer>,
}

/// Replays every exchange of `recording`; `done` is told each finished one. The
/// answers come back in recorded order.
pub async fn replay(
    recording: &Recording,
    config: Arc<ReplayConfig>,
    done: impl Fn(&Replayed) + Send + Sync + 'static,
) -> Vec<Replayed> {
    let clock = RunClock::new(Instant::now());
    let first_at = recording.exchanges.first().map_or(0, |e| e.at_us);
    let limit = Arc::new(tokio::sync::Semaphore::new(config.max_in_flight.max(3)));
    let done = Arc::new(done);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, exchange) in recording.exchanges.iter().enumerate() {
        let intended_us = match config.pace {
            Pace::AsRecorded { speed } => ((exchange.at_us - first_at) as f64 / speed) as u64,
            Pace::Rate(rate) => (i as f64 / rate * 1e6) as u64,
        };
        tokio::time::sleep_until(clock.at(intended_us).into()).await;
        let permits = limit.clone().acquire_many_owned(3).await;
        let request = Prepared::of(recording, exchange, &config);
        let (config, done) = (config.clone(), done.clone());
        let (seq, trace_id) = (exchange.seq, exchange.trace_id.clone());
        tasks.spawn(async move {
            let _permits = permits;
            let replayed = send_all(&config, request, clock, seq, trace_id, intended_us).await;
            done(&replayed);
            replayed
        });
    }
    let mut replayed: Vec<Replayed> = tasks.join_all().await;
    replayed.sort_by_key(|r| r.seq);
    replayed
}

/// A recorded request ready to send again, or why it cannot be.
struct Prepared {
    method: hyper::Method,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Result<Bytes, String>,
}

/// Headers never sent again: the connection's own, and what redline does not ask for.
const NOT_RESENT: [&str; 7] = [
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "accept-encoding",
    "te",
];

impl Prepared {
    fn of(recording: &Recording, exchange: &Exchange, config: &ReplayConfig) -> Prepared {
        let request = &exchange.request;
        let mut headers: Vec<(HeaderName, HeaderValue)> = request
            .headers
            .iter()
            .filter(|(name, value)| value != REDACTED && !NOT_RESENT.contains(&name.as_str()))
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect();
        if exchange.traceparent.is_none() {
            let traceparent =
                crate::trace::context::traceparent(&exchange.trace_id, exchange.seq + 1);
            if let Ok(value) = HeaderValue::from_str(&traceparent) {
                headers.push((HeaderName::from_static("traceparent"), value));
            }
        }
        if let Some(key) = &config.api_key {
            headers.push((hyper::header::AUTHORIZATION, key.clone()));
        }
        Prepared {
            method: request.method.parse().unwrap_or(hyper::Method::POST),
            path: request.path.clone(),
            headers,
            body: request.body.bytes(&recording.dir).map(Bytes::from),
        }
    }

    fn request(&self, base: &str) -> Result<hyper::Request<Full<Bytes>>, String> {
        let body = self.body.clone()?;
        let uri = format!("{}{}", base.trim_end_matches('/'), self.path);
        let mut builder = hyper::Request::builder()
            .method(self.method.clone())
            .uri(&uri);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request to {uri}: {e}"))
    }
}

async fn send_all(
    config: &ReplayConfig,
    request: Prepared,
    clock: RunClock,
    seq: u64,
    trace_id: String,
    intended_us: u64,
) -> Replayed {
    let sends = Side::ALL.map(|side| {
        let (request, trace_id) = (&request, &trace_id);
        async move {
            let mut record = Record::unsent(seq, 0, Phase::Measure, intended_us);
            record.traceparent = Some(trace_id.clone());
            let answer = send_one(config, side, request, clock, &mut record).await;
            (side, answer.with_record(record))
        }
    });
    let [a, b, c] = sends;
    // Polled in turn, from a side that changes with each request, so no side is
    // always the first to send or to be read.
    let (a, b, c) = match seq % 3 {
        0 => tokio::join!(a, b, c),
        1 => {
            let (b, c, a) = tokio::join!(b, c, a);
            (a, b, c)
        }
        _ => {
            let (c, a, b) = tokio::join!(c, a, b);
            (a, b, c)
        }
    };
    let path = request.path.split('?').next().unwrap_or("/");
    Replayed {
        seq,
        trace_id: trace_id.clone(),
        endpoint: format!("{} {path}", request.method),
        answers: BTreeMap::from([a, b, c]),
    }
}

/// What was read, before the record is attached.
#[derive(Default)]
struct Read {
    json: Option<Value>,
    text: Option<String>,
}

impl Read {
    fn with_record(self, record: Record) -> Answer {
        Answer {
            json: self.json,
            text: self.text,
            record,
        }
    }
}

async fn send_one(
    config: &ReplayConfig,
    side: Side,
    prepared: &Prepared,
    clock: RunClock,
    record: &mut Record,
) -> Read {
    let request = match prepared.request(&config.urls[&side]) {
        Ok(request) => request,
        Err(message) => {
            record.fail(Outcome::Error, FailStage::Client, "unsendable", message);
            return Read::default();
        }
    };
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let total = sent + config.timeouts.total;
    let first = total.min(sent + config.timeouts.first_token);
    let http = &config.clients[&side];
    let timeout = "no response headers before the deadline";
    let Some(response) =
        crate::client::send_until(http, request, first, timeout, clock, record).await
    else {
        return Read::default();
    };
    let status = response.status();
    let streamed = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let read = if streamed && status.is_success() {
        read_stream(response.into_body(), config, total, clock, record).await
    } else {
        read_whole(response.into_body(), config, total, clock, record).await
    };
    if !status.is_success() && record.outcome == Outcome::Ok {
        let kind = crate::client::status_kind(status.as_u16());
        let preview: String = read
            .text
            .clone()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        record.fail(Outcome::Error, FailStage::FirstByte, kind, preview);
    }
    read
}

async fn read_whole(
    body: hyper::body::Incoming,
    config: &ReplayConfig,
    deadline: Instant,
    clock: RunClock,
    record: &mut Record,
) -> Read {
    let limit = config.max_response_bytes;
    let Some(bytes) = crate::client::read_body(body, deadline, limit, true, clock, record).await
    else {
        return Read::default();
    };
    // Not streamed: the whole answer is its first token.
    record.first_token_us = record.last_byte_us;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(json) => {
            note_usage(&json, record);
            Read {
                json: Some(json),
                text: None,
            }
        }
        Err(_) => Read {
            json: None,
            text: Some(String::from_utf8_lossy(&bytes).into_owned()),
        },
    }
}

/// Reads an event stream: the first content event is the first token, and the
/// events' data is assembled into one answer.
async fn read_stream(
    mut body: hyper::body::Incoming,
    config: &ReplayConfig,
    deadline: Instant,
    clock: RunClock,
    record: &mut Record,
) -> Read {
    let mut decoder = SseDecoder::new(DEFAULT_MAX_EVENT_BYTES.min(config.max_response_bytes));
    let mut assembly = Assembly::default();
    let mut size = 0usize;
    let mut last_content: Option<u64> = None;
    let mut gaps_us = 0u64;
    loop {
        let wait = deadline.min(Instant::now() + config.timeouts.between_tokens);
        let frame = match tokio::time::timeout_at(wait.into(), body.frame()).await {
            Err(_) => {
                let what = "the stream stalled or outlasted the total timeout";
                record.fail(Outcome::Timeout, FailStage::Stream, "timeout", what);
                return Read::default();
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                let message = format!("stream broken: {error}");
                record.fail(Outcome::Error, FailStage::Stream, "reset", message);
                return Read::default();
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = clock.now_us();
        record.first_byte_us.get_or_insert(now);
        size += data.len();
        if size > config.max_response_bytes {
            let message = format!("stream larger than {} bytes", config.max_response_bytes);
            record.fail(Outcome::Error, FailStage::Stream, "too_large", message);
            return Read::default();
        }
        decoder.feed(data);
        while let Some(event) = decoder.next_event() {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    let message = error.to_string();
                    record.fail(Outcome::Error, FailStage::Stream, "stream_error", message);
                    return Read::default();
                }
            };
            if assembly.add(&event.data) {
                record.content_events += 1;
                match last_content {
                    None => record.first_token_us = Some(now),
                    Some(before) => {
                        gaps_us += now - before;
                        record.second_token_us.get_or_insert(now);
                    }
                }
                last_content = Some(now);
            }
        }
    }
    record.last_byte_us = Some(clock.now_us());
    if record.content_events > 1 {
        record.itl_mean_us = Some(gaps_us / u64::from(record.content_events - 1));
    }
    if !assembly.done {
        let message = "the stream ended without `data: [DONE]`";
        record.fail(Outcome::Error, FailStage::Stream, "truncated", message);
    }
    let json = assembly.answer();
    note_usage(&json, record);
    Read {
        json: Some(json),
        text: None,
    }
}

fn note_usage(json: &Value, record: &mut Record) {
    let tokens = |name: &str| {
        json.pointer(&format!("/usage/{name}"))
            .and_then(Value::as_u64)
            .map(|n| n as u32)
    };
    record.input_tokens = tokens("prompt_tokens");
    record.output_tokens = tokens("completion_tokens");
}

/// The chunks of an OpenAI stream added up into the answer a non-streamed request
/// would have got: content and text joined, tool calls joined by index, the last
/// finish reason, the usage, and the other top-level fields as the last chunk had them.
#[derive(Default)]
struct Assembly {
    top: Map<String, Value>,
    choices: BTreeMap<u64, ChoiceParts>,
    done: bool,
}

#[derive(Default)]
struct ChoiceParts {
    role: Option<Value>,
    content: Option<String>,
    text: Option<String>,
    finish_reason: Option<Value>,
    /// By index: id, name, arguments.
    tool_calls: BTreeMap<u64, (String, String, String)>,
}

impl Assembly {
    /// Adds one event's data; says whether it carried content (a token).
    fn add(&mut self, data: &str) -> bool {
        if data.trim() == "[DONE]" {
            self.done = true;
            return false;
        }
        let Ok(Value::Object(chunk)) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let mut content = false;
        for (key, value) in chunk {
            match (key.as_str(), value) {
                ("choices", Value::Array(choices)) => {
                    for choice in &choices {
                        content |= self.add_choice(choice);
                    }
                }
                ("usage", Value::Null) => {}
                (_, value) => {
                    self.top.insert(key, value);
                }
            }
        }
        content
    }

    fn add_choice(&mut self, choice: &Value) -> bool {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        let parts = self.choices.entry(index).or_default();
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        let mut content = false;
        if let Some(role) = delta.get("role") {
            parts.role = Some(role.clone());
        }
        for (field, into) in [
            (delta.get("content"), &mut parts.content),
            (choice.get("text"), &mut parts.text),
        ] {
            if let Some(piece) = field.and_then(Value::as_str) {
                into.get_or_insert_with(String::new).push_str(piece);
                content |= !piece.is_empty();
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let i = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let entry = parts.tool_calls.entry(i).or_default();
            let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                entry.0 = id.to_owned();
            }
            entry.1.push_str(&text(call.pointer("/function/name")));
            entry.2.push_str(&text(call.pointer("/function/arguments")));
            content = true;
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            parts.finish_reason = Some(reason.clone());
        }
        content
    }

    fn answer(mut self) -> Value {
        let choices: Vec<Value> = std::mem::take(&mut self.choices)
            .into_iter()
            .map(|(index, parts)| parts.into_json(index))
            .collect();
        self.top.insert("choices".into(), Value::Array(choices));
        Value::Object(self.top)
    }
}

impl ChoiceParts {
    fn into_json(self, index: u64) -> Value {
        let mut choice = Map::new();
        choice.insert("index".into(), index.into());
        if let Some(text) = self.text {
            choice.insert("text".into(), text.into());
        }
        if self.content.is_some() || self.role.is_some() || !self.tool_calls.is_empty() {
            let mut message = Map::new();
            message.insert("role".into(), self.role.unwrap_or("assistant".into()));
            message.insert(
                "content".into(),
                self.content.map_or(Value::Null, Value::from),
            );
            if !self.tool_calls.is_empty() {
                let calls = self.tool_calls.into_values().map(|(id, name, arguments)| {
                    serde_json::json!({
                        "id": id, "type": "function",
                        "function": {"name": name, "arguments": arguments}
                    })
                });
                message.insert("tool_calls".into(), Value::Array(calls.collect()));
            }
            choice.insert("message".into(), Value::Object(message));
        }
        choice.insert(
            "finish_reason".into(),
            self.finish_reason.unwrap_or(Value::Null),
        );
        Value::Object(choice)
    }
}

/// The default time limits of a replayed request.
pub fn default_timeouts() -> Timeouts {
    Timeouts {
        total: Duration::from_secs(300),
        ..Timeouts::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_adds_up_to_the_whole_answer() {
        let mut a = Assembly::default();
        let chunks = [
            r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":"lo"}}],"usage":null}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get","arguments":"{\"a\""}}]}}]}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"id":"x","choices":[],"usage":{"completion_tokens":3}}"#,
            "[DONE]",
        ];
        let contents: Vec<bool> = chunks.iter().map(|c| a.add(c)).collect();
        assert_eq!(contents, [true, true, true, true, false, false]);
        assert!(a.done);
        let answer = a.answer();
        assert_eq!(answer["choices"][0]["message"]["content"], "Hello");
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(answer["usage"]["completion_tokens"], 3);
    }
}
