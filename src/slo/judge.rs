//! One judge per kind of metric: latency percentiles, shares of good or bad events,
//! figures judged on their observed value alone, and throughput over seconds. Each
//! gives a verdict with its one-sided bound at the set's confidence, or `not_proven`
//! with what would decide it.

use hdrhistogram::Histogram;

use super::stats::{self, Decision};
use super::{Judgement, Kind, Metric, Op, Slo, ValueUnit, Verdict};
use crate::metrics::Aggregator;

/// Judges one SLO over the run's statistics.
pub(super) fn judge(
    slo: &Slo,
    confidence: f64,
    agg: &Aggregator,
    scraped_hit_rate: Option<f64>,
) -> Verdict {
    let j = Judging { slo, confidence };
    let (d, m) = (&agg.dist, &agg.measured);
    let attempted = m.attempted();
    match slo.metric {
        Metric::Ttft => j.latency(&d.ttft),
        Metric::TtftFromIntended => j.latency(&d.ttft_intended),
        Metric::TimeToSecondToken => j.latency(&d.time_to_second_token),
        Metric::TimeToFirstAnswer => j.latency(&d.time_to_first_answer),
        Metric::TimeToFirstReasoning => j.latency(&d.time_to_first_reasoning),
        Metric::ReasoningTime => j.latency(&d.reasoning),
        Metric::ReasoningTokens => j.percentile(&d.reasoning_tokens, 1.0, ValueUnit::Tokens),
        // Kept in ten-thousandths of the request's E2E.
        Metric::ReasoningShare => j.percentile(&d.reasoning_share, 1e4, ValueUnit::Share),
        Metric::Itl => j.latency(&d.itl),
        Metric::Tpot => j.latency(&d.tpot),
        Metric::E2e => j.latency(&d.e2e),
        Metric::E2eFromIntended => j.latency(&d.e2e_intended),
        Metric::PassRate => j.bounded_share(Share {
            bad: attempted - m.ok,
            n: attempted,
        }),
        Metric::Availability => j.bounded_share(Share {
            bad: agg.unavailable,
            n: attempted,
        }),
        Metric::Goodput if agg.goodput_slo.is_none() => j.no_data(
            ValueUnit::Percent,
            "the InferenceSpec sets no `goodput` per-request SLOs",
        ),
        Metric::Goodput => j.bounded_share(Share {
            bad: attempted - agg.good,
            n: attempted,
        }),
        Metric::ErrorRate => j.bounded_share(Share {
            bad: j.errors(agg),
            n: attempted,
        }),
        Metric::OutputThroughput => j.throughput(agg),
        Metric::KvCacheHitRate => j.kv_cache_hit_rate(agg, scraped_hit_rate),
        Metric::ToolSuccess => match agg.tool_calls() {
            (0, _) => j.no_data(
                ValueUnit::Percent,
                "not measured: this run has no tool calls",
            ),
            (calls, ok) => j.bounded_share(Share {
                bad: calls - ok,
                n: calls,
            }),
        },
        Metric::RecallAtK => j.recall(agg),
        Metric::Accuracy | Metric::Unparsed if agg.quality.graded() == 0 => j.no_data(
            ValueUnit::Percent,
            "not measured: no graded answers (a dataset with a `grader`)",
        ),
        Metric::Accuracy => j.bounded_share(Share {
            bad: agg.quality.wrong + agg.quality.unparsed,
            n: agg.quality.graded(),
        }),
        Metric::Unparsed => j.bounded_share(Share {
            bad: agg.quality.unparsed,
            n: agg.quality.graded(),
        }),
    }
}

/// Judges a windowed SLO by the windows the streaming monitor closed: failed when
/// any of its episodes opened, passed when windows were judged and none did.
pub(super) fn windowed(
    slo: &Slo,
    confidence: f64,
    drift: Option<&super::streaming::DriftSummary>,
) -> Verdict {
    let j = Judging { slo, confidence };
    let unit = if slo.metric == Metric::ErrorRate {
        ValueUnit::Percent
    } else {
        ValueUnit::Ms
    };
    let scale = if unit == ValueUnit::Percent {
        100.0
    } else {
        1.0
    };
    let ours = |series: &str, detector: &str| series == slo.name && detector == "threshold";
    let Some(drift) = drift else {
        return j.no_data(unit, "judged window by window, and no windows were kept");
    };
    let judged: Vec<f64> = drift
        .tracks
        .iter()
        .filter(|t| ours(&t.series, &t.detector))
        .flat_map(|t| t.points.iter().filter_map(|p| p.value))
        .collect();
    let worst = judged
        .iter()
        .copied()
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let episodes: Vec<&super::streaming::Episode> = drift
        .episodes
        .iter()
        .filter(|e| ours(&e.series, &e.detector))
        .collect();
    let Some(worst) = worst else {
        return j.no_data(
            unit,
            "no window had enough requests to judge (`min_samples`)",
        );
    };
    let (outcome, note) = match episodes.first() {
        None => (
            Judgement::Pass,
            format!("{} windows judged, none in violation", judged.len()),
        ),
        Some(first) => (
            Judgement::Fail,
            format!(
                "{} violation{} ({} windows judged); the first from {:.0}s{}",
                episodes.len(),
                if episodes.len() == 1 { "" } else { "s" },
                judged.len(),
                first.opened_s,
                first
                    .closed_s
                    .map_or(" to the end".to_owned(), |c| format!(" to {c:.0}s")),
            ),
        ),
    };
    j.verdict(
        outcome,
        Some(worst * scale),
        None,
        unit,
        judged.len() as u64,
        None,
        Some(note),
    )
}

struct Judging<'a> {
    slo: &'a Slo,
    confidence: f64,
}

/// What a share is made of: `bad` of `n` events.
struct Share {
    bad: u64,
    n: u64,
}

impl Judging<'_> {
    #[allow(clippy::too_many_arguments)]
    fn verdict(
        &self,
        outcome: Judgement,
        observed: Option<f64>,
        bound: Option<f64>,
        unit: ValueUnit,
        samples: u64,
        samples_to_decide: Option<u64>,
        note: Option<String>,
    ) -> Verdict {
        Verdict {
            slo: self.slo.name.clone(),
            expression: self.slo.expression.clone(),
            outcome,
            observed,
            bound,
            unit,
            confidence: self.confidence,
            samples,
            samples_to_decide,
            note,
        }
    }

    fn no_data(&self, unit: ValueUnit, why: &str) -> Verdict {
        self.verdict(
            Judgement::NotProven,
            None,
            None,
            unit,
            0,
            None,
            Some(why.to_owned()),
        )
    }

    /// Pass or fail on the observed value alone, for figures that are no count of
    /// independent samples (a mean recall, a share of tokens, a scraped rate).
    fn observed_only(&self, observed: f64, samples: u64, note: &str) -> Verdict {
        let outcome = if self.slo.op.holds(observed, self.slo.threshold) {
            Judgement::Pass
        } else {
            Judgement::Fail
        };
        let note = Some(note.to_owned());
        self.verdict(
            outcome,
            Some(observed * 100.0),
            None,
            ValueUnit::Percent,
            samples,
            None,
            note,
        )
    }

    /// A latency SLO: the histogram is in µs, the threshold in ms.
    fn latency(&self, h: &Histogram<u64>) -> Verdict {
        self.percentile(h, 1e3, ValueUnit::Ms)
    }

    /// A percentile SLO over a histogram holding `scale` of its values per unit of
    /// the threshold (1,000 µs a ms; a token a token).
    fn percentile(&self, h: &Histogram<u64>, scale: f64, unit: ValueUnit) -> Verdict {
        let (slo, c) = (self.slo, self.confidence);
        let n = h.len();
        if n == 0 {
            return self.no_data(unit, "no measured samples of this metric");
        }
        let q = slo.quantile.expect("percentile SLOs have a percentile");
        let threshold = (slo.threshold * scale).round() as u64;
        // Samples on the wrong side of the threshold: above it for `<=`, at or above
        // it for `<`.
        let at_or_below = |value: u64| h.count_between(0, value);
        let bad = match slo.op {
            Op::Le => n - at_or_below(threshold),
            _ => n - at_or_below(threshold.saturating_sub(1)),
        };
        let observed = h.value_at_quantile(q) as f64 / scale;
        let bound = stats::upper_rank(n, q, c)
            .map(|k| h.value_at_quantile(k as f64 / n as f64) as f64 / scale);
        let (outcome, further) = decided(bad, n, 1.0 - q, true, c);
        // Without an upper bound a pass cannot be proven; a breach still can be, from
        // the samples over the threshold, and the note says which.
        let note = bound.is_none().then(|| match outcome {
            Judgement::Fail => format!(
                "{bad} of {n} samples over the threshold prove the breach; too few to bound the p{} itself",
                q * 100.0
            ),
            _ => format!(
                "{n} samples are too few to bound a p{} at {:.0}%",
                q * 100.0,
                c * 100.0
            ),
        });
        self.verdict(outcome, Some(observed), bound, unit, n, further, note)
    }

    /// Failures the SLO counts: of its kind when it names one, else all.
    fn errors(&self, agg: &Aggregator) -> u64 {
        match &self.slo.error_kind {
            Some(kind) => agg
                .failures
                .iter()
                .filter(|((_, k), _)| k == kind)
                .map(|(_, class)| class.count)
                .sum(),
            None => agg.measured.failed(),
        }
    }

    fn bounded_share(&self, Share { bad, n }: Share) -> Verdict {
        let (slo, c) = (self.slo, self.confidence);
        if n == 0 {
            return self.no_data(ValueUnit::Percent, "no measured requests");
        }
        let share = bad as f64 / n as f64;
        let (observed, allowed, inclusive, bound) = if slo.metric.kind() == Kind::BadShare {
            let bound = stats::upper_bound(bad, n, c);
            (share, slo.threshold, slo.op == Op::Le, bound)
        } else {
            let bound = 1.0 - stats::upper_bound(bad, n, c);
            (1.0 - share, 1.0 - slo.threshold, slo.op == Op::Ge, bound)
        };
        let (outcome, further) = decided(bad, n, allowed, inclusive, c);
        let (observed, bound) = (Some(observed * 100.0), Some(bound * 100.0));
        self.verdict(
            outcome,
            observed,
            bound,
            ValueUnit::Percent,
            n,
            further,
            None,
        )
    }

    /// The share of prompt tokens the server found cached: its own per-request
    /// figures, else the rate scraped from its metrics.
    fn kv_cache_hit_rate(&self, agg: &Aggregator, scraped: Option<f64>) -> Verdict {
        let n = agg.truth_prompt_tokens;
        if n == 0 {
            let Some(rate) = scraped else {
                return self.no_data(
                    ValueUnit::Percent,
                    "the server reports no prefix-cache figures: scrape its metrics (`server_metrics: {}`)",
                );
            };
            return self.observed_only(
                rate,
                0,
                "from the server's prefix-cache counters: judged on the observed value, without a bound",
            );
        }
        let hit = agg.cached_prompt_tokens.min(n) as f64 / n as f64;
        self.observed_only(
            hit,
            n,
            "a share of prompt tokens, which are not independent samples: judged on the observed value, without a bound",
        )
    }

    fn recall(&self, agg: &Aggregator) -> Verdict {
        let Some(mean) = agg.flow.mean_recall() else {
            return self.no_data(
                ValueUnit::Percent,
                "not measured: no search step with a ground truth for its queries",
            );
        };
        self.observed_only(
            mean,
            agg.flow.recall_queries,
            "mean recall@k over the queries: judged on the observed value, without a bound",
        )
    }

    /// Mean output tokens per whole measured second, with a normal interval.
    fn throughput(&self, agg: &Aggregator) -> Verdict {
        let (slo, c) = (self.slo, self.confidence);
        let seconds = agg.measured_seconds();
        let m = seconds.len() as u64;
        if m < 2 {
            return self.no_data(
                ValueUnit::TokensPerSecond,
                "fewer than two whole measured seconds",
            );
        }
        let mean = seconds.iter().sum::<f64>() / m as f64;
        let var = seconds.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1) as f64;
        let z = stats::normal_quantile(c);
        let half = z * (var / m as f64).sqrt();
        let (lower, upper) = (mean - half, mean + half);
        let (outcome, bound) = if slo.op.holds(lower, slo.threshold) {
            (Judgement::Pass, lower)
        } else if !slo.op.holds(upper, slo.threshold) {
            (Judgement::Fail, upper)
        } else {
            (Judgement::NotProven, lower)
        };
        let further = (outcome == Judgement::NotProven && mean != slo.threshold).then(|| {
            let needed = (z * var.sqrt() / (mean - slo.threshold)).powi(2).ceil() as u64;
            needed.saturating_sub(m)
        });
        let note = "per-second output tokens over the measured window; samples are seconds";
        self.verdict(
            outcome,
            Some(mean),
            Some(bound),
            ValueUnit::TokensPerSecond,
            m,
            further,
            Some(note.into()),
        )
    }
}

/// The outcome of a share test and, when undecided, the further samples needed.
fn decided(bad: u64, n: u64, allowed: f64, inclusive: bool, c: f64) -> (Judgement, Option<u64>) {
    match stats::decide(bad, n, allowed, inclusive, c) {
        Decision::Within => (Judgement::Pass, None),
        Decision::Beyond => (Judgement::Fail, None),
        Decision::Undecided => (
            Judgement::NotProven,
            stats::trials_to_decide(bad, n, allowed, inclusive, c).map(|t| t.saturating_sub(n)),
        ),
    }
}
