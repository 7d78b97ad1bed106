//! `timeline.json`: the run in Chrome's trace-event format, which Perfetto UI and
//! `chrome://tracing` open, so a run can sit beside a server-side trace. A slice per
//! request (its W3C trace ID in the args), the first token and each token as instants
//! (tokens while a budget lasts), a session's requests nested under a session slice on
//! the session's own track; requests outside sessions are packed onto lanes, as
//! connections would carry them.

use std::cmp::Reverse;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::record::{Outcome, Record};

/// Per-token instants written at most; past it, only first tokens.
pub const MAX_TOKEN_INSTANTS: usize = 200_000;
/// Requests drawn at most. A 30-minute run at 500 req/s made a 284 MB file (and held
/// as much while writing it), more than the viewers open; past this, one request in
/// k is drawn — by sequence number, or a session's requests by its id — so the whole
/// run is seen, thinly, rather than its start alone. The records keep every request.
pub const MAX_REQUESTS: u64 = 100_000;

const REQUESTS_PID: u64 = 1;
const SESSIONS_PID: u64 = 2;

/// What the timeline keeps of a record while the file is read: where it sits, and
/// its slice's name and arguments already as JSON text (a run's worth of records,
/// or of `serde_json::Value`s, would not be small).
struct Entry {
    start: u64,
    end: u64,
    seq: u64,
    session: Option<u64>,
    name: String,
    args: String,
    first_token: Option<u64>,
    /// Gaps to each later token, while the budget of token instants lasted.
    gaps: Vec<u32>,
}

impl Entry {
    fn of(record: &Record, budget: &mut usize) -> Entry {
        let start = start_of(record);
        let gaps = if record.first_token_us.is_some() && record.itl_us.len() <= *budget {
            *budget -= record.itl_us.len();
            record.itl_us.clone()
        } else {
            Vec::new()
        };
        Entry {
            start,
            end: record.done_us().max(start),
            seq: record.seq,
            session: record.session.as_ref().map(|s| s.id),
            name: serde_json::to_string(&name_of(record)).expect("a string serializes"),
            args: serde_json::to_string(&Args::of(record)).expect("args serialize"),
            first_token: record.first_token_us,
            gaps,
        }
    }
}

/// An event's text and what orders it: its time, then enclosing slices first.
type Event = (u64, Reverse<Option<u64>>, String);

/// `timeline.json` gathered while a run's records are read (the report reads them
/// once for its page and this): one entry per drawn request.
pub struct Timeline {
    budget: usize,
    stride: u64,
    entries: Vec<Entry>,
}

impl Timeline {
    /// `scheduled`: the run's requests, to draw one in k of them past [`MAX_REQUESTS`].
    pub fn new(scheduled: u64) -> Timeline {
        Timeline {
            budget: MAX_TOKEN_INSTANTS,
            stride: stride(scheduled),
            entries: Vec::new(),
        }
    }

    pub fn add(&mut self, record: &Record) {
        if record.session.as_ref().map_or(record.seq, |s| s.id) % self.stride == 0 {
            self.entries.push(Entry::of(record, &mut self.budget));
        }
    }

    /// Writes the document to `out`.
    pub fn write(self, out: &Path) -> anyhow::Result<()> {
        let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write {}: {e}", out.display());
        let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(cannot)?);
        write_document(self.entries, self.stride, &mut file).map_err(cannot)?;
        file.flush().map_err(cannot)
    }
}

/// One request in this many is drawn.
fn stride(scheduled: u64) -> u64 {
    scheduled.div_ceil(MAX_REQUESTS).max(1)
}

/// The trace-event document of a run's records.
pub fn trace_of(records: &[Record]) -> Value {
    let mut budget = MAX_TOKEN_INSTANTS;
    let entries = records.iter().map(|r| Entry::of(r, &mut budget)).collect();
    let mut text = Vec::new();
    write_document(entries, 1, &mut text).expect("writing to memory");
    serde_json::from_slice(&text).expect("the document is JSON")
}

fn write_document(
    entries: Vec<Entry>,
    stride: u64,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let mut events = events_of(entries);
    // Enclosing slices first at equal times, so viewers nest steps under sessions.
    events.sort_by_key(|e| (e.0, e.1));
    out.write_all(b"{\"traceEvents\":[")?;
    for (i, (_, _, text)) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        out.write_all(text.as_bytes())?;
    }
    for (pid, name) in [
        (REQUESTS_PID, "requests (lanes)"),
        (SESSIONS_PID, "sessions"),
    ] {
        write!(
            out,
            r#"{}{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":"{name}"}}}}"#,
            if events.is_empty() && pid == REQUESTS_PID {
                ""
            } else {
                ","
            }
        )?;
    }
    let drawn = if stride == 1 {
        "every request".to_owned()
    } else {
        format!("one request in {stride} (records.jsonl has them all)")
    };
    write!(
        out,
        r#"],"displayTimeUnit":"ms","otherData":{{"producer":"redline {}","clock":"µs from the run's start","drawn":"{drawn}"}}}}"#,
        env!("CARGO_PKG_VERSION")
    )
}

/// A slice per request, its token instants, and a slice per session around its
/// requests; requests outside sessions packed onto lanes in start order.
fn events_of(mut entries: Vec<Entry>) -> Vec<Event> {
    entries.sort_unstable_by_key(|e| (e.start, e.seq));
    let tokens: usize = entries.iter().map(|e| e.gaps.len() + 1).sum();
    let mut events = Vec::with_capacity(entries.len() + tokens);
    let mut lanes: Vec<u64> = Vec::new();
    let mut sessions: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for entry in entries {
        let (start, end) = (entry.start, entry.end);
        let (pid, tid) = match entry.session {
            Some(id) => {
                let span = sessions.entry(id).or_insert((start, end));
                *span = (span.0.min(start), span.1.max(end));
                (SESSIONS_PID, id)
            }
            None => (REQUESTS_PID, lane_for(&mut lanes, start, end)),
        };
        let slice = format!(
            r#"{{"ph":"X","cat":"request","name":{},"pid":{pid},"tid":{tid},"ts":{start},"dur":{},"args":{}}}"#,
            entry.name,
            end - start,
            entry.args
        );
        events.push((start, Reverse(Some(end - start)), slice));
        if let Some(first) = entry.first_token {
            instants(first, &entry.gaps, pid, tid, &mut events);
        }
    }
    for (id, (start, end)) in sessions {
        let slice = format!(
            r#"{{"ph":"X","cat":"session","name":"session {id}","pid":{SESSIONS_PID},"tid":{id},"ts":{start},"dur":{}}}"#,
            end - start
        );
        events.push((start, Reverse(Some(end - start)), slice));
    }
    events
}

/// The first token, then each later token.
fn instants(first: u64, gaps: &[u32], pid: u64, tid: u64, events: &mut Vec<Event>) {
    let instant = |name: &str, ts: u64| {
        let mut text = String::with_capacity(72);
        let _ = write!(
            text,
            r#"{{"ph":"i","s":"t","name":"{name}","pid":{pid},"tid":{tid},"ts":{ts}}}"#
        );
        (ts, Reverse(None), text)
    };
    events.push(instant("first token", first));
    let mut at = first;
    for gap in gaps {
        at += u64::from(*gap);
        events.push(instant("token", at));
    }
}

/// A slice's arguments: the record's sequence number, outcome, intended start, and
/// where it has them its trace ID, TTFT, output tokens and error.
#[derive(Serialize)]
struct Args<'a> {
    seq: u64,
    outcome: String,
    intended_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl<'a> Args<'a> {
    fn of(record: &'a Record) -> Args<'a> {
        Args {
            seq: record.seq,
            outcome: format!("{:?}", record.outcome).to_lowercase(),
            intended_us: record.intended_us,
            trace_id: record.traceparent.as_deref().and_then(trace_id_of),
            ttft_ms: record.ttft_us().map(|us| us as f64 / 1e3),
            output_tokens: record.output_tokens,
            error: record.error.as_ref().map(|e| e.kind.as_str()),
        }
    }
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

fn trace_id_of(traceparent: &str) -> Option<&str> {
    crate::trace::context::parse(traceparent).map(|c| c.trace_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_one_request_in_k_is_drawn_across_the_whole_run() {
        assert_eq!([0, 100_000, 100_001, 900_000].map(stride), [1, 1, 2, 9]);
        let dir = std::env::temp_dir().join(format!("redline-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("timeline.json");
        // As if the run had scheduled 300,000: one in 3 — seq 0, 3 and 6.
        let mut timeline = Timeline::new(300_000);
        for seq in 0..7u64 {
            let mut r = Record::unsent(seq, 0, crate::record::Phase::Measure, seq * 1_000);
            r.sent_us = Some(seq * 1_000);
            r.last_byte_us = Some(seq * 1_000 + 500);
            timeline.add(&r);
        }
        timeline.write(&out).unwrap();
        let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let slices: Vec<u64> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["ts"].as_u64().unwrap())
            .collect();
        assert_eq!(slices, [0, 3_000, 6_000]);
        assert_eq!(
            doc["otherData"]["drawn"],
            "one request in 3 (records.jsonl has them all)"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
