//! What a run leaves and how it ends: where its files go, the summary and JUnit files
//! written there, and the exit code. By default each run gets a folder of its own
//! under `out/NAME/` named by its UTC start time, with `out/NAME/latest` pointing at
//! it, so no run overwrites another. A folder given with `--out` is the user's: the
//! files an earlier run left there are removed first, so none is taken for this run's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{RunInfo, Summary, summarize};
use crate::folder::RunFolder;
use crate::metrics::Aggregator;
use crate::slo::{SloSet, Verdict};

/// Exit codes, as documented in `--help` and the README.
pub mod exit {
    /// The run completed and every SLO passed (or was not proven, without --strict).
    pub const OK: i32 = 0;
    /// Some SLO failed (or, under --strict, was not proven), or a streaming SLO opened
    /// an episode; without SLOs, more than 1 % of the requests failed, or none
    /// succeeded.
    pub const SLO_FAILED: i32 = 1;
    /// The spec or the command line is wrong.
    pub const USAGE: i32 = 2;
    /// The run could not be carried out: no request reached the target.
    pub const UNREACHABLE: i32 = 3;
    /// Interrupted by Ctrl-C or SIGTERM (records and a partial report are written).
    pub const INTERRUPTED: i32 = 130;
}

/// Bootstrap resamples when a failed run explains itself: fewer than `redline
/// explain`'s 30, so the end of a run is not held up; the command gives more.
const RUN_END_BOOTSTRAP: usize = 20;

/// Why a failed flow run's sessions breached: its breaching sessions against the run
/// as a whole, written to `explain.json` as `redline explain` would. Why it cannot be
/// explained (no session breached: the gate failed on another measure) is the inner
/// error, a warning of the run rather than its failure.
pub(super) fn explain_failed_run(
    folder: &RunFolder,
) -> Result<std::result::Result<crate::explain::Explanation, String>> {
    use crate::explain::{Options, explain, files::read_run};
    let options = Options {
        bootstrap: RUN_END_BOOTSTRAP,
        ..Options::default()
    };
    let explanation =
        match read_run(folder.path()).and_then(|table| explain(table, None, None, &options)) {
            Ok(explanation) => explanation,
            Err(why) => return Ok(Err(why)),
        };
    let text = serde_json::to_string_pretty(&explanation)? + "\n";
    std::fs::write(folder.explain(), text).context("cannot write explain.json")?;
    Ok(Ok(explanation))
}

/// `report.html` (or the page at `html`) and `timeline.json`, from the summary and
/// the records in `dir`: at the end of a run, and for `redline report`.
pub fn write_pictures(summary: &Summary, dir: &Path, html: Option<&Path>) -> Result<PathBuf> {
    // One pass over the records for both: reading them is most of the work.
    let mut digest = super::html::Digest::new(summary.requests.scheduled);
    let mut timeline = super::timeline::Timeline::new(summary.requests.scheduled);
    let folder = RunFolder::new(dir);
    crate::record::read_records(&folder.records(), None, |record| {
        digest.add(&record);
        timeline.add(&record);
    })?;
    let page = html.map_or_else(|| folder.report(), Path::to_owned);
    std::fs::write(&page, super::html::render(summary, &digest.finish()))
        .with_context(|| format!("cannot write {}", page.display()))?;
    timeline.write(&folder.timeline())?;
    Ok(page)
}

/// What `redline check` needs to know about the records it judged.
pub struct CheckAbout<'a> {
    pub name: &'a str,
    /// The records file, named in the summary as the run's target.
    pub records: &'a Path,
    pub slos: &'a SloSet,
    /// The windows of the spec's windowed SLOs, replayed over the records.
    pub drift: Option<&'a crate::slo::streaming::DriftSummary>,
    /// From the first request's intended start to the last one's end.
    pub elapsed_s: f64,
    pub strict: bool,
}

/// A finished run's records judged again, offline: the summary of what they hold, with
/// the verdicts; JUnit written when asked; the exit code of the gate alone (the run's
/// own interruptions and aborts are not in the records).
pub fn check(
    aggregator: &Aggregator,
    about: CheckAbout<'_>,
    junit: Option<&Path>,
) -> Result<(Summary, i32)> {
    let verdicts = about.slos.evaluate(aggregator, about.drift);
    let records = about.records.display().to_string();
    let info = RunInfo::of_records(
        about.name,
        &records,
        about.elapsed_s,
        Some(verdicts.clone()),
    );
    let summary = summarize(aggregator, info);
    if let Some(path) = junit {
        write_junit(path, about.name, &verdicts, about.strict)?;
    }
    Ok((summary, gate(&verdicts, about.strict)))
}

pub fn write_junit(path: &Path, name: &str, verdicts: &[Verdict], strict: bool) -> Result<()> {
    let xml = crate::slo::junit::render(name, verdicts, strict);
    std::fs::write(path, xml).with_context(|| format!("cannot write {}", path.display()))
}

/// The SLO gate's exit code: every SLO passed (or, without `strict`, was not proven).
pub fn gate(verdicts: &[Verdict], strict: bool) -> i32 {
    if crate::slo::gate_passes(verdicts, strict) {
        exit::OK
    } else {
        exit::SLO_FAILED
    }
}

/// A run's output folder, made ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    pub path: PathBuf,
    /// `out/NAME/latest`, when the folder is a new one under it.
    pub latest: Option<PathBuf>,
    /// Files of an earlier run that were removed from a reused `--out` folder.
    pub replaced: Vec<String>,
}

/// Makes the output folder: `explicit` as given (emptied of an earlier run's files),
/// else a new `root/NAME/<UTC time>` and its `latest` link.
pub fn prepare(explicit: Option<&Path>, root: &Path, name: &str) -> std::io::Result<RunDir> {
    if let Some(dir) = explicit {
        std::fs::create_dir_all(dir)?;
        let mut replaced = Vec::new();
        for file in crate::folder::RUN_FILES {
            let path = dir.join(file);
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else if path.exists() {
                std::fs::remove_file(&path)?;
            } else {
                continue;
            }
            replaced.push((*file).to_owned());
        }
        return Ok(RunDir {
            path: dir.to_owned(),
            latest: None,
            replaced,
        });
    }
    let parent = root.join(name);
    std::fs::create_dir_all(&parent)?;
    let stamp = utc_stamp(time::OffsetDateTime::now_utc());
    // Two runs started in the same second get -2, -3, …
    let mut path = parent.join(&stamp);
    let mut n = 1;
    while let Err(e) = std::fs::create_dir(&path) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
        n += 1;
        path = parent.join(format!("{stamp}-{n}"));
    }
    let latest = parent.join("latest");
    link_latest(&latest, &path)?;
    Ok(RunDir {
        path,
        latest: Some(latest),
        replaced: Vec::new(),
    })
}

/// `2026-12-01T09-54-03Z`: sortable, and a valid file name everywhere.
fn utc_stamp(at: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Points `latest` at the run's folder (by its name, so the tree can be moved).
#[cfg(unix)]
fn link_latest(latest: &Path, target: &Path) -> std::io::Result<()> {
    let name = target.file_name().expect("a run folder has a name");
    // A link left by an earlier run is replaced; anything else named `latest` is not
    // ours to remove.
    if latest
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        std::fs::remove_file(latest)?;
    }
    std::os::unix::fs::symlink(name, latest)
}

#[cfg(not(unix))]
fn link_latest(_: &Path, _: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_gets_its_own_folder_and_a_reused_one_loses_the_old_files() {
        let root = std::env::temp_dir().join(format!("redline-outputs-{}", std::process::id()));
        let first = prepare(None, &root, "quickstart").unwrap();
        let second = prepare(None, &root, "quickstart").unwrap();
        assert_ne!(
            first.path, second.path,
            "runs in the same second get their own"
        );
        assert!(first.path.starts_with(root.join("quickstart")));
        let latest = second.latest.unwrap();
        assert_eq!(
            std::fs::canonicalize(&latest).unwrap(),
            std::fs::canonicalize(&second.path).unwrap()
        );

        let reused = root.join("mine");
        std::fs::create_dir_all(reused.join("collect")).unwrap();
        std::fs::write(reused.join("junit.xml"), "<old/>").unwrap();
        std::fs::write(reused.join("notes.txt"), "the user's").unwrap();
        let dir = prepare(Some(&reused), &root, "ignored").unwrap();
        assert_eq!(dir.replaced, ["junit.xml", "collect"]);
        assert!(!reused.join("junit.xml").exists() && !reused.join("collect").exists());
        assert!(
            reused.join("notes.txt").exists(),
            "only redline's own files go"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn stamps_sort_and_name_files() {
        let at = time::OffsetDateTime::from_unix_timestamp(1_764_582_843).unwrap();
        assert_eq!(utc_stamp(at), "2025-12-01T09-54-03Z");
    }
}
