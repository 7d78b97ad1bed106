//! A run's folder and the names of the files a run, a merge, a rebuild and the tools
//! that read them after (report, explain, heal, advise) find there. Each name is
//! written once, here.

use std::path::{Path, PathBuf};

/// Every file or folder a run may write into its folder: what a reused `--out` folder
/// is emptied of, so none of an earlier run's is taken for this one's.
pub const RUN_FILES: &[&str] = &[
    RunFolder::RECORDS,
    RunFolder::SUMMARY,
    RunFolder::AGGREGATE,
    RunFolder::JUNIT,
    RunFolder::REPORT,
    RunFolder::TIMELINE,
    RunFolder::DRIFT,
    RunFolder::FEEDBACK,
    RunFolder::EXPLAIN,
    RunFolder::COLLECT,
    RunFolder::HEAL_LOG,
    RunFolder::HEAL_RUNS,
];

/// A run's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    path: PathBuf,
}

impl RunFolder {
    pub const RECORDS: &str = "records.jsonl";
    pub const SUMMARY: &str = "summary.json";
    pub const AGGREGATE: &str = "aggregate.json";
    pub const JUNIT: &str = "junit.xml";
    pub const REPORT: &str = "report.html";
    pub const TIMELINE: &str = "timeline.json";
    pub const DRIFT: &str = "drift.jsonl";
    pub const FEEDBACK: &str = "feedback.jsonl";
    pub const EXPLAIN: &str = "explain.json";
    /// The folder `--collect` stores the services' spans in.
    pub const COLLECT: &str = "collect";
    /// The remediation agent's audit log.
    pub const HEAL_LOG: &str = "heal.jsonl";
    /// The folder of the agent's verify runs.
    pub const HEAL_RUNS: &str = "heal";
    /// The spans a trace receiver stores, in its folder.
    pub const SPANS: &str = "spans.jsonl";
    /// The spec a merged run's parts ran, written beside its figures.
    pub const SPEC: &str = "spec.yaml";

    pub fn new(path: impl Into<PathBuf>) -> RunFolder {
        RunFolder { path: path.into() }
    }

    /// The folder a records file is in (the working folder for a bare file name).
    pub fn of_records(records: &Path) -> RunFolder {
        let path = records
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        RunFolder::new(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn records(&self) -> PathBuf {
        self.path.join(Self::RECORDS)
    }

    pub fn spec(&self) -> PathBuf {
        self.path.join(Self::SPEC)
    }

    pub fn summary(&self) -> PathBuf {
        self.path.join(Self::SUMMARY)
    }

    pub fn aggregate(&self) -> PathBuf {
        self.path.join(Self::AGGREGATE)
    }

    pub fn junit(&self) -> PathBuf {
        self.path.join(Self::JUNIT)
    }

    pub fn report(&self) -> PathBuf {
        self.path.join(Self::REPORT)
    }

    pub fn timeline(&self) -> PathBuf {
        self.path.join(Self::TIMELINE)
    }

    pub fn drift(&self) -> PathBuf {
        self.path.join(Self::DRIFT)
    }

    pub fn feedback(&self) -> PathBuf {
        self.path.join(Self::FEEDBACK)
    }

    pub fn explain(&self) -> PathBuf {
        self.path.join(Self::EXPLAIN)
    }

    pub fn collect(&self) -> PathBuf {
        self.path.join(Self::COLLECT)
    }

    pub fn heal_log(&self) -> PathBuf {
        self.path.join(Self::HEAL_LOG)
    }

    pub fn heal_runs(&self) -> PathBuf {
        self.path.join(Self::HEAL_RUNS)
    }

    /// The spans `--collect` stored.
    pub fn collected_spans(&self) -> PathBuf {
        self.collect().join(Self::SPANS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_file_names_its_folder() {
        let folder = RunFolder::of_records(Path::new("out/x/records.jsonl"));
        assert_eq!(folder.path(), Path::new("out/x"));
        assert_eq!(folder.summary(), Path::new("out/x/summary.json"));
        assert_eq!(
            RunFolder::of_records(Path::new("records.jsonl")).path(),
            Path::new(".")
        );
        assert_eq!(
            folder.collected_spans(),
            Path::new("out/x/collect/spans.jsonl")
        );
    }
}
