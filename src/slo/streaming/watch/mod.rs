//! `redline watch`'s reading: a spec's streaming SLOs over what a service left behind
//! or is producing — a run's records, a Prometheus (or VictoriaMetrics) range query, a
//! JSON-lines log — with the windows and detectors of a live run, so an episode found
//! live is found again here. With `follow`, reading goes on as the sources grow. What
//! it finds on the way is said through a callback; the caller prints.

mod lines;
mod sources;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use tokio_util::sync::CancellationToken;

use super::{Change, DriftSummary, Monitor, StreamingPlan};
pub use sources::rfc3339;
use sources::{External, LogSource, PromSource};

/// The sources `redline watch` is pointed at.
#[derive(Debug, clap::Args)]
pub struct SourceArgs {
    /// records.jsonl of a run (or leave it out and name `--prometheus` or `--log`).
    pub records: Option<PathBuf>,
    /// A Prometheus HTTP API (`http://127.0.0.1:9090`), or VictoriaMetrics's
    /// (`http://127.0.0.1:8428`): each `--query` is read as a range at the spec's step.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// `NAME=PROMQL`, or a bare PromQL expression (named by itself); each point is a
    /// window's value, so give the range vector the spec's window, e.g.
    /// `ttft.p95=histogram_quantile(0.95, sum by (le) (rate(redline_time_to_first_token_seconds_bucket[30s])))`.
    #[arg(long = "query", value_name = "QUERY")]
    pub queries: Vec<String>,
    /// The range's start: RFC 3339, Unix seconds, or a duration back from now (`15m`;
    /// default 1h).
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,
    /// The range's end (default now).
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,
    /// A JSON-lines log, one request per line, or `-` for stdin.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The log's field with the time each request ended (RFC 3339 or Unix time).
    #[arg(long, default_value = "ts", value_name = "FIELD")]
    pub log_time: String,
    /// `QUANTITY=FIELD`: which field holds which latency (`e2e`, `ttft`, `itl`,
    /// `tpot`); repeatable.
    #[arg(
        long = "log-field",
        value_name = "QUANTITY=FIELD",
        default_value = "e2e=latency_ms"
    )]
    pub log_fields: Vec<String>,
    /// The unit of the log's latency fields: `us`, `ms` or `s`.
    #[arg(long, default_value = "ms", value_name = "UNIT")]
    pub log_unit: String,
    /// The log's status field (≥ 500, `error`, `failed`, `timeout` or `false`: failed),
    /// for `error_rate`.
    #[arg(long, value_name = "FIELD")]
    pub log_status: Option<String>,
}

/// What the watcher finds on its way, for the caller to print.
#[derive(Debug)]
pub enum Heard {
    /// An episode opened or closed.
    Change(Change),
    /// The Unix time that t = 0 s stands for (the clocked sources' origin).
    Origin(f64),
    /// Something left out, and why.
    Note(String),
    /// A query failed while following; it is tried again at the next tick.
    Retrying(String),
}

/// The sources, checked against each other and the plan.
pub enum Watched {
    /// A run's records, timed from the run's start.
    Records(PathBuf),
    /// Sources on the wall clock: Prometheus, a log, or both.
    External(External),
}

impl Watched {
    /// The sources `args` name, or what is wrong with them (the user's to fix).
    pub fn of(args: &SourceArgs, plan: &StreamingPlan) -> Result<Watched, String> {
        let external = sources::external(args, plan)?;
        Ok(match &args.records {
            Some(records) => Watched::Records(records.clone()),
            None => Watched::External(external),
        })
    }

    /// The sources, for a header line.
    pub fn describe(&self) -> String {
        match self {
            Watched::Records(path) => path.display().to_string(),
            Watched::External(external) => {
                let mut parts = Vec::new();
                if let Some(p) = &external.prometheus {
                    parts.push(PromSource::describe(p));
                }
                if let Some(l) = &external.log {
                    parts.push(LogSource::describe(l));
                }
                parts.join(" + ")
            }
        }
    }

    /// Every window of the sources through `monitor` (with `follow`, on until `stop`);
    /// returns the end of the last data read, µs from the origin.
    pub async fn watch(
        &self,
        monitor: &mut Monitor,
        follow: bool,
        stop: &CancellationToken,
        say: &dyn Fn(Heard),
    ) -> Result<u64> {
        match self {
            Watched::Records(path) => watch_records(monitor, path, follow, stop, say).await,
            Watched::External(external) => external.watch(monitor, follow, stop, say).await,
        }
    }
}

/// A run's records, timed from its start; with `follow`, also the ones it is still
/// writing. Returns the last record's end.
async fn watch_records(
    monitor: &mut Monitor,
    path: &Path,
    follow: bool,
    stop: &CancellationToken,
    say: &dyn Fn(Heard),
) -> Result<u64> {
    let mut reader = lines::Lines::open(Some(path), follow, stop.clone())?;
    let mut end_us = 0;
    while let Some(line) = reader.next().await {
        let record: crate::record::Record = match serde_json::from_str(&line.text) {
            Ok(record) => record,
            Err(e) => bail!("{}:{}: not a record: {e}", path.display(), line.number),
        };
        end_us = end_us.max(record.done_us());
        monitor.observe(&record);
        // Records are written as they complete: closing the windows a record's end
        // has passed keeps only the open windows' buckets, however long the run.
        for change in monitor.advance(record.done_us()) {
            say(Heard::Change(change));
        }
    }
    if reader.truncated_last_line() {
        say(Heard::Note(
            "the last line was cut short and is left out".into(),
        ));
    }
    Ok(end_us)
}

/// Episodes of different sources that overlap in time, as lines: a drift seen in the
/// metrics and in the logs at once is the same event, told twice.
pub fn seen_together(summary: &DriftSummary) -> Vec<String> {
    let source = |group: &str| group.split('{').next().unwrap_or(group).to_owned();
    let mut lines = Vec::new();
    for (i, a) in summary.episodes.iter().enumerate() {
        for b in &summary.episodes[i + 1..] {
            let (a_end, b_end) = (
                a.closed_s.unwrap_or(f64::INFINITY),
                b.closed_s.unwrap_or(f64::INFINITY),
            );
            let overlap = a.opened_s <= b_end && b.opened_s <= a_end;
            if overlap && source(&a.group) != source(&b.group) {
                lines.push(format!(
                    "{} [{}] from {:.0}s and {} [{}] from {:.0}s",
                    a.series, a.group, a.opened_s, b.series, b.group, b.opened_s
                ));
            }
        }
    }
    lines
}
