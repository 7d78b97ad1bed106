//! SLO-as-code: thresholds written in a `ScaleSpec`'s `sloThresholds`, judged with
//! one-sided confidence bounds so that a verdict says what the data prove.
//!
//! A verdict is `pass` when the bound at the configured confidence clears the
//! threshold, `fail` when the bound is on the wrong side, and `not_proven` otherwise —
//! with how many more samples would decide it if the observed share held. Percentile
//! SLOs are shares too (`p99 <= 350ms` ⇔ at most 1 % take longer than 350 ms), so both
//! kinds use exact binomial bounds ([`stats`]).

mod judge;
pub mod junit;
pub mod rules;
pub mod stats;
pub mod streaming;
pub mod unit;

use std::time::Duration;
pub use unit::ValueUnit;

use serde::{Deserialize, Serialize};

use crate::metrics::Aggregator;
use crate::spec::Problems;
pub use crate::spec::slo::{Kind, Metric};
use crate::spec::slo::{Limit, Percentile, Preset, SloEntry, SloThresholds};
use crate::spec::values::Dur;

/// The source document's redlines (DESIGN.md, "Numbers the source document names").
/// "Token-level P99 latency < 3200 ms" is read as the P99 of a whole generation (E2E):
/// no single token's latency comes near 3.2 s.
const REDLINES: &[(&str, &str)] = &[
    ("pass_rate", ">= 99.995%"),
    ("ttft.p99", "<= 350ms"),
    ("availability", ">= 99.999%"),
    ("e2e.p99", "< 3200ms"),
    ("recall_at_k", ">= 82%"),
    ("tool_success", ">= 99.2%"),
    ("kv_cache_hit_rate", ">= 89%"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Op {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

impl Op {
    fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Op::Lt => value < threshold,
            Op::Le => value <= threshold,
            Op::Gt => value > threshold,
            Op::Ge => value >= threshold,
        }
    }

    fn upper(self) -> bool {
        matches!(self, Op::Lt | Op::Le)
    }
}

/// One SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// `ttft.p99`, `pass_rate`, `error_rate{kind=timeout}`.
    pub name: String,
    metric: Metric,
    /// The failure kind an `error_rate` counts (all failures when none).
    error_kind: Option<String>,
    /// The percentile of a latency SLO, as a fraction (0.99).
    quantile: Option<f64>,
    pub op: Op,
    /// In the metric's base unit: milliseconds, a fraction, tokens per second.
    pub threshold: f64,
    /// As written: `<= 350ms`.
    pub expression: String,
    /// Judged window by window rather than over the whole run: `<= 800ms over 30s
    /// for 3 windows`.
    pub window: Option<Windowed>,
}

/// The windows of a windowed SLO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Windowed {
    pub length: Duration,
    /// Consecutive windows past the limit that make a violation.
    pub windows: u32,
}

impl Slo {
    /// The streaming monitor's rule for a windowed SLO: windows of its length closing
    /// every `step` when `step` divides it, else back to back.
    pub fn windowed_threshold(&self, step: Duration) -> Option<streaming::WindowedThreshold> {
        let w = self.window?;
        let series = match self.metric {
            Metric::ErrorRate => streaming::series::Series::ErrorRate,
            metric => streaming::series::Series::Latency(
                windowed_quantity(metric)?,
                streaming::series::Stat::Percentile(self.quantile? * 100.0),
            ),
        };
        let divides = step <= w.length && w.length.as_millis() % step.as_millis().max(1) == 0;
        Some(streaming::WindowedThreshold {
            slo: self.name.clone(),
            series,
            rule: streaming::ThresholdRule {
                limit: self.threshold,
                inclusive: self.op == Op::Le,
                windows: w.windows,
            },
            window: w.length,
            step: if divides { step } else { w.length },
        })
    }
}

/// The gate: every SLO of a spec, and how to judge them.
#[derive(Debug, Clone, PartialEq)]
pub struct SloSet {
    pub slos: Vec<Slo>,
    /// Confidence of the one-sided bounds (default 0.95).
    pub confidence: f64,
    /// Stop the run once a breach is certain at that confidence.
    pub abort_on_fail: bool,
    /// How long into the run before breaches may abort it.
    pub delay: Duration,
}

impl SloSet {
    /// The gate `sloThresholds` sets: its preset's SLOs, then those written, which
    /// override the preset's of the same name. Problems go to `problems`, each with
    /// its field path.
    pub fn from_spec(thresholds: &SloThresholds, problems: &mut Problems) -> Option<SloSet> {
        let base = "spec.sloThresholds";
        let before = problems.count();
        for problem in &thresholds.problems {
            problems.push(problem.clone().under(base));
        }
        let preset = thresholds.preset.map(preset_entries).unwrap_or_default();
        let mut slos: Vec<Slo> = Vec::new();
        for entry in preset.iter().chain(&thresholds.entries) {
            for limit in &entry.limits {
                let path = match &limit.percentile {
                    Some(p) => format!("{base}.{}.{}", entry.key, p.written),
                    None => format!("{base}.{}", entry.key),
                };
                if let Some(slo) = slo_of(entry, limit, &path, problems) {
                    slos.retain(|earlier| earlier.name != slo.name);
                    slos.push(slo);
                }
            }
        }
        if problems.count() == before && slos.is_empty() {
            problems.add(
                base,
                "sets no SLO".into(),
                Some("add e.g. `ttft: { p99: \"<= 350ms\" }` or `preset: redlines`".into()),
            );
        }
        (problems.count() == before).then(|| SloSet {
            slos,
            confidence: thresholds.confidence.unwrap_or(0.95),
            abort_on_fail: thresholds.abort_on_fail.unwrap_or(false),
            delay: thresholds.delay.unwrap_or(Duration::ZERO),
        })
    }
}

/// A preset's SLOs, as the entries a spec would write.
fn preset_entries(preset: Preset) -> Vec<SloEntry> {
    let written = match preset {
        Preset::Redlines => REDLINES,
    };
    written
        .iter()
        .map(|(name, expression)| {
            let (key, percentile) = match name.split_once('.') {
                Some((metric, stat)) => (metric, Some(stat)),
                None => (*name, None),
            };
            let percentile = percentile.map(|stat| Percentile {
                written: stat.to_owned(),
                quantile: stat[1..].parse::<f64>().expect("a preset's percentile") / 100.0,
            });
            SloEntry {
                key: key.to_owned(),
                metric: Metric::from_name(key).expect("a preset names metrics"),
                error_kind: None,
                limits: vec![Limit {
                    percentile,
                    expression: (*expression).to_owned(),
                }],
            }
        })
        .collect()
}

/// One SLO: a limit's comparison (and window), checked against its metric.
fn slo_of(entry: &SloEntry, limit: &Limit, path: &str, problems: &mut Problems) -> Option<Slo> {
    let name = match &limit.percentile {
        Some(p) => format!("{}.{}", entry.key, p.written),
        None => entry.key.clone(),
    };
    let kind = entry.metric.kind();
    let (text, window) = match split_window(&limit.expression) {
        Ok(split) => split,
        Err(message) => {
            problems.add(
                path,
                message,
                Some("write e.g. `\"<= 800ms over 30s for 3 windows\"`".into()),
            );
            return None;
        }
    };
    let windowable = windowed_quantity(entry.metric).is_some() || entry.metric == Metric::ErrorRate;
    if window.is_some() && (!windowable || entry.error_kind.is_some()) {
        problems.add(
            path,
            format!("`{}` cannot be judged over windows", entry.metric.name()),
            Some(
                "windowed forms are for ttft, itl, tpot, e2e and error_rate; judge this one over the whole run (drop `over …`)"
                    .into(),
            ),
        );
        return None;
    }
    let (op, threshold) = match parse_expression(text, kind) {
        Ok(parsed) => parsed,
        Err(message) => {
            problems.add(path, message, Some(kind.example().into()));
            return None;
        }
    };
    let direction_ok = match kind {
        Kind::Latency | Kind::BadShare | Kind::Tokens | Kind::RequestShare => op.upper(),
        Kind::GoodShare | Kind::Throughput => !op.upper(),
    };
    if !direction_ok {
        problems.add(
            path,
            format!(
                "`{text}` points the wrong way for `{}`",
                entry.metric.name()
            ),
            Some(kind.example().into()),
        );
        return None;
    }
    Some(Slo {
        name,
        metric: entry.metric,
        error_kind: entry.error_kind.clone(),
        quantile: limit.percentile.as_ref().map(|p| p.quantile),
        op,
        threshold,
        expression: match window {
            Some(w) => format!("{} over {}", text.trim(), describe_window(w)),
            None => text.trim().to_owned(),
        },
        window,
    })
}

/// The per-request quantity a windowed SLO of `metric` watches; none for the metrics
/// that are judged over the whole run only.
fn windowed_quantity(metric: Metric) -> Option<streaming::series::Quantity> {
    use streaming::series::Quantity;
    match metric {
        Metric::Ttft => Some(Quantity::Ttft),
        Metric::TimeToFirstAnswer => Some(Quantity::TimeToFirstAnswer),
        Metric::Itl => Some(Quantity::Itl),
        Metric::Tpot => Some(Quantity::Tpot),
        Metric::E2e => Some(Quantity::E2e),
        _ => None,
    }
}

/// `<= 350ms` → (≤, 350.0); `>= 99.995%` → (≥, 0.99995); `>= 900 tok/s` → (≥, 900.0).
fn parse_expression(text: &str, kind: Kind) -> Result<(Op, f64), String> {
    let text = text.trim();
    let (op, rest) = [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
        .iter()
        .find_map(|(s, op)| text.strip_prefix(s).map(|rest| (*op, rest.trim())))
        .ok_or_else(|| format!("`{text}` does not start with <, <=, > or >="))?;
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, unit) = rest.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` has no number after the comparison"))?;
    let unit = unit.trim();
    let value = match (kind, unit) {
        (Kind::Latency, "us") => number / 1e3,
        (Kind::Latency, "ms") => number,
        (Kind::Latency, "s") => number * 1e3,
        (Kind::Latency, _) => return Err(format!("`{text}` needs a unit: us, ms or s")),
        (Kind::GoodShare | Kind::BadShare | Kind::RequestShare, "%") => number / 100.0,
        (Kind::GoodShare | Kind::BadShare | Kind::RequestShare, "") => number,
        (Kind::GoodShare | Kind::BadShare | Kind::RequestShare, _) => {
            return Err(format!("`{text}`: a share is a percentage or a fraction"));
        }
        (Kind::Throughput, "tok/s" | "") => number,
        (Kind::Throughput, _) => return Err(format!("`{text}`: throughput is in tok/s")),
        (Kind::Tokens, "tokens" | "tok" | "") => number,
        (Kind::Tokens, _) => return Err(format!("`{text}`: a count of tokens")),
    };
    let share = matches!(kind, Kind::GoodShare | Kind::BadShare | Kind::RequestShare);
    if share && !(0.0..=1.0).contains(&value) {
        return Err(format!("`{text}` is not a share between 0% and 100%"));
    }
    Ok((op, value))
}

/// `<= 800ms over 30s for 3 windows` → (`<= 800ms`, 30 s × 3); `<= 1% over 1m` →
/// one window of a minute; an expression without `over` is judged over the whole run.
fn split_window(text: &str) -> Result<(&str, Option<Windowed>), String> {
    let Some((expression, window)) = text.split_once(" over ") else {
        return Ok((text, None));
    };
    let (length, windows) = match window.trim().split_once(" for ") {
        Some((length, count)) => {
            let count = count.trim();
            let n = count
                .strip_suffix("windows")
                .or_else(|| count.strip_suffix("window"))
                .and_then(|n| n.trim().parse::<u32>().ok())
                .filter(|n| *n >= 1)
                .ok_or_else(|| format!("`for {count}` is not a number of windows"))?;
            (length, n)
        }
        None => (window, 1),
    };
    let length = Dur::parse(length.trim())
        .ok()
        .filter(|d| d.0 >= Duration::from_secs(1))
        .ok_or_else(|| format!("`over {}` is not a window of at least 1s", length.trim()))?;
    Ok((
        expression,
        Some(Windowed {
            length: length.0,
            windows,
        }),
    ))
}

/// `30s for 3 windows`, as the expression shows it again.
fn describe_window(w: Windowed) -> String {
    let length = Dur(w.length).to_string();
    match w.windows {
        1 => length,
        n => format!("{length} for {n} windows"),
    }
}

/// What judging an SLO found: met, missed, or not enough data to tell either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    Pass,
    Fail,
    NotProven,
}

/// The judgement of one SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub slo: String,
    pub expression: String,
    pub outcome: Judgement,
    /// The observed value, in `unit`.
    pub observed: Option<f64>,
    /// The one-sided confidence bound on the side that must clear the threshold.
    pub bound: Option<f64>,
    pub unit: ValueUnit,
    pub confidence: f64,
    /// Independent samples judged (requests, gaps, or seconds for throughput).
    pub samples: u64,
    /// For `not_proven`: further samples that would decide it if the observed share held.
    pub samples_to_decide: Option<u64>,
    pub note: Option<String>,
}

impl SloSet {
    /// Every SLO against the measured requests; windowed SLOs against the windows of
    /// `drift`.
    pub fn evaluate(
        &self,
        agg: &Aggregator,
        drift: Option<&streaming::DriftSummary>,
    ) -> Vec<Verdict> {
        self.evaluate_with_server(agg, None, drift)
    }

    /// Every SLO, with the prefix-cache hit rate scraped from the server's metrics for
    /// `kv_cache_hit_rate` when the server reports no per-request figures.
    pub fn evaluate_with_server(
        &self,
        agg: &Aggregator,
        scraped_hit_rate: Option<f64>,
        drift: Option<&streaming::DriftSummary>,
    ) -> Vec<Verdict> {
        self.slos
            .iter()
            .map(|slo| {
                if slo.window.is_some() {
                    return judge::windowed(slo, self.confidence, drift);
                }
                let mut verdict = judge::judge(slo, self.confidence, agg, scraped_hit_rate);
                // A figure made of token counts says where the counts came from, when
                // not all were the server's own usage.
                if slo.metric.counts_tokens()
                    && let Some(sources) = crate::record::describe_sources(&agg.token_sources)
                {
                    verdict.note = Some(match verdict.note.take() {
                        Some(note) => format!("{note}; output counts: {sources}"),
                        None => format!("output counts: {sources}"),
                    });
                }
                verdict
            })
            .collect()
    }

    /// SLOs already certain to fail: what `abort_on_fail` stops a run for.
    /// Windowed SLOs are the streaming monitor's to stop a run for (`on_violation`).
    pub fn certain_breaches(&self, agg: &Aggregator) -> Vec<Verdict> {
        self.evaluate(agg, None)
            .into_iter()
            .zip(&self.slos)
            .filter(|(v, slo)| v.outcome == Judgement::Fail && slo.window.is_none())
            .map(|(v, _)| v)
            .collect()
    }
}

/// Why and when a run was stopped early: by `abort_on_fail`, or by a streaming SLO's
/// `on_violation: [abort]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Aborted {
    /// Seconds into the run.
    pub at_s: f64,
    /// The SLOs that were already certain to fail (`abort_on_fail`).
    pub breaches: Vec<Verdict>,
    /// The streaming SLO episode whose opening stopped the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<streaming::Episode>,
}

/// Whether the verdicts let a release through: every one passes, or (unless `strict`)
/// is at worst not proven.
pub fn gate_passes(verdicts: &[Verdict], strict: bool) -> bool {
    verdicts.iter().all(|v| match v.outcome {
        Judgement::Pass => true,
        Judgement::NotProven => !strict,
        Judgement::Fail => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FailStage, Outcome as RecordOutcome, Phase, Record};

    fn set(yaml: &str) -> SloSet {
        let thresholds: SloThresholds = yaml_serde::from_str(yaml).unwrap();
        let mut problems = Problems::new();
        let set = SloSet::from_spec(&thresholds, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        set.unwrap()
    }

    fn ok(seq: u64, ttft_ms: u64) -> Record {
        let mut r = Record::unsent(seq, 0, Phase::Measure, 0);
        r.sent_us = Some(0);
        r.first_token_us = Some(ttft_ms * 1_000);
        r.last_byte_us = Some(ttft_ms * 1_000 + 1_000);
        r.output_tokens = Some(2);
        r
    }

    #[test]
    fn windowed_forms_parse_and_say_what_they_cannot_be() {
        let s = set(
            "ttft: { p99: \"<= 800ms over 30s for 3 windows\" }\nerror_rate: \"< 1% over 1m\"\n",
        );
        let ttft = &s.slos[0];
        assert_eq!(
            (ttft.threshold, ttft.window, ttft.expression.as_str()),
            (
                800.0,
                Some(Windowed {
                    length: Duration::from_secs(30),
                    windows: 3
                }),
                "<= 800ms over 30s for 3 windows"
            )
        );
        let t = ttft.windowed_threshold(Duration::from_secs(10)).unwrap();
        assert_eq!(
            (t.step, t.rule.windows, t.rule.inclusive),
            (Duration::from_secs(10), 3, true)
        );
        // A step that does not divide the window: windows back to back.
        let t = ttft.windowed_threshold(Duration::from_secs(7)).unwrap();
        assert_eq!(t.step, Duration::from_secs(30));
        let errors = s.slos[1]
            .windowed_threshold(Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (
                errors.series,
                errors.window,
                errors.rule.windows,
                errors.rule.limit
            ),
            (
                streaming::series::Series::ErrorRate,
                Duration::from_secs(60),
                1,
                0.01
            )
        );
        for (yaml, message) in [
            (
                "pass_rate: \">= 99% over 30s\"",
                "`pass_rate` cannot be judged over windows",
            ),
            (
                "ttft: { p99: \"<= 8ms over 30x\" }",
                "`over 30x` is not a window of at least 1s",
            ),
            (
                "ttft: { p99: \"<= 8ms over 30s for three windows\" }",
                "`for three windows` is not a number of windows",
            ),
            (
                "error_rate{kind=timeout}: \"< 1% over 30s\"",
                "`error_rate` cannot be judged over windows",
            ),
        ] {
            let thresholds: SloThresholds = yaml_serde::from_str(yaml).unwrap();
            let mut problems = Problems::new();
            assert!(
                SloSet::from_spec(&thresholds, &mut problems).is_none(),
                "{yaml}"
            );
            assert!(
                format!("{problems:?}").contains(message),
                "{yaml}: {problems:?}"
            );
        }
    }

    /// TTFT 100 ms for a minute, then 1 s: `p99 <= 800ms over 10s for 3 windows` fails
    /// from the third window past the change, and the verdict says so.
    #[test]
    fn a_windowed_slo_fails_by_its_windows() {
        let s = set("ttft: { p99: \"<= 800ms over 10s for 3 windows\" }\n");
        let plan = streaming::StreamingPlan::build(None, Some(&s), &mut Problems::new()).unwrap();
        let mut monitor = streaming::Monitor::new(plan);
        let mut agg = Aggregator::new(None);
        for i in 0..900u64 {
            // One request every 100 ms, from 2 s to 92 s.
            let done_ms = i * 100 + 2_000;
            let ttft_ms = if done_ms < 60_000 { 100 } else { 1_000 };
            let mut r = ok(i, ttft_ms);
            r.sent_us = Some(done_ms * 1_000 - ttft_ms * 1_000 - 1_000);
            r.first_token_us = Some(done_ms * 1_000 - 1_000);
            r.last_byte_us = Some(done_ms * 1_000);
            monitor.observe(&r);
            monitor.advance(r.done_us());
            agg.add(&r);
        }
        let (drift, _) = monitor.finish(90_000_000);
        assert_eq!(drift.episodes.len(), 1, "{:?}", drift.episodes);
        let e = &drift.episodes[0];
        assert_eq!(
            (e.opened_s, e.detector.as_str(), e.series.as_str()),
            (90.0, "threshold", "ttft.p99")
        );
        let v = &s.evaluate(&agg, Some(&drift))[0];
        assert_eq!(v.outcome, Judgement::Fail, "{v:?}");
        assert_eq!(v.samples, 9);
        assert!(
            v.note
                .as_deref()
                .unwrap()
                .starts_with("1 violation (9 windows judged); the first from 90s"),
            "{v:?}"
        );
        assert_eq!(s.evaluate(&agg, None)[0].outcome, Judgement::NotProven);
    }

    #[test]
    fn the_preset_expands_and_the_spec_overrides_it() {
        let s = set("preset: redlines\nttft: { p99: \"<= 500ms\" }\n");
        let names: Vec<&str> = s.slos.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "pass_rate",
                "availability",
                "e2e.p99",
                "recall_at_k",
                "tool_success",
                "kv_cache_hit_rate",
                "ttft.p99"
            ]
        );
        let ttft = s.slos.iter().find(|s| s.name == "ttft.p99").unwrap();
        assert_eq!((ttft.op, ttft.threshold), (Op::Le, 500.0));
        let pass = s.slos.iter().find(|s| s.name == "pass_rate").unwrap();
        assert!((pass.threshold - 0.99995).abs() < 1e-12);
    }

    #[test]
    fn verdicts_follow_the_bounds_not_the_point_estimate() {
        let s = set(
            "pass_rate: \">= 99.995%\"\nttft: { p99: \"<= 350ms\", p50: \"<= 100ms\" }\nerror_rate{kind=http_5xx}: \"<= 1%\"\n",
        );
        let mut agg = Aggregator::default();
        // 1,000 clean requests: TTFT 1..=1000 ms spread evenly, so p50 ≈ 500 ms.
        for i in 0..1_000 {
            agg.add(&ok(i, i % 1_000 + 1));
        }
        let v = s.evaluate(&agg, None);
        let by = |name: &str| v.iter().find(|v| v.slo == name).unwrap().clone();
        let pass = by("pass_rate");
        assert_eq!(pass.outcome, Judgement::NotProven);
        // ≈ 59,914 needed in all at 95 %.
        let more = pass.samples_to_decide.unwrap();
        assert!((58_900..=58_930).contains(&more), "{more}");
        // Over 60 % of requests above 350 ms: certain to fail, and p50 too.
        assert_eq!(by("ttft.p99").outcome, Judgement::Fail);
        assert_eq!(by("ttft.p50").outcome, Judgement::Fail);
        // No 5xx in 1,000: the upper bound (0.3 %) clears 1 %.
        assert_eq!(by("error_rate{kind=http_5xx}").outcome, Judgement::Pass);
        // A 5xx in every tenth request is certain to break it.
        for i in 0..100 {
            let mut failed = Record::unsent(2_000 + i, 0, Phase::Measure, 0);
            failed.fail(
                RecordOutcome::Error,
                FailStage::FirstByte,
                "http_5xx",
                "HTTP 503",
            );
            agg.add(&failed);
        }
        assert_eq!(
            s.evaluate(&agg, None)
                .iter()
                .find(|v| v.slo == "error_rate{kind=http_5xx}")
                .unwrap()
                .outcome,
            Judgement::Fail
        );
    }

    /// The phases of a model that reasons are judged per percentile, the times in ms
    /// and the reasoning in tokens.
    #[test]
    fn reasoning_is_judged_by_its_times_and_its_tokens() {
        let s = set(
            "time_to_first_answer: { p90: \"<= 400ms\" }\nreasoning_time: { p50: \"<= 250ms\" }\nreasoning_tokens: { p95: \"<= 100 tokens\" }\nreasoning_share: { p50: \"<= 70%\", p90: \"<= 60%\" }\n",
        );
        let mut agg = Aggregator::default();
        // 500 requests: 40 ms to the first (reasoning) token, 200 ms of thought, then
        // the answer; 50 reasoning tokens each, and every tenth thinks 150.
        for i in 0..500 {
            let mut r = ok(i, 40);
            r.first_reasoning_us = Some(40_000);
            r.first_answer_us = Some(240_000);
            r.last_byte_us = Some(300_000);
            r.output_tokens = Some(200);
            r.reasoning_tokens = Some(if i % 10 == 0 { 150 } else { 50 });
            agg.add(&r);
        }
        let v = s.evaluate(&agg, None);
        let by = |name: &str| v.iter().find(|v| v.slo == name).unwrap().clone();
        let answer = by("time_to_first_answer.p90");
        assert_eq!(answer.outcome, Judgement::Pass);
        // HDR keeps three significant digits.
        assert!(
            (answer.observed.unwrap() - 240.0).abs() < 0.25,
            "{:?}",
            answer.observed
        );
        assert_eq!(by("reasoning_time.p50").outcome, Judgement::Pass);
        // A tenth over 100 tokens: the p95 is certain to break it.
        let tokens = by("reasoning_tokens.p95");
        assert_eq!(
            (tokens.outcome, tokens.unit),
            (Judgement::Fail, ValueUnit::Tokens)
        );
        assert_eq!(tokens.observed, Some(150.0));
        // 200 ms of a 300 ms request's E2E is two thirds of it, every time.
        let half = by("reasoning_share.p50");
        assert_eq!(
            (half.outcome, half.unit),
            (Judgement::Pass, ValueUnit::Share)
        );
        assert!(
            (half.observed.unwrap() - 2.0 / 3.0).abs() < 1e-3,
            "{half:?}"
        );
        assert_eq!(by("reasoning_share.p90").outcome, Judgement::Fail);
        let unit = parse_expression("<= 2 s", Kind::Tokens).unwrap_err();
        assert!(unit.contains("a count of tokens"), "{unit}");
    }

    /// 13 samples cannot bound a p99, but 13 of 13 over the threshold prove a breach:
    /// a FAIL beside "too few samples to bound a p99" read as a contradiction.
    #[test]
    fn a_breach_proven_by_few_samples_says_so() {
        let s = set("ttft: { p99: \"<= 10ms\" }\n");
        let mut agg = Aggregator::default();
        for i in 0..13 {
            agg.add(&ok(i, 50));
        }
        let v = &s.evaluate(&agg, None)[0];
        assert_eq!((v.outcome, v.bound), (Judgement::Fail, None));
        assert_eq!(
            v.note.as_deref(),
            Some(
                "13 of 13 samples over the threshold prove the breach; too few to bound the p99 itself"
            )
        );
    }

    #[test]
    fn strict_fails_what_is_not_proven() {
        let v = |outcome| Verdict {
            slo: "x".into(),
            expression: String::new(),
            outcome,
            observed: None,
            bound: None,
            unit: ValueUnit::Percent,
            confidence: 0.95,
            samples: 0,
            samples_to_decide: None,
            note: None,
        };
        let verdicts = [v(Judgement::Pass), v(Judgement::NotProven)];
        assert!(gate_passes(&verdicts, false));
        assert!(!gate_passes(&verdicts, true));
        assert!(!gate_passes(&[v(Judgement::Fail)], false));
    }
}
