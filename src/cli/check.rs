//! `redline check`: a finished run's records judged against a spec's SLOs, offline.

use super::*;
use crate::report::outputs::CheckAbout;

/// `redline check`: the SLOs of `spec` against the records of a finished run.
pub(super) async fn check(
    records: &Path,
    spec: &Path,
    strict: bool,
    junit: Option<&Path>,
    quiet: bool,
) -> Result<i32> {
    let Some(scenario) = scenario_or_problems(spec)? else {
        return Ok(exit::USAGE);
    };
    let Some(slos) = scenario.slos.clone() else {
        errln!(
            "{}: no SLOs to check: add a `kind: ScaleSpec` document with `sloThresholds` (see examples/redlines.yaml)",
            spec.display()
        );
        return Ok(exit::USAGE);
    };
    let (aggregator, counts, span, drift) = read_run(records, &scenario, quiet).await?;
    let mut header = format!(
        "redline check · {} · {} records of {}",
        scenario.name,
        counts.records,
        records.display()
    );
    if let Some((first_us, last_us)) = span {
        header.push_str(&format!(
            " ({:.1}s of requests)",
            last_us.saturating_sub(first_us) as f64 / 1e6
        ));
    }
    outln!("{header}");
    if counts.truncated_last_line {
        outln!(
            "  note: the last line was cut short (the run was killed while writing it) and is left out"
        );
    }
    let about = CheckAbout {
        name: &scenario.name,
        records,
        slos: &slos,
        drift: drift.as_ref(),
        elapsed_s: span.map_or(0.0, |(first, last)| last.saturating_sub(first) as f64 / 1e6),
        strict,
    };
    let (summary, code) = crate::report::outputs::check(&aggregator, about, junit)?;
    out(&render_terminal(&summary));
    Ok(code)
}

/// What reading a run's records gives: the aggregate, what was read, the span of the
/// requests (first intended start, last end) and the windows of windowed SLOs.
type ReadRun = (
    crate::metrics::Aggregator,
    crate::record::ReadCounts,
    Option<(u64, u64)>,
    Option<crate::slo::streaming::DriftSummary>,
);

/// Aggregates a finished run's records, with a progress bar over the file on a
/// terminal, and replays the spec's windowed SLOs over them (the streaming block's
/// detectors are `redline watch`'s).
pub(super) async fn read_run(path: &Path, scenario: &Scenario, quiet: bool) -> Result<ReadRun> {
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    let drawer =
        progress::wanted(quiet).then(|| progress::Drawer::for_bytes("reading", read.clone(), size));
    let mut aggregator = scenario.aggregator();
    let mut monitor = scenario
        .streaming
        .clone()
        .filter(|plan| !plan.thresholds.is_empty())
        .map(|mut plan| {
            plan.watch.clear();
            crate::slo::streaming::Monitor::new(plan)
        });
    let (path_owned, counter) = (path.to_owned(), read.clone());
    let reading = tokio::task::spawn_blocking(move || {
        let mut span: Option<(u64, u64)> = None;
        let counts = crate::record::read_records(&path_owned, Some(&counter), |record| {
            let (first, last) = (record.intended_us, record.done_us());
            span = Some(span.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
            aggregator.add(&record);
            if let Some(monitor) = &mut monitor {
                monitor.observe(&record);
                monitor.advance(record.done_us());
            }
        });
        let drift = monitor.map(|mut m| m.finish(span.map_or(0, |s| s.1)).0);
        counts.map(|counts| (aggregator, counts, span, drift))
    })
    .await;
    if let Some(drawer) = drawer {
        drawer.finish().await;
    }
    Ok(reading.context("the records reader failed")??)
}
