//! The report's sections about the chain: flow sessions and their steps, injected
//! faults and what they caused, and the traces collected during a run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::chaos::ProxyCounts;
use crate::metrics::{Dist, FaultTally};

/// Flow sessions (measured phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowSummary {
    pub sessions: SessionCounts,
    /// Intended start to last byte of sessions that ended `ok`.
    pub session_e2e_ms: Dist,
    /// Sessions the circuit breaker ended, by rule and tool.
    pub fallbacks: Vec<FallbackCount>,
    /// Each step, in flow order.
    pub steps: Vec<StepSummary>,
    /// Send to last byte of successful embed steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_latency_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<RecallSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCalls>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionCounts {
    pub ok: u64,
    pub failed: u64,
    /// Ended by the circuit breaker: counted apart from failures.
    pub fallback: u64,
    pub cancelled: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FallbackCount {
    pub rule: String,
    pub tool: String,
    pub sessions: u64,
}

/// One step's requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepSummary {
    pub step: String,
    pub kind: String,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    /// Send to last byte of successful requests.
    pub latency_ms: Dist,
    /// For chat steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Dist>,
    /// Failures by `stage/kind`.
    pub errors: BTreeMap<String, u64>,
}

/// Recall@k of searches whose query is in the ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecallSummary {
    pub queries: u64,
    pub mean: f64,
    pub threshold: f64,
    /// Share of queries whose recall@k fell below `threshold`.
    pub below_threshold: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCalls {
    pub calls: u64,
    pub ok: u64,
    pub success_rate: f64,
}

pub(super) fn flow_summary(tally: &crate::metrics::flow::FlowTally) -> Option<FlowSummary> {
    use crate::record::SessionOutcome;
    if tally.is_empty() {
        return None;
    }
    let count = |o| tally.sessions.get(&o).copied().unwrap_or(0);
    let steps = tally
        .steps_in_order()
        .into_iter()
        .map(|(name, t)| StepSummary {
            step: name.clone(),
            kind: t.kind.clone(),
            requests: t.counts.scheduled,
            ok: t.counts.ok,
            failed: t.counts.failed(),
            latency_ms: Dist::of(&t.latency, 1e3),
            ttft_ms: (!t.ttft.is_empty()).then(|| Dist::of(&t.ttft, 1e3)),
            errors: t.failures.clone(),
        })
        .collect();
    Some(FlowSummary {
        sessions: SessionCounts {
            ok: count(SessionOutcome::Ok),
            failed: count(SessionOutcome::Failed),
            fallback: count(SessionOutcome::Fallback),
            cancelled: count(SessionOutcome::Cancelled),
        },
        session_e2e_ms: Dist::of(&tally.session_e2e, 1e3),
        fallbacks: tally
            .fallbacks
            .iter()
            .map(|((rule, tool), n)| FallbackCount {
                rule: rule.clone(),
                tool: tool.clone(),
                sessions: *n,
            })
            .collect(),
        steps,
        embedding_latency_ms: (!tally.embedding_latency.is_empty())
            .then(|| Dist::of(&tally.embedding_latency, 1e3)),
        recall: tally.mean_recall().map(|mean| RecallSummary {
            queries: tally.recall_queries,
            mean,
            threshold: tally.recall_threshold,
            below_threshold: tally.recall_below as f64 / tally.recall_queries as f64,
        }),
        tool_calls: (tally.tool_calls > 0).then(|| ToolCalls {
            calls: tally.tool_calls,
            ok: tally.tool_ok,
            success_rate: tally.tool_ok as f64 / tally.tool_calls as f64,
        }),
    })
}

/// Injected faults against outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FaultsSummary {
    pub rules: Vec<FaultRuleSummary>,
    /// Requests that carried at least one injected fault.
    pub requests_with_faults: u64,
    /// Failed or timed-out requests that carried an injected fault.
    pub failed_with_faults: u64,
    /// Failed or timed-out requests with no injected fault: the service's own.
    pub failed_without_faults: u64,
    /// The proxies' own counts, by service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxies: Vec<ProxyCounts>,
}

/// One rule's faults and what became of the requests it hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FaultRuleSummary {
    pub rule: String,
    pub fault: String,
    /// Requests the proxy matched to the rule (when it ran in this process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<u64>,
    /// Faults the proxy says it injected (when it ran in this process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<u64>,
    /// Records carrying the rule's fault.
    pub requests: u64,
    /// Of those, failed or timed out.
    pub failed: u64,
    /// Their failures, by `stage/kind`.
    pub failures: BTreeMap<String, u64>,
    /// The delay or hold added, where the fault adds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<Dist>,
}

pub(super) fn faults_summary(
    tally: &FaultTally,
    proxies: Vec<ProxyCounts>,
) -> Option<FaultsSummary> {
    if tally.requests_with_faults == 0 && proxies.is_empty() {
        return None;
    }
    let proxy_rule = |name: &str| {
        proxies
            .iter()
            .find_map(|p| p.rules.iter().find(|r| r.0 == name))
    };
    let mut rules: Vec<FaultRuleSummary> = tally
        .rules
        .iter()
        .map(|(name, t)| FaultRuleSummary {
            rule: name.clone(),
            fault: t.fault.clone(),
            matched: proxy_rule(name).map(|r| r.2),
            injected: proxy_rule(name).map(|r| r.3),
            requests: t.requests,
            failed: t.failed,
            failures: t.failures.clone(),
            added_ms: t.added.as_ref().map(|h| Dist::of(h, 1e3)),
        })
        .collect();
    for (name, fault, matched, injected) in proxies.iter().flat_map(|p| &p.rules) {
        if !tally.rules.contains_key(name) {
            rules.push(FaultRuleSummary {
                rule: name.clone(),
                fault: fault.clone(),
                matched: Some(*matched),
                injected: Some(*injected),
                requests: 0,
                failed: 0,
                failures: BTreeMap::new(),
                added_ms: None,
            });
        }
    }
    Some(FaultsSummary {
        rules,
        requests_with_faults: tally.requests_with_faults,
        failed_with_faults: tally.failed_with_faults,
        failed_without_faults: tally.failed_without_faults,
        proxies,
    })
}

pub(super) fn render_flow(f: &FlowSummary, line: &mut impl FnMut(String)) {
    let c = &f.sessions;
    line(format!(
        "  flow sessions: {} ok · {} failed · {} fallback · {} cancelled · session E2E p50 {:.1} ms, p99 {:.1} ms",
        c.ok, c.failed, c.fallback, c.cancelled, f.session_e2e_ms.p50, f.session_e2e_ms.p99
    ));
    line(format!(
        "    {:<16}{:<8}{:>9}{:>8}{:>10}{:>10}{:>10}{:>10}",
        "step", "kind", "requests", "failed", "mean ms", "p50", "p99", "TTFT p50"
    ));
    for st in &f.steps {
        let d = &st.latency_ms;
        let ttft = st
            .ttft_ms
            .map_or("-".to_owned(), |t| format!("{:.2}", t.p50));
        line(format!(
            "    {:<16}{:<8}{:>9}{:>8}{:>10.2}{:>10.2}{:>10.2}{:>10}",
            st.step, st.kind, st.requests, st.failed, d.mean, d.p50, d.p99, ttft
        ));
        for (kind, n) in &st.errors {
            line(format!("        {n} × {kind}"));
        }
    }
    for fb in &f.fallbacks {
        line(format!(
            "    fallback: {} sessions by {} (tool `{}`)",
            fb.sessions, fb.rule, fb.tool
        ));
    }
    if let Some(r) = &f.recall {
        line(format!(
            "    recall@k: mean {:.3} over {} queries · {:.1}% below {:.2}",
            r.mean,
            r.queries,
            r.below_threshold * 100.0,
            r.threshold
        ));
    }
    if let Some(t) = &f.tool_calls {
        line(format!(
            "    tool calls: {} · {} ok · success {:.2}%",
            t.calls,
            t.ok,
            t.success_rate * 100.0
        ));
    }
}

pub(super) fn render_traces(t: &crate::trace::graph::TraceReport, line: &mut impl FnMut(String)) {
    let g = &t.graph;
    line(format!(
        "  traces: {} spans in {} traces · {} nodes, {} edges · {} of {} requests joined to server spans",
        g.spans,
        g.traces,
        g.nodes.len(),
        g.edges.len(),
        t.join.joined,
        t.join.records
    ));
    if let Some(r) = &t.receiver {
        line(format!(
            "    receiver: {} exports, {} spans stored, {} dropped past its bound, {} rejected",
            r.requests, r.spans_stored, r.spans_dropped, r.rejected
        ));
    }
    for edge in g.edges.iter().take(12) {
        line(format!(
            "    {} → {}: {} calls, p50 {:.1} ms, errors {:.1}%",
            edge.source,
            edge.target,
            edge.calls,
            edge.latency_ms.p50,
            edge.error_rate * 100.0
        ));
    }
    for step in &t.join.steps {
        line(format!(
            "    {}: client p50 {:.1} ms · server span p50 {:.1} ms · outside the server p50 {:.1} ms",
            step.step, step.client_ms.p50, step.server_ms.p50, step.outside_server_ms_p50
        ));
    }
}

pub(super) fn render_faults(f: &FaultsSummary, line: &mut impl FnMut(String)) {
    line(format!(
        "  faults: {} requests carried injected faults · failed with a fault {} · failed on their own {}",
        f.requests_with_faults, f.failed_with_faults, f.failed_without_faults
    ));
    for r in &f.rules {
        let failures = r
            .failures
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let added = r.added_ms.map_or(String::new(), |d| {
            format!(" · added p50 {:.0} ms, max {:.0} ms", d.p50, d.max)
        });
        line(format!(
            "    {:<22} {:<18} {} requests, {} failed{}{added}",
            r.rule,
            r.fault,
            r.requests,
            r.failed,
            if failures.is_empty() {
                String::new()
            } else {
                format!(" ({failures})")
            },
        ));
    }
    for p in &f.proxies {
        line(format!(
            "    proxy for {} at {}: {} requests over {} connections · {} upstream errors · {} faults unclaimed",
            p.service, p.addr, p.requests, p.connections, p.upstream_errors, p.unclaimed_faults
        ));
    }
}
