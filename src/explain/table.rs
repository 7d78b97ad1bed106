//! The causal table: one row per trace (a flow session, or a request with the server
//! spans under it), one column per node of the call DAG. A cell holds the node's
//! latency in that trace (ms; NaN when the node did not run) and whether it failed.
//! Built from a run's records, from records joined with collected spans, or from a CSV
//! of latencies with a call graph beside it.

use std::collections::{BTreeMap, HashMap};

use crate::record::{Outcome, Record, SessionOutcome};

/// A node of the call graph: a step of a flow, a server operation, or the root.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    /// The service it belongs to, when known.
    pub service: Option<String>,
    /// The nodes it calls: their latencies are part of its own.
    pub callees: Vec<usize>,
}

/// One trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// When it started, µs since the run started (0 for tables without times).
    pub start_us: u64,
    pub latency: Vec<f64>,
    pub failed: Vec<bool>,
    /// The first error kind of each failed node.
    pub kinds: Vec<Option<String>>,
}

/// The nodes, the DAG and the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub nodes: Vec<Node>,
    pub root: usize,
    /// Every node after all of its callees.
    pub order: Vec<usize>,
    pub rows: Vec<Row>,
    /// What was left out or assumed while building it, said in the report.
    pub notes: Vec<String>,
}

impl Table {
    /// A table of `nodes` whose root is the one node no other calls (or `root`).
    fn new(nodes: Vec<Node>, root: Option<&str>) -> Result<Table, String> {
        let order = topological(&nodes)?;
        let root = match root {
            Some(name) => nodes
                .iter()
                .position(|n| n.name == name)
                .ok_or_else(|| format!("no node is called `{name}`"))?,
            None => {
                let called: Vec<bool> = (0..nodes.len())
                    .map(|i| nodes.iter().any(|n| n.callees.contains(&i)))
                    .collect();
                let tops: Vec<usize> = (0..nodes.len()).filter(|&i| !called[i]).collect();
                match tops[..] {
                    [one] => one,
                    _ => {
                        let names: Vec<&str> =
                            tops.iter().map(|&i| nodes[i].name.as_str()).collect();
                        return Err(format!(
                            "the graph has {} nodes no other calls ({}): name the one to explain with --root",
                            names.len(),
                            names.join(", ")
                        ));
                    }
                }
            }
        };
        Ok(Table {
            nodes,
            root,
            order,
            rows: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// The table under `name`: that node becomes the root and only what it calls,
    /// directly or not, stays (a step's own latency, explained by its spans).
    pub fn reroot(self, name: &str) -> Result<Table, String> {
        let root = self.index(name).ok_or_else(|| {
            let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
            format!(
                "no node is called `{name}`; choose from: {}",
                names.join(", ")
            )
        })?;
        let mut keep = vec![false; self.nodes.len()];
        let mut stack = vec![root];
        while let Some(at) = stack.pop() {
            if !std::mem::replace(&mut keep[at], true) {
                stack.extend(&self.nodes[at].callees);
            }
        }
        let kept: Vec<usize> = (0..self.nodes.len()).filter(|&i| keep[i]).collect();
        let new_index = |old: usize| kept.iter().position(|&k| k == old).expect("kept");
        let nodes: Vec<Node> = kept
            .iter()
            .map(|&i| Node {
                name: self.nodes[i].name.clone(),
                service: self.nodes[i].service.clone(),
                callees: self.nodes[i]
                    .callees
                    .iter()
                    .map(|&c| new_index(c))
                    .collect(),
            })
            .collect();
        let mut table = Table::new(nodes, Some(name))?;
        table.notes = self.notes;
        table.rows = self
            .rows
            .into_iter()
            .filter(|row| !row.latency[root].is_nan())
            .map(|row| Row {
                start_us: row.start_us,
                latency: kept.iter().map(|&i| row.latency[i]).collect(),
                failed: kept.iter().map(|&i| row.failed[i]).collect(),
                kinds: kept.iter().map(|&i| row.kinds[i].clone()).collect(),
            })
            .collect();
        Ok(table)
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// `name (service)`, or the name alone.
    pub fn label(&self, node: usize) -> String {
        let node = &self.nodes[node];
        match &node.service {
            Some(service) if *service != node.name => format!("{} ({service})", node.name),
            _ => node.name.clone(),
        }
    }

    pub(super) fn empty_row(&self, start_us: u64) -> Row {
        let n = self.nodes.len();
        Row {
            start_us,
            latency: vec![f64::NAN; n],
            failed: vec![false; n],
            kinds: vec![None; n],
        }
    }
}

/// Callees before callers; a cycle is an error that names it.
pub(super) fn topological(nodes: &[Node]) -> Result<Vec<usize>, String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        at: usize,
        nodes: &[Node],
        marks: &mut [Mark],
        path: &mut Vec<usize>,
        order: &mut Vec<usize>,
    ) -> Result<(), String> {
        match marks[at] {
            Mark::Done => return Ok(()),
            Mark::Open => {
                let from = path.iter().position(|&p| p == at).unwrap_or(0);
                let cycle: Vec<&str> = path[from..]
                    .iter()
                    .chain([&at])
                    .map(|&i| nodes[i].name.as_str())
                    .collect();
                return Err(format!(
                    "the call graph has a cycle ({}): causal attribution needs a DAG",
                    cycle.join(" → ")
                ));
            }
            Mark::New => {}
        }
        marks[at] = Mark::Open;
        path.push(at);
        for &callee in &nodes[at].callees {
            visit(callee, nodes, marks, path, order)?;
        }
        path.pop();
        marks[at] = Mark::Done;
        order.push(at);
        Ok(())
    }
    let mut marks = vec![Mark::New; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    for start in 0..nodes.len() {
        visit(start, nodes, &mut marks, &mut Vec::new(), &mut order)?;
    }
    Ok(order)
}

/// A request's time, ms: send (or intended start, if never sent) to its end.
fn request_ms(record: &Record) -> f64 {
    let from = record.sent_us.unwrap_or(record.intended_us);
    record.done_us().saturating_sub(from) as f64 / 1e3
}

/// The measured-phase flow sessions of a run: the session is the root, its steps
/// (by name) its callees. (`spans::under_records` adds the spans under the steps.)
pub fn from_records(records: &[Record]) -> Result<Table, String> {
    sessions(records).map(|(table, _)| table)
}

/// [`from_records`], with the row of each session by its ID.
pub(super) fn sessions(records: &[Record]) -> Result<(Table, HashMap<u64, usize>), String> {
    let mut sessions: BTreeMap<u64, Vec<&Record>> = BTreeMap::new();
    for record in records {
        if let (Some(session), Some(_)) = (&record.session, &record.step) {
            sessions.entry(session.id).or_default().push(record);
        }
    }
    if sessions.is_empty() {
        return Err(
            "the records hold no flow sessions: explain needs a flow (steps to blame), or spans collected under the requests (`--collect`)"
                .into(),
        );
    }
    let mut table = Table::new(step_nodes(&sessions), Some("session"))?;
    let mut unfinished = 0;
    let mut warmup = 0;
    let mut rows_by_session = HashMap::new();
    for (&id, records) in &sessions {
        let Some(last) = records.iter().find(|r| r.session_end.is_some()) else {
            unfinished += 1;
            continue;
        };
        if last.phase != crate::record::Phase::Measure {
            warmup += 1;
            continue;
        }
        let end = last.session_end.as_ref().expect("found by it");
        let start = records.iter().map(|r| r.intended_us).min().unwrap_or(0);
        let mut row = table.empty_row(start);
        row.latency[table.root] = end.e2e_us as f64 / 1e3;
        row.failed[table.root] = end.outcome != SessionOutcome::Ok;
        if end.outcome == SessionOutcome::Fallback {
            row.kinds[table.root] = Some("fallback".into());
        }
        for record in records {
            let step = record.step.as_ref().expect("grouped by it");
            let at = table.index(&step.name).expect("a node per step");
            let before = if row.latency[at].is_nan() {
                0.0
            } else {
                row.latency[at]
            };
            row.latency[at] = before + request_ms(record);
            if record.outcome != Outcome::Ok && !row.failed[at] {
                row.failed[at] = true;
                row.kinds[at] = Some(record.error.as_ref().map_or_else(
                    || format!("{:?}", record.outcome).to_lowercase(),
                    |e| e.kind.clone(),
                ));
            }
        }
        rows_by_session.insert(id, table.rows.len());
        table.rows.push(row);
    }
    if unfinished > 0 {
        table.notes.push(format!(
            "{unfinished} sessions without an end (cut by the run's end) left out"
        ));
    }
    if warmup > 0 {
        table
            .notes
            .push(format!("{warmup} warm-up or cool-down sessions left out"));
    }
    Ok((table, rows_by_session))
}

/// The root `session` and the steps, in the order the sessions took them.
fn step_nodes(sessions: &BTreeMap<u64, Vec<&Record>>) -> Vec<Node> {
    let mut first_seen: HashMap<&str, (u32, Option<&str>)> = HashMap::new();
    for record in sessions.values().flatten() {
        let step = record.step.as_ref().expect("grouped by it");
        let entry = first_seen
            .entry(step.name.as_str())
            .or_insert((step.agent_step_seq, step.service.as_deref()));
        entry.0 = entry.0.min(step.agent_step_seq);
    }
    let mut steps: Vec<(&str, (u32, Option<&str>))> = first_seen.into_iter().collect();
    steps.sort_by_key(|&(name, (seq, _))| (seq, name));
    let mut nodes = vec![Node {
        name: "session".into(),
        service: None,
        callees: (1..=steps.len()).collect(),
    }];
    nodes.extend(steps.into_iter().map(|(name, (_, service))| Node {
        name: name.to_owned(),
        service: service.map(str::to_owned),
        callees: Vec::new(),
    }));
    nodes
}

/// A table from a CSV of latencies (a header of node names, one row per trace, an
/// optional `failed_<node>` column of 0/1 per node) and a call graph of
/// `caller -> callee` lines.
pub fn from_csv(csv_text: &str, graph: &str, root: Option<&str>) -> Result<Table, String> {
    let mut reader = csv::ReaderBuilder::new().from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("the CSV's header: {e}"))?
        .iter()
        .map(str::to_owned)
        .collect();
    let names: Vec<&String> = header
        .iter()
        .filter(|h| !h.starts_with("failed_"))
        .collect();
    let mut nodes: Vec<Node> = names
        .iter()
        .map(|name| Node {
            name: (*name).clone(),
            service: None,
            callees: Vec::new(),
        })
        .collect();
    for (number, line) in graph.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (caller, callee) = line.split_once("->").ok_or_else(|| {
            format!(
                "graph line {}: `{line}` is not `caller -> callee`",
                number + 1
            )
        })?;
        let find = |name: &str| {
            nodes
                .iter()
                .position(|n| n.name == name.trim())
                .ok_or_else(|| {
                    format!(
                        "graph line {}: `{}` is not a column of the CSV",
                        number + 1,
                        name.trim()
                    )
                })
        };
        let (caller, callee) = (find(caller)?, find(callee)?);
        if !nodes[caller].callees.contains(&callee) {
            nodes[caller].callees.push(callee);
        }
    }
    let mut table = Table::new(nodes, root)?;
    for (number, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("CSV row {}: {e}", number + 2))?;
        let mut row = table.empty_row(0);
        for (column, value) in header.iter().zip(record.iter()) {
            let (name, failed) = match column.strip_prefix("failed_") {
                Some(name) => (name, true),
                None => (column.as_str(), false),
            };
            let at = table
                .index(name)
                .ok_or_else(|| format!("CSV column `{column}` names no node"))?;
            let number_at = || format!("CSV row {}, column `{column}`", number + 2);
            if value.trim().is_empty() {
                continue;
            }
            let value: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("{}: `{value}` is not a number", number_at()))?;
            if failed {
                row.failed[at] = value != 0.0;
            } else {
                row.latency[at] = value;
            }
        }
        table.rows.push(row);
    }
    if table.rows.is_empty() {
        return Err("the CSV has no rows".into());
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_with_its_call_graph_becomes_a_dag_rooted_where_no_one_calls() {
        let table = from_csv(
            "web,api,db,failed_db\n3,2,1,0\n4,3,2,1\n",
            "# calls\nweb -> api\napi -> db\n",
            None,
        )
        .unwrap();
        assert_eq!(table.nodes[table.root].name, "web");
        let position = |name: &str| {
            table
                .order
                .iter()
                .position(|&i| table.nodes[i].name == name)
        };
        assert!(position("db") < position("api") && position("api") < position("web"));
        assert_eq!(table.rows[1].latency, vec![4.0, 3.0, 2.0]);
        assert_eq!(table.rows[1].failed, vec![false, false, true]);
    }

    #[test]
    fn cycles_unknown_nodes_and_several_roots_are_errors_that_say_what_to_do() {
        let cycle = from_csv("a,b\n1,1\n", "a -> b\nb -> a\n", None).unwrap_err();
        assert!(cycle.contains("cycle (a → b → a)"), "{cycle}");
        let unknown = from_csv("a,b\n1,1\n", "a -> c\n", None).unwrap_err();
        assert_eq!(unknown, "graph line 1: `c` is not a column of the CSV");
        let roots = from_csv("a,b,c\n1,1,1\n", "a -> c\n", None).unwrap_err();
        assert!(
            roots.contains("2 nodes no other calls (a, b): name the one"),
            "{roots}"
        );
        let text = from_csv("a,b\n1,x\n", "a -> b\n", None).unwrap_err();
        let table = from_csv("a,b,c\n3,2,1\n", "a -> b\nb -> c\n", None).unwrap();
        let under_b = table.clone().reroot("b").unwrap();
        assert_eq!(under_b.nodes.len(), 2);
        assert_eq!(under_b.nodes[under_b.root].name, "b");
        assert_eq!(under_b.rows[0].latency, vec![2.0, 1.0]);
        let unknown = table.reroot("x").unwrap_err();
        assert_eq!(unknown, "no node is called `x`; choose from: a, b, c");
        assert_eq!(text, "CSV row 2, column `b`: `x` is not a number");
    }
}
