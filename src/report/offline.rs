//! A finished run read back from its records, offline: the statistics and windowed
//! SLOs `redline check` and `redline merge` judge, and the summary of a run killed
//! before it wrote one (`redline report DIR --spec`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use anyhow::{Context, Result};

use super::{RunInfo, Summary, summarize};
use crate::folder::RunFolder;
use crate::metrics::Aggregator;
use crate::record::ReadCounts;
use crate::scenario::Scenario;
use crate::slo::streaming::{DriftSummary, Monitor};

/// What reading a run's records gives.
pub struct ReadRun {
    pub aggregator: Aggregator,
    pub counts: ReadCounts,
    /// The first request's intended start and the last one's end, µs.
    pub span: Option<(u64, u64)>,
    /// The windows of the spec's windowed SLOs, replayed over the records.
    pub drift: Option<DriftSummary>,
}

impl ReadRun {
    /// From the first request's intended start to the last one's end.
    pub fn elapsed_s(&self) -> f64 {
        self.span
            .map_or(0.0, |(first, last)| last.saturating_sub(first) as f64 / 1e6)
    }
}

/// Aggregates a finished run's records and replays the spec's windowed SLOs over them
/// (the streaming block's detectors are `redline watch`'s). `read` counts the bytes
/// read, for a progress bar.
pub async fn read_run(path: &Path, scenario: &Scenario, read: Arc<AtomicU64>) -> Result<ReadRun> {
    let mut aggregator = scenario.aggregator();
    let mut monitor = scenario
        .streaming
        .clone()
        .filter(|plan| !plan.thresholds.is_empty())
        .map(|mut plan| {
            plan.watch.clear();
            Monitor::new(plan)
        });
    let path = path.to_owned();
    let reading = tokio::task::spawn_blocking(move || {
        let mut span: Option<(u64, u64)> = None;
        let counts = crate::record::read_records(&path, Some(&read), |record| {
            let (first, last) = (record.intended_us, record.done_us());
            span = Some(span.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
            aggregator.add(&record);
            if let Some(monitor) = &mut monitor {
                monitor.observe(&record);
                monitor.advance(record.done_us());
            }
        });
        let drift = monitor.map(|mut m| m.finish(span.map_or(0, |s| s.1)).0);
        counts.map(|counts| ReadRun {
            aggregator,
            counts,
            span,
            drift,
        })
    })
    .await;
    Ok(reading.context("the records reader failed")??)
}

/// The summary of a run killed before it wrote one, from its records (already read)
/// and the spec it ran, marked interrupted.
pub fn rebuild(folder: &RunFolder, scenario: &Scenario, read: &ReadRun) -> Summary {
    let mut warnings = vec![format!(
        "rebuilt by `redline report` from the {} records of records.jsonl: the run ended \
         before it wrote its summary, so requests in flight then are missing, and so are \
         server metrics, traces and fault counts",
        read.counts.records
    )];
    if read.counts.truncated_last_line {
        warnings.push("the last line of records.jsonl was cut short and is left out".into());
    }
    let verdicts = scenario
        .slos
        .as_ref()
        .map(|slos| slos.evaluate(&read.aggregator, read.drift.as_ref()));
    let records_name = folder.records().display().to_string();
    let info = RunInfo {
        interrupted: true,
        warnings,
        ..RunInfo::of_records(&scenario.name, &records_name, read.elapsed_s(), verdicts)
    };
    summarize(&read.aggregator, info)
}
