//! Run statistics: HDR histograms (microseconds) per metric, counters by outcome and by
//! failure stage and kind, and per-second windows. One collector owns an [`Aggregator`];
//! [`Aggregator::merge`] combines aggregators of disjoint parts of a run into the
//! aggregator of the whole (see [`merge`] for what "exact" means there).

pub mod file;
pub mod flow;
pub mod mcp;
pub mod media;
pub mod merge;
pub mod quality;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use redline_base::histogram::Dist;

use crate::record::{FailStage, Outcome, Phase, PrefixMark, Record, TokenSource};

/// Highest value a latency histogram holds: one hour in microseconds.
const MAX_US: u64 = 3_600_000_000;

/// A histogram of 1 µs to an hour (or as many tokens) at 3 significant figures: the
/// one shape every distribution of a run is kept in.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static bounds are valid")
}

/// The latency (and token) distributions of the measured requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distributions {
    #[serde(with = "file::hdr")]
    pub ttft: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub ttft_intended: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub time_to_second_token: Histogram<u64>,
    /// Gaps between content events, pooled over all requests.
    #[serde(with = "file::hdr")]
    pub itl: Histogram<u64>,
    /// Each request's mean gap.
    #[serde(with = "file::hdr")]
    pub itl_request_mean: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub tpot: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub e2e: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub e2e_intended: Histogram<u64>,
    /// Actual send − intended start.
    #[serde(with = "file::hdr")]
    pub send_lag: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub input_tokens: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub output_tokens: Histogram<u64>,
    /// Client TTFT − server-reported (first token − arrival), where the server says.
    #[serde(with = "file::hdr")]
    pub ttft_client_overhead: Histogram<u64>,
    /// Send → first reasoning token, of requests that reasoned.
    #[serde(with = "file::hdr", default = "histogram")]
    pub time_to_first_reasoning: Histogram<u64>,
    /// Send → first answer token (after any reasoning).
    #[serde(with = "file::hdr", default = "histogram")]
    pub time_to_first_answer: Histogram<u64>,
    /// First reasoning token → first answer token.
    #[serde(with = "file::hdr", default = "histogram")]
    pub reasoning: Histogram<u64>,
    /// Reasoning tokens of requests that reasoned.
    #[serde(with = "file::hdr", default = "histogram")]
    pub reasoning_tokens: Histogram<u64>,
    /// Output tokens that are not reasoning, of requests that reasoned.
    #[serde(with = "file::hdr", default = "histogram")]
    pub answer_tokens: Histogram<u64>,
    /// Reasoning's share of E2E, in hundredths of a percent.
    #[serde(with = "file::hdr", default = "histogram")]
    pub reasoning_share: Histogram<u64>,
    /// The server's own account of a request's total time (`server_reported`).
    #[serde(with = "file::hdr")]
    pub server_total: Histogram<u64>,
    /// Client E2E − the server's own total: what the server's account leaves out.
    #[serde(with = "file::hdr")]
    pub e2e_beyond_server: Histogram<u64>,
}

impl Default for Distributions {
    fn default() -> Self {
        Distributions {
            ttft: histogram(),
            ttft_intended: histogram(),
            time_to_second_token: histogram(),
            itl: histogram(),
            itl_request_mean: histogram(),
            tpot: histogram(),
            e2e: histogram(),
            e2e_intended: histogram(),
            send_lag: histogram(),
            input_tokens: histogram(),
            output_tokens: histogram(),
            ttft_client_overhead: histogram(),
            time_to_first_reasoning: histogram(),
            time_to_first_answer: histogram(),
            reasoning: histogram(),
            reasoning_tokens: histogram(),
            answer_tokens: histogram(),
            reasoning_share: histogram(),
            server_total: histogram(),
            e2e_beyond_server: histogram(),
        }
    }
}

/// Counts of one second of the run (by completion time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Window {
    pub completed: u64,
    pub failed: u64,
    pub output_tokens: u64,
    pub ttft_sum_us: u64,
    pub ttft_count: u64,
}

/// Counts by outcome, over all phases.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Counts {
    pub scheduled: u64,
    pub ok: u64,
    pub error: u64,
    pub timeout: u64,
    pub cancelled: u64,
    pub dropped: u64,
}

impl Counts {
    fn bump(&mut self, outcome: Outcome) {
        self.scheduled += 1;
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Error => self.error += 1,
            Outcome::Timeout => self.timeout += 1,
            Outcome::Cancelled => self.cancelled += 1,
            Outcome::Dropped => self.dropped += 1,
        }
    }

    pub fn failed(&self) -> u64 {
        self.error + self.timeout
    }

    /// Requests that were sent: neither dropped at the client's in-flight limit nor
    /// cancelled by a stop. What pass rates and availability are shares of.
    pub fn attempted(&self) -> u64 {
        self.scheduled - self.dropped - self.cancelled
    }

    /// Whether every scheduled request has exactly one outcome.
    pub fn balanced(&self) -> bool {
        self.scheduled == self.ok + self.error + self.timeout + self.cancelled + self.dropped
    }
}

/// A failure class with its count and one example message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailureCount {
    pub stage: FailStage,
    pub kind: String,
    pub count: u64,
    pub example: String,
}

/// The failures of one (stage, kind) and the first of them, as an example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureClass {
    pub count: u64,
    pub example: String,
    /// When the example completed, so merged parts keep the earliest.
    pub first_done_us: u64,
}

/// `n` per second of a window of `window_us` microseconds (0 for an empty window).
pub fn rate_per_s(n: u64, window_us: u64) -> f64 {
    if window_us == 0 {
        0.0
    } else {
        n as f64 / (window_us as f64 / 1e6)
    }
}

/// Per-request SLOs: a request counts toward goodput when it succeeded and met every
/// bound set. TTFT and E2E are taken from the intended start, so a client that fell
/// behind its schedule cannot flatter the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequestSlo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// The answer must also be graded correct (a dataset with a `grader`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub correct: bool,
}

impl RequestSlo {
    pub fn met_by(&self, r: &Record) -> bool {
        // `absent_ok`: a one-token answer has no TPOT and so cannot break its bound,
        // while an answer without a first token has broken any TTFT bound.
        let within =
            |bound: Option<f64>, value_us: Option<f64>, absent_ok: bool| match (bound, value_us) {
                (None, _) => true,
                (Some(ms), Some(us)) => us <= ms * 1e3,
                (Some(_), None) => absent_ok,
            };
        r.outcome == Outcome::Ok
            && within(self.ttft_ms, r.ttft_intended_us().map(|v| v as f64), false)
            && within(self.tpot_ms, r.tpot_us(), true)
            && within(self.e2e_ms, r.e2e_intended_us().map(|v| v as f64), false)
            && (!self.correct
                || r.grade
                    .as_ref()
                    .is_some_and(|g| g.verdict == crate::record::GradeVerdict::Correct))
    }
}

/// The figures of one executed stage (every phase: a sweep point is judged whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageStats {
    pub counts: Counts,
    pub good: u64,
    pub output_tokens: u64,
    /// First intended start and last completion, microseconds.
    pub first_intended_us: u64,
    pub last_done_us: u64,
    #[serde(with = "file::hdr")]
    pub ttft: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub ttft_intended: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub itl: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub tpot: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub e2e: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub e2e_intended: Histogram<u64>,
    #[serde(with = "file::hdr")]
    pub send_lag: Histogram<u64>,
    /// Graded answers: how right the answers were at this stage's load.
    #[serde(default)]
    pub quality: quality::QualityTally,
}

impl Default for StageStats {
    fn default() -> Self {
        StageStats {
            counts: Counts::default(),
            good: 0,
            output_tokens: 0,
            first_intended_us: u64::MAX,
            last_done_us: 0,
            ttft: histogram(),
            ttft_intended: histogram(),
            itl: histogram(),
            tpot: histogram(),
            e2e: histogram(),
            e2e_intended: histogram(),
            send_lag: histogram(),
            quality: quality::QualityTally::default(),
        }
    }
}

impl StageStats {
    fn add(&mut self, r: &Record, done_us: u64, good: bool) {
        self.counts.bump(r.outcome);
        self.good += u64::from(good);
        self.quality.count(r);
        self.first_intended_us = self.first_intended_us.min(r.intended_us);
        self.last_done_us = self.last_done_us.max(done_us);
        let record = |h: &mut Histogram<u64>, v: Option<u64>| {
            if let Some(v) = v {
                h.saturating_record(v.max(1));
            }
        };
        record(
            &mut self.send_lag,
            r.sent_us.map(|s| s.saturating_sub(r.intended_us)),
        );
        if r.outcome != Outcome::Ok {
            return;
        }
        self.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
        record(&mut self.ttft, r.ttft_us());
        record(&mut self.ttft_intended, r.ttft_intended_us());
        record(&mut self.tpot, r.tpot_us().map(|v| v.round() as u64));
        record(&mut self.e2e, r.e2e_us());
        record(&mut self.e2e_intended, r.e2e_intended_us());
        for gap in &r.itl_us {
            self.itl.saturating_record(u64::from(*gap).max(1));
        }
    }

    /// `n` per second of the stage's window, from its first intended start to its
    /// last completion.
    pub fn per_s(&self, n: u64) -> f64 {
        rate_per_s(n, self.last_done_us.saturating_sub(self.first_intended_us))
    }
}

impl Distributions {
    /// A successful request's times and sizes (its TTFT is recorded by the caller,
    /// which also sums it per second).
    fn add_ok(&mut self, r: &Record) {
        let record = |h: &mut Histogram<u64>, v: Option<u64>| {
            if let Some(v) = v {
                h.saturating_record(v.max(1));
            }
        };
        record(&mut self.ttft_intended, r.ttft_intended_us());
        record(
            &mut self.time_to_second_token,
            r.second_token_us
                .zip(r.sent_us)
                .map(|(s, t)| s.saturating_sub(t)),
        );
        record(&mut self.itl_request_mean, r.itl_mean_us);
        record(&mut self.tpot, r.tpot_us().map(|v| v.round() as u64));
        record(&mut self.e2e, r.e2e_us());
        record(&mut self.e2e_intended, r.e2e_intended_us());
        record(&mut self.input_tokens, r.input_tokens.map(u64::from));
        record(&mut self.output_tokens, r.output_tokens.map(u64::from));
        for gap in &r.itl_us {
            self.itl.saturating_record(u64::from(*gap).max(1));
        }
        record(&mut self.time_to_first_answer, r.time_to_first_answer_us());
        if let Some(reasoning) = r.reasoning_us() {
            record(
                &mut self.time_to_first_reasoning,
                r.time_to_first_reasoning_us(),
            );
            self.reasoning.saturating_record(reasoning.max(1));
            record(
                &mut self.reasoning_tokens,
                r.reasoning_tokens.map(u64::from),
            );
            record(&mut self.answer_tokens, r.answer_tokens().map(u64::from));
            if let Some(e2e) = r.e2e_us().filter(|e2e| *e2e > 0) {
                let share = (reasoning.min(e2e) as f64 / e2e as f64 * 10_000.0).round();
                self.reasoning_share
                    .saturating_record((share as u64).max(1));
            }
        }
        if let Some(total) = r.server_reported.and_then(|s| s.total_us) {
            self.server_total.saturating_record(total.max(1));
            if let Some(e2e) = r.e2e_us() {
                self.e2e_beyond_server
                    .saturating_record(e2e.saturating_sub(total).max(1));
            }
        }
    }
}

/// The figures of one turn index across sessions: later turns carry longer histories,
/// and on a server with prefix caching should find more of them cached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    pub requests: u64,
    pub ok: u64,
    #[serde(with = "file::hdr")]
    pub ttft: Histogram<u64>,
    pub prompt_tokens: u64,
    /// Prompt tokens the server reported as cached (simulator ground truth).
    pub cached_prompt_tokens: u64,
}

impl Default for TurnStats {
    fn default() -> Self {
        TurnStats {
            requests: 0,
            ok: 0,
            ttft: histogram(),
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
        }
    }
}

impl TurnStats {
    fn add(&mut self, r: &Record) {
        self.requests += 1;
        if r.outcome != Outcome::Ok {
            return;
        }
        self.ok += 1;
        if let Some(ttft) = r.ttft_us() {
            self.ttft.saturating_record(ttft.max(1));
        }
        self.prompt_tokens += u64::from(r.input_tokens.unwrap_or(0));
        if let Some((cached, _)) = r.prefix_cache_hit() {
            self.cached_prompt_tokens += u64::from(cached);
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregator {
    /// Per-request SLOs of goodput, if set.
    pub goodput_slo: Option<RequestSlo>,
    /// Measured requests that met the goodput SLOs.
    pub good: u64,
    /// Per executed stage, by index.
    pub stages: BTreeMap<u32, StageStats>,
    /// Per turn of multi-turn sessions (measured requests).
    pub turns: BTreeMap<u32, TurnStats>,
    /// Shared prefixes already sent by a successful request (any phase: warm-up
    /// requests fill a prefix cache too), with the first such request.
    pub seen_prefixes: std::collections::HashMap<u32, FirstPrefix>,
    /// Prompt tokens of measured requests that began with a shared prefix, and how
    /// many of them repeated a prefix sent before: the most a prefix cache can save.
    pub prefix_prompt_tokens: u64,
    pub repeated_prefix_tokens: u64,
    pub counts: Counts,
    /// Counts of the measured phase only.
    pub measured: Counts,
    /// Measured requests that failed for the service being unavailable.
    pub unavailable: u64,
    pub dist: Distributions,
    #[serde(with = "file::pairs")]
    pub failures: BTreeMap<(FailStage, String), FailureClass>,
    pub windows: BTreeMap<u64, Window>,
    pub output_tokens: u64,
    pub input_tokens: u64,
    /// Successful requests by where their output token count came from.
    pub token_sources: std::collections::BTreeMap<TokenSource, u64>,
    pub preempted: u64,
    pub cached_prompt_tokens: u64,
    /// Prompt tokens of the measured requests whose server reported its prefix-cache
    /// hits (its timeline, or its usage's cached tokens).
    pub truth_prompt_tokens: u64,
    /// Prompt tokens the server said it wrote to its cache (Anthropic's).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Measured window: first intended start and last completion, microseconds.
    pub window_start_us: Option<u64>,
    pub window_end_us: Option<u64>,
    /// Injected faults against outcomes (every phase: the proxy's log counts them all).
    pub faults: FaultTally,
    /// Steps, sessions, recall and tool calls of flows.
    pub flow: flow::FlowTally,
    /// Image, transcription and speech requests, by kind.
    #[serde(default)]
    pub media: media::MediaTally,
    /// MCP calls, by operation, and their sessions.
    #[serde(default)]
    pub mcp: mcp::McpTally,
    /// Graded answers (graded datasets).
    #[serde(default)]
    pub quality: quality::QualityTally,
}

/// The first successful request that sent a shared prefix: what a merge needs to
/// decide which of two parts sent it first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FirstPrefix {
    pub done_us: u64,
    pub tokens: u32,
    pub measured: bool,
}

/// Requests with and without injected faults, and how they ended: what separates the
/// failures a fault caused from the ones the service produced on its own.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultTally {
    /// By rule name.
    pub rules: BTreeMap<String, RuleTally>,
    pub requests_with_faults: u64,
    pub failed_with_faults: u64,
    pub failed_without_faults: u64,
}

/// The requests one rule injected into.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleTally {
    /// The fault it injects.
    pub fault: String,
    pub requests: u64,
    pub failed: u64,
    /// Failures of those requests by `stage/kind`.
    pub failures: BTreeMap<String, u64>,
    /// Delays or holds it added, microseconds.
    #[serde(with = "file::hdr_option")]
    pub added: Option<Histogram<u64>>,
}

impl FaultTally {
    fn add(&mut self, r: &Record) {
        let failed = matches!(r.outcome, Outcome::Error | Outcome::Timeout);
        if r.faults.is_empty() {
            self.failed_without_faults += u64::from(failed);
            return;
        }
        self.requests_with_faults += 1;
        self.failed_with_faults += u64::from(failed);
        for fault in &r.faults {
            let rule = self.rules.entry(fault.rule.clone()).or_default();
            rule.fault.clone_from(&fault.fault);
            rule.requests += 1;
            if failed {
                rule.failed += 1;
                if let Some(f) = &r.error {
                    let stage = serde_json::to_value(f.stage).unwrap_or_default();
                    let key = format!("{}/{}", stage.as_str().unwrap_or_default(), f.kind);
                    *rule.failures.entry(key).or_default() += 1;
                }
            }
            if let Some(ms) = fault.added_ms {
                let histogram = rule.added.get_or_insert_with(histogram);
                let _ = histogram.record((ms * 1e3) as u64);
            }
        }
    }
}

impl Aggregator {
    /// An aggregator that also counts goodput under `slo`.
    pub fn new(goodput_slo: Option<RequestSlo>) -> Aggregator {
        Aggregator {
            goodput_slo,
            ..Aggregator::default()
        }
    }

    /// Tool calls of flows' steps and of MCP load together, and how many succeeded.
    pub fn tool_calls(&self) -> (u64, u64) {
        (
            self.flow.tool_calls + self.mcp.tool_calls,
            self.flow.tool_ok + self.mcp.tool_ok,
        )
    }

    /// Takes one record into the statistics.
    pub fn add(&mut self, r: &Record) {
        self.counts.bump(r.outcome);
        self.faults.add(r);
        self.flow.add(r);
        self.media.add(r);
        self.mcp.add(r);
        self.quality.add(r);
        let good = self.goodput_slo.is_some_and(|slo| slo.met_by(r));
        let repeated_prefix = match (r.outcome, r.prefix) {
            (Outcome::Ok, Some(prefix)) => self.first_or_repeat(r, prefix),
            _ => None,
        };
        let done_us = r.done_us();
        if let Some(f) = &r.error {
            self.count_failure(f, done_us);
        }
        self.stages
            .entry(r.stage)
            .or_default()
            .add(r, done_us, good);
        let window = self.windows.entry(done_us / 1_000_000).or_default();
        if r.outcome == Outcome::Ok {
            window.completed += 1;
        } else if matches!(r.outcome, Outcome::Error | Outcome::Timeout) {
            window.failed += 1;
        }
        if r.phase != Phase::Measure {
            return;
        }
        self.measured.bump(r.outcome);
        self.good += u64::from(good);
        if r.outcome == Outcome::Ok && r.prefix.is_some() {
            self.prefix_prompt_tokens += u64::from(r.input_tokens.unwrap_or(0));
            self.repeated_prefix_tokens += repeated_prefix.map_or(0, |p| u64::from(p.tokens));
        }
        // Turns are a chat conversation's; a flow's requests are steps (see `flow`).
        if let Some(session) = r.session.as_ref().filter(|_| r.step.is_none()) {
            self.turns.entry(session.turn).or_default().add(r);
        }
        if is_unavailability(r) {
            self.unavailable += 1;
        }
        self.window_start_us = Some(
            self.window_start_us
                .map_or(r.intended_us, |s| s.min(r.intended_us)),
        );
        self.window_end_us = Some(self.window_end_us.map_or(done_us, |e| e.max(done_us)));
        let d = &mut self.dist;
        if let Some(sent) = r.sent_us {
            d.send_lag
                .saturating_record(sent.saturating_sub(r.intended_us));
        }
        if r.outcome != Outcome::Ok {
            return;
        }
        let tokens = u64::from(r.output_tokens.unwrap_or(0));
        self.output_tokens += tokens;
        self.input_tokens += u64::from(r.input_tokens.unwrap_or(0));
        window.output_tokens += tokens;
        if let Some(source) = r.token_source {
            *self.token_sources.entry(source).or_default() += 1;
        }
        if let Some(ttft) = r.ttft_us() {
            d.ttft.saturating_record(ttft.max(1));
            window.ttft_sum_us += ttft;
            window.ttft_count += 1;
        }
        d.add_ok(r);
        if let Some((cached, prompt)) = r.prefix_cache_hit() {
            self.cached_prompt_tokens += u64::from(cached);
            self.truth_prompt_tokens += u64::from(prompt);
        }
        self.cache_write_tokens += u64::from(r.cache_write_tokens.unwrap_or(0));
        if let Some(server) = &r.server {
            self.preempted += u64::from(server.preemptions > 0);
            if let Some(ttft) = r.ttft_us() {
                let server_ttft = server.first_token_us.saturating_sub(server.arrival_us);
                d.ttft_client_overhead
                    .saturating_record(ttft.saturating_sub(server_ttft).max(1));
            }
        }
    }

    /// One failure into its class (stage and kind), with its first example.
    fn count_failure(&mut self, f: &crate::record::Failure, done_us: u64) {
        let class = self
            .failures
            .entry((f.stage, f.kind.clone()))
            .or_insert_with(|| FailureClass {
                count: 0,
                example: f.message.clone(),
                first_done_us: done_us,
            });
        class.count += 1;
    }

    /// The prefix when it was sent before; else remembers this request as its first.
    fn first_or_repeat(&mut self, r: &Record, prefix: PrefixMark) -> Option<PrefixMark> {
        use std::collections::hash_map::Entry;
        match self.seen_prefixes.entry(prefix.id) {
            Entry::Occupied(_) => Some(prefix),
            Entry::Vacant(slot) => {
                slot.insert(FirstPrefix {
                    done_us: r.done_us(),
                    tokens: prefix.tokens,
                    measured: r.phase == Phase::Measure,
                });
                None
            }
        }
    }

    /// Output tokens of each whole second inside the measured window.
    pub fn measured_seconds(&self) -> Vec<f64> {
        let (Some(start), Some(end)) = (self.window_start_us, self.window_end_us) else {
            return Vec::new();
        };
        // Whole seconds only: the first and last are cut by the window's edges.
        let (first, last) = (start / 1_000_000 + 1, end / 1_000_000);
        (first..last)
            .map(|second| {
                self.windows
                    .get(&second)
                    .map_or(0.0, |w| w.output_tokens as f64)
            })
            .collect()
    }

    pub fn failure_counts(&self) -> Vec<FailureCount> {
        let mut out: Vec<FailureCount> = self
            .failures
            .iter()
            .map(|((stage, kind), class)| FailureCount {
                stage: *stage,
                kind: kind.clone(),
                count: class.count,
                example: class.example.clone(),
            })
            .collect();
        out.sort_by_key(|f| std::cmp::Reverse(f.count));
        out
    }
}

/// Failures that mean the service was not there to answer: refused or reset
/// connections, 5xx, timeouts. (A 4xx is the client's fault; a bad answer is not
/// unavailability.)
pub fn is_unavailability(r: &Record) -> bool {
    match (&r.outcome, &r.error) {
        (Outcome::Timeout, _) => true,
        (Outcome::Error, Some(f)) => {
            matches!(
                f.kind.as_str(),
                "http_5xx" | "connect_refused" | "connect_error" | "reset"
            )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn ok(seq: u64, intended: u64, sent: u64, first: u64, last: u64, tokens: u32) -> Record {
        let mut r = Record::unsent(seq, 0, Phase::Measure, intended);
        r.sent_us = Some(sent);
        r.first_token_us = Some(first);
        r.last_byte_us = Some(last);
        r.output_tokens = Some(tokens);
        r.token_source = Some(TokenSource::Usage);
        r.itl_us = vec![10_000; tokens as usize - 1];
        r
    }

    #[test]
    fn figures_follow_the_definitions() {
        let mut agg = Aggregator::default();
        // Sent 2 ms late; TTFT 50 ms from send, 52 from intent; 11 tokens over 100 ms.
        agg.add(&ok(0, 0, 2_000, 52_000, 152_000, 11));
        let d = &agg.dist;
        assert_eq!(Dist::of(&d.ttft, 1e3).p50.round(), 50.0);
        assert_eq!(Dist::of(&d.ttft_intended, 1e3).p50.round(), 52.0);
        assert_eq!(Dist::of(&d.tpot, 1e3).p50.round(), 10.0);
        assert_eq!(Dist::of(&d.e2e, 1e3).p50.round(), 150.0);
        assert_eq!(Dist::of(&d.send_lag, 1e3).p50.round(), 2.0);
        assert_eq!(d.itl.len(), 10);
        assert_eq!(agg.output_tokens, 11);
    }

    #[test]
    fn every_outcome_is_counted_once_and_warmup_is_not_measured() {
        let mut agg = Aggregator::default();
        agg.add(&ok(0, 0, 0, 10, 20, 2));
        let mut warm = ok(1, 0, 0, 10, 20, 2);
        warm.phase = Phase::Warmup;
        agg.add(&warm);
        let mut failed = Record::unsent(2, 0, Phase::Measure, 5);
        failed.fail(Outcome::Error, FailStage::FirstByte, "http_5xx", "HTTP 503");
        agg.add(&failed);
        let mut dropped = Record::unsent(3, 0, Phase::Measure, 5);
        dropped.fail(
            Outcome::Dropped,
            FailStage::Client,
            "in_flight_limit",
            "at the limit",
        );
        agg.add(&dropped);
        assert!(agg.counts.balanced());
        assert_eq!((agg.counts.scheduled, agg.measured.scheduled), (4, 3));
        assert_eq!(agg.dist.ttft.len(), 1);
        assert_eq!(agg.unavailable, 1);
        assert_eq!(agg.failure_counts()[0].count, 1);
    }
}
