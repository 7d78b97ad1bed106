//! Flow figures over the records: each step's own latency and failures, how sessions
//! ended (and why they fell back), recall@k of searches, and tool-call success.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{Counts, histogram};
use crate::record::{Outcome, Phase, Record, SessionOutcome};

/// One step's requests (measured phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTally {
    pub kind: String,
    pub counts: Counts,
    /// Send to last byte, microseconds, of successful requests.
    #[serde(with = "super::file::hdr")]
    pub latency: Histogram<u64>,
    #[serde(with = "super::file::hdr")]
    pub ttft: Histogram<u64>,
    /// Failures by `stage/kind`.
    pub failures: BTreeMap<String, u64>,
    /// When the step's first request completed: steps are listed in that order.
    pub first_done_us: u64,
}

/// Flow figures (measured phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowTally {
    /// By step name.
    pub steps: BTreeMap<String, StepTally>,
    pub sessions: BTreeMap<SessionOutcome, u64>,
    /// Intended start to last byte of whole sessions that ended `ok`, microseconds.
    #[serde(with = "super::file::hdr")]
    pub session_e2e: Histogram<u64>,
    /// Fallbacks by (rule, tool).
    #[serde(with = "super::file::pairs")]
    pub fallbacks: BTreeMap<(String, String), u64>,
    /// Send to last byte of successful embed steps (`embedding_latency_ms`).
    #[serde(with = "super::file::hdr")]
    pub embedding_latency: Histogram<u64>,
    pub recall_queries: u64,
    pub recall_sum: f64,
    /// Queries whose recall@k fell below `recall_threshold`.
    pub recall_below: u64,
    pub recall_threshold: f64,
    pub tool_calls: u64,
    pub tool_ok: u64,
}

impl Default for FlowTally {
    fn default() -> Self {
        FlowTally {
            steps: BTreeMap::new(),
            sessions: BTreeMap::new(),
            session_e2e: histogram(),
            fallbacks: BTreeMap::new(),
            embedding_latency: histogram(),
            recall_queries: 0,
            recall_sum: 0.0,
            recall_below: 0,
            recall_threshold: 0.82,
            tool_calls: 0,
            tool_ok: 0,
        }
    }
}

impl FlowTally {
    pub fn add(&mut self, r: &Record) {
        if r.phase != Phase::Measure {
            return;
        }
        if let Some(end) = &r.session_end {
            *self.sessions.entry(end.outcome).or_default() += 1;
            if end.outcome == SessionOutcome::Ok {
                let _ = self.session_e2e.record(end.e2e_us.max(1));
            }
            if let Some(reason) = &end.fallback_reason {
                *self
                    .fallbacks
                    .entry((reason.rule.clone(), reason.tool.clone()))
                    .or_default() += 1;
            }
        }
        let Some(step) = &r.step else { return };
        let tally = self
            .steps
            .entry(step.name.clone())
            .or_insert_with(|| StepTally {
                kind: step.kind.clone(),
                counts: Counts::default(),
                latency: histogram(),
                ttft: histogram(),
                failures: BTreeMap::new(),
                first_done_us: r.done_us(),
            });
        tally.counts.bump(r.outcome);
        if let Some(f) = &r.error {
            let stage = serde_json::to_value(f.stage).unwrap_or_default();
            let key = format!("{}/{}", stage.as_str().unwrap_or_default(), f.kind);
            *tally.failures.entry(key).or_default() += 1;
        }
        if r.outcome == Outcome::Ok {
            if let Some(e2e) = r.e2e_us() {
                let _ = tally.latency.record(e2e.max(1));
                if step.kind == "embed" {
                    let _ = self.embedding_latency.record(e2e.max(1));
                }
            }
            if let Some(ttft) = r.ttft_us() {
                let _ = tally.ttft.record(ttft.max(1));
            }
        }
        if step.kind == "tool"
            && matches!(r.outcome, Outcome::Ok | Outcome::Error | Outcome::Timeout)
        {
            self.tool_calls += 1;
            self.tool_ok += u64::from(r.outcome == Outcome::Ok);
        }
        if let Some(recall) = step.recall {
            self.recall_queries += 1;
            self.recall_sum += recall;
            self.recall_below += u64::from(recall < self.recall_threshold);
        }
    }

    /// The steps in the order their first requests completed (a session's order,
    /// for steps every session runs), ties by name.
    pub fn steps_in_order(&self) -> Vec<(&String, &StepTally)> {
        let mut steps: Vec<_> = self.steps.iter().collect();
        steps.sort_by_key(|(name, t)| (t.first_done_us, *name));
        steps
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty() && self.sessions.is_empty()
    }

    pub fn mean_recall(&self) -> Option<f64> {
        (self.recall_queries > 0).then(|| self.recall_sum / self.recall_queries as f64)
    }
}
