//! The sources `redline watch` reads besides a run's records: Prometheus range
//! queries and a JSON-lines log, on one clock (Unix time, from an origin on the step
//! grid) so that their windows line up and their episodes can be joined.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::lines::Lines;
use super::{Heard, SourceArgs};
use crate::client::{self, HttpClient, Timeouts};
use crate::prometheus::query;
use crate::slo::ValueUnit;
use crate::slo::streaming::logs::{LineError, LogFields, LogSample};
use crate::slo::streaming::series::Quantity;
use crate::slo::streaming::{Monitor, Observed, StreamingPlan};

/// How long after a window's end its data are taken as complete when following: a
/// scrape or a log line may land a moment late.
const SETTLE: Duration = Duration::from_secs(2);

pub struct PromSource {
    base: String,
    /// (name, PromQL).
    queries: Vec<(String, String)>,
    start_s: f64,
    /// None: up to now.
    end_s: Option<f64>,
}

pub struct LogSource {
    path: Option<std::path::PathBuf>,
    fields: LogFields,
}

pub struct External {
    pub prometheus: Option<PromSource>,
    pub log: Option<LogSource>,
    step_s: f64,
}

/// The sources the arguments name, checked.
pub(super) fn external(args: &SourceArgs, plan: &StreamingPlan) -> Result<External, String> {
    let prometheus = prom_source(args)?;
    let log = log_source(args)?;
    match (&args.records, &prometheus, &log) {
        (None, None, None) => Err(
            "name what to watch: a run's records.jsonl, `--prometheus URL --query …`, or `--log FILE`"
                .into(),
        ),
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(
            "a run's records are timed from the run's start, not by the clock: watch them on their own"
                .into(),
        ),
        _ => Ok(External {
            prometheus,
            log,
            step_s: plan.step.as_secs_f64(),
        }),
    }
}

fn prom_source(args: &SourceArgs) -> Result<Option<PromSource>, String> {
    let Some(base) = &args.prometheus else {
        if !args.queries.is_empty() {
            return Err("`--query` needs `--prometheus URL`".into());
        }
        return Ok(None);
    };
    if args.queries.is_empty() {
        return Err("`--prometheus` needs at least one `--query`".into());
    }
    let now = now_s();
    let start_s = match &args.start {
        Some(t) => parse_time(t, now)?,
        None => now - 3600.0,
    };
    let end_s = args
        .end
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()?;
    if end_s.is_some_and(|end| end <= start_s) {
        return Err("`--end` is not after `--start`".into());
    }
    Ok(Some(PromSource {
        base: base.clone(),
        queries: args.queries.iter().map(|q| name_query(q)).collect(),
        start_s,
        end_s,
    }))
}

/// `ttft.p95=histogram_quantile(…)` → (`ttft.p95`, the query); a query whose text
/// before its first `=` is no plain name (`rate(x{job="a"}[1m])`) is its own name.
fn name_query(text: &str) -> (String, String) {
    let plain = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
    };
    match text.split_once('=') {
        Some((name, query)) if plain(name.trim()) => (name.trim().to_owned(), query.to_owned()),
        _ => (text.to_owned(), text.to_owned()),
    }
}

fn log_source(args: &SourceArgs) -> Result<Option<LogSource>, String> {
    let Some(path) = &args.log else {
        return Ok(None);
    };
    let unit_us = match args.log_unit.as_str() {
        "us" | "µs" => 1.0,
        "ms" => 1_000.0,
        "s" => 1_000_000.0,
        other => return Err(format!("`--log-unit {other}`: choose from us, ms, s")),
    };
    let mut values = Vec::new();
    for pair in &args.log_fields {
        let (quantity, field) = pair.split_once('=').ok_or_else(|| {
            format!("`--log-field {pair}`: write QUANTITY=FIELD, e.g. e2e=latency_ms")
        })?;
        let quantity = Quantity::from_name(quantity.trim())
            .filter(|q| {
                matches!(
                    q,
                    Quantity::E2e | Quantity::Ttft | Quantity::Itl | Quantity::Tpot
                )
            })
            .ok_or_else(|| {
                format!("`--log-field {pair}`: the quantity is one of e2e, ttft, itl, tpot")
            })?;
        values.push((quantity, field.trim().to_owned()));
    }
    Ok(Some(LogSource {
        path: Some(path.clone()),
        fields: LogFields {
            time: args.log_time.clone(),
            values,
            unit_us,
            status: args.log_status.clone(),
        },
    }))
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// RFC 3339, Unix seconds, or a duration back from `now` (`15m`).
fn parse_time(text: &str, now: f64) -> Result<f64, String> {
    let text = text.trim();
    if let Ok(t) = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
    {
        return Ok(t.unix_timestamp_nanos() as f64 / 1e9);
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Ok(seconds);
    }
    crate::spec::values::Dur::parse(text)
        .map(|d| now - d.0.as_secs_f64())
        .map_err(|_| format!("`{text}` is not a time: write RFC 3339, Unix seconds or a duration back from now (`15m`)"))
}

impl PromSource {
    pub(super) fn describe(&self) -> String {
        let names: Vec<&str> = self.queries.iter().map(|(n, _)| n.as_str()).collect();
        format!("{} ({})", self.base, names.join(", "))
    }
}

impl LogSource {
    pub(super) fn describe(&self) -> String {
        match &self.path {
            Some(p) if p.as_os_str() != "-" => p.display().to_string(),
            _ => "stdin".into(),
        }
    }
}

/// The clock the sources share: Unix seconds of the run's t = 0, on the step grid.
struct Clock {
    origin_s: Option<f64>,
    step_s: f64,
}

impl Clock {
    fn start_at(&mut self, unix_s: f64) -> f64 {
        *self
            .origin_s
            .get_or_insert_with(|| (unix_s / self.step_s).floor() * self.step_s)
    }

    fn us_since(&self, unix_s: f64) -> Option<u64> {
        let origin = self.origin_s?;
        (unix_s >= origin).then(|| ((unix_s - origin) * 1e6).round() as u64)
    }
}

impl External {
    /// Reads every source to its end (with `follow`, on until `stop`); returns the end
    /// of the last window's data, µs from the origin.
    pub async fn watch(
        &self,
        monitor: &mut Monitor,
        follow: bool,
        stop: &CancellationToken,
        say: &dyn Fn(Heard),
    ) -> Result<u64> {
        let http = client::http_client(&Timeouts::default(), false);
        let mut clock = Clock {
            origin_s: None,
            step_s: self.step_s,
        };
        let mut polled_to = None;
        if let Some(p) = &self.prometheus {
            say(Heard::Origin(clock.start_at(p.start_s)));
            let to = p.end_s.unwrap_or_else(|| now_s() - SETTLE.as_secs_f64());
            p.read(&http, monitor, &clock, (p.start_s, to), say).await?;
            // Following goes on from the last point on the query's grid.
            polled_to = Some(last_on_grid(p.start_s, to, self.step_s));
        }
        let mut lines = match &self.log {
            Some(l) => Some(Lines::open(l.path.as_deref(), follow, stop.clone())?),
            None => None,
        };
        let mut last_log_us = 0;
        let mut skipped = Skipped::default();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while follow || lines.is_some() {
            tokio::select! {
                line = next_line(&mut lines) => match line {
                    Some(line) => {
                        let log = self.log.as_ref().expect("lines come from the log");
                        match feed_log(monitor, &log.fields, &mut clock, &line.text, say) {
                            Ok(us) => last_log_us = last_log_us.max(us.unwrap_or(0)),
                            Err(why) => skipped.add(line.number, &why),
                        }
                    }
                    None => lines = None,
                },
                _ = tick.tick(), if follow => {
                    // A query that fails while following (a restart, a blip) is tried
                    // again at the next tick, from where the last one got to.
                    if let Err(e) = self.poll(&http, monitor, &clock, &mut polled_to, say).await {
                        say(Heard::Retrying(format!("{e:#}")));
                    }
                    if let Some(now) = clock.us_since(now_s() - SETTLE.as_secs_f64()) {
                        monitor.advance(now).into_iter().for_each(|c| say(Heard::Change(c)));
                    }
                }
                _ = stop.cancelled() => break,
            }
        }
        skipped.report(say);
        let prom_end = polled_to.and_then(|to| clock.us_since(to)).unwrap_or(0);
        Ok(if follow {
            clock.us_since(now_s()).unwrap_or(0)
        } else {
            prom_end.max(last_log_us)
        })
    }

    /// While following: the points that have come since the last poll.
    async fn poll(
        &self,
        http: &HttpClient,
        monitor: &mut Monitor,
        clock: &Clock,
        polled_to: &mut Option<f64>,
        say: &dyn Fn(Heard),
    ) -> Result<()> {
        let (Some(p), Some(from)) = (&self.prometheus, *polled_to) else {
            return Ok(());
        };
        let to = now_s() - SETTLE.as_secs_f64();
        let next = from + self.step_s;
        if to < next {
            return Ok(());
        }
        // On the grid of the first query, so every window is read once.
        let last = last_on_grid(next, to, self.step_s);
        p.read(http, monitor, clock, (next, last), say).await?;
        *polled_to = Some(last);
        Ok(())
    }
}

/// The last point of the grid `from + k·step` at or before `to`.
fn last_on_grid(from: f64, to: f64, step: f64) -> f64 {
    from + ((to - from) / step).floor() * step
}

async fn next_line(lines: &mut Option<Lines>) -> Option<super::lines::Line> {
    match lines {
        Some(lines) => lines.next().await,
        None => std::future::pending().await,
    }
}

/// Log lines left out, and why the first was.
#[derive(Default)]
struct Skipped {
    count: u64,
    first: Option<String>,
}

impl Skipped {
    fn add(&mut self, line: u64, why: &LineError) {
        self.count += 1;
        self.first
            .get_or_insert_with(|| format!("line {line}: {why}"));
    }

    fn report(&self, say: &dyn Fn(Heard)) {
        if let Some(first) = &self.first {
            say(Heard::Note(format!(
                "{} log line(s) left out (the first, {first})",
                self.count
            )));
        }
    }
}

/// One log line into the windows; the line's time in µs from the origin (none for a
/// line from before the origin).
fn feed_log(
    monitor: &mut Monitor,
    fields: &LogFields,
    clock: &mut Clock,
    text: &str,
    say: &dyn Fn(Heard),
) -> Result<Option<u64>, LineError> {
    let LogSample {
        done_unix_us,
        failed,
        values,
    } = fields.read(text)?;
    let unix_s = done_unix_us as f64 / 1e6;
    if clock.origin_s.is_none() {
        say(Heard::Origin(clock.start_at(unix_s)));
    }
    let Some(us) = clock.us_since(unix_s) else {
        return Ok(None);
    };
    monitor.observe_sample(us, "log", failed, &values);
    monitor
        .advance(us)
        .into_iter()
        .for_each(|c| say(Heard::Change(c)));
    Ok(Some(us))
}

impl PromSource {
    /// Every query's points in `[from, to]` judged as windows ending at their times.
    async fn read(
        &self,
        http: &HttpClient,
        monitor: &mut Monitor,
        clock: &Clock,
        (from, to): (f64, f64),
        say: &dyn Fn(Heard),
    ) -> Result<()> {
        let step = monitor.plan().step.as_secs_f64();
        for (name, promql) in &self.queries {
            let range = query::Range {
                base: &self.base,
                query: promql,
                step_s: step,
            };
            let answer = query::range(http, range, (from, to)).await?;
            for series in answer {
                let group = match series.group().as_str() {
                    "all" => "prometheus".to_owned(),
                    labels => format!("prometheus{labels}"),
                };
                for (t, value) in series.points {
                    let Some(us) = clock.us_since(t) else {
                        continue;
                    };
                    let point = Observed {
                        end_s: us as f64 / 1e6,
                        count: 0,
                        value,
                        sd: None,
                    };
                    if let Some(change) =
                        monitor.observe_point(name, &group, ValueUnit::OfQuery, point)
                    {
                        say(Heard::Change(change));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A Unix time as RFC 3339 (to the second), for the user.
pub fn rfc3339(unix_s: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_s as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{unix_s} (Unix)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_named_only_by_a_plain_name() {
        assert_eq!(
            name_query("ttft.p95=histogram_quantile(0.95, x)"),
            ("ttft.p95".into(), "histogram_quantile(0.95, x)".into())
        );
        let q = r#"rate(x{job="a"}[1m])"#;
        assert_eq!(name_query(q), (q.into(), q.into()));
    }

    #[test]
    fn times_read_as_rfc3339_unix_or_back_from_now() {
        assert_eq!(parse_time("2026-12-02T05:00:00Z", 0.0), Ok(1_796_187_600.0));
        assert_eq!(parse_time("1796187600.5", 0.0), Ok(1_796_187_600.5));
        assert_eq!(parse_time("15m", 10_000.0), Ok(9_100.0));
        assert!(parse_time("soon", 0.0).is_err());
    }
}
