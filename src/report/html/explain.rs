//! Why a failed flow run breached: the causes `redline explain` found, drawn on the
//! call graph (an edge into a blamed node red, each labelled with its node's share of
//! the change), and every node's contribution with its interval and intervention.

use std::fmt::Write;

use super::flows::{self, GraphEdge};
use super::parts::section;
use super::svg::escape;
use crate::explain::render::signed;
use crate::report::Summary;

pub fn explanation(summary: &Summary) -> Option<String> {
    let e = summary.explain.as_ref()?;
    let a = &e.attribution;
    let mut body = format!(
        "<p>The {} breaching sessions against all {}, by {}: change {} (98 % interval {} … {}). Each node's share is its Shapley value over its own behaviour; <i>undoes</i> is how much of the change <code>do(node = baseline)</code> removes.</p>",
        a.incident_traces,
        a.baseline_traces,
        escape(&a.measure.describe()),
        escape(&signed(a.change.value, &a.measure)),
        escape(&signed(a.change.low, &a.measure)),
        escape(&signed(a.change.high, &a.measure)),
    );
    if e.causes.is_empty() {
        let _ = write!(
            body,
            "<p>{}</p>",
            escape(e.no_cause.as_deref().unwrap_or("no cause"))
        );
    } else {
        body.push_str("<ol class=\"causes\">");
        for cause in &e.causes {
            let text = code_spans(&escape(&cause.suggestion));
            let _ = write!(
                body,
                r#"<li data-cause="{}">{text}</li>"#,
                escape(&cause.node)
            );
        }
        body.push_str("</ol>");
    }
    body.push_str(&flows::graph(
        "the call graph, blamed nodes' edges in red",
        &edges(e),
    ));
    body.push_str(&table(e));
    Some(section("explain", "Why it failed", &body))
}

fn edges(e: &crate::explain::Explanation) -> Vec<GraphEdge> {
    let blamed = |node: &str| e.causes.iter().any(|c| c.node == node);
    let share = |node: &str| {
        e.attribution
            .nodes
            .iter()
            .find(|n| n.node == node)
            .filter(|n| n.share.abs() >= 0.05)
            .map_or(String::new(), |n| format!("{:.0} %", n.share * 100.0))
    };
    e.graph
        .iter()
        .flat_map(|(caller, callees)| {
            callees.iter().map(move |callee| GraphEdge {
                from: caller.clone(),
                to: callee.clone(),
                label: share(callee),
                failing: blamed(callee),
            })
        })
        .collect()
}

fn table(e: &crate::explain::Explanation) -> String {
    let a = &e.attribution;
    let mut table = String::from(
        r#"<table><tr><th>node</th><th class="n">contribution</th><th class="n">interval</th><th class="n">share</th><th class="n">undoes</th><th>mechanism</th></tr>"#,
    );
    for n in &a.nodes {
        let _ = write!(
            table,
            r#"<tr><td>{}</td><td class="n" data-contribution="{}">{}</td><td class="n">{}&nbsp;…&nbsp;{}</td><td class="n">{:.0} %</td><td class="n">{:.0} %</td><td>{}</td></tr>"#,
            escape(&n.node),
            n.contribution.value,
            unbroken(&signed(n.contribution.value, &a.measure)),
            unbroken(&signed(n.contribution.low, &a.measure)),
            unbroken(&signed(n.contribution.high, &a.measure)),
            n.share * 100.0,
            n.undoes * 100.0,
            escape(&n.mechanism.describe()),
        );
    }
    table.push_str("</table>");
    table
}

/// A figure and its unit on one line.
fn unbroken(text: &str) -> String {
    escape(text).replace(' ', "&nbsp;")
}

/// `name` in the (escaped) suggestion as `<code>name</code>`.
fn code_spans(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_owned()
            }
        })
        .collect()
}
