//! `redline watch`: a spec's streaming SLOs over what a service left behind or is
//! producing — a run's records, a Prometheus (or VictoriaMetrics) range query, a
//! JSON-lines log — with the windows and detectors of a live run, so an episode found
//! live is found again here. `--follow` keeps reading as the sources grow.

mod lines;
mod sources;

use std::time::Duration;

use super::*;
use crate::slo::streaming::{Change, DriftSummary, Monitor};
use sources::{LogSource, PromSource};

/// What to watch and how.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// records.jsonl of a run (or leave it out and name `--prometheus` or `--log`).
    pub records: Option<PathBuf>,
    /// The spec whose ScaleSpec has the `streaming:` block or windowed SLOs.
    #[arg(long)]
    pub spec: PathBuf,
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
    /// Keep reading as the sources grow (new records, new log lines, new points) until
    /// Ctrl-C or `--for`.
    #[arg(long)]
    pub follow: bool,
    /// With `--follow`: stop after this long.
    #[arg(long = "for", requires = "follow", value_parser = parse_duration, value_name = "DURATION")]
    pub follow_for: Option<Duration>,
    /// Also write what was seen (windows, episodes) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Every window of the sources through the detectors of `spec`; exit 1 when an
/// episode opened.
pub(super) async fn watch(args: WatchArgs) -> Result<i32> {
    let Some(scenario) = scenario_or_problems(&args.spec)? else {
        return Ok(exit::USAGE);
    };
    let Some(plan) = scenario.streaming.clone() else {
        errln!(
            "{}: no streaming SLOs to watch: add `streaming:` or a windowed SLO (`p99: \"<= 800ms over 30s for 3 windows\"`) to the spec's `kind: ScaleSpec` document (see docs/slo.md)",
            args.spec.display()
        );
        return Ok(exit::USAGE);
    };
    let external = match sources::external(&args, &plan) {
        Ok(external) => external,
        Err(problem) => {
            errln!("redline watch: {problem}");
            return Ok(exit::USAGE);
        }
    };
    let stop = CancellationToken::new();
    if args.follow {
        tokio::spawn(stop_after(stop.clone(), args.follow_for));
    }
    let what = match &args.records {
        Some(records) => records.display().to_string(),
        None => external.describe(),
    };
    outln!(
        "redline watch · {what} · {} over {}s windows every {}s",
        plan.describe(),
        plan.window.as_secs_f64(),
        plan.step.as_secs_f64()
    );
    let mut monitor = Monitor::new(plan);
    let end_us = match &args.records {
        Some(records) => watch_records(&mut monitor, records, args.follow, &stop).await?,
        None => external.watch(&mut monitor, args.follow, &stop).await?,
    };
    let (summary, changes) = monitor.finish(end_us);
    print_changes(&changes);
    out(&crate::report::render_drift_summary(&summary));
    print_joined(&summary);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if summary.episodes.is_empty() {
        exit::OK
    } else {
        exit::SLO_FAILED
    })
}

async fn stop_after(stop: CancellationToken, after: Option<Duration>) {
    let limit = async {
        match after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = signal() => {}
        _ = limit => {}
    }
    stop.cancel();
}

fn print_changes(changes: &[Change]) {
    for change in changes {
        outln!("{}", crate::report::render_drift_change(change));
    }
}

/// A run's records, timed from its start; with `follow`, also the ones it is still
/// writing. Returns the last record's end.
async fn watch_records(
    monitor: &mut Monitor,
    path: &Path,
    follow: bool,
    stop: &CancellationToken,
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
        print_changes(&monitor.advance(record.done_us()));
    }
    if reader.truncated_last_line() {
        outln!("  note: the last line was cut short and is left out");
    }
    Ok(end_us)
}

/// Episodes of different sources that overlap in time: a drift seen in the metrics
/// and in the logs at once is the same event, told twice.
fn print_joined(summary: &DriftSummary) {
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
                    "  {} [{}] from {:.0}s and {} [{}] from {:.0}s",
                    a.series, a.group, a.opened_s, b.series, b.group, b.opened_s
                ));
            }
        }
    }
    if !lines.is_empty() {
        outln!("seen by more than one source at once:");
        for line in lines {
            outln!("{line}");
        }
    }
}

/// The sources other than records, for the header.
impl sources::External {
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.prometheus {
            parts.push(PromSource::describe(p));
        }
        if let Some(l) = &self.log {
            parts.push(LogSource::describe(l));
        }
        parts.join(" + ")
    }
}
