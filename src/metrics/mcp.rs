//! MCP figures over the records: per operation (a method, and the tool or prompt it
//! names) counts, latency and failures; the sessions' handshakes, re-initializations
//! and churn; tool-call success (docs/metrics.md, "MCP").

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{Counts, histogram};
use crate::record::{Outcome, Phase, Record};

/// One operation's measured calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpTally {
    pub counts: Counts,
    /// Send to the result of successful calls, microseconds (the call's own request:
    /// a handshake it needed first is in [`McpTally::handshakes`]).
    #[serde(with = "super::file::hdr")]
    pub latency: Histogram<u64>,
    /// Failures by `stage/kind`.
    pub failures: BTreeMap<String, u64>,
    /// Progress notifications received.
    pub progress: u64,
}

impl Default for OpTally {
    fn default() -> Self {
        OpTally {
            counts: Counts::default(),
            latency: histogram(),
            failures: BTreeMap::new(),
            progress: 0,
        }
    }
}

/// MCP calls of the measured phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpTally {
    /// By operation: `tools/call get_weather`, `resources/read`, `tools/list`…
    pub ops: BTreeMap<String, OpTally>,
    /// Time of each `initialize` handshake, microseconds.
    #[serde(with = "super::file::hdr")]
    pub handshakes: Histogram<u64>,
    /// Calls whose session the server had dropped, sent again on a new one.
    pub reinitialized: u64,
    /// Sessions ended after a call (churn).
    pub sessions_ended: u64,
    /// Tool calls that were not a flow's step (those count in the flow's tally), and
    /// how many succeeded: a JSON-RPC error, an `isError` result or a timeout is a
    /// failed call.
    pub tool_calls: u64,
    pub tool_ok: u64,
    /// Messages heard on the sessions' GET streams.
    #[serde(default)]
    pub heard: u64,
}

impl Default for McpTally {
    fn default() -> Self {
        McpTally {
            ops: BTreeMap::new(),
            handshakes: histogram(),
            reinitialized: 0,
            sessions_ended: 0,
            tool_calls: 0,
            tool_ok: 0,
            heard: 0,
        }
    }
}

impl McpTally {
    pub fn add(&mut self, r: &Record) {
        let (Phase::Measure, Some(mcp)) = (r.phase, &r.mcp) else {
            return;
        };
        let key = match (&mcp.name, mcp.method.as_str()) {
            (Some(name), "tools/call" | "prompts/get") => format!("{} {name}", mcp.method),
            _ => mcp.method.clone(),
        };
        let tally = self.ops.entry(key).or_default();
        tally.counts.bump(r.outcome);
        tally.progress += u64::from(mcp.progress);
        if let Some(f) = &r.error {
            let stage = serde_json::to_value(f.stage).unwrap_or_default();
            let key = format!("{}/{}", stage.as_str().unwrap_or_default(), f.kind);
            *tally.failures.entry(key).or_default() += 1;
        }
        if let (Outcome::Ok, Some(e2e)) = (r.outcome, r.e2e_us()) {
            let _ = tally.latency.record(e2e.max(1));
        }
        if let Some(us) = mcp.handshake_us {
            let _ = self.handshakes.record(us.max(1));
        }
        self.reinitialized += u64::from(mcp.reinitialized);
        self.sessions_ended += u64::from(mcp.ended_session);
        self.heard += u64::from(mcp.heard);
        let attempted = matches!(r.outcome, Outcome::Ok | Outcome::Error | Outcome::Timeout);
        if mcp.method == "tools/call" && r.step.is_none() && attempted {
            self.tool_calls += 1;
            self.tool_ok += u64::from(r.outcome == Outcome::Ok);
        }
    }

    pub fn merge(&mut self, other: &McpTally) {
        for (op, theirs) in &other.ops {
            let ours = self.ops.entry(op.clone()).or_default();
            ours.counts.merge(&theirs.counts);
            ours.latency
                .add(&theirs.latency)
                .expect("the histograms share their bounds");
            ours.progress += theirs.progress;
            for (failure, n) in &theirs.failures {
                *ours.failures.entry(failure.clone()).or_default() += n;
            }
        }
        self.handshakes
            .add(&other.handshakes)
            .expect("the histograms share their bounds");
        self.reinitialized += other.reinitialized;
        self.sessions_ended += other.sessions_ended;
        self.tool_calls += other.tool_calls;
        self.tool_ok += other.tool_ok;
        self.heard += other.heard;
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
