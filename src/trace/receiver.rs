//! An OTLP/HTTP trace receiver (`redline collect`): the services under test send their
//! spans here (protobuf or JSON, `POST /v1/traces`), and each export is appended to
//! `spans.jsonl` as one OTLP/JSON line (metric exports, `POST /v1/metrics`, to
//! `metrics.jsonl`), which `redline graph` reads and joins to a
//! run's records by trace ID. Memory stays bounded: a request body is capped, spans go
//! to the file as they arrive, and past `max_spans` they are dropped and counted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde::Serialize;

/// Largest export accepted; larger ones get 413 and are counted.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// What the receiver counted.
#[derive(Debug, Default, Serialize)]
pub struct CollectStats {
    /// Export requests accepted.
    pub requests: AtomicU64,
    pub spans_stored: AtomicU64,
    /// Spans past `max_spans`: dropped, counted.
    pub spans_dropped: AtomicU64,
    /// Exports that were not OTLP (400) or too large (413).
    pub rejected: AtomicU64,
    /// Metric exports stored in `metrics.jsonl`.
    pub metric_exports: AtomicU64,
}

impl CollectStats {
    pub fn counts(&self) -> crate::trace::graph::ReceiverCounts {
        crate::trace::graph::ReceiverCounts {
            requests: self.requests.load(Ordering::Relaxed),
            spans_stored: self.spans_stored.load(Ordering::Relaxed),
            spans_dropped: self.spans_dropped.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// The receiver's state: where spans go and what it counted.
pub struct SpanStore {
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    pub path: PathBuf,
    metrics_out: Mutex<std::io::BufWriter<std::fs::File>>,
    /// `metrics.jsonl`: OTLP/JSON metric exports, one a line.
    pub metrics_path: PathBuf,
    max_spans: u64,
    pub stats: CollectStats,
}

impl SpanStore {
    /// Appends to `DIR/spans.jsonl`.
    pub fn create(dir: &Path, max_spans: u64) -> std::io::Result<SpanStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(crate::folder::RunFolder::SPANS);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let metrics_path = dir.join("metrics.jsonl");
        let metrics_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)?;
        Ok(SpanStore {
            out: Mutex::new(std::io::BufWriter::new(file)),
            path,
            metrics_out: Mutex::new(std::io::BufWriter::new(metrics_file)),
            metrics_path,
            max_spans,
            stats: CollectStats::default(),
        })
    }

    /// Stores one export; `Err` is the reason it is not OTLP.
    pub fn accept(&self, content_type: &str, body: &[u8]) -> Result<u64, String> {
        let request = decode_traces(content_type, body)?;
        let spans: u64 = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum();
        let stored = self.stats.spans_stored.load(Ordering::Relaxed);
        if stored + spans > self.max_spans {
            self.stats.spans_dropped.fetch_add(spans, Ordering::Relaxed);
            return Ok(0);
        }
        let line = serde_json::to_string(&request).map_err(|e| e.to_string())?;
        let mut out = self.out.lock().expect("the span writer holds no invariant");
        // A full disk loses spans, counted as dropped.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            self.stats.spans_dropped.fetch_add(spans, Ordering::Relaxed);
            return Ok(0);
        }
        self.stats.spans_stored.fetch_add(spans, Ordering::Relaxed);
        Ok(spans)
    }
}

/// An OTLP trace export, as JSON (`application/json…`) or protobuf (anything else).
pub fn decode_traces(content_type: &str, body: &[u8]) -> Result<ExportTraceServiceRequest, String> {
    if content_type.starts_with("application/json") {
        serde_json::from_slice(body).map_err(|e| format!("not OTLP/JSON: {e}"))
    } else {
        ExportTraceServiceRequest::decode(body).map_err(|e| format!("not OTLP protobuf: {e}"))
    }
}

/// An OTLP metrics export, as JSON (`application/json…`) or protobuf.
pub fn decode_metrics(
    content_type: &str,
    body: &[u8],
) -> Result<ExportMetricsServiceRequest, String> {
    if content_type.starts_with("application/json") {
        serde_json::from_slice(body).map_err(|e| format!("not OTLP/JSON metrics: {e}"))
    } else {
        ExportMetricsServiceRequest::decode(body)
            .map_err(|e| format!("not OTLP protobuf metrics: {e}"))
    }
}

impl SpanStore {
    /// Stores one metrics export; `Err` is the reason it is not OTLP.
    pub fn accept_metrics(&self, content_type: &str, body: &[u8]) -> Result<(), String> {
        let request = decode_metrics(content_type, body)?;
        let line = serde_json::to_string(&request).map_err(|e| e.to_string())?;
        let mut out = self
            .metrics_out
            .lock()
            .expect("the metrics writer holds no invariant");
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot store the metrics: {e}"))?;
        self.stats.metric_exports.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

async fn metrics(
    State(store): State<Arc<SpanStore>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/x-protobuf")
        .to_owned();
    match body
        .map_err(|e| e.to_string())
        .and_then(|b| store.accept_metrics(&content_type, &b))
    {
        Ok(()) => StatusCode::OK.into_response(),
        Err(reason) => {
            store.stats.rejected.fetch_add(1, Ordering::Relaxed);
            (StatusCode::BAD_REQUEST, reason).into_response()
        }
    }
}

pub fn app(store: Arc<SpanStore>) -> Router {
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .route("/stats", get(stats))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(store)
}

async fn traces(
    State(store): State<Arc<SpanStore>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let Ok(body) = body else {
        store.stats.rejected.fetch_add(1, Ordering::Relaxed);
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("exports are limited to {MAX_BODY_BYTES} bytes"),
        )
            .into_response();
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/x-protobuf");
    match store.accept(content_type, &body) {
        Ok(_) => {
            store.stats.requests.fetch_add(1, Ordering::Relaxed);
            // An empty ExportTraceServiceResponse, in the request's encoding.
            if content_type.starts_with("application/json") {
                ([(header::CONTENT_TYPE, "application/json")], "{}").into_response()
            } else {
                (
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
                    .into_response()
            }
        }
        Err(reason) => {
            store.stats.rejected.fetch_add(1, Ordering::Relaxed);
            (StatusCode::BAD_REQUEST, reason).into_response()
        }
    }
}

async fn stats(State(store): State<Arc<SpanStore>>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::to_value(&store.stats).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn export(spans: usize) -> ExportTraceServiceRequest {
        let attribute = |key: &str, value: &str| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.into())),
            }),
            ..KeyValue::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![attribute("service.name", "rag")],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: (0..spans)
                        .map(|i| Span {
                            trace_id: vec![1; 16],
                            span_id: vec![i as u8 + 1; 8],
                            parent_span_id: if i == 0 { vec![] } else { vec![1; 8] },
                            name: format!("op{i}"),
                            start_time_unix_nano: 1_000,
                            end_time_unix_nano: 2_000_000,
                            attributes: vec![attribute("llm.operation_type", "retrieve")],
                            ..Span::default()
                        })
                        .collect(),
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    #[test]
    fn protobuf_and_json_exports_are_stored_as_otlp_json_the_graph_reads() {
        let dir = std::env::temp_dir().join(format!("redline-collect-{}", std::process::id()));
        let store = SpanStore::create(&dir, 5).unwrap();
        let protobuf = export(3).encode_to_vec();
        assert_eq!(store.accept("application/x-protobuf", &protobuf), Ok(3));
        let json = serde_json::to_vec(&export(2)).unwrap();
        assert_eq!(store.accept("application/json", &json), Ok(2));
        // Past the bound: dropped and counted, not stored.
        assert_eq!(store.accept("application/x-protobuf", &protobuf), Ok(0));
        assert_eq!(store.stats.spans_dropped.load(Ordering::Relaxed), 3);
        assert!(
            store
                .accept("application/x-protobuf", b"\xff\xff garbage")
                .is_err()
        );
        assert!(
            store
                .accept("application/json", b"{\"resourceSpans\": 5}")
                .is_err()
        );

        let text = std::fs::read_to_string(&store.path).unwrap();
        let spans = crate::trace::graph::parse_spans(&text).unwrap();
        assert_eq!(spans.len(), 5);
        assert_eq!(spans[0].service, "rag");
        assert_eq!(spans[0].trace_id, "01".repeat(16));
        assert_eq!(spans[1].node(), "rag/retrieve");
        let graph = crate::trace::graph::build(&spans);
        assert_eq!(graph.edges.len(), 1, "children of op0, by operation");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
