//! The one last step of a run (`finish`), a merge, a rebuilt run and heal: the summary, the
//! statistics, the pictures and the JUnit file written into the run's folder, and the
//! exit code the summary means.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::outputs::{exit, gate, write_junit, write_pictures};
use super::{RunInfo, Summary, render_json, summarize};
use crate::folder::RunFolder;
use crate::metrics::Aggregator;
use crate::results::RunResult;
use crate::slo::SloSet;
use crate::workload::dataset::DatasetInfo;

/// What the last step writes besides the summary.
pub struct Conclude<'a> {
    /// `aggregate.json`, when this step has the statistics (heal only amends).
    pub aggregator: Option<&'a Aggregator>,
    /// Write `junit.xml` from the summary's verdicts.
    pub junit: bool,
    /// `not_proven` fails the gate.
    pub strict: bool,
    /// Explain a failed flow run (`explain.json`) into the summary first.
    pub explain: bool,
    /// Draw `report.html` and `timeline.json` from the folder's records (when it has
    /// them: a merge of aggregates has none of its own).
    pub pictures: bool,
    /// Where the HTML report goes, when not `report.html` in the folder.
    pub html: Option<&'a std::path::Path>,
}

/// What the folder holds once concluded.
pub struct Concluded {
    pub summary: Summary,
    pub code: i32,
    pub junit: Option<PathBuf>,
    /// `report.html`, when the records were there to draw it from.
    pub report: Option<PathBuf>,
}

/// Writes the folder's summary, aggregate, pictures (from its records, when it has
/// them) and JUnit file, and judges the exit code.
pub fn conclude(folder: &RunFolder, mut summary: Summary, how: Conclude<'_>) -> Result<Concluded> {
    let code = exit_code(&summary, how.strict);
    let has_records = folder.records().is_file();
    if how.explain && has_records && code == exit::SLO_FAILED && summary.flow.is_some() {
        match super::outputs::explain_failed_run(folder)? {
            Ok(explanation) => summary.explain = Some(explanation),
            Err(why) => summary.warnings.push(format!("explain: {why}")),
        }
    }
    let path = folder.summary();
    std::fs::write(&path, render_json(&summary))
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Some(aggregator) = how.aggregator {
        crate::metrics::file::write(&folder.aggregate(), aggregator)?;
    }
    let report = match has_records && how.pictures {
        true => Some(write_pictures(&summary, folder.path(), how.html)?),
        false => None,
    };
    let junit = match summary.verdicts.as_deref().filter(|_| how.junit) {
        Some(verdicts) => {
            let path = folder.junit();
            write_junit(&path, &summary.name, verdicts, how.strict)?;
            Some(path)
        }
        None => None,
    };
    Ok(Concluded {
        summary,
        code,
        junit,
        report,
    })
}

/// Interrupted, then a failed gate (an abort, a streaming SLO's episode, a failed
/// SLO), then nothing reached, then the default gate when no SLO is set.
pub fn exit_code(summary: &Summary, strict: bool) -> i32 {
    if summary.interrupted {
        return exit::INTERRUPTED;
    }
    // A streaming SLO's episode is a violation, however the run looks as a whole.
    let drifted = summary
        .drift
        .as_ref()
        .is_some_and(|d| !d.episodes.is_empty());
    let failed_gate = summary
        .verdicts
        .as_deref()
        .is_some_and(|v| gate(v, strict) != exit::OK);
    if summary.aborted.is_some() || drifted || failed_gate {
        return exit::SLO_FAILED;
    }
    let counts = &summary.requests;
    let unreachable = counts.ok == 0
        && counts.scheduled > 0
        && summary
            .errors
            .iter()
            .all(|e| e.stage == crate::record::FailStage::Connect);
    if unreachable {
        exit::UNREACHABLE
    } else if summary.default_gate.is_some_and(|g| !g.passed) {
        exit::SLO_FAILED
    } else {
        exit::OK
    }
}

/// What the report needs to know about a run besides its result.
pub struct RunAbout<'a> {
    pub name: &'a str,
    pub slos: Option<&'a SloSet>,
    pub dataset: Option<DatasetInfo>,
    /// `not_proven` fails the gate.
    pub strict: bool,
    /// The command line and the spec, for the report.
    pub invocation: Option<super::invocation::Invocation>,
    /// The share of the run this process sent (`--segment`), when not the whole.
    pub segment: Option<crate::schedule::segment::Segment>,
}

/// What a finished run leaves: its summary (also written as `summary.json`), the
/// JUnit file when it has SLOs, and the exit code.
pub struct Finished {
    pub summary: Summary,
    pub junit: Option<PathBuf>,
    pub code: i32,
}

/// Judges a finished run against its SLOs, writes `summary.json` (and `junit.xml`
/// when there are SLOs) into `dir`, and decides how the process exits.
pub fn finish(result: &RunResult, about: RunAbout<'_>, dir: &Path) -> Result<Finished> {
    let scraped_hit_rate = result
        .server_metrics
        .as_ref()
        .and_then(|m| m.prefix_hit_rate);
    let verdicts = about.slos.map(|slos| {
        slos.evaluate_with_server(&result.aggregator, scraped_hit_rate, result.drift.as_ref())
    });
    let mut summary = summarize(
        &result.aggregator,
        RunInfo {
            name: about.name,
            target: &result.target_url,
            model: &result.model,
            interrupted: result.interrupted,
            warnings: result.warnings.clone(),
            elapsed_s: result.elapsed.as_secs_f64(),
            stages: result.stages.clone(),
            dataset: about.dataset,
            server_metrics: result.server_metrics.clone(),
            verdicts: verdicts.clone(),
            aborted: result.aborted.clone(),
            proxies: result.proxies.clone(),
            traces: result.traces.clone(),
            token_settlement: result.token_settlement.clone(),
        },
    );
    summary.invocation = about.invocation;
    summary.segment = about.segment.map(|s| s.to_string());
    summary.samples = result.samples.clone();
    summary.drift = result.drift.clone();
    summary.feedback = result.feedback.clone();
    summary.disruptions = result.availability.clone();
    let how = super::conclude::Conclude {
        aggregator: Some(&result.aggregator),
        junit: true,
        strict: about.strict,
        explain: true,
        pictures: true,
        html: None,
    };
    let concluded = super::conclude::conclude(&RunFolder::new(dir), summary, how)?;
    Ok(Finished {
        summary: concluded.summary,
        junit: concluded.junit,
        code: concluded.code,
    })
}
