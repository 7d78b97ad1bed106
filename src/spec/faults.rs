//! Fault rules as written: in a rules file for `redline chaos`, in a spec's `faults:`
//! and in the chaos proxy's admin API. `chaos::rules` validates them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::values::Dur;

/// A rules file for `redline chaos --rules FILE`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    /// Seed of every fault decision: with the same requests, the same faults.
    #[serde(default)]
    pub seed: u64,
    /// Answer `x-redline-fault-*` request headers that ask for a fault on one request.
    #[serde(default)]
    pub allow_header_faults: bool,
    #[serde(default)]
    pub rules: Vec<FaultRuleSpec>,
}

/// One rule: which requests, when, and the one fault it injects. Each matching rule
/// rolls its own probability per request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultRuleSpec {
    /// Names the rule in the fault log, the records and the report.
    #[serde(default)]
    pub name: String,
    /// In a spec's `faults:`, the service the proxy sits in front of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Which requests the rule applies to (default: all).
    #[serde(default, rename = "match")]
    pub matches: MatchSpec,
    /// At most this many faults from this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// Only between these offsets from the start of the run (or of the proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// Hold the request before forwarding it (or the response before its first byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelaySpec>,
    /// Answer with a status, reset the connection, or never answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<AbortSpec>,
    /// Answer 429 with `Retry-After` past a token-bucket rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,
    /// Rewrite a JSON answer so that a list in it is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_result: Option<EmptyResultSpec>,
    /// Hold an event stream before its first event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_first_token: Option<HoldSpec>,
    /// Hold every event of a stream a little longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_drip: Option<HoldSpec>,
    /// End an event stream early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_stream: Option<CutStreamSpec>,
    /// Replace one event's data with text that is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_event: Option<CorruptEventSpec>,
    /// Leave out the stream's end marker (`data: [DONE]`, NDJSON's `done` line, a gRPC
    /// call's status trailers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_done: Option<ChanceSpec>,
    /// Send the response no faster than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<BandwidthSpec>,
    /// Split the response into small writes at random points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceSpec>,
    /// Answer an MCP (JSON-RPC) request with a JSON-RPC error in the server's place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_error: Option<McpErrorSpec>,
    /// Answer an MCP `tools/list` in the server's place with a page of made-up tools
    /// at least this large, as a server with a huge catalogue would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_oversize: Option<McpOversizeSpec>,
}

/// An oversized `tools/list` result answered for the request's id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpOversizeSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    /// The answer's size, at least (e.g. `10MiB`; at most 1GiB).
    pub bytes: super::values::Size,
}

/// A JSON-RPC error answered for the request's id (HTTP 200, as a server answers one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpErrorSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    /// The error's code (default -32603, internal error).
    #[serde(default = "internal_error")]
    pub code: i64,
    /// The error's message (default: which rule injected it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn internal_error() -> i64 {
    -32603
}

/// Which MCP requests a rule applies to: POSTs of a JSON-RPC message (the proxy reads
/// their body, up to 8 MiB, to know).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpMatchSpec {
    /// The JSON-RPC method, e.g. `tools/call`, `tools/list`, `initialize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// For `tools/call`: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// Which requests a rule applies to; every given condition must hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    /// A path prefix (`/v1/`), or a glob over the whole path where `*` is one segment
    /// and `**` any number (`/collections/*/points/search`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP method, e.g. `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Request headers that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// MCP requests by JSON-RPC method and tool (`{ method: tools/call, tool: search }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpMatchSpec>,
}

/// When a rule may inject.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    #[serde(default)]
    pub from: Dur,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Dur>,
}

/// Where a delay is added.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DelayAt {
    /// Before the request is forwarded.
    #[default]
    Request,
    /// Before the response's first byte.
    Response,
}

/// A delay: `ms` fixed, `min_ms`..`max_ms` uniform, or `mean_ms` ± `stddev_ms` normal
/// (clamped at 0).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelaySpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev_ms: Option<f64>,
    #[serde(default)]
    pub at: DelayAt,
}

/// An abort: exactly one of `status`, `reset: true` or `timeout: true`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AbortSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    /// Answer with this status instead of forwarding (a gRPC call gets the code gRPC
    /// maps it to: 503 → `UNAVAILABLE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The answer's body (default: an OpenAI-shaped JSON error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Answer a gRPC call with this status, by name or number (`unavailable`, `14`),
    /// in a trailers-only response (a plain HTTP request gets the HTTP status the code
    /// maps to: `UNAVAILABLE` → 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<String>,
    /// The `grpc-message` with `grpc_status` (default: names the rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_message: Option<String>,
    /// Close the connection without an answer.
    #[serde(default)]
    pub reset: bool,
    /// Hold the request open and never answer.
    #[serde(default)]
    pub timeout: bool,
}

/// A token bucket: `rps` tokens a second, up to `burst` saved.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSpec {
    pub rps: f64,
    /// Default: `rps`, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
}

/// Empty a list in a JSON answer, or a repeated field in a gRPC answer's messages.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyResultSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    /// Dotted path of the list in a JSON answer: `result` (Qdrant, the default),
    /// `data` (embeddings), `hits.hits`.
    #[serde(default = "qdrant_result")]
    pub json_path: String,
    /// Field number of the repeated field in a gRPC answer's messages (default 1:
    /// `result` of Qdrant's `SearchResponse` and `QueryResponse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_field: Option<u32>,
}

fn qdrant_result() -> String {
    "result".into()
}

/// Hold for `ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    pub ms: f64,
}

/// End the stream after `after_events` events: just end it, or in one of the ways the
/// flags name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CutStreamSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    pub after_events: u32,
    /// Send the end marker at the cut (`data: [DONE]`, NDJSON's `done` line, a gRPC OK
    /// status), as a server that stops early but cleanly would.
    #[serde(default)]
    pub done: bool,
    /// Reset the stream at the cut (HTTP/2 `RST_STREAM`; on HTTP/1.1 the connection
    /// closes mid-body), as a server that crashed mid-answer would.
    #[serde(default)]
    pub reset: bool,
    /// End a gRPC stream at the cut with this status in its trailers, by name or number
    /// (`unavailable`, `14`), as a server aborting the call mid-stream would (a stream
    /// that is not gRPC just ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<String>,
    /// The `grpc-message` with `grpc_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_message: Option<String>,
}

/// Corrupt one event.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorruptEventSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
    /// Which event, from 1 (default 1).
    #[serde(default = "first")]
    pub event: u32,
}

fn first() -> u32 {
    1
}

/// Only a chance.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChanceSpec {
    /// Chance per matching request, 0 to 1.
    pub probability: f64,
}

/// A bandwidth cap on the response.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BandwidthSpec {
    /// Chance per matching request, 0 to 1 (default 1).
    #[serde(default = "always")]
    pub probability: f64,
    pub bytes_per_second: u64,
}

/// Small writes at random split points.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SliceSpec {
    /// Chance per matching request, 0 to 1 (default 1).
    #[serde(default = "always")]
    pub probability: f64,
    /// Largest write, in bytes (default 16).
    #[serde(default = "sixteen")]
    pub max_bytes: usize,
}

fn always() -> f64 {
    1.0
}

fn sixteen() -> usize {
    16
}
