//! The flow section and its pictures: a per-step waterfall of a typical and of the
//! slowest session, and the dependency graph with its edges' calls and latencies —
//! the services' own graph when the run collected their spans, else the path sessions
//! took from step to step, from the records.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::digest::Digest;
use super::flow_sessions::{FLOW_SESSIONS, FlowSessions, Waterfall};
use super::parts::section;
use super::svg::{PALETTE, WIDTH, escape, num};
use crate::report::Summary;

/// One session's steps as bars from the session's first send, labelled with their
/// name and time.
pub fn waterfall(w: &Waterfall) -> String {
    const ROW: f64 = 22.0;
    const LEFT: f64 = 12.0;
    const RIGHT: f64 = 180.0;
    let start = w.steps.iter().map(|s| s.start_us).min().unwrap_or(0);
    let end = w.steps.iter().map(|s| s.end_us).max().unwrap_or(start + 1);
    let span = (end - start).max(1) as f64;
    let px = |us: u64| LEFT + (us - start) as f64 / span * (WIDTH - LEFT - RIGHT);
    let height = 24.0 + ROW * w.steps.len() as f64;
    let mut out = format!(
        r##"<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" aria-label="session {}" xmlns="http://www.w3.org/2000/svg" class="waterfall" data-session="{}">"##,
        w.session, w.session
    );
    for (i, step) in w.steps.iter().enumerate() {
        let y = 4.0 + ROW * i as f64;
        let (x0, x1) = (px(step.start_us), px(step.end_us));
        let ms = (step.end_us - step.start_us) as f64 / 1e3;
        let class = if step.failed.is_some() {
            "failed"
        } else {
            "decode"
        };
        let what = step
            .failed
            .as_ref()
            .map_or(String::new(), |kind| format!(", failed: {kind}"));
        let _ = write!(
            out,
            r##"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{}" class="{class}"><title>{}: {} ms from {} ms{}</title></rect><text x="{:.1}" y="{:.1}" class="legend">{} · {} ms{}</text>"##,
            (x1 - x0).max(1.0),
            ROW - 8.0,
            escape(&step.name),
            num(ms),
            num((step.start_us - start) as f64 / 1e3),
            escape(&what),
            x1 + 5.0,
            y + ROW - 11.0,
            escape(&step.name),
            num(ms),
            escape(&what)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{}" class="tick">0 ms</text><text x="{}" y="{}" class="tick" text-anchor="end">{} ms</text></svg>"##,
        height - 4.0,
        WIDTH - RIGHT,
        height - 4.0,
        num(span / 1e3)
    );
    out
}

/// An edge of a graph to draw.
pub struct GraphEdge {
    pub from: String,
    pub to: String,
    pub label: String,
    /// Drawn red: its calls failed.
    pub failing: bool,
}

/// A directed graph in layers: a node one step further than its furthest parent
/// (cycles cut where a node would move past the node count), each edge a curve
/// labelled with its calls and latency.
pub fn graph(title: &str, edges: &[GraphEdge]) -> String {
    const NODE_W: f64 = 112.0;
    const NODE_H: f64 = 30.0;
    const GAP_X: f64 = 96.0;
    const GAP_Y: f64 = 26.0;
    let layers = layers_of(edges);
    let mut columns: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (node, layer) in &layers {
        columns.entry(*layer).or_default().push(node);
    }
    let deepest = columns.values().map(Vec::len).max().unwrap_or(1) as f64;
    let width = (columns.len() as f64 * (NODE_W + GAP_X) + 20.0).max(WIDTH);
    let height = deepest * (NODE_H + GAP_Y) + 20.0;
    let mut at: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for (layer, nodes) in &columns {
        let column_h = nodes.len() as f64 * (NODE_H + GAP_Y);
        for (row, node) in nodes.iter().enumerate() {
            let x = 10.0 + *layer as f64 * (NODE_W + GAP_X);
            let y = (height - column_h) / 2.0 + row as f64 * (NODE_H + GAP_Y) + GAP_Y / 2.0;
            at.insert(node, (x, y));
        }
    }
    let mut out = format!(
        r##"<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg" class="graph">"##,
        escape(title)
    );
    for edge in edges {
        let (Some(&(x0, y0)), Some(&(x1, y1))) =
            (at.get(edge.from.as_str()), at.get(edge.to.as_str()))
        else {
            continue;
        };
        let (sx, sy) = (x0 + NODE_W, y0 + NODE_H / 2.0);
        let (tx, ty) = (x1, y1 + NODE_H / 2.0);
        // A back edge (a loop, a retry) bends below its nodes.
        let bend = if tx <= sx { NODE_H * 1.6 } else { 0.0 };
        let (mx, my) = ((sx + tx) / 2.0, (sy + ty) / 2.0 + bend);
        let colour = if edge.failing { "#b3261e" } else { "#9aa3b0" };
        let _ = write!(
            out,
            r##"<path d="M{sx:.1},{sy:.1} C{:.1},{:.1} {:.1},{:.1} {tx:.1},{ty:.1}" fill="none" stroke="{colour}" stroke-width="1.4" class="edge"><title>{} → {}: {}</title></path><text x="{mx:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            sx + GAP_X / 2.0,
            sy + bend,
            tx - GAP_X / 2.0,
            ty + bend,
            escape(&edge.from),
            escape(&edge.to),
            escape(&edge.label),
            my - 3.0,
            escape(&edge.label)
        );
    }
    for (node, (x, y)) in &at {
        let colour = PALETTE[0];
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="#fff" stroke="{colour}"/><text x="{:.1}" y="{:.1}" class="legend" text-anchor="middle">{}</text>"##,
            x + NODE_W / 2.0,
            y + NODE_H / 2.0 + 4.0,
            escape(&crate::record::cut_to(node, 18))
        );
    }
    out.push_str("</svg>");
    out
}

/// Each node's layer: one past its furthest parent, roots at 0, over the graph with
/// its back edges (loops: a tool call that returns to the model) left out. The
/// search for back edges starts from the nodes nothing calls (a flow's first step,
/// a gateway), so a loop is cut where it returns, not where it begins.
fn layers_of(edges: &[GraphEdge]) -> BTreeMap<&str, usize> {
    let mut nodes: Vec<&str> = Vec::new();
    for e in edges {
        for n in [e.from.as_str(), e.to.as_str()] {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    nodes.sort_by_key(|n| edges.iter().any(|e| e.to == *n && e.from != *n));
    let children = |n: &str| -> Vec<&str> {
        edges
            .iter()
            .filter(|e| e.from == n)
            .map(|e| e.to.as_str())
            .collect()
    };
    // Depth-first from each unvisited node: an edge to a node still on the path is a
    // back edge.
    let mut back: Vec<(&str, &str)> = Vec::new();
    let mut state: BTreeMap<&str, bool> = BTreeMap::new(); // true: on the path
    for &root in &nodes {
        if state.contains_key(root) {
            continue;
        }
        let mut stack = vec![(root, children(root))];
        state.insert(root, true);
        while let Some((node, pending)) = stack.last_mut() {
            match pending.pop() {
                Some(next) => match state.get(next) {
                    Some(true) => back.push((node, next)),
                    Some(false) => {}
                    None => {
                        state.insert(next, true);
                        stack.push((next, children(next)));
                    }
                },
                None => {
                    state.insert(node, false);
                    stack.pop();
                }
            }
        }
    }
    let forward: Vec<&GraphEdge> = edges
        .iter()
        .filter(|e| !back.contains(&(e.from.as_str(), e.to.as_str())))
        .collect();
    let mut layer: BTreeMap<&str, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    // Longest path over a DAG: at most one pass per node.
    for _ in 0..nodes.len() {
        let mut moved = false;
        for e in &forward {
            let next = layer[e.from.as_str()] + 1;
            if next > layer[e.to.as_str()] {
                layer.insert(&e.to, next);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    layer
}

pub fn flow(summary: &Summary, digest: &Digest) -> Option<String> {
    let flow = summary.flow.as_ref()?;
    let s = &flow.sessions;
    let mut body = format!(
        r#"<p>Sessions: {} ok, {} failed, {} ended by the circuit breaker, {} cancelled; session E2E p50 {} ms, p99 {} ms.</p>"#,
        s.ok,
        s.failed,
        s.fallback,
        s.cancelled,
        num(flow.session_e2e_ms.p50),
        num(flow.session_e2e_ms.p99)
    );
    body.push_str(r#"<table><tr><th>step</th><th>kind</th><th class="n">requests</th><th class="n">failed</th><th class="n">p50 ms</th><th class="n">p99 ms</th><th>errors</th></tr>"#);
    for step in &flow.steps {
        let errors: Vec<String> = step
            .errors
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        let _ = write!(
            body,
            r#"<tr><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            escape(&step.step),
            escape(&step.kind),
            step.requests,
            step.failed,
            num(step.latency_ms.p50),
            num(step.latency_ms.p99),
            escape(&errors.join(", "))
        );
    }
    body.push_str("</table>");
    if let Some(recall) = &flow.recall {
        let _ = write!(
            body,
            "<p>Recall: mean {} over {} queries; {} % below {}.</p>",
            num(recall.mean),
            recall.queries,
            num(recall.below_threshold * 100.0),
            num(recall.threshold)
        );
    }
    if let Some(tools) = &flow.tool_calls {
        let _ = write!(
            body,
            "<p>Tool calls: {} of {} succeeded ({} %).</p>",
            tools.ok,
            tools.calls,
            num(tools.success_rate * 100.0)
        );
    }
    for f in &flow.fallbacks {
        let _ = write!(
            body,
            "<p>Fallback <code>{}</code> for tool <code>{}</code>: {} sessions.</p>",
            escape(&f.rule),
            escape(&f.tool),
            f.sessions
        );
    }
    flow_pictures(summary, &digest.flows, &mut body);
    Some(section("flow", "Flow", &body))
}

/// The waterfalls of a typical and the slowest session, and the dependency graph.
fn flow_pictures(summary: &Summary, sessions: &FlowSessions, body: &mut String) {
    for w in &sessions.waterfalls {
        let _ = write!(
            body,
            "<h3>Session {} — {}, {} ms</h3>{}",
            w.session,
            escape(&w.label),
            num(w.e2e_us as f64 / 1e3),
            waterfall(w)
        );
    }
    let collected = summary
        .traces
        .as_ref()
        .map(|t| &t.graph)
        .filter(|g| !g.edges.is_empty());
    let (edges, note) = match collected {
        Some(graph) => (
            graph
                .edges
                .iter()
                .map(|e| GraphEdge {
                    from: e.source.clone(),
                    to: e.target.clone(),
                    label: format!("{} · p50 {} ms", e.calls, num(e.latency_ms.p50)),
                    failing: e.error_rate > 0.0,
                })
                .collect::<Vec<_>>(),
            format!(
                "The services' call graph from {} collected traces: each edge a caller → callee with its calls and their median latency; red where calls failed.",
                graph.traces
            ),
        ),
        None => (
            sessions
                .transitions
                .iter()
                .map(|((from, to), (n, sum_us))| GraphEdge {
                    from: from.clone(),
                    to: to.clone(),
                    label: format!("{n} · {} ms", num(*sum_us as f64 / *n as f64 / 1e3)),
                    failing: false,
                })
                .collect(),
            format!(
                "The paths sessions took from step to step, from the records of {} sessions{}: each edge with the sessions that took it and the next step's mean latency. With <code>--collect</code>, the services' own call graph is drawn instead.",
                sessions.sessions,
                if sessions.left_out > 0 {
                    format!(
                        " (the first {FLOW_SESSIONS}; {} more not drawn)",
                        sessions.left_out
                    )
                } else {
                    String::new()
                }
            ),
        ),
    };
    if !edges.is_empty() {
        let _ = write!(
            body,
            r#"<h3>Dependency graph</h3><p class="note">{note}</p>{}"#,
            graph("dependency graph", &edges)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str) -> GraphEdge {
        GraphEdge {
            from: from.into(),
            to: to.into(),
            label: String::new(),
            failing: false,
        }
    }

    #[test]
    fn nodes_sit_one_past_their_furthest_parent_and_cycles_end() {
        // In the order a BTreeMap keeps them: the loop's tool first.
        let edges = [
            edge("chat", "tool"),
            edge("embed", "search"),
            edge("search", "chat"),
            edge("start", "chat"),
            edge("start", "embed"),
            edge("tool", "chat"),
        ];
        let layers = layers_of(&edges);
        assert_eq!(layers["start"], 0);
        assert_eq!(layers["embed"], 1);
        assert_eq!(layers["search"], 2);
        // tool → chat is the loop's back edge: the tool sits after the model.
        assert_eq!(layers["chat"], 3);
        assert_eq!(layers["tool"], 4);
        let svg = graph("g", &edges);
        assert_eq!(svg.matches("class=\"edge\"").count(), 6);
    }
}
