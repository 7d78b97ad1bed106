//! What a run hands on to the report: its result, the header printed before it, and
//! the accounts of its disruptions and of its feedback controller. They live below
//! the runner and the report alike, so the report reads a run's result without
//! knowing how a run is carried out.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::chaos::ProxyCounts;
use crate::metrics::Aggregator;
use crate::prometheus::scrape::ServerMetrics;
use crate::schedule::ExecutedStage;
use crate::slo::Aborted;

/// What a run leaves behind.
pub struct RunResult {
    pub aggregator: Aggregator,
    /// How the counts of answers without usage were settled, when there were any.
    pub token_settlement: Option<crate::record::TokenSettlement>,
    pub interrupted: bool,
    /// What a reader must know before trusting the figures.
    pub warnings: Vec<String>,
    pub elapsed: Duration,
    pub target_url: String,
    pub model: String,
    /// The stages as they ran, indexed by the records' `stage`.
    pub stages: Vec<ExecutedStage>,
    /// Stopped early by `abort_on_fail`: when, and the breaches that were certain.
    pub aborted: Option<Aborted>,
    /// What scraping the server's metrics found, when the spec asked for it.
    pub server_metrics: Option<ServerMetrics>,
    /// The chaos proxies' counts, by service, when the spec had faults.
    pub proxies: Vec<ProxyCounts>,
    /// What the OTLP exporter sent, when the run exported its spans.
    pub otlp: Option<crate::trace::export::ExportCounts>,
    /// The collected spans' graph and their join to the records (`--collect`).
    pub traces: Option<crate::trace::graph::TraceReport>,
    /// The first requests' prompts and answers, cut short.
    pub samples: Vec<crate::record::Sample>,
    /// What the streaming SLOs saw, when the spec has `streaming:`.
    pub drift: Option<crate::slo::streaming::DriftSummary>,
    /// Availability through the run's disruptions, when it had any.
    pub availability: Option<Availability>,
    /// What the feedback controller read and set, when the spec has `feedback`.
    pub feedback: Option<FeedbackReport>,
}

/// What a run is about to do, printed before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub name: String,
    pub target: String,
    pub model: String,
    /// One line per stage of the spec.
    pub stages: Vec<String>,
    /// How long the schedule runs, when every stage is bounded in time.
    pub planned: Option<std::time::Duration>,
    /// Things to know before reading the figures (e.g. certificates not verified).
    pub notes: Vec<String>,
}

/// What the run's requests saw through its disruptions.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Availability {
    /// Requests sent (not those the client itself dropped or the run cancelled).
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Requests the client dropped at its in-flight limit (not sent, not counted).
    pub dropped: u64,
    /// succeeded / requests.
    pub availability: f64,
    /// Its one-sided lower bound at `confidence` (Clopper–Pearson).
    pub lower_bound: f64,
    pub confidence: f64,
    pub target: f64,
    /// Requests in all that would show `target` at `confidence` if failures kept their
    /// observed share; none when the observed share is already worse than the target.
    pub requests_to_show_target: Option<u64>,
    /// Failures during no step (or its settling second after).
    pub unattributed_failures: u64,
    pub steps: Vec<StepAvailability>,
}

/// One disruption step and what it cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StepAvailability {
    #[serde(flatten)]
    pub step: DisruptionStep,
    /// Requests that ended during the step.
    pub requests: u64,
    /// Of them, failed; a failure whose record names the restart as its fault is
    /// counted here whenever it ended.
    pub failed: u64,
    /// From the step's start to its last failure (0 when none failed): how long the
    /// service kept failing.
    pub failing_for_ms: f64,
    /// Requests the balancer resent to another replica because the restarting one
    /// did not take them (they succeeded, or are counted in `failed`).
    pub retried: u64,
    /// From the step's start to the last request that failed or had to be resent
    /// because of it (0 when none): the failover time, until traffic had moved to the
    /// other replicas.
    pub failover_ms: f64,
}

/// What one step of a disruption did, on the run's clock.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DisruptionStep {
    /// 1, 2, … in the order they ran.
    pub step: u32,
    /// `restart` or `hook`.
    pub kind: String,
    /// The replica restarted (`llm[1] http://127.0.0.1:9102`) or the command run.
    pub target: String,
    /// Which replica of the service (restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<usize>,
    /// When it began: the stop signal, or the command's start (s since the run began).
    pub started_s: f64,
    /// When the stopped replica had exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_s: Option<f64>,
    /// When it ended: the replica ready again, or the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
    /// Why it did not end well: a replica not ready in time, a command's failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One reading of the gauge and the rates it led to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RateEvent {
    /// Since the run started.
    pub at_ms: f64,
    /// u the gauge gave; absent when it failed (the rates were held).
    pub reading: Option<f64>,
    /// The smoothed u the rates were computed from.
    pub smoothed: Option<f64>,
    /// Each mixed service's rate from here on, requests per second, in the mix's order.
    pub rates: Vec<f64>,
}

/// What the controller did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FeedbackReport {
    /// The mix's services, in the order of each event's `rates`.
    pub services: Vec<String>,
    pub interval_ms: f64,
    pub events: Vec<RateEvent>,
    /// Readings that failed or made no sense (the rates were held).
    pub gauge_failures: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why `feedback.jsonl` stopped being written, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
}
