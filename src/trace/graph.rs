//! The dependency graph of a chain, built from its traces: nodes are
//! `service/operation` (the span's `llm.operation_type` when it has one), edges go from
//! a span's parent to the span with call counts, latency percentiles, error rates and
//! weights (from `llm.dependency_edges` when a span declares them, else each edge's
//! share of its caller's calls), and reasoning paths are each trace's ordered
//! operations, grouped by `llm.reasoning_path_id` or by sequence. Reads OTLP/JSON
//! (`resourceSpans`) and Jaeger JSON (`data[].spans`); renders JSON, Graphviz DOT and
//! Mermaid. Pure: callers read and write the files.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

/// One span, whatever format it came in.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub service: String,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub error: bool,
    pub attributes: BTreeMap<String, Value>,
}

impl Span {
    /// `service/operation`: the node this span is a call of.
    pub fn node(&self) -> String {
        let operation = self
            .attributes
            .get("llm.operation_type")
            .and_then(Value::as_str)
            .unwrap_or(&self.name);
        format!("{}/{operation}", self.service)
    }

    fn duration_ms(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e6
    }
}

/// Spans from OTLP/JSON (`{"resourceSpans": …}`, one document or JSON lines of them)
/// or Jaeger JSON (`{"data": [{"spans": …, "processes": …}]}`).
pub fn parse_spans(text: &str) -> Result<Vec<Span>, String> {
    let documents: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(value) => vec![value],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(n, line)| {
                serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", n + 1))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut spans = Vec::new();
    for document in &documents {
        if let Some(resource_spans) = document["resourceSpans"].as_array() {
            otlp_spans(resource_spans, &mut spans)?;
        } else if let Some(traces) = document["data"].as_array() {
            jaeger_spans(traces, &mut spans)?;
        } else {
            return Err("neither OTLP/JSON (`resourceSpans`) nor Jaeger JSON (`data`)".into());
        }
    }
    Ok(spans)
}

/// An OTLP `AnyValue` as plain JSON.
fn any_value(value: &Value) -> Value {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return Value::Null;
    };
    match kind.as_str() {
        "intValue" => inner
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .map_or_else(|| inner.clone(), Value::from),
        "arrayValue" => Value::Array(
            inner["values"]
                .as_array()
                .map(|v| v.iter().map(any_value).collect())
                .unwrap_or_default(),
        ),
        _ => inner.clone(),
    }
}

fn attributes(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .map(|attrs| {
            attrs
                .iter()
                .filter_map(|a| Some((a["key"].as_str()?.to_owned(), any_value(&a["value"]))))
                .collect()
        })
        .unwrap_or_default()
}

fn nanos(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

fn otlp_spans(resource_spans: &[Value], out: &mut Vec<Span>) -> Result<(), String> {
    for resource in resource_spans {
        let resource_attributes = attributes(&resource["resource"]["attributes"]);
        let service = resource_attributes
            .get("service.name")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let id = |key: &str| {
                    span[key]
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                };
                out.push(Span {
                    trace_id: id("traceId").ok_or("a span has no traceId")?,
                    span_id: id("spanId").ok_or("a span has no spanId")?,
                    parent_span_id: id("parentSpanId"),
                    service: service.clone(),
                    name: span["name"].as_str().unwrap_or_default().to_owned(),
                    start_ns: nanos(&span["startTimeUnixNano"]),
                    end_ns: nanos(&span["endTimeUnixNano"]),
                    // STATUS_CODE_ERROR is 2.
                    error: span["status"]["code"].as_u64() == Some(2)
                        || span["status"]["code"].as_str() == Some("STATUS_CODE_ERROR"),
                    attributes: attributes(&span["attributes"]),
                });
            }
        }
    }
    Ok(())
}

fn jaeger_spans(traces: &[Value], out: &mut Vec<Span>) -> Result<(), String> {
    for trace in traces {
        let processes = &trace["processes"];
        for span in trace["spans"].as_array().into_iter().flatten() {
            let tags: BTreeMap<String, Value> = span["tags"]
                .as_array()
                .map(|tags| {
                    tags.iter()
                        .filter_map(|t| Some((t["key"].as_str()?.to_owned(), t["value"].clone())))
                        .collect()
                })
                .unwrap_or_default();
            let parent = span["references"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["refType"] == "CHILD_OF")
                .and_then(|r| r["spanID"].as_str())
                .map(str::to_owned);
            let start_us = span["startTime"].as_u64().unwrap_or(0);
            let service = span["processID"]
                .as_str()
                .and_then(|p| processes[p]["serviceName"].as_str())
                .unwrap_or("unknown");
            out.push(Span {
                trace_id: span["traceID"]
                    .as_str()
                    .ok_or("a span has no traceID")?
                    .to_owned(),
                span_id: span["spanID"]
                    .as_str()
                    .ok_or("a span has no spanID")?
                    .to_owned(),
                parent_span_id: parent,
                service: service.to_owned(),
                name: span["operationName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                start_ns: start_us * 1000,
                end_ns: (start_us + span["duration"].as_u64().unwrap_or(0)) * 1000,
                error: tags.get("error").is_some_and(|v| v == &Value::Bool(true)),
                attributes: tags,
            });
        }
    }
    Ok(())
}

/// Latency of an edge's calls, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Node {
    pub id: String,
    pub service: String,
    pub operation: String,
    pub calls: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Edge {
    pub source: String,
    pub target: String,
    pub calls: u64,
    pub latency_ms: Latency,
    pub error_rate: f64,
    /// From `llm.dependency_edges` when declared, else the edge's share of the
    /// source's outgoing calls.
    pub weight: f64,
    pub declared_weight: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ReasoningPath {
    /// `llm.reasoning_path_id`, or the operations joined by ` → `.
    pub id: String,
    pub operations: Vec<String>,
    pub traces: u64,
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Graph {
    pub traces: u64,
    pub spans: u64,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub paths: Vec<ReasoningPath>,
    /// Spans whose parent is not among the spans read (roots are not counted).
    pub orphans: u64,
}

fn latency(mut values: Vec<f64>) -> Latency {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Latency {
        mean: values.iter().sum::<f64>() / values.len() as f64,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    }
}

/// Declared edge weights: `llm.dependency_edges` as a JSON list (or a string of one)
/// of `{source, target, weight}`.
fn declared_weights(spans: &[Span]) -> HashMap<(String, String), f64> {
    let mut weights = HashMap::new();
    for span in spans {
        let Some(value) = span.attributes.get("llm.dependency_edges") else {
            continue;
        };
        let list = match value {
            Value::String(text) => serde_json::from_str::<Value>(text).unwrap_or(Value::Null),
            other => other.clone(),
        };
        for edge in list.as_array().into_iter().flatten() {
            if let (Some(source), Some(target), Some(weight)) = (
                edge["source"].as_str(),
                edge["target"].as_str(),
                edge["weight"].as_f64(),
            ) {
                weights.insert((source.to_owned(), target.to_owned()), weight);
            }
        }
    }
    weights
}

/// Builds the graph of a set of spans.
pub fn build(spans: &[Span]) -> Graph {
    let by_id: HashMap<(&str, &str), &Span> = spans
        .iter()
        .map(|s| ((s.trace_id.as_str(), s.span_id.as_str()), s))
        .collect();
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut calls: BTreeMap<(String, String), (Vec<f64>, u64)> = BTreeMap::new();
    let mut orphans = 0;
    for span in spans {
        let id = span.node();
        let node = nodes.entry(id.clone()).or_insert_with(|| Node {
            id: id.clone(),
            service: span.service.clone(),
            operation: id[span.service.len() + 1..].to_owned(),
            calls: 0,
        });
        node.calls += 1;
        let Some(parent_id) = &span.parent_span_id else {
            continue;
        };
        let Some(parent) = by_id.get(&(span.trace_id.as_str(), parent_id.as_str())) else {
            orphans += 1;
            continue;
        };
        let entry = calls.entry((parent.node(), id)).or_default();
        entry.0.push(span.duration_ms());
        entry.1 += u64::from(span.error);
    }
    let declared = declared_weights(spans);
    let mut outgoing: HashMap<&str, u64> = HashMap::new();
    for ((source, _), (durations, _)) in &calls {
        *outgoing.entry(source).or_default() += durations.len() as u64;
    }
    let edges = calls
        .iter()
        .map(|((source, target), (durations, errors))| {
            let n = durations.len() as u64;
            let declared_weight = declared.get(&(source.clone(), target.clone()));
            Edge {
                source: source.clone(),
                target: target.clone(),
                calls: n,
                latency_ms: latency(durations.clone()),
                error_rate: *errors as f64 / n as f64,
                weight: declared_weight
                    .copied()
                    .unwrap_or(n as f64 / outgoing[source.as_str()] as f64),
                declared_weight: declared_weight.is_some(),
            }
        })
        .collect();
    // Reasoning paths: each trace's operations in start order.
    let mut traces: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        traces.entry(&span.trace_id).or_default().push(span);
    }
    let mut paths: BTreeMap<String, (Vec<String>, u64)> = BTreeMap::new();
    for trace in traces.values_mut() {
        trace.sort_by_key(|s| (s.start_ns, s.end_ns));
        let operations: Vec<String> = trace.iter().map(|s| s.node()).collect();
        let id = trace
            .iter()
            .find_map(|s| s.attributes.get("llm.reasoning_path_id"))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_else(|| operations.join(" → "));
        paths.entry(id).or_insert((operations, 0)).1 += 1;
    }
    let total = traces.len() as u64;
    let mut paths: Vec<ReasoningPath> = paths
        .into_iter()
        .map(|(id, (operations, n))| ReasoningPath {
            id,
            operations,
            traces: n,
            share: n as f64 / total.max(1) as f64,
        })
        .collect();
    paths.sort_by(|a, b| b.traces.cmp(&a.traces).then_with(|| a.id.cmp(&b.id)));
    Graph {
        traces: total,
        spans: spans.len() as u64,
        nodes: nodes.into_values().collect(),
        edges,
        paths,
        orphans,
    }
}

/// Server-side spans joined to the client's records by `traceparent`: a span whose
/// parent is a request's span ID is that request's server side.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Join {
    /// Records that carried a `traceparent`.
    pub records: u64,
    /// Of those, records with at least one server span.
    pub joined: u64,
    /// Traces among the spans that no record started.
    pub foreign_traces: u64,
    /// Per step (`request` outside flows): client time against server span time.
    pub steps: Vec<StepJoin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StepJoin {
    pub step: String,
    pub requests: u64,
    /// Send to last byte, as the client saw it.
    pub client_ms: Latency,
    /// The server span's own duration.
    pub server_ms: Latency,
    /// Median client − server time: network, queues and proxies in between.
    pub outside_server_ms_p50: f64,
}

/// Joins spans to records (a run's `records.jsonl`).
pub fn join(spans: &[Span], records: &[crate::record::Record]) -> Join {
    let mut children: HashMap<(&str, &str), Vec<&Span>> = HashMap::new();
    for span in spans {
        if let Some(parent) = &span.parent_span_id {
            children
                .entry((span.trace_id.as_str(), parent.as_str()))
                .or_default()
                .push(span);
        }
    }
    let mut traced = 0;
    let mut joined = 0;
    let mut record_traces = std::collections::HashSet::new();
    // Per step: client times, server times, and their differences, in ms.
    type Times = (Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by_step: BTreeMap<String, Times> = BTreeMap::new();
    for record in records {
        let Some(traceparent) = &record.traceparent else {
            continue;
        };
        let mut parts = traceparent.split('-');
        let (Some(trace), Some(span)) = (parts.nth(1), parts.next()) else {
            continue;
        };
        traced += 1;
        record_traces.insert(trace.to_owned());
        let Some(server) = children.get(&(trace, span)) else {
            continue;
        };
        joined += 1;
        let Some(client_us) = record.e2e_us() else {
            continue;
        };
        let server_ms = server
            .iter()
            .map(|s| s.duration_ms())
            .fold(0.0_f64, f64::max);
        let client_ms = client_us as f64 / 1e3;
        let step = record
            .step
            .as_ref()
            .map_or("request".to_owned(), |s| s.name.clone());
        let entry = by_step.entry(step).or_default();
        entry.0.push(client_ms);
        entry.1.push(server_ms);
        entry.2.push(client_ms - server_ms);
    }
    let foreign_traces = spans
        .iter()
        .map(|s| s.trace_id.as_str())
        .collect::<std::collections::HashSet<_>>()
        .into_iter()
        .filter(|t| !record_traces.contains(*t))
        .count() as u64;
    Join {
        records: traced,
        joined,
        foreign_traces,
        steps: by_step
            .into_iter()
            .map(|(step, (client, server, outside))| StepJoin {
                step,
                requests: client.len() as u64,
                client_ms: latency(client),
                server_ms: latency(server),
                outside_server_ms_p50: latency(outside).p50,
            })
            .collect(),
    }
}

/// The graph of the spans collected during a run and their join to its records.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TraceReport {
    pub graph: Graph,
    pub join: Join,
    /// What the receiver counted, spans it dropped past its bound included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<ReceiverCounts>,
}

/// A trace receiver's counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ReceiverCounts {
    pub requests: u64,
    pub spans_stored: u64,
    /// Past the receiver's bound: dropped, counted.
    pub spans_dropped: u64,
    /// Exports that were not OTLP or too large.
    pub rejected: u64,
}

/// Graphviz DOT.
pub fn render_dot(graph: &Graph) -> String {
    let mut out = String::from("digraph redline {\n  rankdir=LR;\n  node [shape=box];\n");
    for node in &graph.nodes {
        out.push_str(&format!(
            "  \"{}\" [label=\"{}\\n{}\\n{} calls\"];\n",
            node.id, node.service, node.operation, node.calls
        ));
    }
    for edge in &graph.edges {
        out.push_str(&format!(
            "  \"{}\" -> \"{}\" [label=\"{} calls\\np50 {:.1} ms\\nerrors {:.1}%\", penwidth={:.2}];\n",
            edge.source,
            edge.target,
            edge.calls,
            edge.latency_ms.p50,
            edge.error_rate * 100.0,
            1.0 + 3.0 * edge.weight.clamp(0.0, 1.0)
        ));
    }
    out.push_str("}\n");
    out
}

/// Mermaid `flowchart`.
pub fn render_mermaid(graph: &Graph) -> String {
    let ids: HashMap<&str, String> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), format!("n{i}")))
        .collect();
    let mut out = String::from("flowchart LR\n");
    for node in &graph.nodes {
        out.push_str(&format!(
            "  {}[\"{}<br/>{}<br/>{} calls\"]\n",
            ids[node.id.as_str()],
            node.service,
            node.operation,
            node.calls
        ));
    }
    for edge in &graph.edges {
        out.push_str(&format!(
            "  {} -->|\"{} calls, p50 {:.1} ms, errors {:.1}%\"| {}\n",
            ids[edge.source.as_str()],
            edge.calls,
            edge.latency_ms.p50,
            edge.error_rate * 100.0,
            ids[edge.target.as_str()]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RAG request: gateway → embed, gateway → search, gateway → llm → tool.
    const OTLP: &str = r#"{"resourceSpans": [
      {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "gateway"}}]},
       "scopeSpans": [{"spans": [
         {"traceId": "t1", "spanId": "a", "name": "handle", "startTimeUnixNano": "0", "endTimeUnixNano": "100000000",
          "attributes": [{"key": "llm.reasoning_path_id", "value": {"stringValue": "rag"}},
                         {"key": "llm.dependency_edges", "value": {"stringValue": "[{\"source\": \"gateway/handle\", \"target\": \"llm/generate\", \"weight\": 0.7}]"}}]},
         {"traceId": "t2", "spanId": "a", "name": "handle", "startTimeUnixNano": "0", "endTimeUnixNano": "90000000"}]}]},
      {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "embed"}}]},
       "scopeSpans": [{"spans": [
         {"traceId": "t1", "spanId": "b", "parentSpanId": "a", "name": "embeddings", "startTimeUnixNano": "1000000", "endTimeUnixNano": "6000000"},
         {"traceId": "t2", "spanId": "b", "parentSpanId": "a", "name": "embeddings", "startTimeUnixNano": "1000000", "endTimeUnixNano": "8000000"}]}]},
      {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "llm"}}]},
       "scopeSpans": [{"spans": [
         {"traceId": "t1", "spanId": "c", "parentSpanId": "a", "name": "chat", "startTimeUnixNano": "10000000", "endTimeUnixNano": "60000000",
          "attributes": [{"key": "llm.operation_type", "value": {"stringValue": "generate"}}]},
         {"traceId": "t2", "spanId": "c", "parentSpanId": "a", "name": "chat", "startTimeUnixNano": "10000000", "endTimeUnixNano": "80000000",
          "attributes": [{"key": "llm.operation_type", "value": {"stringValue": "generate"}}], "status": {"code": 2}},
         {"traceId": "t1", "spanId": "d", "parentSpanId": "c", "name": "tool_call", "startTimeUnixNano": "20000000", "endTimeUnixNano": "30000000"},
         {"traceId": "t2", "spanId": "x", "parentSpanId": "gone", "name": "late", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}
    ]}"#;

    #[test]
    fn otlp_spans_give_the_known_topology() {
        let spans = parse_spans(OTLP).unwrap();
        assert_eq!(spans.len(), 8);
        let graph = build(&spans);
        assert_eq!((graph.traces, graph.orphans), (2, 1));
        let edge = |s: &str, t: &str| {
            graph
                .edges
                .iter()
                .find(|e| e.source == s && e.target == t)
                .unwrap()
        };
        let embed = edge("gateway/handle", "embed/embeddings");
        assert_eq!(embed.calls, 2);
        assert!(
            (embed.latency_ms.mean - 6.0).abs() < 1e-9,
            "{:?}",
            embed.latency_ms
        );
        let generate = edge("gateway/handle", "llm/generate");
        assert_eq!((generate.calls, generate.error_rate), (2, 0.5));
        assert_eq!((generate.weight, generate.declared_weight), (0.7, true));
        assert_eq!(embed.weight, 0.5, "half of the gateway's calls");
        assert_eq!(edge("llm/generate", "llm/tool_call").calls, 1);
        assert_eq!(graph.edges.len(), 3);
        let rag = graph.paths.iter().find(|p| p.id == "rag").unwrap();
        assert_eq!(
            rag.operations,
            [
                "gateway/handle",
                "embed/embeddings",
                "llm/generate",
                "llm/tool_call"
            ]
        );
        assert_eq!(graph.paths.len(), 2);
        let dot = render_dot(&graph);
        assert!(
            dot.contains("\"gateway/handle\" -> \"llm/generate\""),
            "{dot}"
        );
        let mermaid = render_mermaid(&graph);
        assert!(mermaid.starts_with("flowchart LR\n"));
        assert_eq!(mermaid.matches("-->").count(), 3);
    }

    #[test]
    fn jaeger_json_reads_the_same() {
        let jaeger = r#"{"data": [{"traceID": "t", "processes": {"p1": {"serviceName": "api"}, "p2": {"serviceName": "db"}},
          "spans": [
            {"traceID": "t", "spanID": "1", "operationName": "GET /", "references": [], "startTime": 0, "duration": 5000, "processID": "p1"},
            {"traceID": "t", "spanID": "2", "operationName": "query", "references": [{"refType": "CHILD_OF", "spanID": "1"}],
             "startTime": 1000, "duration": 2000, "processID": "p2", "tags": [{"key": "error", "value": true}]}]}]}"#;
        let graph = build(&parse_spans(jaeger).unwrap());
        assert_eq!(graph.edges.len(), 1);
        let edge = &graph.edges[0];
        assert_eq!(
            (edge.source.as_str(), edge.target.as_str()),
            ("api/GET /", "db/query")
        );
        assert_eq!((edge.latency_ms.p50, edge.error_rate), (2.0, 1.0));
        assert!(parse_spans("{\"nothing\": 1}").is_err());
    }

    #[test]
    fn server_spans_join_the_records_that_sent_them() {
        let mut record = crate::record::Record::unsent(0, 0, crate::record::Phase::Measure, 0);
        record.traceparent = Some("00-t1-a-01".into());
        record.sent_us = Some(0);
        record.last_byte_us = Some(120_000);
        let mut lost = record.clone();
        lost.traceparent = Some("00-t9-z-01".into());
        let spans = parse_spans(OTLP).unwrap();
        let join = join(&spans, &[record, lost]);
        assert_eq!((join.records, join.joined), (2, 1));
        // t1's children of span `a`: embeddings (5 ms) and chat (50 ms): the longest.
        let step = &join.steps[0];
        assert_eq!((step.step.as_str(), step.requests), ("request", 1));
        assert_eq!((step.client_ms.p50, step.server_ms.p50), (120.0, 50.0));
        assert_eq!(step.outside_server_ms_p50, 70.0);
        assert_eq!(join.foreign_traces, 1, "t2 was not started by a record");
    }
}
