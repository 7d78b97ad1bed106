//! `redline watch`: a spec's streaming SLOs over a finished run's records — the same
//! windows and detectors as a live run, so an episode found live is found again here.

use super::*;
use crate::slo::streaming::Monitor;

/// Every window of `records` through the detectors of `spec`'s `streaming:` block;
/// exit 1 when an episode opened.
pub(super) fn watch(records: &Path, spec: &Path, json: Option<&Path>) -> Result<i32> {
    let Some(scenario) = scenario_or_problems(spec)? else {
        return Ok(exit::USAGE);
    };
    let Some(plan) = scenario.streaming.clone() else {
        errln!(
            "{}: no streaming SLOs to watch: add `streaming:` to the spec's `kind: ScaleSpec` document (see docs/slo.md)",
            spec.display()
        );
        return Ok(exit::USAGE);
    };
    outln!(
        "redline watch · {} · {} over {}s windows every {}s",
        records.display(),
        plan.rule.name(),
        plan.window.as_secs_f64(),
        plan.step.as_secs_f64()
    );
    let mut monitor = Monitor::new(plan);
    let mut end_us = 0;
    // Records are written as they complete: closing the windows a record's end has
    // passed keeps only the open windows' buckets, however long the run.
    let counts = crate::record::read_records(records, None, |record| {
        end_us = end_us.max(record.done_us());
        monitor.observe(&record);
        for change in monitor.advance(record.done_us()) {
            outln!("{}", crate::report::render_drift_change(&change));
        }
    })?;
    let (summary, changes) = monitor.finish(end_us);
    for change in &changes {
        outln!("{}", crate::report::render_drift_change(change));
    }
    if counts.truncated_last_line {
        outln!("  note: the last line was cut short and is left out");
    }
    out(&crate::report::render_drift_summary(&summary));
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if summary.episodes.is_empty() {
        exit::OK
    } else {
        exit::SLO_FAILED
    })
}
