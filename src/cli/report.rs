//! `redline report`: a run folder's pictures built again from what it holds.

use super::*;
use crate::report::{RunInfo, Summary, summarize};

/// `redline report DIR [-o FILE] [--spec SPEC]`: report.html (and timeline.json beside
/// the records). A run killed before it wrote summary.json (SIGKILL, a lost machine)
/// gets one rebuilt from its records with the spec's SLOs, marked interrupted.
pub(super) async fn report(dir: &Path, out: Option<&Path>, spec: Option<&Path>) -> Result<i32> {
    let summary = match (dir.join("summary.json").is_file(), spec) {
        (true, _) => crate::report::read_summary(dir)?,
        (false, Some(spec)) => match rebuilt_summary(dir, spec).await? {
            Some(summary) => summary,
            None => return Ok(exit::USAGE),
        },
        (false, None) => {
            errln!(
                "{}: no summary.json (was the run killed before it ended?): rebuild it from records.jsonl with `redline report {} --spec SPEC`",
                dir.display(),
                dir.display()
            );
            return Ok(exit::USAGE);
        }
    };
    let html = crate::report::outputs::write_pictures(&summary, dir, out)?;
    outln!("{}", html.display());
    outln!("{}", dir.join("timeline.json").display());
    Ok(exit::OK)
}

/// The summary of a killed run, from its records and the spec it ran (for its SLOs,
/// goodput bounds and token settings), written to DIR/summary.json. `None` when the
/// spec has problems (they are printed).
async fn rebuilt_summary(dir: &Path, spec: &Path) -> Result<Option<Summary>> {
    let Some(scenario) = scenario_or_problems(spec)? else {
        return Ok(None);
    };
    let records = dir.join("records.jsonl");
    let (aggregator, counts, span, drift) = read_run(&records, &scenario, true).await?;
    let mut warnings = vec![format!(
        "rebuilt by `redline report` from the {} records of records.jsonl: the run ended \
         before it wrote its summary, so requests in flight then are missing, and so are \
         server metrics, traces and fault counts",
        counts.records
    )];
    if counts.truncated_last_line {
        warnings.push("the last line of records.jsonl was cut short and is left out".into());
    }
    let verdicts = scenario
        .slos
        .as_ref()
        .map(|slos| slos.evaluate(&aggregator, drift.as_ref()));
    let elapsed_s = span.map_or(0.0, |(first, last)| last.saturating_sub(first) as f64 / 1e6);
    let records_name = records.display().to_string();
    let info = RunInfo {
        interrupted: true,
        warnings,
        ..RunInfo::of_records(&scenario.name, &records_name, elapsed_s, verdicts)
    };
    let summary = summarize(&aggregator, info);
    let path = dir.join("summary.json");
    std::fs::write(&path, crate::report::render_json(&summary))
        .with_context(|| format!("cannot write {}", path.display()))?;
    outln!("{}", path.display());
    Ok(Some(summary))
}
