//! Traces: the W3C trace context redline sends, its own spans exported over OTLP/HTTP
//! with `gen_ai.*` metrics, the OTLP receiver behind `redline collect`, and the
//! dependency graph built from stored spans.
//!
//! # Layout
//! - [`context`] — the W3C `traceparent`, built and read
//! - [`export`] — redline's spans over OTLP/HTTP
//! - [`genai`] — OpenTelemetry's `gen_ai.*` client metrics
//! - [`receiver`] — the OTLP/HTTP trace receiver
//! - [`graph`] — the dependency graph of traces

pub mod context;
pub mod export;
pub mod genai;
pub mod graph;
pub mod receiver;
