//! MCP calls in the report: a row per operation, and what the sessions went through.

use std::fmt::Write;

use super::parts::section;
use super::svg::{escape, num};
use crate::report::Summary;

/// The section, when the run made MCP calls.
pub fn mcp(summary: &Summary) -> Option<String> {
    let mcp = summary.mcp.as_ref()?;
    let mut body = String::from(
        r#"<table><tr><th>operation</th><th class="n">calls</th><th class="n">failed</th><th class="n">mean ms</th><th class="n">p50 ms</th><th class="n">p90 ms</th><th class="n">p99 ms</th><th class="n">progress</th><th>errors</th></tr>"#,
    );
    for op in &mcp.ops {
        let errors: Vec<String> = op.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let d = &op.latency_ms;
        let _ = write!(
            body,
            r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            escape(&op.op),
            op.calls,
            op.failed,
            num(d.mean),
            num(d.p50),
            num(d.p90),
            num(d.p99),
            op.progress,
            escape(&errors.join(", "))
        );
    }
    body.push_str("</table>");
    let mut success = mcp.tool_success_pct.map_or(String::new(), |pct| {
        format!(" Tool calls: {} · {}% succeeded.", mcp.tool_calls, num(pct))
    });
    if mcp.heard > 0 {
        let _ = write!(
            success,
            " The servers sent {} messages on the sessions' GET streams.",
            mcp.heard
        );
    }
    let _ = write!(
        body,
        r#"<p class="note">Latency is each call's own request, send to result; a session's handshake (<code>initialize</code>, then <code>notifications/initialized</code>) is counted apart: {} sessions opened, handshake p50 {} ms, p99 {} ms; {} ended by churn; {} calls found their session dropped (404) and initialized again.{success}</p>"#,
        mcp.handshakes,
        num(mcp.handshake_ms.p50),
        num(mcp.handshake_ms.p99),
        mcp.sessions_ended,
        mcp.reinitialized,
    );
    Some(section("mcp", "MCP calls", &body))
}
