//! Sliding windows over records as they complete: one bucket per step and group (a
//! flow step's name, else `all`), a window the merge of its last `span` buckets. Only
//! the buckets of the open windows are held, so memory follows the window count, not
//! the run's length.

use std::collections::{BTreeMap, VecDeque};

use hdrhistogram::Histogram;

use super::series::{Quantity, Series, Stat};
use crate::record::{Outcome, Phase, Record};

/// One quantity's samples in a bucket or window: an HDR histogram (2 significant
/// figures: 1 %, plenty to see drift, 1/8 the memory of the run's 3) and moments.
#[derive(Debug, Clone)]
struct Samples {
    histogram: Histogram<u64>,
    sum: f64,
    sum_sq: f64,
}

impl Samples {
    fn new() -> Samples {
        Samples {
            histogram: Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .expect("static bounds are valid"),
            sum: 0.0,
            sum_sq: 0.0,
        }
    }

    fn add(&mut self, value_us: f64) {
        self.histogram
            .saturating_record(value_us.round().max(1.0) as u64);
        self.sum += value_us;
        self.sum_sq += value_us * value_us;
    }

    fn merge(&mut self, other: &Samples) {
        self.histogram
            .add(&other.histogram)
            .expect("windows share one shape");
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }
}

/// The requests of one step of one group.
#[derive(Debug, Clone)]
struct Bucket {
    samples: BTreeMap<Quantity, Samples>,
    completed: u64,
    failed: u64,
}

impl Bucket {
    fn new(quantities: &[Quantity]) -> Bucket {
        Bucket {
            samples: quantities.iter().map(|q| (*q, Samples::new())).collect(),
            completed: 0,
            failed: 0,
        }
    }

    fn merge(&mut self, other: &Bucket) {
        for (q, samples) in &mut self.samples {
            samples.merge(&other.samples[q]);
        }
        self.completed += other.completed;
        self.failed += other.failed;
    }
}

/// A closed window's figure for one series of one group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowValue {
    /// Samples in the window (requests; for `error_rate`, completed requests).
    pub count: u64,
    /// The series' value, in its unit (milliseconds, ms per token, a share).
    pub value: f64,
    /// The spread of the window's samples (standard deviation, same unit).
    pub sd: f64,
}

/// The windows of a run.
#[derive(Debug)]
pub struct Windows {
    step_us: u64,
    /// Buckets per window.
    span: u64,
    watch: Vec<Series>,
    quantities: Vec<Quantity>,
    groups: BTreeMap<String, VecDeque<(u64, Bucket)>>,
    /// Index of the bucket the next window to close ends before.
    next_end: u64,
    /// Records that completed in a bucket no open window holds any more.
    pub late: u64,
}

impl Windows {
    pub fn new(step_us: u64, span: u64, watch: &[Series]) -> Windows {
        let mut quantities: Vec<Quantity> = watch
            .iter()
            .filter_map(|s| match s {
                Series::Latency(q, _) => Some(*q),
                Series::ErrorRate => None,
            })
            .collect();
        quantities.sort();
        quantities.dedup();
        Windows {
            step_us,
            span,
            watch: watch.to_vec(),
            quantities,
            groups: BTreeMap::new(),
            next_end: span,
            late: 0,
        }
    }

    /// The end of the next window to close, in microseconds from the run's start.
    pub fn next_end_us(&self) -> u64 {
        self.next_end * self.step_us
    }

    /// Takes one record (measured phase only; warm-up and cool-down are not judged).
    pub fn observe(&mut self, r: &Record) {
        if r.phase != Phase::Measure || r.outcome == Outcome::Cancelled {
            return;
        }
        let group = r.step.as_ref().map_or("all", |s| s.name.as_str());
        let Some(bucket) = self.bucket_at(r.done_us(), group) else {
            return;
        };
        match r.outcome {
            Outcome::Ok => bucket.completed += 1,
            Outcome::Error | Outcome::Timeout => {
                bucket.completed += 1;
                bucket.failed += 1;
            }
            _ => {}
        }
        for (q, samples) in &mut bucket.samples {
            if let Some(value) = q.of(r) {
                samples.add(value);
            }
        }
    }

    /// Takes one request known only by a line of a log: when it ended, whether it
    /// failed and the quantities the line gives (microseconds).
    pub fn observe_sample(
        &mut self,
        done_us: u64,
        group: &str,
        failed: bool,
        values: &[(Quantity, f64)],
    ) {
        let Some(bucket) = self.bucket_at(done_us, group) else {
            return;
        };
        bucket.completed += 1;
        bucket.failed += u64::from(failed);
        for (q, value) in values {
            if let Some(samples) = bucket.samples.get_mut(q).filter(|_| !failed) {
                samples.add(*value);
            }
        }
    }

    /// The bucket a request that ended at `done_us` falls in; none (counted late) when
    /// every window holding it has closed.
    fn bucket_at(&mut self, done_us: u64, group: &str) -> Option<&mut Bucket> {
        let index = done_us / self.step_us;
        if index + self.span < self.next_end {
            self.late += 1;
            return None;
        }
        let buckets = self.groups.entry(group.to_owned()).or_default();
        let at = match buckets.binary_search_by_key(&index, |(i, _)| *i) {
            Ok(at) => at,
            Err(at) => {
                buckets.insert(at, (index, Bucket::new(&self.quantities)));
                at
            }
        };
        Some(&mut buckets[at].1)
    }

    /// Closes the next window: its end (µs) and each group's value of each series.
    pub fn close_next(&mut self) -> (u64, Vec<(String, Series, WindowValue)>) {
        let end = self.next_end;
        let first = end - self.span;
        let mut values = Vec::new();
        for (group, buckets) in &mut self.groups {
            let mut window = Bucket::new(&self.quantities);
            for (_, bucket) in buckets.iter().filter(|(i, _)| (first..end).contains(i)) {
                window.merge(bucket);
            }
            // The next window starts one bucket later.
            while buckets.front().is_some_and(|(i, _)| *i <= first) {
                buckets.pop_front();
            }
            for series in &self.watch {
                if let Some(value) = value_of(&window, *series) {
                    values.push((group.clone(), *series, value));
                }
            }
        }
        self.next_end += 1;
        (end * self.step_us, values)
    }
}

fn value_of(window: &Bucket, series: Series) -> Option<WindowValue> {
    match series {
        Series::ErrorRate => {
            let n = window.completed;
            let p = window.failed as f64 / n.max(1) as f64;
            (n > 0).then(|| WindowValue {
                count: n,
                value: p,
                sd: (p * (1.0 - p)).sqrt(),
            })
        }
        Series::Latency(q, stat) => {
            let s = &window.samples[&q];
            let n = s.histogram.len();
            if n == 0 {
                return None;
            }
            let mean = s.sum / n as f64;
            let sd = (s.sum_sq / n as f64 - mean * mean).max(0.0).sqrt();
            let value = match stat {
                Stat::Mean => mean,
                Stat::Percentile(p) => s.histogram.value_at_quantile(p / 100.0) as f64,
            };
            Some(WindowValue {
                count: n,
                value: value / 1e3,
                sd: sd / 1e3,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(done_ms: u64, ttft_ms: u64) -> Record {
        let mut r = Record::unsent(0, 0, Phase::Measure, 0);
        r.sent_us = Some(done_ms * 1_000 - ttft_ms * 1_000);
        r.first_token_us = Some(done_ms * 1_000);
        r.last_byte_us = Some(done_ms * 1_000);
        r
    }

    #[test]
    fn windows_slide_by_a_step_and_hold_only_open_buckets() {
        let ttft = Series::parse("ttft.p50").unwrap();
        let errors = Series::ErrorRate;
        // 1 s steps, 3 s windows.
        let mut w = Windows::new(1_000_000, 3, &[ttft, errors]);
        for second in 0..6u64 {
            for i in 0..10 {
                // TTFT = 100 ms × (second + 1): each second a level of its own.
                w.observe(&ok(second * 1_000 + i * 50 + 500, (second + 1) * 100));
            }
        }
        let mut failed = Record::unsent(0, 0, Phase::Measure, 0);
        failed.fail(
            Outcome::Error,
            crate::record::FailStage::FirstByte,
            "http_5xx",
            "503",
        );
        failed.sent_us = Some(4_100_000);
        failed.last_byte_us = Some(4_200_000);
        w.observe(&failed);
        let (end, values) = w.close_next();
        assert_eq!(end, 3_000_000);
        // Seconds 0–2: levels 100, 200, 300 ms; the median is 200.
        let ttft_value = values.iter().find(|v| v.1 == ttft).unwrap().2;
        assert_eq!(ttft_value.count, 30);
        assert!((ttft_value.value - 200.0).abs() <= 2.0, "{ttft_value:?}");
        let (end, values) = w.close_next();
        assert_eq!(end, 4_000_000);
        assert!((values.iter().find(|v| v.1 == ttft).unwrap().2.value - 300.0).abs() <= 3.0);
        assert_eq!(values.iter().find(|v| v.1 == errors).unwrap().2.value, 0.0);
        // Second 4's failure is in the window ending at 5 s.
        let (_, values) = w.close_next();
        let share = values.iter().find(|v| v.1 == errors).unwrap().2;
        assert_eq!((share.count, share.value), (31, 1.0 / 31.0));
        // Only the buckets of windows still open are held.
        assert!(w.groups["all"].len() <= 3);
        // A record for a bucket no open window holds is counted late, not lost quietly.
        w.observe(&ok(1_500, 100));
        assert_eq!(w.late, 1);
    }
}
