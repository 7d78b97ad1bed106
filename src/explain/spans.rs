//! Spans under a flow's requests: a server span whose parent is a request's span (its
//! `traceparent`) is a callee of that request's step, a span under it a callee of its
//! node, and so on down. A node is `service/operation`; one called from two places is
//! two nodes (`… via caller`), so each caller's latency is a function of its own.

use std::collections::{BTreeMap, HashMap};

use super::table::{Node, Table, sessions, topological};
use crate::record::Record;
use crate::trace::graph::Span;

/// Where a span hangs: under a request of a session, or under another span.
enum Parent<'a> {
    Step { row: usize, node: usize },
    Span(&'a Span),
}

/// Adds the spans' nodes under the steps and their latencies to the rows.
/// The measured-phase flow sessions of a run, as [`super::table::from_records`] reads
/// them, with the spans under each step's requests as the steps' callees.
pub fn under_records(records: &[Record], spans: &[Span]) -> Result<Table, String> {
    let (mut table, rows_by_session) = sessions(records)?;
    if spans.is_empty() {
        table.notes.push(
            "no spans: the steps are the deepest nodes (collect the services' spans with --collect to see inside them)"
                .into(),
        );
        return Ok(table);
    }
    deepen(table, records, spans, &rows_by_session)
}

fn deepen(
    mut table: Table,
    records: &[Record],
    spans: &[Span],
    rows_by_session: &HashMap<u64, usize>,
) -> Result<Table, String> {
    let mut steps: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
    for record in records {
        let (Some(traceparent), Some(session), Some(step)) =
            (&record.traceparent, &record.session, &record.step)
        else {
            continue;
        };
        let mut parts = traceparent.split('-');
        let (Some(trace), Some(span)) = (parts.nth(1), parts.next()) else {
            continue;
        };
        if let (Some(&row), Some(node)) =
            (rows_by_session.get(&session.id), table.index(&step.name))
        {
            steps.insert((trace, span), (row, node));
        }
    }
    let by_id: HashMap<(&str, &str), &Span> = spans
        .iter()
        .map(|s| ((s.trace_id.as_str(), s.span_id.as_str()), s))
        .collect();
    let parent_of = |span: &Span| -> Option<Parent<'_>> {
        let parent = span.parent_span_id.as_deref()?;
        let key = (span.trace_id.as_str(), parent);
        if let Some(&(row, node)) = steps.get(&key) {
            return Some(Parent::Step { row, node });
        }
        by_id.get(&key).map(|s| Parent::Span(s))
    };
    // Each span's place: its row and its caller's node name, found by walking up.
    let mut placed: Vec<(&Span, usize, String)> = Vec::new();
    let mut orphans = 0;
    let mut foreign = 0;
    for span in spans {
        match place(span, &parent_of, &table, spans.len()) {
            Placement::Under { row, caller } => placed.push((span, row, caller)),
            Placement::Orphan => orphans += 1,
            Placement::Foreign => foreign += 1,
        }
    }
    let names = node_names(&placed);
    add_nodes(&mut table, &placed, &names)?;
    for (span, row, caller) in &placed {
        let at = table
            .index(&names[&(span.node(), caller.clone())])
            .expect("added");
        let cell = &mut table.rows[*row];
        let ms = span.end_ns.saturating_sub(span.start_ns) as f64 / 1e6;
        cell.latency[at] = if cell.latency[at].is_nan() {
            ms
        } else {
            cell.latency[at] + ms
        };
        if span.error && !cell.failed[at] {
            cell.failed[at] = true;
            cell.kinds[at] = Some("span_error".into());
        }
    }
    table.notes.push(format!(
        "{} spans placed under {} requests' steps",
        placed.len(),
        steps.len()
    ));
    if orphans > 0 {
        table.notes.push(format!(
            "{orphans} spans left out: their parent span is in no trace collected (orphans)"
        ));
    }
    if foreign > 0 {
        table.notes.push(format!(
            "{foreign} spans left out: their traces were started by no request of this run"
        ));
    }
    Ok(table)
}

enum Placement {
    Under { row: usize, caller: String },
    Orphan,
    Foreign,
}

/// Walks up from `span` to the request it hangs under (bounded: a cycle of parent
/// IDs is an orphan, not a hang).
fn place<'a>(
    span: &'a Span,
    parent_of: &impl Fn(&'a Span) -> Option<Parent<'a>>,
    table: &Table,
    limit: usize,
) -> Placement {
    let caller = match parent_of(span) {
        None if span.parent_span_id.is_none() => return Placement::Foreign,
        None => return Placement::Orphan,
        Some(Parent::Step { row, node }) => {
            return Placement::Under {
                row,
                caller: table.nodes[node].name.clone(),
            };
        }
        Some(Parent::Span(parent)) => parent,
    };
    let mut at = caller;
    for _ in 0..limit {
        match parent_of(at) {
            Some(Parent::Step { row, .. }) => {
                return Placement::Under {
                    row,
                    caller: caller.node(),
                };
            }
            Some(Parent::Span(up)) => at = up,
            None if at.parent_span_id.is_none() => return Placement::Foreign,
            None => return Placement::Orphan,
        }
    }
    Placement::Orphan
}

/// `service/operation`, or `service/operation via caller` when it is called from
/// more than one node.
fn node_names(placed: &[(&Span, usize, String)]) -> BTreeMap<(String, String), String> {
    let mut callers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (span, _, caller) in placed {
        let list = callers.entry(span.node()).or_default();
        if !list.contains(caller) {
            list.push(caller.clone());
        }
    }
    let mut names = BTreeMap::new();
    for (node, list) in callers {
        for caller in &list {
            let name = if list.len() == 1 {
                node.clone()
            } else {
                format!("{node} via {caller}")
            };
            names.insert((node.clone(), caller.clone()), name);
        }
    }
    names
}

fn add_nodes(
    table: &mut Table,
    placed: &[(&Span, usize, String)],
    names: &BTreeMap<(String, String), String>,
) -> Result<(), String> {
    for name in names.values() {
        if table.index(name).is_none() {
            let service = name.split('/').next().map(str::to_owned);
            table.nodes.push(Node {
                name: name.clone(),
                service,
                callees: Vec::new(),
            });
        }
    }
    for (span, _, caller) in placed {
        let callee = table
            .index(&names[&(span.node(), caller.clone())])
            .expect("added");
        // The caller is a step (named as is) or a span's node (renamed if called from
        // several places: then any of its names calls it).
        let callers: Vec<usize> = (0..table.nodes.len())
            .filter(|&i| {
                let name = &table.nodes[i].name;
                name == caller
                    || name
                        .strip_prefix(caller.as_str())
                        .is_some_and(|r| r.starts_with(" via "))
            })
            .collect();
        for at in callers {
            if !table.nodes[at].callees.contains(&callee) {
                table.nodes[at].callees.push(callee);
            }
        }
    }
    let n = table.nodes.len();
    for row in &mut table.rows {
        row.latency.resize(n, f64::NAN);
        row.failed.resize(n, false);
        row.kinds.resize(n, None);
    }
    table.order = topological(&table.nodes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::record::{Phase, SessionEnd, SessionMark, SessionOutcome, StepMark};

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

    fn request(seq: u64, step: &str, span: &str, ms: u64, last: bool) -> Record {
        let mut r = Record::unsent(seq, 0, Phase::Measure, seq * 1000);
        r.sent_us = Some(seq * 1000);
        r.last_byte_us = Some(seq * 1000 + ms * 1000);
        r.traceparent = Some(format!("00-{TRACE}-{span}-01"));
        r.session = Some(SessionMark {
            id: 0,
            turn: seq as u32 + 1,
            trace_id: TRACE.into(),
            snapshot: String::new(),
        });
        r.step = Some(StepMark {
            name: step.into(),
            kind: "chat".into(),
            service: Some("llm".into()),
            agent_step_seq: seq as u32 + 1,
            tool: None,
            tool_call_hash: None,
            results: None,
            recall: None,
        });
        if last {
            r.session_end = Some(SessionEnd {
                outcome: SessionOutcome::Ok,
                fallback_reason: None,
                requests: 2,
                e2e_us: 100_000,
            });
        }
        r
    }

    fn span(
        id: &str,
        parent: Option<&str>,
        service: &str,
        name: &str,
        ms: u64,
        trace: &str,
    ) -> Span {
        Span {
            trace_id: trace.into(),
            span_id: id.into(),
            parent_span_id: parent.map(str::to_owned),
            service: service.into(),
            name: name.into(),
            start_ns: 0,
            end_ns: ms * 1_000_000,
            error: name == "search",
            attributes: Default::default(),
        }
    }

    #[test]
    fn spans_hang_under_the_steps_they_served_and_strays_are_counted_not_placed() {
        let records = [
            request(0, "plan", "00000000000000a1", 40, false),
            request(1, "answer", "00000000000000a2", 50, true),
        ];
        let spans = [
            span("b1", Some("00000000000000a2"), "llm", "chat", 45, TRACE),
            span("b2", Some("b1"), "vectors", "search", 20, TRACE),
            span(
                "b3",
                Some("00000000000000a1"),
                "vectors",
                "search",
                10,
                TRACE,
            ),
            span("c1", Some("missing"), "llm", "chat", 5, TRACE),
            span(
                "d1",
                None,
                "llm",
                "chat",
                5,
                "1af7651916cd43dd8448eb211c80319c",
            ),
        ];
        let table = under_records(&records, &spans).unwrap();
        let names: Vec<&str> = table.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "session",
                "plan",
                "answer",
                "llm/chat",
                "vectors/search via llm/chat",
                "vectors/search via plan"
            ]
        );
        let at = |name: &str| table.index(name).unwrap();
        assert_eq!(table.nodes[at("answer")].callees, [at("llm/chat")]);
        assert_eq!(
            table.nodes[at("llm/chat")].callees,
            [at("vectors/search via llm/chat")]
        );
        assert_eq!(
            table.nodes[at("plan")].callees,
            [at("vectors/search via plan")]
        );
        let row = &table.rows[0];
        assert_eq!(row.latency[at("llm/chat")], 45.0);
        assert!(row.failed[at("vectors/search via plan")]);
        let notes = table.notes.join("\n");
        assert!(
            notes.contains("3 spans placed under 2 requests' steps"),
            "{notes}"
        );
        assert!(
            notes.contains("1 spans left out: their parent span is in no trace"),
            "{notes}"
        );
        assert!(
            notes.contains("1 spans left out: their traces were started by no request"),
            "{notes}"
        );
    }
}
