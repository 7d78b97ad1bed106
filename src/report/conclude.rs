//! The one last step of a run, a merge, a rebuilt run and heal: the summary, the
//! statistics, the pictures and the JUnit file written into the run's folder, and the
//! exit code the summary means.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::outputs::{exit, gate, write_junit, write_pictures};
use super::{Summary, render_json};
use crate::folder::RunFolder;
use crate::metrics::Aggregator;

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
