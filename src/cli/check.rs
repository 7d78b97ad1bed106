//! `redline check`: a finished run's records judged against a spec's SLOs, offline.

use super::*;
use crate::report::offline::ReadRun;
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
    let read = read_run(records, &scenario, quiet).await?;
    let mut header = format!(
        "redline check · {} · {} records of {}",
        scenario.name,
        read.counts.records,
        records.display()
    );
    if read.span.is_some() {
        header.push_str(&format!(" ({:.1}s of requests)", read.elapsed_s()));
    }
    outln!("{header}");
    if read.counts.truncated_last_line {
        outln!(
            "  note: the last line was cut short (the run was killed while writing it) and is left out"
        );
    }
    let about = CheckAbout {
        name: &scenario.name,
        records,
        slos: &slos,
        drift: read.drift.as_ref(),
        elapsed_s: read.elapsed_s(),
        strict,
    };
    let (summary, code) = crate::report::outputs::check(&read.aggregator, about, junit)?;
    out(&render_terminal(&summary));
    Ok(code)
}

/// A finished run's records read back, with a progress bar over the file on a
/// terminal.
pub(super) async fn read_run(path: &Path, scenario: &Scenario, quiet: bool) -> Result<ReadRun> {
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    let drawer =
        progress::wanted(quiet).then(|| progress::Drawer::for_bytes("reading", read.clone(), size));
    let reading = crate::report::offline::read_run(path, scenario, read).await;
    if let Some(drawer) = drawer {
        drawer.finish().await;
    }
    reading
}
