//! Reports: the JSON summary (a stable schema, `docs/summary.schema.json`), the
//! terminal table rendered from it, the self-contained HTML report and the
//! trace-event timeline. Rendering is pure; callers (and `outputs`) write the bytes.

mod availability;
mod chain;
mod drift;
mod mcp;
mod media;
mod terminal;
pub mod compare;
pub mod conclude;
pub mod html;
pub mod invocation;
pub mod offline;
pub mod outputs;
pub mod timeline;

pub use drift::{render_drift_change, render_drift_summary};
pub use terminal::{render_header, render_terminal};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use chain::{
    FallbackCount, FaultRuleSummary, FaultsSummary, FlowSummary, RecallSummary, SessionCounts,
    StepSummary, ToolCalls,
};
use chain::{faults_summary, flow_summary};

use crate::chaos::ProxyCounts;
use crate::metrics::{Aggregator, Counts, Dist, FailureCount, RequestSlo, StageStats, Window};
use crate::prometheus::scrape::ServerMetrics;
use crate::schedule::{ExecutedStage, SweepRole};
use crate::slo::{Aborted, Judgement, Verdict};
use crate::workload::dataset::DatasetInfo;

/// Version of the summary's shape; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub schema_version: u32,
    pub name: String,
    pub target: String,
    pub model: String,
    /// Stopped early by Ctrl-C or SIGTERM: the figures cover what ran.
    pub interrupted: bool,
    /// What a reader must know before trusting the figures (e.g. certificates that
    /// were not verified).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub elapsed_s: f64,
    /// The stages as they ran (a sweep runs as several), with each one's figures.
    pub stages: Vec<StageSummary>,
    /// The sweep's verdict, when the load had a sweep.
    pub sweep: Option<SweepSummary>,
    /// All requests, every phase.
    pub requests: Counts,
    /// Requests of the measured phase (warm-up and cool-down excluded).
    pub measured: Counts,
    pub measured_window_s: f64,
    pub throughput: Throughput,
    /// The prompt dataset, when the workload reads one: records read, used, skipped.
    pub dataset: Option<DatasetInfo>,
    /// The server's own metrics, scraped during the run (`server_metrics` in the spec).
    pub server_metrics: Option<ServerMetrics>,
    /// Injected faults and what they caused, when any were injected or a proxy ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsSummary>,
    /// Flow sessions: per-step figures, how sessions ended, recall@k, tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowSummary>,
    /// Image, transcription and speech requests, by kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<media::MediaSummary>,
    /// MCP calls: per operation, and their sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<mcp::McpSummary>,
    /// The spans collected during the run (`--collect`): the dependency graph and,
    /// per step, client time against server span time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traces: Option<crate::trace::graph::TraceReport>,
    /// The gate: one verdict per SLO of the spec's `sloThresholds`.
    pub verdicts: Option<Vec<Verdict>>,
    /// Without SLOs, the bound a run's failures must stay within not to fail (exit 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_gate: Option<DefaultGate>,
    /// Stopped early by `abort_on_fail` or a streaming SLO's `abort`: when, and why.
    pub aborted: Option<Aborted>,
    /// The streaming SLOs: windows, detectors, episodes (`streaming:` in the spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::slo::streaming::DriftSummary>,
    /// The feedback controller's readings and rates (`feedback:` in the spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<crate::results::FeedbackReport>,
    /// Availability through the run's `disruptions:` (restarts, hooks), step by step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruptions: Option<crate::results::Availability>,
    /// Requests that succeeded within the per-request SLOs, when the spec sets them.
    pub goodput: Option<Goodput>,
    /// Measured requests with no failure of any kind.
    pub pass_rate: Option<f64>,
    /// Measured requests not failed by unavailability (refused/reset, 5xx, timeout).
    pub availability: Option<f64>,
    pub latency_ms: Latency,
    pub tokens: Tokens,
    pub errors: Vec<FailureCount>,
    pub server: ServerSide,
    /// Per turn of multi-turn sessions (empty without sessions).
    pub turns: Vec<TurnSummary>,
    /// For workloads with shared prefixes: what a prefix cache could save, and what
    /// the server reports it did.
    pub prefix_cache: Option<PrefixCache>,
    /// For models that reason: how much, and what share of each request's time
    /// (absent when no measured request reasoned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// Graded answers (a dataset with a `grader`): absent when none was graded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<Quality>,
    /// Per second of the run, by completion time.
    pub timeseries: Vec<TimePoint>,
    /// How the run was started: redline's version, the command line and the spec,
    /// secrets hidden (absent for `redline check`, which judges records it did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<invocation::Invocation>,
    /// The share of the run this process sent (`--segment`, `FROM:TO` of `[0, 1)`);
    /// absent for a whole run. A merged run names the segments it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// The first few requests' prompts and answers, cut short.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<crate::record::Sample>,
    /// For a flow run whose gate failed: which steps (or services inside them) made
    /// its sessions breach, as `redline explain RUN` finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<crate::explain::Explanation>,
    /// What `redline heal` decided and did about this run, written by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal: Option<HealSummary>,
}

/// The remediation agent's loop on a run, step by step (the whole of it is in
/// `heal.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HealSummary {
    pub model: String,
    /// Actions ran (`--execute`); otherwise they were only planned.
    pub executed: bool,
    /// Why the loop ended: `recovered`, `finished`, `planned`, `step_limit`,
    /// `unknown_action`, `invalid_arguments`, `repeated_failure`, `model_failed`.
    pub ending: String,
    /// The ending in words.
    pub detail: String,
    pub steps: Vec<HealStep>,
}

/// One decision of the agent and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HealStep {
    pub step: u32,
    pub action: String,
    pub arguments: serde_json::Value,
    pub thought: String,
    /// `planned`, `ok`, `refused: …` or `failed: …`.
    pub result: String,
    /// The rollback's result, when one ran.
    pub rollback: Option<String>,
    /// Whether the verify load passed, when one ran.
    pub verify: Option<bool>,
}

/// Without SLOs, a run must still not look green to a CI script when its requests
/// failed: at most this share of the attempted requests may fail (failures that
/// injected faults caused are the test's, not the service's, and do not count).
pub const DEFAULT_MAX_FAILED: f64 = 0.01;

/// The default gate's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DefaultGate {
    /// The largest share of attempted requests that may fail.
    pub bound: f64,
    /// Requests that failed, timed out or were dropped, without an injected fault.
    pub failed: u64,
    /// Requests scheduled and not cancelled by an interruption.
    pub attempted: u64,
    pub passed: bool,
}

fn default_gate(requests: &Counts, faults: Option<&FaultsSummary>) -> DefaultGate {
    let injected = faults.map_or(0, |f| f.failed_with_faults);
    let failed = (requests.failed() + requests.dropped).saturating_sub(injected);
    let attempted = requests.scheduled - requests.cancelled;
    DefaultGate {
        bound: DEFAULT_MAX_FAILED,
        failed,
        attempted,
        passed: requests.ok > 0 && failed as f64 <= attempted as f64 * DEFAULT_MAX_FAILED,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PrefixCache {
    /// Share of prompt tokens that repeat a prefix an earlier request sent: the hit
    /// rate of an unbounded, token-granular cache.
    pub expected_hit_share: f64,
    /// Share of prompt tokens the server reported as cached, where it reports it (the
    /// simulator does; block granularity and evictions keep it at or below the
    /// expected share).
    pub server_hit_share: Option<f64>,
}

/// Reasoning, of the measured requests that reasoned: one definition across APIs
/// (docs/metrics.md). The times are in `latency_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reasoning {
    /// Successful requests with reasoning.
    pub requests: u64,
    /// Reasoning tokens per request: the server's count (`reasoning_tokens` in its
    /// usage) where it gives one, else the reasoning text counted.
    pub tokens: Dist,
    /// Output tokens that are not reasoning, per request.
    pub answer_tokens: Dist,
    /// Reasoning's share of each request's E2E, percent.
    pub share_of_e2e_pct: Dist,
}

/// Graded answers of the measured phase (docs/metrics.md, "Graded answers").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quality {
    /// Answered requests graded (failed requests are not: they are errors).
    pub graded: u64,
    pub correct: u64,
    pub wrong: u64,
    pub unparsed: u64,
    /// correct ÷ graded.
    pub accuracy: f64,
    /// Its exact (Clopper–Pearson) two-sided 95 % interval.
    pub accuracy_interval: [f64; 2],
    /// unparsed ÷ graded.
    pub unparsed_rate: f64,
    /// Graded tool calls that were not correct, by why (`wrong_tool`,
    /// `missing_param`, …); only the buckets that hold any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub buckets: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnSummary {
    /// From 1.
    pub turn: u32,
    pub requests: u64,
    pub ok: u64,
    pub ttft_ms: Dist,
    /// Mean prompt tokens: the history grows turn by turn.
    pub mean_prompt_tokens: f64,
    /// Share of prompt tokens the server found cached (where it reports it).
    pub cached_share: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Goodput {
    pub slo: RequestSlo,
    /// Measured requests that met every bound.
    pub requests: u64,
    pub per_s: f64,
    /// Of the measured requests that were attempted.
    pub ratio: Option<f64>,
}

/// One stage as it ran, over every phase of its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageSummary {
    pub description: String,
    /// Its part in a sweep.
    pub sweep: Option<SweepRole>,
    /// Requests (or sessions) per second it was meant to start (open loop at a fixed
    /// rate).
    pub offered_rate_per_s: Option<f64>,
    /// The offered rate counts sessions (flows, conversations), each several requests.
    #[serde(default)]
    pub offered_sessions: bool,
    /// Successes per second, from its first intended start to its last completion.
    pub achieved_rate_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Goodput per second, when the spec sets per-request SLOs.
    pub goodput_per_s: Option<f64>,
    /// Share of its attempted requests that met those SLOs.
    pub goodput_ratio: Option<f64>,
    pub requests: Counts,
    pub ttft_ms: Dist,
    pub ttft_from_intended_ms: Dist,
    pub itl_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    pub e2e_from_intended_ms: Dist,
    pub send_lag_ms: Dist,
    /// Graded answers at this stage's load (a dataset with a `grader`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<Quality>,
}

/// Where a sweep's knee is: the highest rate the service sustained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepSummary {
    /// Index into `stages` of the knee; none when not even the lowest rate held.
    pub knee_stage: Option<usize>,
    pub knee_rate_per_s: Option<f64>,
    /// Every rate point held: the knee lies at or above the highest one.
    pub every_rate_sustained: bool,
    pub highest_rate_per_s: f64,
    /// The rule a point had to pass to count as sustained.
    pub rule: String,
    /// The throughput point completed at least [`crate::schedule::SCALING_FACTOR`]
    /// times the synchronous point's rate: the server scales with concurrency. When
    /// not, the rates ran from half to all of the higher of the two.
    #[serde(default = "scales_default")]
    pub scales: bool,
}

fn scales_default() -> bool {
    true
}

/// Without per-request SLOs, a rate point is sustained when its median latency from
/// the intended start stays within this factor of the synchronous point's: past the
/// knee requests queue, and that latency grows with the run instead of with the batch.
const KNEE_LATENCY_FACTOR: f64 = 3.0;
/// ...and it lost no more than this share of its requests.
const KNEE_MAX_FAILED: f64 = 0.01;
/// With per-request SLOs (`goodput`), a point is sustained when this share of its
/// requests met them.
const KNEE_MIN_GOODPUT: f64 = 0.95;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Latency {
    /// Send → first content token.
    pub ttft: Dist,
    /// Intended start → first content token (includes schedule lag).
    pub ttft_from_intended: Dist,
    pub time_to_second_token: Dist,
    /// Send → first answer token, after any reasoning (TTFT for a model that does
    /// not reason).
    #[serde(default)]
    pub time_to_first_answer: Dist,
    /// Send → first reasoning token, of requests that reasoned.
    #[serde(default)]
    pub time_to_first_reasoning: Dist,
    /// First reasoning token → first answer token (or last byte, with no answer).
    #[serde(default)]
    pub reasoning: Dist,
    /// Gaps between content events, pooled over requests.
    pub itl: Dist,
    /// Per-request mean gap.
    pub itl_per_request: Dist,
    /// (E2E − TTFT) / (output tokens − 1).
    pub tpot: Dist,
    /// Send → last byte.
    pub e2e: Dist,
    pub e2e_from_intended: Dist,
    /// Actual send − intended start.
    pub send_lag: Dist,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tokens {
    pub input_total: u64,
    pub output_total: u64,
    pub input: Dist,
    pub output: Dist,
    /// Requests whose output count is a local estimate (the server sent no usage).
    pub estimated_requests: u64,
    /// Successful requests by where their output count came from: `usage`, `events`
    /// (one token per event, seen over the run), `server_tokenizer`, `tokenizer` (the
    /// one the spec named), `estimated`, `skipped` (over the count limit).
    #[serde(default)]
    pub sources: std::collections::BTreeMap<crate::record::TokenSource, u64>,
    /// How the counts of answers without usage were settled at the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<crate::record::TokenSettlement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerSide {
    /// Requests the server reported as preempted (simulator ground truth).
    pub preempted_requests: u64,
    /// Prompt tokens the server's prefix cache served: its ground truth, or its
    /// usage's `cached_tokens` (Anthropic's cache reads).
    pub cached_prompt_tokens: u64,
    /// Prompt tokens the server wrote to its cache (Anthropic's cache creation).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Client TTFT minus the server's own (first token − arrival): network and client
    /// overhead, where the server reports its timeline.
    pub ttft_client_overhead_ms: Dist,
    /// What the server's API said of its own time (Ollama's durations, TGI's
    /// headers), where it said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ServerReportedTimes>,
}

/// The server's own account of its requests' time, beside the client's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerReportedTimes {
    /// The server's total per request.
    pub total_ms: Dist,
    /// Client E2E minus the server's total: transport, the server's HTTP layer and
    /// any queue it does not count, and the client.
    pub client_e2e_beyond_ms: Dist,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimePoint {
    pub second: u64,
    #[serde(flatten)]
    pub window: Window,
}

/// Everything the summary needs that the aggregator does not know.
pub struct RunInfo<'a> {
    pub name: &'a str,
    pub target: &'a str,
    pub model: &'a str,
    pub interrupted: bool,
    pub warnings: Vec<String>,
    pub elapsed_s: f64,
    pub stages: Vec<ExecutedStage>,
    pub dataset: Option<DatasetInfo>,
    pub server_metrics: Option<ServerMetrics>,
    pub verdicts: Option<Vec<Verdict>>,
    pub aborted: Option<Aborted>,
    /// The chaos proxies' own counts, when the run put any in front of its services.
    pub proxies: Vec<ProxyCounts>,
    /// The collected spans' graph and join, when the run collected them.
    pub traces: Option<crate::trace::graph::TraceReport>,
    /// How the counts of answers without usage were settled.
    pub token_settlement: Option<crate::record::TokenSettlement>,
}

impl<'a> RunInfo<'a> {
    /// What is known of a run read back from its records alone (`redline check`, a
    /// killed run's summary rebuilt): its name, where the records are, how long they
    /// span and the verdicts; no stages, server metrics, proxies or traces.
    pub fn of_records(
        name: &'a str,
        records: &'a str,
        elapsed_s: f64,
        verdicts: Option<Vec<Verdict>>,
    ) -> RunInfo<'a> {
        RunInfo {
            name,
            target: records,
            model: "",
            interrupted: false,
            warnings: Vec::new(),
            elapsed_s,
            stages: Vec::new(),
            dataset: None,
            server_metrics: None,
            verdicts,
            aborted: None,
            proxies: Vec::new(),
            traces: None,
            token_settlement: None,
        }
    }
}

fn stage_summary(stage: &ExecutedStage, stats: Option<&StageStats>, goodput: bool) -> StageSummary {
    let empty = StageStats::default();
    let st = stats.unwrap_or(&empty);
    let per_s = |n: u64| st.per_s(n);
    let ms = |h| Dist::of(h, 1e3);
    StageSummary {
        description: stage.description.clone(),
        sweep: stage.sweep,
        offered_rate_per_s: stage.offered_rate,
        offered_sessions: stage.unit == crate::schedule::Unit::Sessions,
        achieved_rate_per_s: per_s(st.counts.ok),
        output_tokens_per_s: per_s(st.output_tokens),
        goodput_per_s: goodput.then(|| per_s(st.good)),
        goodput_ratio: goodput
            .then(|| {
                let attempted = st.counts.attempted();
                (attempted > 0).then(|| st.good as f64 / attempted as f64)
            })
            .flatten(),
        requests: st.counts,
        ttft_ms: ms(&st.ttft),
        ttft_from_intended_ms: ms(&st.ttft_intended),
        itl_ms: ms(&st.itl),
        tpot_ms: ms(&st.tpot),
        e2e_ms: ms(&st.e2e),
        e2e_from_intended_ms: ms(&st.e2e_intended),
        send_lag_ms: ms(&st.send_lag),
        quality: quality_of(&st.quality),
    }
}

/// The knee of a sweep: the highest-rate point that was sustained. With per-request
/// SLOs that means [`KNEE_MIN_GOODPUT`] of its requests met them; without, that its
/// median latency from the intended start stayed within [`KNEE_LATENCY_FACTOR`] of the
/// synchronous point's and it failed no more than [`KNEE_MAX_FAILED`] of its requests.
/// Streams are judged on TTFT, other requests on E2E.
fn sweep_summary(stages: &[StageSummary]) -> Option<SweepSummary> {
    let synchronous = stages
        .iter()
        .find(|s| s.sweep == Some(SweepRole::Synchronous))?;
    let throughput = stages
        .iter()
        .find(|s| s.sweep == Some(SweepRole::Throughput));
    let streams = synchronous.ttft_ms.count > 0;
    let latency = |s: &StageSummary| {
        if streams {
            s.ttft_from_intended_ms.p50
        } else {
            s.e2e_from_intended_ms.p50
        }
    };
    let floor = latency(synchronous);
    let with_slo = synchronous.goodput_ratio.is_some();
    let rule = if with_slo {
        format!(
            "≥ {:.0}% of requests within the goodput SLOs",
            KNEE_MIN_GOODPUT * 100.0
        )
    } else {
        format!(
            "median {} from intended start ≤ {KNEE_LATENCY_FACTOR}× the synchronous point's ({floor:.1} ms), failures ≤ {:.0}%",
            if streams { "TTFT" } else { "latency" },
            KNEE_MAX_FAILED * 100.0
        )
    };
    let sustained = |s: &StageSummary| {
        if with_slo {
            return s.goodput_ratio.is_some_and(|r| r >= KNEE_MIN_GOODPUT);
        }
        let attempted = s.requests.attempted();
        s.requests.ok > 0
            && latency(s) <= floor * KNEE_LATENCY_FACTOR
            && (attempted - s.requests.ok) as f64 <= attempted as f64 * KNEE_MAX_FAILED
    };
    let rates: Vec<(usize, &StageSummary)> = stages
        .iter()
        .enumerate()
        .filter(|(_, s)| s.sweep == Some(SweepRole::Rate))
        .collect();
    let rate = |s: &StageSummary| s.offered_rate_per_s.unwrap_or(0.0);
    // The knee is the highest rate below the first one not sustained: a higher point
    // that passed after a lower one failed was luck (a light Poisson draw), not
    // capacity.
    let mut ascending = rates.clone();
    ascending.sort_by(|a, b| rate(a.1).total_cmp(&rate(b.1)));
    let knee = ascending.iter().take_while(|(_, s)| sustained(s)).last();
    let highest = rates.iter().map(|(_, s)| rate(s)).fold(0.0, f64::max);
    Some(SweepSummary {
        knee_stage: knee.map(|(i, _)| *i),
        knee_rate_per_s: knee.map(|(_, s)| rate(s)),
        every_rate_sustained: !rates.is_empty() && rates.iter().all(|(_, s)| sustained(s)),
        highest_rate_per_s: highest,
        rule,
        scales: throughput.is_none_or(|t| {
            t.achieved_rate_per_s
                >= synchronous.achieved_rate_per_s * crate::schedule::SCALING_FACTOR
        }),
    })
}

/// What the server did and said of its own time, beside the client's view.
fn server_side(agg: &Aggregator) -> ServerSide {
    let d = &agg.dist;
    let ms = |h| Dist::of(h, 1e3);
    ServerSide {
        preempted_requests: agg.preempted,
        cached_prompt_tokens: agg.cached_prompt_tokens,
        cache_write_tokens: agg.cache_write_tokens,
        ttft_client_overhead_ms: ms(&d.ttft_client_overhead),
        reported: (!d.server_total.is_empty()).then(|| ServerReportedTimes {
            total_ms: ms(&d.server_total),
            client_e2e_beyond_ms: ms(&d.e2e_beyond_server),
        }),
    }
}

fn reasoning_of(d: &crate::metrics::Distributions) -> Option<Reasoning> {
    (!d.reasoning.is_empty()).then(|| Reasoning {
        requests: d.reasoning.len(),
        tokens: Dist::of(&d.reasoning_tokens, 1.0),
        answer_tokens: Dist::of(&d.answer_tokens, 1.0),
        share_of_e2e_pct: Dist::of(&d.reasoning_share, 100.0),
    })
}

fn quality_of(q: &crate::metrics::quality::QualityTally) -> Option<Quality> {
    use crate::slo::stats::{lower_bound, upper_bound};
    let n = q.graded();
    (n > 0).then(|| Quality {
        graded: n,
        correct: q.correct,
        wrong: q.wrong,
        unparsed: q.unparsed,
        accuracy: q.correct as f64 / n as f64,
        // Each side at 97.5 %: together the 95 % interval.
        accuracy_interval: [
            lower_bound(q.correct, n, 0.975),
            upper_bound(q.correct, n, 0.975),
        ],
        unparsed_rate: q.unparsed as f64 / n as f64,
        buckets: q
            .bucket_counts()
            .map(|(bucket, count)| (bucket.name().to_owned(), count))
            .collect(),
    })
}

/// The prompt tokens a prefix cache could have served, and those the server did.
fn prefix_cache_of(agg: &Aggregator) -> Option<PrefixCache> {
    (agg.prefix_prompt_tokens > 0).then(|| PrefixCache {
        expected_hit_share: agg.repeated_prefix_tokens as f64 / agg.prefix_prompt_tokens as f64,
        server_hit_share: (agg.truth_prompt_tokens > 0)
            .then(|| agg.cached_prompt_tokens as f64 / agg.truth_prompt_tokens as f64),
    })
}

pub fn summarize(agg: &Aggregator, info: RunInfo) -> Summary {
    let faults = faults_summary(&agg.faults, info.proxies.clone());
    let window_s = match (agg.window_start_us, agg.window_end_us) {
        (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
        _ => 0.0,
    };
    let per_s = |n: u64| {
        if window_s > 0.0 {
            n as f64 / window_s
        } else {
            0.0
        }
    };
    let m = &agg.measured;
    let attempted = m.attempted();
    let ratio = |n: u64| (attempted > 0).then(|| n as f64 / attempted as f64);
    let stages: Vec<StageSummary> = info
        .stages
        .iter()
        .enumerate()
        .map(|(i, stage)| {
            stage_summary(
                stage,
                agg.stages.get(&(i as u32)),
                agg.goodput_slo.is_some(),
            )
        })
        .collect();
    Summary {
        schema_version: SCHEMA_VERSION,
        name: info.name.to_owned(),
        target: info.target.to_owned(),
        model: info.model.to_owned(),
        interrupted: info.interrupted,
        warnings: info.warnings,
        elapsed_s: info.elapsed_s,
        sweep: sweep_summary(&stages),
        stages,
        requests: agg.counts,
        measured: agg.measured,
        measured_window_s: window_s,
        throughput: Throughput {
            requests_per_s: per_s(m.ok),
            output_tokens_per_s: per_s(agg.output_tokens),
            total_tokens_per_s: per_s(agg.output_tokens + agg.input_tokens),
        },
        dataset: info.dataset,
        server_metrics: info.server_metrics,
        default_gate: info
            .verdicts
            .is_none()
            .then(|| default_gate(&agg.counts, faults.as_ref())),
        faults,
        flow: flow_summary(&agg.flow),
        media: media::media_summary(&agg.media, window_s),
        mcp: mcp::mcp_summary(&agg.mcp),
        traces: info.traces,
        verdicts: info.verdicts,
        aborted: info.aborted,
        drift: None,
        feedback: None,
        disruptions: None,
        goodput: agg.goodput_slo.map(|slo| Goodput {
            slo,
            requests: agg.good,
            per_s: per_s(agg.good),
            ratio: ratio(agg.good),
        }),
        pass_rate: ratio(m.ok),
        availability: ratio(attempted - agg.unavailable),
        latency_ms: latency_of(&agg.dist),
        tokens: tokens_of(agg, info.token_settlement),
        errors: agg.failure_counts(),
        server: server_side(agg),
        turns: turns_of(agg),
        prefix_cache: prefix_cache_of(agg),
        reasoning: reasoning_of(&agg.dist),
        quality: quality_of(&agg.quality),
        timeseries: agg
            .windows
            .iter()
            .map(|(second, window)| TimePoint {
                second: *second,
                window: *window,
            })
            .collect(),
        invocation: None,
        segment: None,
        samples: Vec::new(),
        explain: None,
        heal: None,
    }
}

fn latency_of(d: &crate::metrics::Distributions) -> Latency {
    let ms = |h| Dist::of(h, 1e3);
    Latency {
        ttft: ms(&d.ttft),
        ttft_from_intended: ms(&d.ttft_intended),
        time_to_second_token: ms(&d.time_to_second_token),
        time_to_first_answer: ms(&d.time_to_first_answer),
        time_to_first_reasoning: ms(&d.time_to_first_reasoning),
        reasoning: ms(&d.reasoning),
        itl: ms(&d.itl),
        itl_per_request: ms(&d.itl_request_mean),
        tpot: ms(&d.tpot),
        e2e: ms(&d.e2e),
        e2e_from_intended: ms(&d.e2e_intended),
        send_lag: ms(&d.send_lag),
    }
}

fn tokens_of(agg: &Aggregator, settlement: Option<crate::record::TokenSettlement>) -> Tokens {
    let d = &agg.dist;
    Tokens {
        input_total: agg.input_tokens,
        output_total: agg.output_tokens,
        input: Dist::of(&d.input_tokens, 1.0),
        output: Dist::of(&d.output_tokens, 1.0),
        estimated_requests: agg
            .token_sources
            .get(&crate::record::TokenSource::Estimated)
            .copied()
            .unwrap_or(0),
        sources: agg.token_sources.clone(),
        settlement,
    }
}

fn turns_of(agg: &Aggregator) -> Vec<TurnSummary> {
    let share = |n: u64, of: u64| if of > 0 { n as f64 / of as f64 } else { 0.0 };
    agg.turns
        .iter()
        .map(|(turn, t)| TurnSummary {
            turn: *turn,
            requests: t.requests,
            ok: t.ok,
            ttft_ms: Dist::of(&t.ttft, 1e3),
            mean_prompt_tokens: share(t.prompt_tokens, t.ok),
            cached_share: share(t.cached_prompt_tokens, t.prompt_tokens),
        })
        .collect()
}

/// The JSON Schema of `summary.json` (committed as `docs/summary.schema.json`).
pub fn summary_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Summary)).expect("a schema serializes")
}

/// The JSON Schema of one line of `records.jsonl` (`docs/record.schema.json`).
pub fn record_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(crate::record::Record)).expect("a schema serializes")
}

/// A run folder's `summary.json`, read back.
pub fn read_summary(dir: &std::path::Path) -> anyhow::Result<Summary> {
    use anyhow::Context;
    let path = crate::folder::RunFolder::new(dir).summary();
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a redline summary", path.display()))
}

pub fn render_json(summary: &Summary) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(summary).expect("a summary always serializes");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        role: SweepRole,
        rate: Option<f64>,
        ttft_p50: f64,
        ok: u64,
        failed: u64,
    ) -> StageSummary {
        let dist = Dist {
            count: ok,
            p50: ttft_p50,
            ..Dist::default()
        };
        StageSummary {
            description: String::new(),
            sweep: Some(role),
            offered_rate_per_s: rate,
            offered_sessions: false,
            achieved_rate_per_s: 0.0,
            output_tokens_per_s: 0.0,
            goodput_per_s: None,
            goodput_ratio: None,
            requests: Counts {
                scheduled: ok + failed,
                ok,
                error: failed,
                ..Counts::default()
            },
            ttft_ms: dist,
            ttft_from_intended_ms: dist,
            itl_ms: Dist::default(),
            tpot_ms: Dist::default(),
            e2e_ms: Dist::default(),
            e2e_from_intended_ms: Dist::default(),
            send_lag_ms: Dist::default(),
            quality: None,
        }
    }

    #[test]
    fn the_knee_is_the_highest_sustained_rate() {
        let stages = [
            point(SweepRole::Synchronous, None, 20.0, 10, 0),
            point(SweepRole::Throughput, None, 900.0, 500, 0),
            point(SweepRole::Rate, Some(10.0), 30.0, 100, 0),
            point(SweepRole::Rate, Some(20.0), 59.0, 200, 0),
            // Over 3× the synchronous median: queued.
            point(SweepRole::Rate, Some(30.0), 61.0, 300, 0),
        ];
        let sweep = sweep_summary(&stages).unwrap();
        assert_eq!(sweep.knee_stage, Some(3));
        assert_eq!(sweep.knee_rate_per_s, Some(20.0));
        assert!(!sweep.every_rate_sustained);
        // A point that lost over 1 % of its requests is not sustained, however fast.
        let mut failing = stages.clone();
        failing[3] = point(SweepRole::Rate, Some(20.0), 25.0, 196, 4);
        assert_eq!(sweep_summary(&failing).unwrap().knee_stage, Some(2));
        // Nothing held: no knee, and the report says so rather than naming one.
        let none = [
            point(SweepRole::Synchronous, None, 20.0, 10, 0),
            point(SweepRole::Rate, Some(10.0), 100.0, 100, 0),
        ];
        assert_eq!(sweep_summary(&none).unwrap().knee_stage, None);
        // Not a sweep: no verdict.
        assert_eq!(sweep_summary(&stages[2..]), None);
    }

    /// On a serial llama.cpp server the knee once landed on a point whose Poisson draw
    /// happened to be light, above one that had queued.
    #[test]
    fn a_lucky_point_above_a_failed_one_is_not_the_knee() {
        let mut stages = vec![
            point(SweepRole::Synchronous, None, 250.0, 10, 0),
            point(SweepRole::Throughput, None, 9000.0, 10, 0),
            point(SweepRole::Rate, Some(0.54), 260.0, 16, 0),
            point(SweepRole::Rate, Some(0.63), 4000.0, 19, 0),
            point(SweepRole::Rate, Some(0.72), 300.0, 14, 0),
        ];
        stages[0].achieved_rate_per_s = 0.72;
        stages[1].achieved_rate_per_s = 0.70;
        let sweep = sweep_summary(&stages).unwrap();
        assert_eq!(sweep.knee_rate_per_s, Some(0.54));
        assert!(
            !sweep.scales,
            "16 sessions completed less than one at a time"
        );
        stages[1].achieved_rate_per_s = 5.0;
        assert!(sweep_summary(&stages).unwrap().scales);
    }

    #[test]
    fn with_goodput_slos_the_knee_is_where_95_percent_met_them() {
        let mut stages = vec![
            point(SweepRole::Synchronous, None, 20.0, 10, 0),
            point(SweepRole::Rate, Some(10.0), 500.0, 100, 0),
            point(SweepRole::Rate, Some(20.0), 500.0, 100, 0),
        ];
        for (stage, ratio) in stages.iter_mut().zip([1.0, 0.96, 0.94]) {
            stage.goodput_ratio = Some(ratio);
        }
        let sweep = sweep_summary(&stages).unwrap();
        assert_eq!(sweep.knee_rate_per_s, Some(10.0));
        assert!(sweep.rule.contains("goodput"), "{}", sweep.rule);
    }
}
