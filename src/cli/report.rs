//! `redline report`: a run folder's pictures built again from what it holds.

use super::*;
use crate::folder::RunFolder;
use crate::report::conclude::{Conclude, conclude};

/// `redline report DIR [-o FILE] [--spec SPEC]`: report.html (and timeline.json beside
/// the records). A run killed before it wrote summary.json (SIGKILL, a lost machine)
/// gets one rebuilt from its records with the spec's SLOs, marked interrupted.
pub(super) async fn report(dir: &Path, out: Option<&Path>, spec: Option<&Path>) -> Result<i32> {
    let folder = RunFolder::new(dir);
    let html = match (folder.summary().is_file(), spec) {
        (true, _) => {
            let summary = crate::report::read_summary(dir)?;
            crate::report::outputs::write_pictures(&summary, dir, out)?
        }
        (false, Some(spec)) => match rebuild(&folder, spec, out).await? {
            Some(html) => html,
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
    outln!("{}", html.display());
    outln!("{}", folder.timeline().display());
    Ok(exit::OK)
}

/// A killed run's summary rebuilt from its records and the spec it ran (for its SLOs,
/// goodput bounds and token settings), and concluded into its folder: the HTML
/// report's path. `None` when the spec has problems (they are printed).
async fn rebuild(folder: &RunFolder, spec: &Path, html: Option<&Path>) -> Result<Option<PathBuf>> {
    let Some(scenario) = scenario_or_problems(spec)? else {
        return Ok(None);
    };
    let read = read_run(&folder.records(), &scenario, true).await?;
    let summary = crate::report::offline::rebuild(folder, &scenario, &read);
    let how = Conclude {
        aggregator: Some(&read.aggregator),
        junit: false,
        strict: false,
        explain: false,
        pictures: true,
        html,
    };
    let concluded = conclude(folder, summary, how)?;
    outln!("{}", folder.summary().display());
    let html = concluded
        .report
        .context("the records were read, so the report is drawn")?;
    Ok(Some(html))
}
