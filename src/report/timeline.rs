//! `timeline.json`: the run in Chrome's trace-event format, which Perfetto UI and
//! `chrome://tracing` open, so a run can sit beside a server-side trace. A slice per
//! request (its W3C trace ID in the args), the first token and each token as instants
//! (tokens while a budget lasts), a session's requests nested under a session slice on
//! the session's own track; requests outside sessions are packed onto lanes, as
//! connections would carry them.

use std::path::Path;

use serde_json::{Value, json};

use crate::record::{Outcome, Record};

/// Per-token instants written at most; past it, only first tokens.
pub const MAX_TOKEN_INSTANTS: usize = 200_000;

const REQUESTS_PID: u64 = 1;
const SESSIONS_PID: u64 = 2;

/// Writes `timeline.json` for a records file.
pub fn write(records: &Path, out: &Path) -> anyhow::Result<()> {
    let mut all = Vec::new();
    crate::record::read_records(records, None, |r| all.push(r))?;
    let text = serde_json::to_string(&trace_of(&all)).expect("trace events serialize");
    std::fs::write(out, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))
}

/// The trace-event document of a run's records.
pub fn trace_of(records: &[Record]) -> Value {
    let mut events = Vec::with_capacity(records.len() * 3);
    let mut lanes: Vec<u64> = Vec::new();
    let mut sessions: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    let mut token_budget = MAX_TOKEN_INSTANTS;
    let mut order: Vec<&Record> = records.iter().collect();
    order.sort_by_key(|r| (start_of(r), r.seq));
    for record in order {
        let start = start_of(record);
        let end = record.done_us().max(start);
        let (pid, tid) = match &record.session {
            Some(session) => {
                let span = sessions.entry(session.id).or_insert((start, end));
                *span = (span.0.min(start), span.1.max(end));
                (SESSIONS_PID, session.id)
            }
            None => (REQUESTS_PID, lane_for(&mut lanes, start, end)),
        };
        events.push(json!({
            "ph": "X", "cat": "request", "name": name_of(record), "pid": pid, "tid": tid,
            "ts": start, "dur": end - start, "args": args_of(record),
        }));
        instants(record, pid, tid, &mut token_budget, &mut events);
    }
    for (id, (start, end)) in sessions {
        events.push(json!({
            "ph": "X", "cat": "session", "name": format!("session {id}"),
            "pid": SESSIONS_PID, "tid": id, "ts": start, "dur": end - start,
        }));
    }
    // Enclosing slices first at equal times, so viewers nest steps under sessions.
    events.sort_by_key(|e| (e["ts"].as_u64(), std::cmp::Reverse(e["dur"].as_u64())));
    events.extend(process_names());
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": { "producer": format!("redline {}", env!("CARGO_PKG_VERSION")), "clock": "µs from the run's start" },
    })
}

/// When the request started: its send, else (never sent) its intended start.
fn start_of(record: &Record) -> u64 {
    record.sent_us.unwrap_or(record.intended_us)
}

/// The first lane free at `start` (a lane holds one request at a time).
fn lane_for(lanes: &mut Vec<u64>, start: u64, end: u64) -> u64 {
    let lane = match lanes.iter().position(|busy_until| *busy_until <= start) {
        Some(lane) => lane,
        None => {
            lanes.push(0);
            lanes.len() - 1
        }
    };
    lanes[lane] = end;
    lane as u64
}

fn name_of(record: &Record) -> String {
    match &record.step {
        Some(step) => step.name.clone(),
        None if record.outcome == Outcome::Ok => "request".into(),
        None => format!(
            "request ({})",
            format!("{:?}", record.outcome).to_lowercase()
        ),
    }
}

fn args_of(record: &Record) -> Value {
    let mut args = json!({
        "seq": record.seq,
        "outcome": format!("{:?}", record.outcome).to_lowercase(),
        "intended_us": record.intended_us,
    });
    let fields = [
        (
            "trace_id",
            record
                .traceparent
                .as_deref()
                .and_then(trace_id_of)
                .map(Value::from),
        ),
        ("ttft_ms", record.ttft_us().map(|us| json!(us as f64 / 1e3))),
        ("output_tokens", record.output_tokens.map(Value::from)),
        ("error", record.error.as_ref().map(|e| json!(e.kind))),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            args[key] = value;
        }
    }
    args
}

fn trace_id_of(traceparent: &str) -> Option<&str> {
    crate::trace::context::parse(traceparent).map(|c| c.trace_id)
}

/// The first token, then each later token while the budget lasts.
fn instants(record: &Record, pid: u64, tid: u64, budget: &mut usize, events: &mut Vec<Value>) {
    let Some(first) = record.first_token_us else {
        return;
    };
    events.push(
        json!({ "ph": "i", "s": "t", "name": "first token", "pid": pid, "tid": tid, "ts": first }),
    );
    if record.itl_us.len() > *budget {
        return;
    }
    *budget -= record.itl_us.len();
    let mut at = first;
    for gap in &record.itl_us {
        at += u64::from(*gap);
        events.push(
            json!({ "ph": "i", "s": "t", "name": "token", "pid": pid, "tid": tid, "ts": at }),
        );
    }
}

fn process_names() -> [Value; 2] {
    [
        json!({ "ph": "M", "name": "process_name", "pid": REQUESTS_PID, "args": { "name": "requests (lanes)" } }),
        json!({ "ph": "M", "name": "process_name", "pid": SESSIONS_PID, "args": { "name": "sessions" } }),
    ]
}
