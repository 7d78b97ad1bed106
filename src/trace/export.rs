//! redline's own spans over OTLP/HTTP (protobuf, the `opentelemetry-proto` types):
//! one span per request — a child of its flow session's span — with the first and last
//! token as events, OpenTelemetry's `gen_ai.*` attributes and the source's `llm.*` and
//! per-request fields. Spans are built from the records as the collector writes them,
//! so they say exactly what `records.jsonl` says.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Uri};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use tokio::sync::mpsc;

use crate::client::HttpClient;
use crate::record::{Outcome, Record};

/// The attribute names redline writes: in one place, because OpenTelemetry's GenAI
/// conventions are still moving.
pub mod attr {
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const GEN_AI_SYSTEM: &str = "gen_ai.system";
    pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
    pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
    pub const ERROR_TYPE: &str = "error.type";
    pub const LLM_OPERATION_TYPE: &str = "llm.operation_type";
    pub const LLM_REQUEST_ID: &str = "llm_request_id";
    pub const AGENT_STEP_SEQ: &str = "agent_step_seq";
    pub const TOOL_CALL_HASH: &str = "tool_call_hash";
    pub const EMBEDDING_LATENCY_MS: &str = "embedding_latency_ms";
    pub const REDLINE_STEP: &str = "redline.step";
    pub const REDLINE_OUTCOME: &str = "redline.outcome";
    pub const REDLINE_TTFT_MS: &str = "redline.ttft_ms";
}

pub(super) fn string(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

fn double(key: &str, value: f64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::DoubleValue(value)),
        }),
        ..KeyValue::default()
    }
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    (hex.len() % 2 == 0)
        .then(|| {
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                .collect()
        })
        .flatten()
}

/// `gen_ai.operation.name` of a request: `chat`, `embeddings`, `execute_tool`, or
/// (not GenAI operations) `search` and `http`.
pub fn operation_of(record: &Record) -> &'static str {
    match record.step.as_ref().map(|s| s.kind.as_str()) {
        Some("embed") => "embeddings",
        Some("tool") => "execute_tool",
        Some("search") => "search",
        Some("http") => "http",
        _ => "chat",
    }
}

/// The span ID of a flow session's own span: derived from its trace ID, so its
/// requests can name it as parent before the session ends.
pub fn session_span_id(trace_id: &str) -> Vec<u8> {
    (crate::seed::fnv64(trace_id.as_bytes()) | 1)
        .to_be_bytes()
        .to_vec()
}

/// The spans of one record: its request's, and its session's when it ends one.
/// `origin_ns` is the run's start in Unix nanoseconds.
pub fn spans_of(record: &Record, model: &str, origin_ns: u64) -> Vec<Span> {
    let Some(traceparent) = &record.traceparent else {
        return Vec::new();
    };
    let Some(context) = super::context::parse(traceparent) else {
        return Vec::new();
    };
    let (Some(trace_id), Some(span_id)) = (hex_bytes(context.trace_id), hex_bytes(context.span_id))
    else {
        return Vec::new();
    };
    let at = |us: u64| origin_ns + us * 1000;
    let start_us = record.sent_us.unwrap_or(record.intended_us);
    let operation = operation_of(record);
    let session_parent = record
        .session
        .as_ref()
        .filter(|_| record.step.is_some())
        .map(|s| session_span_id(&s.trace_id));
    let mut spans = vec![Span {
        trace_id: trace_id.clone(),
        span_id,
        parent_span_id: session_parent.clone().unwrap_or_default(),
        name: record
            .step
            .as_ref()
            .map_or_else(|| operation.to_owned(), |s| s.name.clone()),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: at(start_us),
        end_time_unix_nano: at(record.done_us().max(start_us)),
        attributes: attributes_of(record, model, operation),
        events: events_of(record, at),
        status: Some(status_of(record)),
        ..Span::default()
    }];
    if let (Some(end), Some(session_id)) = (&record.session_end, session_parent) {
        let done = record.done_us();
        spans.push(Span {
            trace_id,
            span_id: session_id,
            name: "session".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: at(done.saturating_sub(end.e2e_us)),
            end_time_unix_nano: at(done),
            attributes: vec![
                string(attr::LLM_OPERATION_TYPE, "session"),
                string(
                    attr::REDLINE_OUTCOME,
                    format!("{:?}", end.outcome).to_lowercase(),
                ),
                int(attr::AGENT_STEP_SEQ, i64::from(end.requests)),
            ],
            ..Span::default()
        });
    }
    spans
}

/// A request span's attributes: the GenAI conventions, then redline's own.
fn attributes_of(record: &Record, model: &str, operation: &str) -> Vec<KeyValue> {
    let step = record.step.as_ref();
    let kind = step.map_or("chat", |s| s.kind.as_str());
    let mut attributes = vec![
        string(attr::GEN_AI_OPERATION_NAME, operation),
        string(attr::GEN_AI_SYSTEM, "openai"),
        string(attr::LLM_OPERATION_TYPE, kind),
        int(attr::LLM_REQUEST_ID, record.seq as i64),
        string(
            attr::REDLINE_OUTCOME,
            format!("{:?}", record.outcome).to_lowercase(),
        ),
    ];
    if matches!(operation, "chat" | "embeddings") && !model.is_empty() {
        attributes.push(string(attr::GEN_AI_REQUEST_MODEL, model));
    }
    if let Some(n) = record.input_tokens {
        attributes.push(int(attr::GEN_AI_USAGE_INPUT_TOKENS, i64::from(n)));
    }
    if let Some(n) = record.output_tokens {
        attributes.push(int(attr::GEN_AI_USAGE_OUTPUT_TOKENS, i64::from(n)));
    }
    if let Some(reason) = &record.finish_reason {
        attributes.push(string(attr::GEN_AI_RESPONSE_FINISH_REASONS, reason.clone()));
    }
    if let Some(ttft) = record.ttft_us() {
        attributes.push(double(attr::REDLINE_TTFT_MS, ttft as f64 / 1e3));
    }
    if let Some(step) = step {
        attributes.push(string(attr::REDLINE_STEP, step.name.clone()));
        attributes.push(int(attr::AGENT_STEP_SEQ, i64::from(step.agent_step_seq)));
        if let Some(tool) = &step.tool {
            attributes.push(string(attr::GEN_AI_TOOL_NAME, tool.clone()));
        }
        if let Some(hash) = &step.tool_call_hash {
            attributes.push(string(attr::TOOL_CALL_HASH, hash.clone()));
        }
        if kind == "embed"
            && let Some(e2e) = record.e2e_us()
        {
            attributes.push(double(attr::EMBEDDING_LATENCY_MS, e2e as f64 / 1e3));
        }
    }
    if let Some(error) = &record.error {
        attributes.push(string(attr::ERROR_TYPE, error.kind.clone()));
    }
    attributes
}

/// The first and last token as span events.
fn events_of(record: &Record, at: impl Fn(u64) -> u64) -> Vec<Event> {
    let last_token = record.last_byte_us.filter(|_| record.content_events > 0);
    [
        ("gen_ai.first_token", record.first_token_us),
        ("gen_ai.last_token", last_token),
    ]
    .into_iter()
    .filter_map(|(name, us)| {
        Some(Event {
            time_unix_nano: at(us?),
            name: name.into(),
            ..Event::default()
        })
    })
    .collect()
}

fn status_of(record: &Record) -> Status {
    Status {
        code: if record.outcome == Outcome::Ok {
            StatusCode::Ok as i32
        } else {
            StatusCode::Error as i32
        },
        message: record
            .error
            .as_ref()
            .map_or(String::new(), |e| format!("{}: {}", e.kind, e.message)),
    }
}

/// The export of a batch of spans, from service `redline`.
pub fn export_request(spans: Vec<Span>, scenario: &str) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    string("service.name", "redline"),
                    string("redline.scenario", scenario),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "redline".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// What the exporter managed.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ExportCounts {
    pub spans_sent: u64,
    /// Spans in exports the endpoint refused or never answered.
    pub spans_failed: u64,
    /// Snapshots of the client metrics sent to `…/v1/metrics`, and refused.
    pub metric_exports: u64,
    pub metric_exports_failed: u64,
}

/// What the collector hands the exporter.
pub enum Export {
    Span(Box<Span>),
    /// A snapshot of the cumulative client metrics.
    Metrics(opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest),
}

/// `…/v1/metrics` beside a `…/v1/traces` endpoint.
pub fn metrics_uri(traces: &Uri) -> Option<Uri> {
    let text = traces.to_string();
    text.strip_suffix("/v1/traces")
        .and_then(|base| format!("{base}/v1/metrics").parse().ok())
}

async fn post(http: &HttpClient, uri: Uri, body: Vec<u8>) -> bool {
    let request = Request::post(uri)
        .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
        .body(Full::new(Bytes::from(body)))
        .expect("a URI validated with the options");
    matches!(
        tokio::time::timeout(Duration::from_secs(10), crate::client::send(http, request)).await,
        Ok(Ok(response)) if response.status().is_success()
    )
}

/// Sends batches of spans (at most 512, at least every second) to `endpoint`
/// (`…/v1/traces`), and metric snapshots to `…/v1/metrics`, until the sender is
/// dropped; then the rest.
pub async fn export(
    http: HttpClient,
    endpoint: Uri,
    scenario: String,
    mut spans: mpsc::UnboundedReceiver<Export>,
) -> ExportCounts {
    let metrics_endpoint = metrics_uri(&endpoint);
    let mut counts = ExportCounts::default();
    let mut batch = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        // (the batch is due, the sender is gone)
        let (due, closed) = tokio::select! {
            export = spans.recv() => match export {
                Some(Export::Span(span)) => {
                    batch.push(*span);
                    (batch.len() >= 512, false)
                }
                Some(Export::Metrics(request)) => {
                    let sent = match &metrics_endpoint {
                        Some(uri) => post(&http, uri.clone(), request.encode_to_vec()).await,
                        None => false,
                    };
                    if sent {
                        counts.metric_exports += 1;
                    } else {
                        counts.metric_exports_failed += 1;
                    }
                    (false, false)
                }
                None => (true, true),
            },
            _ = tick.tick() => (true, false),
        };
        if due && !batch.is_empty() {
            let n = batch.len() as u64;
            let body = export_request(std::mem::take(&mut batch), &scenario).encode_to_vec();
            if post(&http, endpoint.clone(), body).await {
                counts.spans_sent += n;
            } else {
                counts.spans_failed += n;
            }
        }
        if closed {
            return counts;
        }
    }
}
