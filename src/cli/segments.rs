//! Segmented runs: `run --segment` (one worker's share), `run --workers N` (N worker
//! processes on this machine) and `redline merge` (their folders joined into one run:
//! one records file, one summary, one SLO verdict, one report).

use super::*;
use crate::folder::RunFolder;
use crate::record::Record;
use crate::report::conclude::{Conclude, conclude};
use crate::report::{RunInfo, Summary, summarize};
use crate::schedule::{ExecutedStage, Stage};
use crate::segment::Segment;

/// Gives `scenario` its share of the run. A sweep is refused: its rates come from the
/// throughput its closed-loop points measure, which each worker would measure alone.
pub(super) fn apply_segment(scenario: &mut Scenario, segment: Segment) -> Result<(), String> {
    if !segment.is_whole() && scenario.stages.iter().any(|s| matches!(s, Stage::Sweep(_))) {
        return Err(format!(
            "--segment {segment}: a sweep cannot be split, as its rates come from the throughput \
             its first points measure; give the sweep's rates as open-loop stages instead"
        ));
    }
    scenario.segment = segment;
    Ok(())
}

/// `redline run SPEC --workers N`: N processes of this binary, the K-th with
/// `--segment K/N` and its own folder under `OUT/workers/`; then their folders merged
/// into OUT. They meet at a coordinator served from this process on loopback, so they
/// start together with one run ID and are judged as one run by the code path workers
/// on several machines use. A worker that fails is reported, and the merge says which
/// share is missing.
pub(super) async fn run_workers(
    args: &RunArgs,
    workers: u32,
    out_dir: &Path,
    scenario: &Scenario,
) -> Result<i32> {
    if workers == 0 {
        bail!("--workers 0: give at least one worker");
    }
    let exe = std::env::current_exe().context("cannot find redline's own executable")?;
    let run_id = crate::runner::new_run_id();
    let coordinator = crate::coordinator::Coordinator::new(
        workers,
        scenario.slos.clone(),
        scenario.aggregator(),
        run_id,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen for the workers' coordinator")?;
    let url = format!("http://{}", listener.local_addr()?);
    let served = CancellationToken::new();
    let server = coordinator.serve(listener, served.clone());
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut children = Vec::new();
    let mut dirs = Vec::new();
    for k in 1..=workers {
        let dir = out_dir.join("workers").join(format!("{k}-of-{workers}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
        let log = std::fs::File::create(dir.join("worker.log"))?;
        let mut command = tokio::process::Command::new(&exe);
        command
            .args(worker_args(&argv, k, workers, &dir, &url))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        children.push(command.spawn().context("cannot start a worker")?);
        dirs.push(dir);
    }
    outln!(
        "redline: {workers} workers, run {run_id:016x}: {}",
        out_dir.join("workers").display()
    );
    supervise(children, &dirs, &coordinator).await?;
    served.cancel();
    server.await.context("the workers' coordinator failed")??;
    merge(&dirs, out_dir, args.strict, args.quiet, false).await
}

/// Waits for every worker. Ctrl-C or SIGTERM is passed to all as SIGTERM (a terminal's
/// Ctrl-C reaches them too); each drains as a run does, and their partial results are
/// merged. A worker that fails before the run has started stops the others, which
/// would otherwise wait for it at the coordinator.
async fn supervise(
    children: Vec<tokio::process::Child>,
    dirs: &[PathBuf],
    coordinator: &crate::coordinator::Coordinator,
) -> Result<()> {
    let n = children.len();
    let pids: Vec<Option<u32>> = children.iter().map(tokio::process::Child::id).collect();
    let mut running = vec![true; n];
    let stop = |running: &[bool]| {
        for (pid, _) in pids.iter().zip(running).filter(|(_, running)| **running) {
            if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
    };
    let mut waits = tokio::task::JoinSet::new();
    for (k, mut child) in children.into_iter().enumerate() {
        waits.spawn(async move { (k, child.wait().await) });
    }
    let signalled = signal();
    tokio::pin!(signalled);
    let mut stopping = false;
    loop {
        tokio::select! {
            joined = waits.join_next() => {
                let Some(joined) = joined else { break };
                let (k, status) = joined?;
                let status = status?;
                running[k] = false;
                if status.success() || status.code() == Some(exit::SLO_FAILED) {
                    continue;
                }
                errln!(
                    "redline: worker {}/{n} ended with {status}: see {}",
                    k + 1,
                    dirs[k].join("worker.log").display()
                );
                if !stopping && !coordinator.has_started() {
                    errln!("redline: the run had not started: stopping the other workers");
                    stopping = true;
                    stop(&running);
                }
            }
            _ = &mut signalled, if !stopping => {
                errln!("redline: stopping the workers — each drains, then the partial runs are merged");
                stopping = true;
                stop(&running);
            }
        }
    }
    Ok(())
}

/// The command line of worker `k` of `n`: the run's own arguments without `--workers`,
/// `--out` and `--quiet`, plus the worker's segment, folder and the coordinator.
fn worker_args(argv: &[String], k: u32, n: u32, dir: &Path, coordinator: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut skip_value = false;
    for arg in argv {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match arg.as_str() {
            "--workers" | "--out" => skip_value = true,
            "--quiet" => {}
            _ if arg.starts_with("--workers=") || arg.starts_with("--out=") => {}
            _ => args.push(arg.clone()),
        }
    }
    args.extend([
        "--segment".to_owned(),
        format!("{k}/{n}"),
        "--out".to_owned(),
        dir.display().to_string(),
        "--coordinator".to_owned(),
        coordinator.to_owned(),
        "--quiet".to_owned(),
    ]);
    args
}

/// One worker's folder, as the merge reads it.
struct Part {
    dir: PathBuf,
    summary: Summary,
    segment: Segment,
}

/// `redline merge DIR… --out OUT`: the workers' folders joined into one run folder.
/// Folders of different specs are refused; a share of the run no folder holds is
/// named, and the SLOs are judged on the rest with a warning.
pub(super) async fn merge(
    dirs: &[PathBuf],
    out_dir: &Path,
    strict: bool,
    quiet: bool,
    without_records: bool,
) -> Result<i32> {
    let (mut parts, mut warnings) = read_parts(dirs)?;
    if parts.is_empty() {
        errln!("redline merge: none of the folders holds a finished run's summary.json");
        return Ok(exit::USAGE);
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
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot make {}", out_dir.display()))?;
    let spec_path = out_dir.join("spec.yaml");
    std::fs::write(&spec_path, spec)?;
    let Some(scenario) = scenario_or_problems(&spec_path)? else {
        return Ok(exit::USAGE);
    };
    let folder = RunFolder::new(out_dir);
    let records_path = folder.records();
    let from_records = !without_records
        && parts
            .iter()
            .all(|p| RunFolder::new(&p.dir).records().is_file());
    let (aggregator, drift, joined) = if from_records {
        let written = merge_records(&parts, &records_path)?;
        let read = read_run(&records_path, &scenario, quiet).await?;
        (read.aggregator, read.drift, format!("{written} records"))
    } else {
        let aggregator = merge_aggregates(&parts)?;
        let windowed = scenario
            .streaming
            .as_ref()
            .is_some_and(|s| !s.thresholds.is_empty());
        if windowed {
            warnings.push(
                "the windowed SLOs are not judged: their windows are replayed from the \
                 records, and this merge read the aggregates only"
                    .into(),
            );
        }
        warnings.push(
            "report.html and timeline.json are not written: they are drawn from the \
             records, and this merge read the aggregates only"
                .into(),
        );
        (
            aggregator,
            None,
            "their aggregate.json files, no records".to_owned(),
        )
    };
    let verdicts = scenario
        .slos
        .as_ref()
        .map(|slos| slos.evaluate(&aggregator, drift.as_ref()));
    let first = &parts[0].summary;
    let aborted = parts.iter().find_map(|p| p.summary.aborted.clone());
    // Workers stopped because one of them aborted on an SLO are not an interruption:
    // the run as a whole was aborted, as one process's would be.
    let interrupted = aborted.is_none() && parts.iter().any(|p| p.summary.interrupted);
    let stopped: Vec<&Part> = parts
        .iter()
        .filter(|p| p.summary.aborted.is_some())
        .collect();
    match stopped.as_slice() {
        [] => {}
        // One worker judged its own share (`--workers`); the others were interrupted.
        [part] => warnings.push(format!(
            "the worker of share {} stopped the run on an SLO its share was certain to fail; \
             the others were stopped then",
            part.segment
        )),
        // A coordinator judged the whole run and stopped every worker it reached.
        _ => warnings.push(format!(
            "{} of {} workers were stopped by their coordinator: the whole run was certain \
             to fail an SLO",
            stopped.len(),
            parts.len()
        )),
    }
    warnings.push(format!(
        "merged from {} worker folders ({joined}); server metrics, proxy counts and \
         traces are each worker's own, in its folder",
        parts.len()
    ));
    let records_name = records_path.display().to_string();
    let info = RunInfo {
        target: &first.target,
        model: &first.model,
        interrupted,
        warnings,
        stages: scenario
            .stages
            .iter()
            .map(|s| ExecutedStage::of(s, None, scenario.unit()))
            .collect(),
        aborted,
        ..RunInfo::of_records(
            &scenario.name,
            &records_name,
            parts
                .iter()
                .map(|p| p.summary.elapsed_s)
                .fold(0.0, f64::max),
            verdicts.clone(),
        )
    };
    let mut summary = summarize(&aggregator, info);
    summary.invocation = first.invocation.clone();
    summary.drift = drift;
    summary.segment = (!missing.is_empty()).then(|| {
        let held: Vec<String> = parts.iter().map(|p| p.segment.to_string()).collect();
        held.join(",")
    });
    let how = Conclude {
        aggregator: Some(&aggregator),
        junit: true,
        strict,
        explain: true,
        pictures: from_records,
        html: None,
    };
    let concluded = conclude(&folder, summary, how)?;
    let summary = concluded.summary;
    out(&render_terminal(&summary));
    let records = if from_records {
        records_path.display().to_string()
    } else {
        "none (merged from aggregates)".into()
    };
    outln!(
        "  records: {records}  summary: {}",
        folder.summary().display()
    );
    Ok(concluded.code)
}

/// The parts' aggregates (`aggregate.json`, which every run writes) merged: the same
/// counts and histograms as the records would give, without reading them.
fn merge_aggregates(parts: &[Part]) -> Result<crate::metrics::Aggregator> {
    let mut merged: Option<crate::metrics::Aggregator> = None;
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
/// thread a part, so the merge holds a few records a part, not the run.
fn merge_records(parts: &[Part], path: &Path) -> Result<u64> {
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
    for (part, (_, reader)) in parts.iter().zip(readers) {
        let counts = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader of {} failed", part.dir.display()))??;
        if counts.truncated_last_line {
            errln!(
                "redline merge: {}: the last line of records.jsonl was cut short and is left out",
                part.dir.display()
            );
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_runs_the_same_command_with_its_segment_folder_and_coordinator() {
        let argv: Vec<String> = [
            "run",
            "spec.yaml",
            "--workers",
            "4",
            "--out=o",
            "--quiet",
            "--strict",
        ]
        .map(String::from)
        .to_vec();
        let args = worker_args(
            &argv,
            2,
            4,
            Path::new("o/workers/2-of-4"),
            "http://127.0.0.1:9",
        );
        assert_eq!(
            args.join(" "),
            "run spec.yaml --strict --segment 2/4 --out o/workers/2-of-4 --coordinator http://127.0.0.1:9 --quiet"
        );
    }
}
