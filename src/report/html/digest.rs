//! What the HTML report draws that `summary.json` does not hold: the distributions'
//! shapes, per-second latency percentiles, in flight and errors by kind, and a bounded
//! sample of requests for the timeline. Built in one pass over `records.jsonl`, in
//! memory bounded by the histograms, the run's length in seconds and the sample.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::record::{Outcome, Record};

/// Requests drawn in the timeline at most; a larger run is sampled evenly by `seq`.
pub const TIMELINE_ROWS: u64 = 400;

/// A gap between tokens drawn as a stall in the timeline.
pub const STALL_GAP_US: u64 = 250_000;

/// One request as the timeline draws it, µs from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    pub seq: u64,
    pub intended_us: u64,
    pub sent_us: Option<u64>,
    pub first_token_us: Option<u64>,
    pub done_us: u64,
    /// The failure's kind, for a request that did not succeed.
    pub failed: Option<String>,
    /// Gaps between tokens over [`STALL_GAP_US`]: (start, length), µs.
    pub stalls: Vec<(u64, u64)>,
    /// The flow step or session turn, when it belongs to one.
    pub label: Option<String>,
}

/// One second of the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    /// TTFTs of requests that completed in it, µs, sorted by [`Digest::finish`].
    pub ttft_us: Vec<u64>,
    /// Requests sent by its end and not done by then.
    pub in_flight: u64,
    /// Failures that ended in it, by kind.
    pub errors: BTreeMap<String, u64>,
    /// Sum and count of the send lag of requests sent in it, µs.
    pub send_lag_sum_us: u64,
    pub sent: u64,
    /// Sent minus done in it (summed into `in_flight` at the end).
    delta: i64,
}

/// Distributions (µs or tokens), per-second figures and the timeline's sample.
pub struct Digest {
    pub ttft: Histogram<u64>,
    pub ttft_intended: Histogram<u64>,
    pub itl: Histogram<u64>,
    pub tpot: Histogram<u64>,
    pub e2e: Histogram<u64>,
    pub input_tokens: Histogram<u64>,
    pub output_tokens: Histogram<u64>,
    pub seconds: Vec<Second>,
    pub timeline: Vec<TimelineRow>,
    /// One request in `step` (by `seq`) goes into the timeline.
    pub step: u64,
    /// Each stage's first intended start, µs, by stage index.
    pub stage_starts: BTreeMap<u32, u64>,
    /// Faults injected, by the second of the request's intended start.
    pub faults_per_second: BTreeMap<u64, u64>,
    pub records: u64,
}

impl Digest {
    /// A digest for a file of `total` records (which sets the timeline's sampling).
    pub fn new(total: u64) -> Digest {
        let histogram = crate::metrics::histogram;
        Digest {
            ttft: histogram(),
            ttft_intended: histogram(),
            itl: histogram(),
            tpot: histogram(),
            e2e: histogram(),
            input_tokens: histogram(),
            output_tokens: histogram(),
            seconds: Vec::new(),
            timeline: Vec::new(),
            step: total.div_ceil(TIMELINE_ROWS).max(1),
            stage_starts: BTreeMap::new(),
            faults_per_second: BTreeMap::new(),
            records: 0,
        }
    }

    pub fn add(&mut self, record: &Record) {
        self.records += 1;
        let start = self.stage_starts.entry(record.stage).or_insert(u64::MAX);
        *start = (*start).min(record.intended_us);
        if !record.faults.is_empty() {
            *self
                .faults_per_second
                .entry(record.intended_us / 1_000_000)
                .or_default() += record.faults.len() as u64;
        }
        if record.outcome == Outcome::Ok {
            self.add_latencies(record);
        }
        let done = self.second(record.done_us());
        if let Some(sent) = record.sent_us {
            let lag = sent.saturating_sub(record.intended_us);
            let sent = self.second(sent);
            let second = &mut self.seconds[sent];
            second.sent += 1;
            second.send_lag_sum_us += lag;
            second.delta += 1;
            self.seconds[done].delta -= 1;
        }
        let done = &mut self.seconds[done];
        if record.outcome == Outcome::Ok {
            done.ttft_us.extend(record.ttft_us());
        } else if let Some(error) = &record.error {
            *done.errors.entry(error.kind.clone()).or_default() += 1;
        }
        if record.seq % self.step == 0 && (self.timeline.len() as u64) < TIMELINE_ROWS {
            self.timeline.push(row_of(record));
        }
    }

    /// Sums the in-flight deltas and sorts each second's TTFTs; call once every
    /// record is in.
    pub fn finish(mut self) -> Digest {
        let mut in_flight = 0i64;
        for second in &mut self.seconds {
            in_flight += second.delta;
            second.in_flight = in_flight.max(0) as u64;
            second.ttft_us.sort_unstable();
        }
        self.timeline.sort_by_key(|r| r.seq);
        self
    }

    fn add_latencies(&mut self, record: &Record) {
        let take = |h: &mut Histogram<u64>, v: Option<u64>| {
            if let Some(v) = v {
                h.saturating_record(v.max(1));
            }
        };
        take(&mut self.ttft, record.ttft_us());
        take(&mut self.ttft_intended, record.ttft_intended_us());
        take(&mut self.e2e, record.e2e_us());
        take(&mut self.tpot, record.tpot_us().map(|t| t.round() as u64));
        take(&mut self.input_tokens, record.input_tokens.map(u64::from));
        take(&mut self.output_tokens, record.output_tokens.map(u64::from));
        for gap in &record.itl_us {
            self.itl.saturating_record(u64::from(*gap).max(1));
        }
    }

    /// The index of the second `us` falls in, the seconds grown to hold it.
    fn second(&mut self, us: u64) -> usize {
        let index = (us / 1_000_000) as usize;
        if self.seconds.len() <= index {
            self.seconds.resize_with(index + 1, Second::default);
        }
        index
    }
}

fn row_of(record: &Record) -> TimelineRow {
    let mut stalls = Vec::new();
    if let Some(first) = record.first_token_us {
        let mut at = first;
        for gap in &record.itl_us {
            let gap = u64::from(*gap);
            if gap >= STALL_GAP_US {
                stalls.push((at, gap));
            }
            at += gap;
        }
    }
    let label = match (&record.step, &record.session) {
        (Some(step), _) => Some(format!("{} ({})", step.name, step.kind)),
        (None, Some(session)) => Some(format!("session {} turn {}", session.id, session.turn)),
        (None, None) => None,
    };
    TimelineRow {
        seq: record.seq,
        intended_us: record.intended_us,
        sent_us: record.sent_us,
        first_token_us: record.first_token_us,
        done_us: record.done_us(),
        failed: (record.outcome != Outcome::Ok).then(|| {
            record.error.as_ref().map_or_else(
                || format!("{:?}", record.outcome).to_lowercase(),
                |e| e.kind.clone(),
            )
        }),
        stalls,
        label,
    }
}
