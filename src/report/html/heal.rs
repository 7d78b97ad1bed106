//! What the remediation agent did about the run: each decision, whether the whitelist
//! and schema let it through, what running it (or its rollback) gave, and whether the
//! verify load passed; then why the loop ended.

use std::fmt::Write;

use super::parts::section;
use super::svg::escape;
use crate::report::Summary;

pub fn heal(summary: &Summary) -> Option<String> {
    let heal = summary.heal.as_ref()?;
    let mut body = format!(
        "<p>{} asked by <code>redline heal</code>{} — the audit log is <code>heal.jsonl</code>.</p>",
        escape(&heal.model),
        if heal.executed {
            ", actions run"
        } else {
            ", a dry run: nothing ran"
        }
    );
    body.push_str("<table><thead><tr><th>step</th><th>action</th><th>arguments</th><th>reasoning</th><th>result</th><th>rollback</th><th>verify</th></tr></thead><tbody>");
    for step in &heal.steps {
        let verify = match step.verify {
            Some(true) => "passed",
            Some(false) => "failed",
            None => "",
        };
        let _ = write!(
            body,
            "<tr data-step=\"{}\"><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{verify}</td></tr>",
            step.step,
            step.step,
            escape(&step.action),
            escape(&step.arguments.to_string()),
            escape(&step.thought),
            escape(&step.result),
            escape(step.rollback.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</tbody></table>");
    let _ = write!(
        body,
        "<p class=\"heal-ending\" data-ending=\"{}\">{}</p>",
        escape(&heal.ending),
        escape(&heal.detail)
    );
    Some(section("heal", "What the agent did", &body))
}
