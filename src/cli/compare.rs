//! `redline compare`: runs against a baseline, with a regression gate.

use super::*;
use crate::report::compare::{self, FailRule};

/// `redline compare BASE RUN… [--fail-on RULE]… [--html FILE]`; exit 1 when a rule
/// breaks, 2 when a rule is malformed.
pub(super) fn compare_runs(
    runs: &[PathBuf],
    fail_on: &[String],
    min_change_percent: f64,
    html: Option<&Path>,
) -> Result<i32> {
    let rules = match fail_on
        .iter()
        .map(|r| FailRule::parse(r))
        .collect::<Result<Vec<_>>>()
    {
        Ok(rules) => rules,
        Err(e) => {
            err(&format!("--fail-on {e}"));
            return Ok(exit::USAGE);
        }
    };
    // Clap asks for two folders or more.
    let Some((base, others)) = runs.split_first() else {
        bail!("compare needs a baseline run folder and at least one more");
    };
    let base = compare::load(base)?;
    let mut compared = Vec::new();
    for dir in others {
        let run = compare::load(dir)?;
        let comparisons = compare::compare(&base, &run, min_change_percent / 100.0);
        compared.push((run, comparisons));
    }
    out(&compare::render_terminal(&base, &compared));
    if let Some(path) = html {
        std::fs::write(path, crate::report::html::compare_page(&base, &compared))
            .with_context(|| format!("cannot write {}", path.display()))?;
        outln!("  html: {}", path.display());
    }
    let mut broken = Vec::new();
    for (run, comparisons) in &compared {
        for d in comparisons.iter().flat_map(|c| c.stats.iter()) {
            for rule in rules.iter().filter(|r| r.broken_by(d)) {
                broken.push(format!(
                    "{}: {} ({:+.1} %, beyond noise)",
                    run.dir.display(),
                    rule.text,
                    d.change * 100.0
                ));
            }
        }
    }
    for (run, _) in &compared {
        let Some(a) = compare::AccuracyComparison::of(&base.summary, &run.summary) else {
            continue;
        };
        for rule in rules.iter().filter(|r| r.broken_by_accuracy(&a)) {
            broken.push(format!(
                "{}: {} ({:+.1} points, beyond noise)",
                run.dir.display(),
                rule.text,
                a.change_pp
            ));
        }
    }
    for line in &broken {
        outln!("  FAIL {line}");
    }
    Ok(if broken.is_empty() {
        exit::OK
    } else {
        exit::SLO_FAILED
    })
}
