//! The outcome record: one per scheduled request, whatever happened to it, streamed to
//! `records.jsonl` as requests complete. Times are microseconds since the run started.

use serde::{Deserialize, Serialize};

mod line;

/// How a scheduled request ended. Exactly one per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// Failed: see `error` for the stage and kind.
    Error,
    /// Stopped by a client-side timeout: see `error.stage`.
    Timeout,
    /// In flight when the run was interrupted and the drain ran out of time.
    Cancelled,
    /// Never sent: a client limit (in-flight cap) refused it at its intended time.
    Dropped,
}

/// Where in a request's life a failure happened.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailStage {
    Connect,
    Send,
    FirstByte,
    FirstToken,
    Stream,
    Decode,
    Assert,
    Client,
}

/// A typed failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Failure {
    pub stage: FailStage,
    /// e.g. `http_5xx`, `http_429`, `timeout`, `connect_refused`, `reset`,
    /// `truncated`, `invalid_json`, `invalid_http`, `unexpected_encoding`, `too_large`,
    /// `empty_output`, `stream_error`, `in_flight_limit`.
    pub kind: String,
    pub message: String,
    /// Where it began, as far as the client can tell: `chaos:RULE` for a fault the
    /// chaos proxy injected, the service a flow step called, `target` for the run's
    /// one target, `client` for a request the client itself stopped or never sent.
    /// (`redline explain` goes further, into the services' spans.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// Which part of the run a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Warmup,
    Measure,
    Cooldown,
}

/// Where a token count came from, most trustworthy first.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage`.
    Usage,
    /// The content events of a server that sends one token per event (seen to, over
    /// the run: answers cut by `max_tokens` had exactly that many events).
    Events,
    /// The server's own tokenizer endpoint (`/tokenize`), counting the received text.
    ServerTokenizer,
    /// The tokenizer the spec named (`tokenizer:`), counting the received text.
    Tokenizer,
    /// The default local tokenizer: an estimate.
    Estimated,
    /// Not counted: the answer was longer than `limits.max_local_count_bytes`.
    Skipped,
}

impl TokenSource {
    /// How a count of this source was made, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            TokenSource::Usage => "from the server's usage",
            TokenSource::Events => "by content events (one token each)",
            TokenSource::ServerTokenizer => "by the server's /tokenize",
            TokenSource::Tokenizer => "by the named tokenizer",
            TokenSource::Estimated => "estimated locally (the server sent no usage)",
            TokenSource::Skipped => "not counted (over limits.max_local_count_bytes)",
        }
    }
}

/// `30 by content events (one token each), 2 not counted (…)`: where the output
/// counts came from, when not all from the server's usage.
pub fn describe_sources(sources: &std::collections::BTreeMap<TokenSource, u64>) -> Option<String> {
    if sources.keys().all(|s| *s == TokenSource::Usage) {
        return None;
    }
    let parts: Vec<String> = sources
        .iter()
        .map(|(source, n)| format!("{n} {}", source.describe()))
        .collect();
    Some(parts.join(", "))
}

/// How the output counts of answers without `usage` were settled at the end of a
/// run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenSettlement {
    /// Answers the server gave no count for.
    pub uncounted: u64,
    /// The source their counts came from in the end.
    pub source: TokenSource,
    /// Answers cut by `max_tokens` whose event count matched it, and did not.
    pub events_agree: u64,
    pub events_disagree: u64,
    /// The server's tokenizer endpoint, when one was found and used.
    pub server_tokenizer: Option<String>,
}

/// The simulator's (or any server's) own account of the request, when it sent one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerTruth {
    pub arrival_us: u64,
    pub scheduled_us: u64,
    pub first_token_us: u64,
    pub finish_us: u64,
    pub preemptions: u32,
    pub cached_prompt_tokens: u32,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// FNV-1a of the request body as the server received it.
    #[serde(default)]
    pub request_hash: u64,
    /// When the server handed the first token's chunk to the connection, on the same
    /// clock: what lies after `first_token_us` is the server's own delivery (the
    /// simulator writes a whole step's tokens one stream after another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_sent_us: Option<u64>,
    /// The first answer token, after the model's reasoning (absent: no reasoning, or
    /// no answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer_us: Option<u64>,
    /// Of the completion tokens, those the model reasoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
}

/// What the server said of its own time for a request, where its API says it:
/// Ollama's durations, TGI's `x-*-time` headers. Beside the client's marks, not in
/// place of them: the difference is queueing and transport the server cannot see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerReported {
    /// From the server receiving the request to it finishing the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_us: Option<u64>,
    /// Waiting for a batch slot (TGI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_us: Option<u64>,
    /// Loading the model (Ollama; near zero when it was loaded already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_us: Option<u64>,
    /// Evaluating the prompt (Ollama's `prompt_eval_duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_us: Option<u64>,
    /// Generating (Ollama's `eval_duration`; TGI's inference time, prefill included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_us: Option<u64>,
    /// Mean time per generated token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_per_token_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
}

/// The shared prefix (system prompt) a synthetic request began with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PrefixMark {
    /// Which of the workload's prefixes.
    pub id: u32,
    pub tokens: u32,
}

/// Where a request sits in its session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionMark {
    /// The session, numbered from 0 in the order sessions started.
    pub id: u64,
    /// The turn, from 1.
    pub turn: u32,
    /// The W3C trace ID every request of the session carries (`traceparent`).
    pub trace_id: String,
    /// The workload and seed the session was generated from: with the spec, enough to
    /// replay it exactly.
    pub snapshot: String,
}

/// The response header in which the chaos proxy names the faults it injected into a
/// request: `rule=fault, …`.
pub const FAULT_HEADER: &str = "x-redline-fault";

/// A fault the chaos proxy injected into a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InjectedFault {
    /// The rule that fired (`header` for a fault a request header asked for).
    pub rule: String,
    /// What it did: `delay`, `abort`, `rate_limit`, `empty_result`, `stall_first_token`,
    /// `token_drip`, `cut_stream`, `corrupt_event`, `drop_done`, `bandwidth`, `slice`.
    pub fault: String,
    /// The delay or hold it added, for faults that add one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<f64>,
}

/// What an image, transcription or speech request carried and got back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaMark {
    pub kind: MediaKind,
    /// Seconds of audio: the clip sent (transcription) or the clip received (speech).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_s: Option<f64>,
    /// Images received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<u32>,
    /// Bytes of media received: the decoded images, the audio.
    pub bytes: u64,
    /// Words of the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<u32>,
    /// Realtime: seconds of audio sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_in_s: Option<f64>,
    /// Realtime: when the input was done (the spoken input's commit, or the typed
    /// input's `response.create`, as it was sent), run microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_done_us: Option<u64>,
    /// Realtime: the input transcript's first delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_transcript_us: Option<u64>,
    /// Realtime: the answer's first audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audio_us: Option<u64>,
}

/// The kinds of media request (docs/metrics.md, "Media").
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// `POST /v1/images/generations`.
    Image,
    /// `POST /v1/audio/transcriptions`.
    Transcription,
    /// `POST /v1/audio/speech`.
    Speech,
    /// A Realtime session over WebSocket (`/v1/realtime`).
    Realtime,
}

impl MediaKind {
    pub fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Transcription => "transcription",
            MediaKind::Speech => "speech",
            MediaKind::Realtime => "realtime",
        }
    }
}

impl MediaMark {
    /// Nothing sent or received yet.
    pub fn new(kind: MediaKind) -> MediaMark {
        MediaMark {
            kind,
            audio_s: None,
            images: None,
            bytes: 0,
            words: None,
            audio_in_s: None,
            input_done_us: None,
            first_transcript_us: None,
            first_audio_us: None,
        }
    }

    /// When the request's answer was asked for: a Realtime session's input done, else
    /// the send.
    pub fn asked_us(&self, record: &Record) -> Option<u64> {
        self.input_done_us.or(record.sent_us)
    }

    /// Send (a Realtime session: input done) to the last byte.
    pub fn latency_us(&self, record: &Record) -> Option<u64> {
        Some(record.last_byte_us?.saturating_sub(self.asked_us(record)?))
    }

    /// Audio seconds per second of the request: a transcription's RTFx, or how many
    /// times faster than real time speech was made, over [`latency_us`](Self::latency_us).
    pub fn realtime_factor(&self, record: &Record) -> Option<f64> {
        let (audio_s, latency) = (self.audio_s?, self.latency_us(record)?);
        (latency > 0).then(|| audio_s / (latency as f64 / 1e6))
    }

    /// Asked to the first audio (speech: the first byte).
    pub fn time_to_first_audio_us(&self, record: &Record) -> Option<u64> {
        let first = match self.kind {
            MediaKind::Realtime => self.first_audio_us?,
            _ => record.first_byte_us?,
        };
        Some(first.saturating_sub(self.asked_us(record)?))
    }

    /// Realtime: input done to the transcript's first delta.
    pub fn time_to_first_transcript_us(&self) -> Option<u64> {
        Some(
            self.first_transcript_us?
                .saturating_sub(self.input_done_us?),
        )
    }
}

/// How a graded request's answer was judged (docs/metrics.md, "Graded answers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GradeVerdict {
    Correct,
    /// Read, and not the expected answer.
    Wrong,
    /// Not readable as an answer of its kind: no number, no choice letter, not JSON.
    Unparsed,
}

/// A graded request's verdict, and why when it is not correct (never the answer's
/// text: records carry no prompt or answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Grade {
    pub verdict: GradeVerdict,
    /// A graded tool call's failure, by kind (`tool_ast`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<GradeBucket>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Why a graded tool call was not correct, in the BFCL AST checker's terms.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GradeBucket {
    /// More or fewer calls than expected (a call missing where one was due).
    WrongCount,
    WrongTool,
    /// A required parameter, or an expected one with no default, not given.
    MissingParam,
    /// A parameter the tool or the expected call does not have.
    UnexpectedParam,
    ParamType,
    /// A value none of the possible answers allows.
    ParamValue,
    /// A call where none was due (BFCL's irrelevance).
    ShouldNotHaveCalled,
    /// No call, or arguments that are not a JSON object.
    Unparsed,
}

impl GradeBucket {
    pub const ALL: [GradeBucket; 8] = [
        GradeBucket::WrongCount,
        GradeBucket::WrongTool,
        GradeBucket::MissingParam,
        GradeBucket::UnexpectedParam,
        GradeBucket::ParamType,
        GradeBucket::ParamValue,
        GradeBucket::ShouldNotHaveCalled,
        GradeBucket::Unparsed,
    ];

    /// The bucket's name, as records write it.
    pub fn name(self) -> &'static str {
        match self {
            GradeBucket::WrongCount => "wrong_count",
            GradeBucket::WrongTool => "wrong_tool",
            GradeBucket::MissingParam => "missing_param",
            GradeBucket::UnexpectedParam => "unexpected_param",
            GradeBucket::ParamType => "param_type",
            GradeBucket::ParamValue => "param_value",
            GradeBucket::ShouldNotHaveCalled => "should_not_have_called",
            GradeBucket::Unparsed => "unparsed",
        }
    }
}

/// Where a request sits in a flow (a RAG or agent session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepMark {
    /// The step's name in the flow.
    pub name: String,
    /// `embed`, `search`, `chat`, `tool` or `http`.
    pub kind: String,
    /// The service (under `spec.services`) the step called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The request's place in its session, from 1 (`agent_step_seq`).
    pub agent_step_seq: u32,
    /// For tool calls: the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For tool calls: FNV-1a of the tool name and its canonical (key-sorted) JSON
    /// arguments, so repeated identical calls can be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_hash: Option<String>,
    /// For searches: hits returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<u32>,
    /// For searches whose query is in the ground truth: recall@k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
}

/// For an MCP call: what it called and what its session went through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpMark {
    /// The JSON-RPC method: `tools/call`, `resources/read`, `tools/list`, `ping`…
    pub method: String,
    /// The tool or prompt called, or the resource read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When the call opened its session: the handshake's time (`initialize` and
    /// `notifications/initialized`), microseconds, spent before the call was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_us: Option<u64>,
    /// The server had dropped the session (404 on its id): the call initialized a new
    /// one and was sent again, once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reinitialized: bool,
    /// Progress notifications received before the result.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress: u32,
    /// For a list: the pages fetched (following `nextCursor`) and the items listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u32>,
    /// The session was ended after the call (`DELETE`): session churn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended_session: bool,
    /// Times its SSE answer ended or broke before the result and was resumed (a GET
    /// with `Last-Event-ID`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resumed: u32,
    /// Messages the server sent on the session's standalone GET stream (`listen`)
    /// since the session's previous call: what it said outside any call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heard: u32,
}

impl McpMark {
    /// The mark of a call of `method` (on `name`), before anything happened to it.
    pub fn called(method: &str, name: Option<&str>) -> McpMark {
        McpMark {
            method: method.to_owned(),
            name: name.map(str::to_owned),
            handshake_us: None,
            reinitialized: false,
            progress: 0,
            pages: None,
            items: None,
            ended_session: false,
            resumed: 0,
            heard: 0,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How a flow session ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SessionOutcome {
    Ok,
    /// A step failed (its record says how).
    Failed,
    /// The circuit breaker opened: the remaining steps were skipped.
    Fallback,
    /// Stopped by the run ending or an in-flight limit before its steps were done.
    Cancelled,
}

/// Why a session fell back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FallbackReason {
    /// The rule that fired: `consecutive_tool_timeouts`.
    pub rule: String,
    /// The tool whose call timed out last.
    pub tool: String,
    /// Consecutive timeouts seen.
    pub timeouts: u32,
    /// Steps not sent.
    pub skipped: Vec<String>,
}

/// The end of a flow session, on its last record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionEnd {
    pub outcome: SessionOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<FallbackReason>,
    /// Requests the session sent.
    pub requests: u32,
    /// From the session's intended start to its last request's end, microseconds.
    pub e2e_us: u64,
}

/// One request's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    /// Position in the arrival schedule, from 0. In a segment of a run (`--segment`),
    /// open-loop and replay requests keep their place in the whole schedule; requests
    /// numbered as they happen (closed loops, sessions) start at the segment's own base
    /// (docs/segments.md).
    pub seq: u64,
    /// Index of the stage that scheduled it, as run: the summary's `stages` (a sweep
    /// runs as several).
    pub stage: u32,
    pub phase: Phase,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// The conversation it belongs to, for multi-turn sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionMark>,
    /// The shared prefix its prompt began with, for prefix workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PrefixMark>,
    /// The W3C `traceparent` it carried: its trace and span IDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Faults the chaos proxy injected into it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<InjectedFault>,
    /// Its step, for requests of a flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepMark>,
    /// For image, transcription and speech requests: what was sent and received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaMark>,
    /// For MCP calls: the method and the session's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpMark>,
    /// On a flow session's last record: how the session ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_end: Option<SessionEnd>,
    /// For a graded dataset's requests that were answered: the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grade: Option<Grade>,
    /// When the schedule meant it to start.
    pub intended_us: u64,
    /// When it was handed to the connection (absent if never sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_us: Option<u64>,
    /// TCP connect time, microseconds, on the first request a new connection carried
    /// (requests on a reused connection paid none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<u64>,
    /// TLS handshake time, microseconds, likewise (https only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_byte_us: Option<u64>,
    /// First event carrying generated content of any kind (text, reasoning, tool call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_token_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_reasoning_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_answer_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_token_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_byte_us: Option<u64>,
    /// When a request that failed before its last byte was given up: the reset, the
    /// refusal, the timeout, the cancel. Without it such a request would seem to end
    /// at its send, before the restart that broke its connection or a whole timeout
    /// early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Content-bearing events received.
    pub content_events: u32,
    /// Mean gap between content events, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_mean_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_source: Option<TokenSource>,
    /// Why the count is what it is, when that needs saying (a skipped count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_note: Option<String>,
    /// The `max_tokens` the request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Local count of the output text, kept beside the server's when both exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens_local: Option<u32>,
    /// Of the output tokens, the reasoning ones: as the server's usage says
    /// (`reasoning_tokens`), else counted from the reasoning text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
    /// Of the input tokens, those the server says its prefix cache served (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    /// Of the input tokens, those the server says it wrote to its cache (Anthropic's
    /// `cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerTruth>,
    /// The server's own timings, for APIs that report them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_reported: Option<ServerReported>,
    /// Gaps between consecutive content events, microseconds: pooled into the ITL
    /// histogram, and written, so `redline check` judges pooled ITL on the same samples
    /// as the run did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub itl_us: Vec<u32>,
    /// The generated text of an answer the server gave no count for, until the
    /// recorder takes it (to count with the server's tokenizer after the run). Never
    /// written.
    #[serde(skip)]
    pub answer: Option<String>,
    /// What it said, for the first few requests of a run (the report's samples).
    /// Never written to the records.
    #[serde(skip)]
    pub exchange: Option<Box<Exchange>>,
}

/// A request's prompt and answer, cut to [`Exchange::MAX_CHARS`] each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub prompt: String,
    pub answer: String,
}

impl Exchange {
    /// Requests with a sequence number below this keep their exchange.
    pub const FIRST_SEQS: u64 = 3;
    pub const MAX_CHARS: usize = 600;

    pub fn new(prompt: &str, answer: &str) -> Exchange {
        Exchange {
            prompt: cut_to(prompt, Exchange::MAX_CHARS),
            answer: cut_to(answer, Exchange::MAX_CHARS),
        }
    }
}

/// A request's exchange with how it went: what the report shows as a sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sample {
    pub seq: u64,
    pub outcome: Outcome,
    pub prompt: String,
    pub answer: String,
    pub output_tokens: Option<u32>,
    pub ttft_ms: Option<f64>,
}

impl Sample {
    /// The record's exchange, when it kept one.
    pub fn of(record: &Record) -> Option<Sample> {
        let exchange = record.exchange.as_deref()?;
        Some(Sample {
            seq: record.seq,
            outcome: record.outcome,
            prompt: exchange.prompt.clone(),
            answer: exchange.answer.clone(),
            output_tokens: record.output_tokens,
            ttft_ms: record.ttft_us().map(|us| us as f64 / 1e3),
        })
    }
}

/// The first `chars` characters of `text`, with an ellipsis when cut.
pub fn cut_to(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

impl Record {
    /// A record for a request that has not (yet) been sent.
    pub fn unsent(seq: u64, stage: u32, phase: Phase, intended_us: u64) -> Record {
        Record {
            seq,
            stage,
            phase,
            outcome: Outcome::Ok,
            error: None,
            session: None,
            prefix: None,
            traceparent: None,
            faults: Vec::new(),
            step: None,
            media: None,
            mcp: None,
            session_end: None,
            grade: None,
            intended_us,
            sent_us: None,
            connect_us: None,
            tls_us: None,
            headers_us: None,
            first_byte_us: None,
            first_token_us: None,
            first_reasoning_us: None,
            first_answer_us: None,
            second_token_us: None,
            last_byte_us: None,
            failed_us: None,
            status: None,
            content_events: 0,
            itl_mean_us: None,
            input_tokens: None,
            output_tokens: None,
            token_source: None,
            token_note: None,
            max_tokens: None,
            output_tokens_local: None,
            reasoning_tokens: None,
            cached_tokens: None,
            cache_write_tokens: None,
            finish_reason: None,
            server: None,
            server_reported: None,
            itl_us: Vec::new(),
            answer: None,
            exchange: None,
        }
    }

    pub fn fail(
        &mut self,
        outcome: Outcome,
        stage: FailStage,
        kind: &str,
        message: impl Into<String>,
    ) {
        self.outcome = outcome;
        self.error = Some(Failure {
            stage,
            kind: kind.to_owned(),
            message: message.into(),
            origin: None,
        });
    }

    /// Notes `now_us` as when it was given up, if it failed before its last byte
    /// ([`Record::failed_us`]).
    pub fn note_given_up(&mut self, now_us: u64) {
        if self.outcome != Outcome::Ok && self.last_byte_us.is_none() && self.failed_us.is_none() {
            self.failed_us = Some(now_us);
        }
    }

    /// Names where its failure began (see [`Failure::origin`]), once the faults the
    /// proxy injected into it are known.
    pub fn settle_origin(&mut self) {
        let origin = if self.outcome == Outcome::Dropped || self.outcome == Outcome::Cancelled {
            "client".to_owned()
        } else if let Some(fault) = self.faults.first() {
            format!("chaos:{}", fault.rule)
        } else if let Some(service) = self.step.as_ref().and_then(|s| s.service.as_ref()) {
            service.clone()
        } else {
            "target".to_owned()
        };
        if let Some(error) = &mut self.error {
            error.origin = Some(origin);
        }
    }

    /// Time to first token from the actual send.
    pub fn ttft_us(&self) -> Option<u64> {
        Some(self.first_token_us?.saturating_sub(self.sent_us?))
    }

    /// Time to the first reasoning token, from the send.
    pub fn time_to_first_reasoning_us(&self) -> Option<u64> {
        Some(self.first_reasoning_us?.saturating_sub(self.sent_us?))
    }

    /// Time to the first answer token (text or a tool call), from the send: after the
    /// reasoning, for a model that reasons; its TTFT, for one that does not.
    pub fn time_to_first_answer_us(&self) -> Option<u64> {
        Some(self.first_answer_us?.saturating_sub(self.sent_us?))
    }

    /// How long the model reasoned: its first reasoning token to its first answer
    /// token, or to its last byte when it never answered.
    pub fn reasoning_us(&self) -> Option<u64> {
        let start = self.first_reasoning_us?;
        let end = self.first_answer_us.or(self.last_byte_us)?;
        Some(end.saturating_sub(start))
    }

    /// Prompt tokens the server's prefix cache served, and the prompt's length, where
    /// the server says: its ground truth, else its usage (`cached_tokens`,
    /// Anthropic's cache reads).
    pub fn prefix_cache_hit(&self) -> Option<(u32, u32)> {
        match &self.server {
            Some(truth) => Some((truth.cached_prompt_tokens, truth.prompt_tokens)),
            None => Some((self.cached_tokens?, self.input_tokens?)),
        }
    }

    /// Output tokens that are not reasoning, when the reasoning is counted.
    pub fn answer_tokens(&self) -> Option<u32> {
        Some(self.output_tokens?.saturating_sub(self.reasoning_tokens?))
    }

    /// Time to first token from the intended start (includes any schedule lag).
    pub fn ttft_intended_us(&self) -> Option<u64> {
        Some(self.first_token_us?.saturating_sub(self.intended_us))
    }

    /// Send to last byte.
    pub fn e2e_us(&self) -> Option<u64> {
        Some(self.last_byte_us?.saturating_sub(self.sent_us?))
    }

    /// When the request ended: its last byte, else when it was given up, else its
    /// send, else its intended start.
    pub fn done_us(&self) -> u64 {
        self.last_byte_us
            .or(self.failed_us)
            .or(self.sent_us)
            .unwrap_or(self.intended_us)
    }

    pub fn e2e_intended_us(&self) -> Option<u64> {
        Some(self.last_byte_us?.saturating_sub(self.intended_us))
    }

    /// (E2E − TTFT) / (output tokens − 1); none for one-token answers.
    pub fn tpot_us(&self) -> Option<f64> {
        let tokens = self.output_tokens?;
        if tokens < 2 {
            return None;
        }
        let decode = self.last_byte_us?.checked_sub(self.first_token_us?)?;
        Some(decode as f64 / f64::from(tokens - 1))
    }
}

/// Why `records.jsonl` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a redline record: {source}")]
    NotARecord {
        path: String,
        line: usize,
        source: serde_json::Error,
    },
}

/// What reading `records.jsonl` found besides the records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    pub records: u64,
    /// A last line cut short (a run killed while writing it): left out, not an error.
    pub truncated_last_line: bool,
}

/// Reads a run's `records.jsonl`, one record at a time, adding the bytes read to
/// `read` (for a progress bar). Every line must be a record, but a last line without
/// its newline that does not parse is a record cut short by a killed run: it is left
/// out and said in the counts, since everything before it is whole.
pub fn read_records(
    path: &std::path::Path,
    read: Option<&std::sync::atomic::AtomicU64>,
    each: impl FnMut(Record),
) -> Result<ReadCounts, ReadError> {
    let file = std::fs::File::open(path).map_err(|source| ReadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_records_from(std::io::BufReader::new(file), path, read, each)
}

/// [`read_records`] from any reader; `path` names it in errors.
pub fn read_records_from(
    mut reader: impl std::io::BufRead,
    path: &std::path::Path,
    read: Option<&std::sync::atomic::AtomicU64>,
    mut each: impl FnMut(Record),
) -> Result<ReadCounts, ReadError> {
    let name = || path.display().to_string();
    let mut counts = ReadCounts::default();
    let mut line = String::new();
    for number in 1.. {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|source| ReadError::Io {
                path: name(),
                source,
            })?;
        if n == 0 {
            break;
        }
        if let Some(read) = read {
            read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(record) => {
                counts.records += 1;
                each(record);
            }
            Err(_) if !line.ends_with('\n') => counts.truncated_last_line = true,
            Err(source) => {
                return Err(ReadError::NotARecord {
                    path: name(),
                    line: number,
                    source,
                });
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn a_record_cut_short_at_the_end_is_left_out_and_any_other_bad_line_named() {
        let dir = std::env::temp_dir().join(format!("redline-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let whole = serde_json::to_string(&Record::unsent(0, 0, Phase::Measure, 5)).unwrap();
        let path = dir.join("records.jsonl");
        std::fs::write(&path, format!("{whole}\n{whole}\n{}", &whole[..20])).unwrap();
        let read = std::sync::atomic::AtomicU64::new(0);
        let mut seen = 0;
        let counts = read_records(&path, Some(&read), |_| seen += 1).unwrap();
        assert_eq!(
            (counts.records, counts.truncated_last_line, seen),
            (2, true, 2)
        );
        assert_eq!(
            read.load(std::sync::atomic::Ordering::Relaxed),
            std::fs::metadata(&path).unwrap().len()
        );
        std::fs::write(&path, format!("{whole}\nnot json\n{whole}\n")).unwrap();
        let error = read_records(&path, None, |_| {}).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{}:2: not a redline record", path.display())),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
