//! The summary's MCP section: per operation (a method, and the tool or prompt it
//! names) calls, failures and latency; the sessions' handshakes, re-initializations
//! and churn; tool-call success.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::Dist;
use crate::metrics::mcp::McpTally;

/// MCP calls of the measured phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpSummary {
    /// By operation, in name order.
    pub ops: Vec<McpOpSummary>,
    /// `initialize` handshakes: one per session opened.
    pub handshakes: u64,
    /// Their time (`initialize` and `notifications/initialized`), milliseconds.
    pub handshake_ms: Dist,
    /// Calls whose session the server had dropped (404), sent again on a new one.
    pub reinitialized: u64,
    /// Sessions ended after a call (churn).
    pub sessions_ended: u64,
    /// Tool calls (not a flow's) and the share that succeeded, in percent.
    pub tool_calls: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_success_pct: Option<f64>,
    /// Messages the servers sent on the sessions' GET streams (with `listen`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heard: u64,
}

/// One operation's calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpOpSummary {
    /// `tools/call NAME`, `prompts/get NAME`, or the method.
    pub op: String,
    pub calls: u64,
    pub ok: u64,
    pub failed: u64,
    /// Send to result of successful calls.
    pub latency_ms: Dist,
    /// Progress notifications received.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress: u64,
    /// Failures by `stage/kind`.
    pub errors: BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The MCP section, when the run made MCP calls.
pub(super) fn mcp_summary(tally: &McpTally) -> Option<McpSummary> {
    if tally.is_empty() {
        return None;
    }
    let ops = tally
        .ops
        .iter()
        .map(|(op, t)| McpOpSummary {
            op: op.clone(),
            calls: t.counts.scheduled,
            ok: t.counts.ok,
            failed: t.counts.failed(),
            latency_ms: Dist::of(&t.latency, 1e3),
            progress: t.progress,
            errors: t.failures.clone(),
        })
        .collect();
    Some(McpSummary {
        ops,
        handshakes: tally.handshakes.len(),
        handshake_ms: Dist::of(&tally.handshakes, 1e3),
        reinitialized: tally.reinitialized,
        sessions_ended: tally.sessions_ended,
        tool_calls: tally.tool_calls,
        tool_success_pct: (tally.tool_calls > 0)
            .then(|| 100.0 * tally.tool_ok as f64 / tally.tool_calls as f64),
        heard: tally.heard,
    })
}

/// The terminal's MCP table.
pub(super) fn render_mcp(mcp: &McpSummary, line: &mut impl FnMut(String)) {
    line(format!(
        "  {:<28}{:>8}{:>8}{:>11}{:>10}{:>10}{:>10}",
        "mcp", "calls", "failed", "mean ms", "p50", "p90", "p99"
    ));
    for op in &mcp.ops {
        let d = &op.latency_ms;
        line(format!(
            "  {:<28}{:>8}{:>8}{:>11.2}{:>10.2}{:>10.2}{:>10.2}",
            crate::record::cut_to(&op.op, 27),
            op.calls,
            op.failed,
            d.mean,
            d.p50,
            d.p90,
            d.p99,
        ));
        for (kind, n) in &op.errors {
            line(format!("      {n} × {kind}"));
        }
    }
    let mut sessions = format!(
        "      sessions: {} opened (handshake p50 {:.2} ms, p99 {:.2} ms) · {} ended by churn · {} re-initialized after a 404",
        mcp.handshakes,
        mcp.handshake_ms.p50,
        mcp.handshake_ms.p99,
        mcp.sessions_ended,
        mcp.reinitialized
    );
    if let Some(pct) = mcp.tool_success_pct {
        sessions.push_str(&format!(" · tool success {pct:.2}% of {}", mcp.tool_calls));
    }
    if mcp.heard > 0 {
        sessions.push_str(&format!(" · {} messages heard on GET streams", mcp.heard));
    }
    line(sessions);
}
