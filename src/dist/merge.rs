//! `redline merge` and `run --workers`' last step: segment workers' folders joined into
//! one run: one records file, one summary, one SLO verdict, one report. Folders of
//! different specs are refused; a share of the run no folder holds is named, and the
//! SLOs are judged on the rest with a warning.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::folder::RunFolder;
use crate::metrics::Aggregator;
use crate::record::Record;
use crate::report::conclude::{Conclude, Concluded, conclude};
use crate::report::offline::ReadRun;
use crate::report::{RunInfo, Summary, summarize};
use crate::scenario::Scenario;
use crate::schedule::ExecutedStage;
use crate::schedule::segment::Segment;
use crate::slo::streaming::DriftSummary;

/// One worker's folder, as the merge reads it.
struct Part {
    dir: PathBuf,
    summary: Summary,
    segment: Segment,
}

/// The finished workers' folders, in segment order, checked to be shares of one run.
pub struct Parts {
    parts: Vec<Part>,
    /// The spec they all ran.
    spec: String,
    /// The shares of the run no folder holds.
    missing: Vec<String>,
    warnings: Vec<String>,
}

/// What the merged figures are read from.
pub enum Figures {
    /// The merged records file, read back (windows and pictures included).
    Records(ReadRun),
    /// The parts' `aggregate.json` files merged: the same counts and histograms, no
    /// windows or pictures.
    Aggregates(Aggregator),
}

impl Parts {
    /// The finished folders among `dirs`; `None` when none holds a finished run. A
    /// folder without a summary (a worker that died) is a warning, as its share shows
    /// as missing.
    pub fn read(dirs: &[PathBuf]) -> Result<Option<Parts>> {
        let (mut parts, mut warnings) = read_parts(dirs)?;
        if parts.is_empty() {
            return Ok(None);
        }
        parts.sort_by_key(|p| p.segment.from);
        let spec = spec_of(&parts)?;
        let missing = coverage(&parts)?;
        if !missing.is_empty() {
            warnings.push(format!(
                "the share {} of the run is missing (no folder holds it): the figures and the \
                 SLO verdicts cover the rest only",
                missing.join(", ")
            ));
        }
        Ok(Some(Parts {
            parts,
            spec,
            missing,
            warnings,
        }))
    }

    /// The spec every part ran, written into the merged folder; returns its path.
    pub fn write_spec(&self, folder: &RunFolder) -> Result<PathBuf> {
        std::fs::create_dir_all(folder.path())
            .with_context(|| format!("cannot make {}", folder.path().display()))?;
        let path = folder.spec();
        std::fs::write(&path, &self.spec)?;
        Ok(path)
    }

    /// Whether every part kept its records (so the merge can join them).
    pub fn have_records(&self) -> bool {
        self.parts
            .iter()
            .all(|p| RunFolder::new(&p.dir).records().is_file())
    }

    /// The parts' records joined into `folder`'s records file; returns how many.
    pub fn join_records(&mut self, folder: &RunFolder) -> Result<u64> {
        let (written, cut) = merge_records(&self.parts, &folder.records())?;
        self.warnings.extend(cut.iter().map(|dir| {
            format!(
                "{}: the last line of records.jsonl was cut short and is left out",
                dir.display()
            )
        }));
        Ok(written)
    }

    /// The parts' aggregates merged, for a merge without records.
    pub fn aggregates(&self) -> Result<Aggregator> {
        merge_aggregates(&self.parts)
    }

    /// The merged run's summary, written with its aggregate, JUnit and (from records)
    /// pictures into `folder`, judged as one run.
    pub fn conclude(
        mut self,
        scenario: &Scenario,
        figures: Figures,
        folder: &RunFolder,
        strict: bool,
    ) -> Result<Concluded> {
        let from_records = matches!(figures, Figures::Records(_));
        let (aggregator, drift, joined) = match figures {
            Figures::Records(read) => {
                let joined = format!("{} records", read.counts.records);
                (read.aggregator, read.drift, joined)
            }
            Figures::Aggregates(aggregator) => {
                self.warn_of_aggregates(scenario);
                let joined = "their aggregate.json files, no records".to_owned();
                (aggregator, None, joined)
            }
        };
        self.warn_of_stops();
        self.warnings.push(format!(
            "merged from {} worker folders ({joined}); server metrics, proxy counts and \
             traces are each worker's own, in its folder",
            self.parts.len()
        ));
        let mut summary = self.summary(scenario, folder, &aggregator, drift.as_ref());
        summary.drift = drift;
        let how = Conclude {
            aggregator: Some(&aggregator),
            junit: true,
            strict,
            explain: true,
            pictures: from_records,
            html: None,
        };
        conclude(folder, summary, how)
    }

    fn warn_of_aggregates(&mut self, scenario: &Scenario) {
        let windowed = scenario
            .streaming
            .as_ref()
            .is_some_and(|s| !s.thresholds.is_empty());
        if windowed {
            self.warnings.push(
                "the windowed SLOs are not judged: their windows are replayed from the \
                 records, and this merge read the aggregates only"
                    .into(),
            );
        }
        self.warnings.push(
            "report.html and timeline.json are not written: they are drawn from the \
             records, and this merge read the aggregates only"
                .into(),
        );
    }

    /// Which workers stopped the run on an SLO, said once.
    fn warn_of_stops(&mut self) {
        let stopped: Vec<&Part> = self
            .parts
            .iter()
            .filter(|p| p.summary.aborted.is_some())
            .collect();
        let warning = match stopped.as_slice() {
            [] => return,
            // One worker judged its own share (`--workers`); the others were interrupted.
            [part] => format!(
                "the worker of share {} stopped the run on an SLO its share was certain to \
                 fail; the others were stopped then",
                part.segment
            ),
            // A coordinator judged the whole run and stopped every worker it reached.
            _ => format!(
                "{} of {} workers were stopped by their coordinator: the whole run was \
                 certain to fail an SLO",
                stopped.len(),
                self.parts.len()
            ),
        };
        self.warnings.push(warning);
    }

    /// The merged run's summary before it is concluded: the parts' SLO verdicts judged
    /// again on the merged figures, and the longest part's time.
    fn summary(
        self,
        scenario: &Scenario,
        folder: &RunFolder,
        aggregator: &Aggregator,
        drift: Option<&DriftSummary>,
    ) -> Summary {
        let first = &self.parts[0].summary;
        let aborted = self.parts.iter().find_map(|p| p.summary.aborted.clone());
        // Workers stopped because one of them aborted on an SLO are not an
        // interruption: the run as a whole was aborted, as one process's would be.
        let interrupted = aborted.is_none() && self.parts.iter().any(|p| p.summary.interrupted);
        let verdicts = scenario
            .slos
            .as_ref()
            .map(|slos| slos.evaluate(aggregator, drift));
        let records_name = folder.records().display().to_string();
        let elapsed_s = self
            .parts
            .iter()
            .map(|p| p.summary.elapsed_s)
            .fold(0.0, f64::max);
        let info = RunInfo {
            target: &first.target,
            model: &first.model,
            interrupted,
            warnings: self.warnings.clone(),
            stages: scenario
                .stages
                .iter()
                .map(|s| ExecutedStage::of(s, None, scenario.unit()))
                .collect(),
            aborted,
            ..RunInfo::of_records(&scenario.name, &records_name, elapsed_s, verdicts)
        };
        let mut summary = summarize(aggregator, info);
        summary.invocation = first.invocation.clone();
        summary.segment = (!self.missing.is_empty()).then(|| {
            let held: Vec<String> = self.parts.iter().map(|p| p.segment.to_string()).collect();
            held.join(",")
        });
        summary
    }
}

/// The parts' aggregates (`aggregate.json`, which every run writes) merged: the same
/// counts and histograms as the records would give, without reading them.
fn merge_aggregates(parts: &[Part]) -> Result<Aggregator> {
    let mut merged: Option<Aggregator> = None;
    for part in parts {
        let path = RunFolder::new(&part.dir).aggregate();
        if !path.is_file() {
            bail!(
                "{}: neither records.jsonl nor aggregate.json: nothing of its share to merge",
                part.dir.display()
            );
        }
        let aggregator = crate::metrics::file::read(&path).map_err(|e| anyhow::anyhow!(e))?;
        match &mut merged {
            Some(merged) => merged.merge(&aggregator),
            None => merged = Some(aggregator),
        }
    }
    Ok(merged.expect("the merge has at least one part"))
}

/// Each folder's summary and segment; a folder without a summary (a worker that died)
/// is a warning, as its share shows as missing.
fn read_parts(dirs: &[PathBuf]) -> Result<(Vec<Part>, Vec<String>)> {
    let mut parts = Vec::new();
    let mut warnings = Vec::new();
    for dir in dirs {
        if !RunFolder::new(dir).summary().is_file() {
            warnings.push(format!(
                "{}: no summary.json (the worker did not finish); its records are left out",
                dir.display()
            ));
            continue;
        }
        let summary = crate::report::read_summary(dir)?;
        let segment = match &summary.segment {
            Some(text) => Segment::parse(text)
                .map_err(|e| anyhow::anyhow!("{}: summary.json's segment {e}", dir.display()))?,
            None => Segment::WHOLE,
        };
        parts.push(Part {
            dir: dir.clone(),
            summary,
            segment,
        });
    }
    Ok((parts, warnings))
}

/// The spec every part ran; parts of different specs (or seeds) are refused.
fn spec_of(parts: &[Part]) -> Result<String> {
    let spec_of = |part: &Part| {
        part.summary
            .invocation
            .as_ref()
            .map(|i| i.spec.clone())
            .ok_or_else(|| anyhow::anyhow!("{}: summary.json names no spec", part.dir.display()))
    };
    let spec = spec_of(&parts[0])?;
    for part in &parts[1..] {
        if spec_of(part)? != spec {
            bail!(
                "{} and {} ran different specs: only the segments of one run merge",
                parts[0].dir.display(),
                part.dir.display()
            );
        }
    }
    Ok(spec)
}

/// The shares of `[0, 1)` no part holds (parts sorted by their start); overlapping
/// parts are refused, as their records would count twice.
fn coverage(parts: &[Part]) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    let mut reached = Segment::WHOLE.from;
    for (i, part) in parts.iter().enumerate() {
        if part.segment.from < reached {
            bail!(
                "{} ({}) overlaps the folder before it: each share of the run must come once",
                part.dir.display(),
                part.segment
            );
        }
        if reached < part.segment.from {
            missing.push(
                Segment {
                    from: reached,
                    to: part.segment.from,
                }
                .to_string(),
            );
        }
        reached = part.segment.to;
        if i + 1 == parts.len() && reached < Segment::WHOLE.to {
            missing.push(
                Segment {
                    from: reached,
                    to: Segment::WHOLE.to,
                }
                .to_string(),
            );
        }
    }
    Ok(missing)
}

/// The parts' records in one file, in order of completion (as one process's recorder
/// writes them), so figures that depend on order (warm-up, sessions) read as one run's.
/// Each part's file is already in that order: they are merged as streams, one reader
/// thread a part, so the merge holds a few records a part, not the run. Returns how
/// many it wrote and the parts whose last line was cut short (left out).
fn merge_records(parts: &[Part], path: &Path) -> Result<(u64, Vec<PathBuf>)> {
    use std::cmp::Reverse;
    let mut readers = Vec::new();
    for part in parts {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Record>(1024);
        let file = RunFolder::new(&part.dir).records();
        let reader = std::thread::Builder::new()
            .name("redline-merge".into())
            .spawn(move || {
                crate::record::read_records(&file, None, |record| {
                    // The receiver goes only when writing failed; that error is reported.
                    let _ = sender.send(record);
                })
            })?;
        readers.push((receiver, reader));
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let mut heads: Vec<Option<Record>> = readers.iter().map(|(r, _)| r.recv().ok()).collect();
    let mut next: std::collections::BinaryHeap<_> = heads
        .iter()
        .enumerate()
        .filter_map(|(i, head)| head.as_ref().map(|r| Reverse((r.done_us(), r.seq, i))))
        .collect();
    let (mut written, mut line) = (0u64, Vec::with_capacity(1024));
    while let Some(Reverse((_, _, i))) = next.pop() {
        let record = heads[i].take().expect("a queued part has its head");
        line.clear();
        record.write_json(&mut line)?;
        line.push(b'\n');
        std::io::Write::write_all(&mut out, &line)?;
        written += 1;
        if let Ok(record) = readers[i].0.recv() {
            next.push(Reverse((record.done_us(), record.seq, i)));
            heads[i] = Some(record);
        }
    }
    std::io::Write::flush(&mut out)?;
    let mut cut = Vec::new();
    for (part, (_, reader)) in parts.iter().zip(readers) {
        let counts = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader of {} failed", part.dir.display()))??;
        if counts.truncated_last_line {
            cut.push(part.dir.clone());
        }
    }
    Ok((written, cut))
}
