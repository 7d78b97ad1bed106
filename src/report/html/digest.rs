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

/// Seconds in which one fault rule injected, by the requests' intended starts.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultWindow {
    /// `rule: fault`.
    pub fault: String,
    pub from_s: u64,
    /// The end of its last second.
    pub to_s: u64,
    pub count: u64,
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
    /// Prompt tokens of successful requests that began with a shared prefix, and of
    /// those the prefix tokens an earlier request had sent: what a cache could hit.
    pub prefix_prompt_tokens: u64,
    pub repeated_prefix_tokens: u64,
    /// Prompt tokens and cached prompt tokens as the server reported them per
    /// request (the simulator's ground truth).
    pub truth_prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    /// Of successful requests whose server reported its own time: the client's E2E and
    /// each part the server named, µs, by series name ([`REPORTED_PARTS`]), sorted by
    /// [`Digest::finish`].
    pub reported_us: BTreeMap<&'static str, Vec<u64>>,
    /// Sent minus done in it (summed into `in_flight` at the end).
    delta: i64,
}

/// The series of a server's own account of a request's time, beside the client's E2E.
pub const REPORTED_PARTS: [&str; 6] = [
    "client E2E",
    "server total",
    "server queue",
    "server model load",
    "server prefill",
    "server decode",
];

/// Distributions (µs or tokens), per-second figures and the timeline's sample.
pub struct Digest {
    pub ttft: Histogram<u64>,
    pub ttft_intended: Histogram<u64>,
    pub itl: Histogram<u64>,
    pub tpot: Histogram<u64>,
    pub e2e: Histogram<u64>,
    pub input_tokens: Histogram<u64>,
    pub output_tokens: Histogram<u64>,
    /// The server's reported total, and the client's E2E beyond it, where it reported.
    pub server_total: Histogram<u64>,
    pub e2e_beyond_server: Histogram<u64>,
    pub seconds: Vec<Second>,
    pub timeline: Vec<TimelineRow>,
    /// One request in `step` (by `seq`) goes into the timeline.
    pub step: u64,
    /// Each stage's first intended start, µs, by stage index.
    pub stage_starts: BTreeMap<u32, u64>,
    /// Faults injected, by the second of the request's intended start.
    pub faults_per_second: BTreeMap<u64, u64>,
    /// Faults injected by rule and kind (`rule: fault`): count per second.
    faults_by_rule: BTreeMap<String, BTreeMap<u64, u64>>,
    pub records: u64,
    /// Flow sessions' steps: the waterfalls and the step graph.
    pub flows: super::flow_sessions::FlowSessions,
    /// Shared prefixes sent so far, in the order records come (about completion order).
    seen_prefixes: std::collections::HashSet<u32>,
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
            server_total: histogram(),
            e2e_beyond_server: histogram(),
            seconds: Vec::new(),
            timeline: Vec::new(),
            step: total.div_ceil(TIMELINE_ROWS).max(1),
            stage_starts: BTreeMap::new(),
            faults_per_second: BTreeMap::new(),
            faults_by_rule: BTreeMap::new(),
            records: 0,
            flows: Default::default(),
            seen_prefixes: Default::default(),
        }
    }

    pub fn add(&mut self, record: &Record) {
        self.records += 1;
        self.flows.add(record);
        let start = self.stage_starts.entry(record.stage).or_insert(u64::MAX);
        *start = (*start).min(record.intended_us);
        let second = record.intended_us / 1_000_000;
        if !record.faults.is_empty() {
            *self.faults_per_second.entry(second).or_default() += record.faults.len() as u64;
        }
        for fault in &record.faults {
            let rule = format!("{}: {}", fault.rule, fault.fault);
            *self
                .faults_by_rule
                .entry(rule)
                .or_default()
                .entry(second)
                .or_default() += 1;
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
        let repeated = record
            .prefix
            .as_ref()
            .map(|p| (!self.seen_prefixes.insert(p.id), p.tokens));
        let done = &mut self.seconds[done];
        if record.outcome == Outcome::Ok {
            done.ttft_us.extend(record.ttft_us());
            if let Some((repeated, tokens)) = repeated {
                done.prefix_prompt_tokens += u64::from(record.input_tokens.unwrap_or(0));
                done.repeated_prefix_tokens += if repeated { u64::from(tokens) } else { 0 };
            }
            if let Some(server) = &record.server {
                done.truth_prompt_tokens += u64::from(server.prompt_tokens);
                done.cached_prompt_tokens += u64::from(server.cached_prompt_tokens);
            }
            if let (Some(reported), Some(e2e)) = (record.server_reported, record.e2e_us()) {
                let parts = [
                    Some(e2e),
                    reported.total_us,
                    reported.queue_us,
                    reported.load_us,
                    reported.prefill_us,
                    reported.decode_us,
                ];
                for (name, us) in REPORTED_PARTS.into_iter().zip(parts) {
                    if let Some(us) = us {
                        done.reported_us.entry(name).or_default().push(us);
                    }
                }
            }
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
            for values in second.reported_us.values_mut() {
                values.sort_unstable();
            }
        }
        self.timeline.sort_by_key(|r| r.seq);
        self.flows.finish();
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
        if let Some(total) = record.server_reported.and_then(|s| s.total_us) {
            take(&mut self.server_total, Some(total));
            let beyond = record.e2e_us().map(|e2e| e2e.saturating_sub(total));
            take(&mut self.e2e_beyond_server, beyond);
        }
    }

    /// The windows in which each rule injected: runs of seconds with faults, a quiet
    /// second or two not breaking one (a rule at 5 % on a few requests a second fires
    /// in most seconds, not all).
    pub fn fault_windows(&self) -> Vec<FaultWindow> {
        const QUIET_S: u64 = 2;
        let mut windows = Vec::new();
        for (fault, seconds) in &self.faults_by_rule {
            let mut open: Option<FaultWindow> = None;
            for (&second, &count) in seconds {
                match &mut open {
                    Some(w) if second <= w.to_s + QUIET_S => {
                        w.to_s = second + 1;
                        w.count += count;
                    }
                    _ => {
                        windows.extend(open.take());
                        open = Some(FaultWindow {
                            fault: fault.clone(),
                            from_s: second,
                            to_s: second + 1,
                            count,
                        });
                    }
                }
            }
            windows.extend(open);
        }
        windows
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{InjectedFault, Phase};

    #[test]
    fn fault_windows_join_seconds_a_short_quiet_does_not_break() {
        let mut digest = Digest::new(10);
        let mut add = |second: u64, rule: &str| {
            let mut record = Record::unsent(0, 0, Phase::Measure, second * 1_000_000 + 300);
            record.faults.push(InjectedFault {
                rule: rule.into(),
                fault: "abort".into(),
                added_ms: None,
            });
            digest.add(&record);
        };
        for second in [0, 1, 1, 2, 4, 10, 11] {
            add(second, "a");
        }
        add(5, "b");
        let windows: Vec<_> = digest
            .fault_windows()
            .into_iter()
            .map(|w| (w.fault, w.from_s, w.to_s, w.count))
            .collect();
        assert_eq!(
            windows,
            [
                ("a: abort".to_owned(), 0, 5, 5),
                ("a: abort".to_owned(), 10, 12, 2),
                ("b: abort".to_owned(), 5, 6, 1),
            ]
        );
    }
}
