//! The spec file: Kubernetes-style YAML documents (`apiVersion`, `kind`, `metadata`,
//! `spec`). Strict: unknown keys are errors naming the nearest valid key; values are
//! validated as they are parsed, so every error has a file, line and field path.
//! The doc comment of each field is its reference documentation.

pub mod error;
pub mod faults;
pub mod feedback;
pub mod flow;
pub mod mcp;
pub mod media;
pub mod pgvector;
pub mod problems;
mod read;
pub mod replicas;
pub mod schema;
pub mod slo;
pub mod streaming;
pub mod values;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use error::{SpecError, SpecErrors};
pub use pgvector::{Distance, PgvectorSpec};
pub use problems::{Problem, Problems};
pub use read::{SpecFile, load, parse};
pub use values::{Dur, Size};

/// The API version this build reads.
pub const API_VERSION: &str = "redline.dev/v1alpha1";

/// Kinds of document this build reads.
pub const KINDS: &[&str] = &["InferenceSpec", "ScaleSpec", "ModelLoadSpec"];

/// `metadata` of a document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// Name of the test; used in reports and the output directory.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `kind: InferenceSpec` — the load: services, what one session sends, the arrival plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InferenceSpec {
    /// Seed of every random choice (arrival times, prompts): same seed, same traffic.
    #[serde(default)]
    pub seed: u64,
    /// The services under test, by name.
    pub services: BTreeMap<String, ServiceSpec>,
    /// What one session sends.
    #[serde(rename = "payloadTemplate")]
    pub payload_template: PayloadTemplate,
    /// Load stages, run in order.
    #[serde(default)]
    pub load: Vec<StageSpec>,
    /// Rates driven by a gauge of GPU memory, instead of `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<feedback::FeedbackSpec>,
    /// Shorthand for one constant-rate stage of `duration` (requests per second).
    #[serde(rename = "qpsTarget", default, skip_serializing_if = "Option::is_none")]
    pub qps_target: Option<f64>,
    /// Duration of the `qpsTarget` stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
    /// Requests whose intended start falls in the first `warmup` are recorded but left
    /// out of the summary.
    #[serde(default)]
    pub warmup: Dur,
    /// Likewise for the last `cooldown` of the schedule.
    #[serde(default)]
    pub cooldown: Dur,
    /// `per_run` (default): every run's trace IDs are its own, so runs never collide
    /// in Jaeger or Tempo; `seeded`: the same spec and seed send the same IDs, to
    /// replay a run exactly. (Span IDs, which the chaos proxy's fault decisions key on,
    /// come from the seed either way.)
    #[serde(default)]
    pub trace_ids: TraceIds,
    /// Client-side time limits of every request.
    #[serde(default)]
    pub timeouts: TimeoutsSpec,
    /// Client-side size limits: what a server may make the client read and count.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// Most requests in flight at once; a request whose time comes while the client is
    /// at the limit is recorded as `dropped` (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// On Ctrl-C or SIGTERM, how long in-flight requests may finish (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Dur>,
    /// Per-request SLOs for goodput: requests per second that succeeded within them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<GoodputSpec>,
    /// Scrape the server's Prometheus metrics during the run (`server_metrics: {}` for
    /// the service's own `/metrics` every second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetricsSpec>,
    /// Fault rules: `redline run` puts a chaos proxy on loopback in front of each named
    /// `service` and sends that service's traffic through it (see `docs/chaos.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<faults::FaultRuleSpec>,
    /// What the run does to its services while it runs: restarts of a `url: balanced`
    /// service's replicas, or a command of yours, at a fixed interval; availability is
    /// measured through them (see docs/availability.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disruptions: Vec<replicas::DisruptionSpec>,
    /// When the run fails (its gate, a streaming SLO's episode, a flow's explained
    /// breach), hand it to `redline heal` with this runbook and model (see docs/heal.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate: Option<RemediateSpec>,
}

/// `remediate:`: the remediation agent a failed run calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemediateSpec {
    /// The runbook: the whitelist of actions.
    pub runbook: std::path::PathBuf,
    /// An OpenAI-compatible server (`http://127.0.0.1:11434` for Ollama, `…/v1`).
    pub model_url: String,
    pub model: String,
    /// The environment variable holding the server's API key, if it needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Run the actions; without it (the default) the plan is only printed and logged.
    #[serde(default)]
    pub execute: bool,
}

/// Where and how often to scrape the server's metrics.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerMetricsSpec {
    /// The Prometheus endpoint (default: the service's URL + `/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Between scrapes (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Dur>,
}

/// A service under test.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Base URL (e.g. `http://127.0.0.1:8000`, with or without `/v1`), `embedded` to
    /// start the built-in simulator in-process, `balanced` for the run's own
    /// balancer in front of `replicas`, or `stdio` for an `api: mcp` server that
    /// redline starts as a child process from `command`.
    pub url: String,
    /// For `url: stdio`: the MCP server's command, one argument per item (no shell),
    /// started once per session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// For `url: balanced`: the replicas, each started by redline when it has a
    /// `command` (see docs/availability.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<replicas::ReplicaSpec>,
    /// For `url: balanced`: how requests are spread and when a replica is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<replicas::BalanceSpec>,
    /// Model name sent in requests (default: the embedded simulator's, else required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Simulator profile for `url: embedded`: `7b`, `7b-multimodal`, `tiny`, `llamacpp`, or a profile file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Which OpenAI API to call.
    #[serde(default)]
    pub api: ApiKind,
    /// Name of an environment variable holding the API key (sent as a bearer token,
    /// never recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Speak HTTP/2 instead of HTTP/1.1: negotiated by ALPN over https (a server that
    /// will not fails the connection), with prior knowledge over http.
    #[serde(default)]
    pub http2: bool,
    /// For an `https://` URL: whom to trust, who we are, whether to check at all.
    /// Without it, the system's root certificates are trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Local tokenizer for counts the server does not report: `cl100k_base` (default
    /// for real servers), `o200k_base`, `sim` (default for `url: embedded`), or the
    /// path (relative to the spec) of the model's Hugging Face `tokenizer.json` or the
    /// directory holding it, for exact counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Count every answer locally, also when the server reports usage (the local count
    /// goes beside the server's in the records, to check a tokenizer against it).
    /// Otherwise only answers the server gives no count for are counted.
    #[serde(default)]
    pub always_count_locally: bool,
    /// Qdrant collection (`api: qdrant`, default `docs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
    /// The table to search (`api: pgvector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgvector: Option<PgvectorSpec>,
    /// For `url: embedded` search and tool tiers: the latency of each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<values::LatencySpec>,
    /// For `url: embedded` tools: the share of calls that fail with 500.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_rate: Option<f64>,
    /// For `url: embedded` search: documents in the seeded corpus (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_size: Option<u32>,
}

/// TLS for an https service.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// A PEM file of the CA certificates to trust instead of the system's (a private
    /// CA), relative to the spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// A client certificate chain (PEM), for servers that ask for one (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM); never copied into any output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    /// Accept any certificate (self-signed, expired, another host's). The report says
    /// the server's identity was not checked.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// `/v1/chat/completions`
    #[default]
    Chat,
    /// `/v1/completions`
    Completions,
    /// Hugging Face TGI's native `/generate` and `/generate_stream`; `body` fields go
    /// under `parameters`.
    Tgi,
    /// Ollama's `/api/chat` (newline-delimited JSON streaming); `model` is required.
    Ollama,
    /// Ollama's `/api/generate`.
    OllamaGenerate,
    /// KServe v2's generate extension (NVIDIA Triton with TensorRT-LLM or vLLM):
    /// `/v2/models/{model}/generate_stream`; `model` is required.
    Kserve,
    /// KServe v2 over gRPC (Triton's `ModelStreamInfer`, `ModelInfer` when not
    /// streamed): `url` is the gRPC port's (`http://host:8001`), always HTTP/2;
    /// `model` is required.
    #[serde(alias = "kserve-grpc")]
    KserveGrpc,
    /// OpenAI's Responses API, `/v1/responses`: typed events, reasoning items,
    /// `previous_response_id` (set it and `store` under `body`).
    Responses,
    /// Anthropic's Messages API, `/v1/messages`: typed events, thinking blocks,
    /// `cache_control`; the key goes as `x-api-key`, `max_tokens` is required.
    Anthropic,
    /// Any HTTP endpoint: `payloadTemplate.request` says what to send.
    Http,
    /// `/v1/embeddings` (flows' `embed` steps).
    Embeddings,
    /// Qdrant's REST API (flows' `search` steps); `collection` names the collection.
    Qdrant,
    /// Qdrant's gRPC API (`qdrant.Points/Search`; flows' `search` steps): `url` is the
    /// gRPC port's (`http://host:6334`), always HTTP/2.
    #[serde(alias = "qdrant-grpc")]
    QdrantGrpc,
    /// PostgreSQL with pgvector (flows' `search` steps): `url` is the connection
    /// string (`postgresql://user@127.0.0.1:5432/db`), `pgvector` the table.
    Pgvector,
    /// Tool endpoints (flows' `tool` steps): `POST <url>/tools/<name>`.
    Tools,
    /// `/v1/images/generations`: `payloadTemplate.image` says what to ask for.
    Images,
    /// `/v1/audio/transcriptions`: `payloadTemplate.audio` gives the clips.
    Transcriptions,
    /// `/v1/audio/speech`: `payloadTemplate.speech` gives the voice.
    Speech,
    /// OpenAI's Realtime API over WebSocket (`/v1/realtime`): one request is one
    /// session; `payloadTemplate.realtime` says what it asks for, `audio` gives the
    /// clips it speaks (else `prompts` the text it types).
    Realtime,
    /// A Model Context Protocol server over Streamable HTTP (`url` is the endpoint,
    /// e.g. `http://host:port/mcp`): `payloadTemplate.mcp` gives the calls.
    Mcp,
}

/// What one session sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PayloadTemplate {
    /// Where prompts come from (OpenAI APIs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<PromptsSpec>,
    /// The request to send (`api: http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HttpRequestSpec>,
    /// Image requests (`api: images`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<media::ImageSpec>,
    /// The clips to transcribe (`api: transcriptions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<media::AudioSpec>,
    /// Speech requests (`api: speech`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<media::SpeechSpec>,
    /// Realtime sessions (`api: realtime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime: Option<media::RealtimeSpec>,
    /// MCP calls (`api: mcp`): the operations and their weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<mcp::McpSpec>,
    /// Requests to several services on one arrival process, each drawn by weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mix: Vec<media::MixEntrySpec>,
    /// The service to call (default: the only service, or the one named `llm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Stream the answer (SSE) — needed for TTFT and inter-token latency.
    #[serde(default = "yes")]
    pub stream: bool,
    /// Ask for token usage in the stream (`stream_options.include_usage`).
    #[serde(default = "yes")]
    pub include_usage: bool,
    /// Fields merged into every request body (e.g. `temperature: 0`, `ignore_eos: true`).
    #[serde(default)]
    pub body: serde_json::Map<String, serde_json::Value>,
    /// Multi-turn conversations (chat only): each arrival or closed-loop slot runs a
    /// session of `turns` requests, each sending the history with the real answers so
    /// far; one W3C trace per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionSpec>,
    /// A RAG or agent chain: each arrival (or closed-loop slot) runs these steps in
    /// order, as one session with one trace. Without it, one request per arrival.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow: Vec<flow::FlowStepSpec>,
    /// Ends a flow session as `fallback` after consecutive tool timeouts.
    #[serde(
        rename = "circuitBreaker",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub circuit_breaker: Option<flow::CircuitBreakerSpec>,
}

/// A multi-turn session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Turns per session: a number, `{min, max}` or `{mean, stddev}`.
    pub turns: LengthSpec,
    /// Pause between an answer and the next turn (a user reading and typing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<Dur>,
    /// Where the conversation is kept: `resend` (default) sends the whole history
    /// each turn; `server` (OpenAI's Responses API) sends only the new turn with the
    /// last answer's `previous_response_id`, and the server keeps the rest.
    #[serde(default)]
    pub history: HistoryMode,
}

/// Where a session's history is kept.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HistoryMode {
    /// The client resends the whole conversation each turn.
    #[default]
    Resend,
    /// The server keeps it (`previous_response_id`); only the new turn is sent.
    Server,
}

/// A plain HTTP request, for `api: http` services.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequestSpec {
    /// HTTP method (default GET).
    #[serde(default = "get")]
    pub method: String,
    /// Path and query, appended to the service URL (default `/`).
    #[serde(default = "root")]
    pub path: String,
    /// Request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request body, sent as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The status a good answer has (default: any 2xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<u16>,
}

fn get() -> String {
    "GET".into()
}

fn root() -> String {
    "/".into()
}

fn yes() -> bool {
    true
}

/// Prompt sources: exactly one of `synthetic` or `file`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptsSpec {
    /// Generated prompts of given token lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticSpec>,
    /// A JSONL file (relative to the spec file): one `{"prompt": …}` or
    /// `{"messages": […]}` per line, with an optional `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// A dataset with options: JSONL, ShareGPT JSON or CSV, length filters, order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetSpec>,
    /// Templates learned by `redline datagen`: prompts drawn by the templates'
    /// weights, slots filled from the values seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub templates: Option<TemplatesSpec>,
}

/// A prompt dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// The file (relative to the spec file).
    pub file: PathBuf,
    /// `jsonl`, `sharegpt` or `csv` (default: by extension — `.json` is ShareGPT,
    /// `.csv` is CSV, anything else JSONL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DatasetFormat>,
    /// CSV: the column holding the prompt (default `prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_column: Option<String>,
    /// CSV: a column holding each request's `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_column: Option<String>,
    /// `sequential` (default, then again from the start), `shuffle` (each record once
    /// per pass, seeded order) or `random` (with replacement, seeded).
    #[serde(default)]
    pub order: DatasetOrder,
    /// Send only prompts of at least / at most this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_input_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u32>,
    /// Count and skip records that cannot be read, instead of stopping (the count is in
    /// the report).
    #[serde(default)]
    pub skip_invalid: bool,
    /// The answer budget (`max_tokens`) of records that carry none of their own;
    /// without it such records send no `max_tokens` and the server decides (llama.cpp
    /// generates until its context is full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<LengthSpec>,
    /// Grade each answer against its line's `expected` (JSONL datasets): correct,
    /// wrong or unparsed, with accuracy in the summary and as an SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grader: Option<GraderSpec>,
}

/// How a graded dataset's answers are judged (docs/metrics.md, "Graded answers").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum GraderSpec {
    /// The answer is the `expected` text, trimmed, its whitespace collapsed.
    Exact {
        #[serde(default)]
        case_sensitive: bool,
        /// Drop ASCII punctuation from both before comparing.
        #[serde(default)]
        ignore_punctuation: bool,
    },
    /// The answer contains a match of the `expected` pattern.
    Regex,
    /// The last number in the answer is within `tolerance` of the `expected` one.
    Numeric {
        #[serde(default)]
        tolerance: f64,
    },
    /// The letter the answer settles on (as lm-eval extracts it) is the `expected` one.
    Choice,
    /// The answer is JSON valid against `schema` (or each line's own `schema`).
    JsonSchema {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<serde_json::Value>,
    },
    /// The answer's tool calls, by BFCL's AST rule, against the line's `tools` and
    /// its `expected` calls (BFCL's `ground_truth` shape; `[]`: no call is due).
    ToolAst,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DatasetFormat {
    Jsonl,
    Sharegpt,
    Csv,
    /// A BFCL question file (`BFCL_v4_<category>.json`, its possible answers in
    /// `possible_answer/` beside it), or a category's name to read it from the
    /// installed `bfcl-eval`; graded by `tool_ast`.
    Bfcl,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DatasetOrder {
    #[default]
    Sequential,
    Shuffle,
    Random,
}

/// A template file from `redline datagen`, and the answer lengths to ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplatesSpec {
    /// The file (relative to the spec file).
    pub file: PathBuf,
    /// Answer length in tokens (sent as `max_tokens`).
    pub output_tokens: LengthSpec,
}

/// Synthetic prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Prompt length in tokens.
    pub input_tokens: LengthSpec,
    /// Answer length in tokens (sent as `max_tokens`).
    pub output_tokens: LengthSpec,
    /// Tokens of a shared prefix (system prompt) at the start of every prompt.
    #[serde(default)]
    pub prefix_tokens: u32,
    /// How many distinct shared prefixes; each request draws one.
    #[serde(default = "one")]
    pub prefixes: u32,
}

fn one() -> u32 {
    1
}

/// A token length: a number, `{mean, stddev}` (normal), or `{min, max}` (uniform);
/// `min`/`max` also bound a normal draw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum LengthSpec {
    Fixed(u32),
    Normal {
        mean: f64,
        stddev: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
    Uniform {
        min: u32,
        max: u32,
    },
}

/// One load stage: open loop (`rate`, with an `arrival` process), closed loop
/// (`concurrency`) or a `sweep`, bounded by `duration` and/or `requests`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// Find the rate the service can hold: one session at a time, then as many as
    /// `throughput_concurrency`, then `rates` open-loop rates evenly between the two
    /// achieved rates (GuideLLM's sweep). `duration`/`requests` bound each point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepSpec>,
    /// Replay a timestamped trace (Mooncake JSONL: `timestamp` ms, `input_length`,
    /// `output_length`, `hash_ids`) on its own schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplaySpec>,
    /// Arrival process of an open-loop stage (default poisson).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalKind>,
    /// Requests per second (open loop); the start rate of a ramp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Ramp linearly from `rate` to this rate over the stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_to: Option<f64>,
    /// Gamma arrivals: shape factor; 1 is Poisson, below 1 burstier (vLLM's
    /// `--burstiness`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// Open loop: most requests in flight; a request whose time comes at the cap
    /// waits for a slot (its lag is recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Closed loop: sessions running back to back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Closed loop: pause between a session's requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<Dur>,
    /// How long the stage schedules requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
    /// Most requests the stage schedules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// A trace to replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// The trace (relative to the spec file).
    pub file: PathBuf,
    /// Time scale: 2 replays twice as fast (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<f64>,
    /// Tokens each `hash_ids` entry stands for (default 512, as in Mooncake traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_tokens: Option<u32>,
}

/// A rate sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Open-loop rates between the synchronous and the throughput point (default 8).
    #[serde(default = "sweep_rates")]
    pub rates: u32,
    /// Sessions of the throughput point, which finds the most the service completes
    /// per second (default 256).
    #[serde(default = "sweep_concurrency")]
    pub throughput_concurrency: u32,
}

fn sweep_rates() -> u32 {
    8
}

fn sweep_concurrency() -> u32 {
    256
}

/// Per-request SLOs that make a request count toward goodput (vLLM's `--goodput`): it
/// succeeded and met every bound given.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoodputSpec {
    /// Send → first content token at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<Dur>,
    /// Time per output token after the first at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot: Option<Dur>,
    /// Send → last byte at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e: Option<Dur>,
    /// The answer must also be graded correct: a request that was fast and wrong is
    /// not good (a dataset with a `grader`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub correct: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    Constant,
    Poisson,
    Gamma,
}

/// Client-side time limits.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsSpec {
    /// TCP connect (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<Dur>,
    /// Send to the first content token (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token: Option<Dur>,
    /// Longest silence between stream events (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_tokens: Option<Dur>,
    /// Send to last byte (default 600s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Dur>,
}

/// Whose trace IDs a run's requests carry.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TraceIds {
    #[default]
    PerRun,
    Seeded,
}

/// Client-side size limits, so no answer costs the client more than it can afford.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Largest response (a whole body, or one stream event) read; a larger one fails
    /// as `too_large` (default 64MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<Size>,
    /// Largest answer counted locally when the server reports no usage; past it the
    /// record's `token_source` is `skipped`, with the reason (default 2MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_local_count_bytes: Option<Size>,
}

/// `kind: ScaleSpec` — the gate (`sloThresholds`) and replica bounds.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScaleSpec {
    /// Fewest replicas the service may run: `redline advise` keeps its replica count
    /// at or above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<u32>,
    /// Most replicas the service may run: `redline advise` keeps its replica count at
    /// or below it (and says when the target rate needs more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// SLOs by metric, k6-style: `ttft: { p99: "<= 350ms" }`, `pass_rate: ">= 99.995%"`,
    /// plus `preset`, `confidence`, `abort_on_fail` and `delay`; judged by
    /// [`crate::slo`].
    #[serde(default)]
    pub slo_thresholds: slo::SloThresholds,
    /// SLOs watched window by window while the run goes: sliding windows, a drift
    /// detector per series, WARN/CRITICAL episodes and what to do when one opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<streaming::StreamingSpec>,
}

/// `kind: ModelLoadSpec` — the model a test loads, as `redline advise` sizes its pods
/// (start-up itself is measured by `redline coldstart`; see docs/coldstart.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelLoadSpec {
    /// The model, e.g. `Qwen/Qwen2.5-7B-Instruct`.
    pub model_ref: String,
    /// Resource limits by name (`memory: 24Gi`, `gpuMemory: 24Gi`, `cpu: "8"`);
    /// `memory` is the VerticalPodAutoscaler's `maxAllowed` in `redline advise`.
    #[serde(default)]
    pub resource_limits: BTreeMap<String, String>,
    /// How the deployment's pods start: `cold` (default: a fresh node, weights from
    /// the disk; pods need weights + peak activations × 1.3) or `warm` (weights cached;
    /// pods may go down to resident static memory × 1.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_policy: Option<CachePolicy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CachePolicy {
    Cold,
    Warm,
}
