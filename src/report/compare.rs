//! `redline compare`: runs side by side, each against the first (the baseline), with
//! whether each difference is beyond noise. Two tests on the per-request samples the
//! records hold (measured phase, successful requests): Mann–Whitney U (normal
//! approximation with the tie correction) for a shift of the whole distribution, and a
//! seeded percentile bootstrap (1,000 resamples, 95 %) of the difference of each
//! percentile — a difference is "beyond noise" when its interval excludes zero and it
//! is at least the smallest change called (`--min-change`, [`MIN_CHANGE`] by
//! default): two runs of one spec on one machine drift by a few percent, however many
//! samples make the drift look certain. A percentile is judged only when each run has
//! [`TAIL_SAMPLES`] samples above it (p99 wants 1,000): the bootstrap of a quantile
//! set by its last one or two samples is far narrower than the truth, and two runs of
//! one spec "differed" at p99 by a third on 60 requests. `--fail-on` rules turn it
//! into a regression gate.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Normal};

use super::Summary;
use crate::record::{MediaKind, Outcome, Phase, Record};

/// The smallest relative difference called by default: below it, "within noise"
/// however narrow the interval (runs of one spec drifted by up to 4 % here).
pub const MIN_CHANGE: f64 = 0.05;

/// Samples each run needs above a percentile for it to be judged: with fewer, the
/// percentile is one of the last few samples and its interval means little.
pub const TAIL_SAMPLES: f64 = 10.0;

/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 1000;

/// The metrics compared, each a per-request sample in ms.
pub const METRICS: [&str; 8] = [
    "ttft",
    "itl",
    "tpot",
    "e2e",
    "time_to_first_answer",
    "reasoning_time",
    "time_to_first_audio",
    "time_to_first_transcript",
];

/// The percentiles compared.
pub const STATS: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// One run: its summary and its per-request samples by metric.
pub struct Run {
    pub dir: PathBuf,
    pub summary: Summary,
    /// By [`METRICS`], in ms, sorted.
    pub samples: [Vec<f64>; METRICS.len()],
}

/// Reads a run folder (`summary.json`, `records.jsonl`).
pub fn load(dir: &Path) -> Result<Run> {
    let summary = super::read_summary(dir)?;
    let mut samples: [Vec<f64>; METRICS.len()] = Default::default();
    crate::record::read_records(&crate::folder::RunFolder::new(dir).records(), None, |r| {
        if r.outcome == Outcome::Ok && r.phase == Phase::Measure {
            for (i, value) in per_request(&r).into_iter().enumerate() {
                samples[i].extend(value);
            }
        }
    })?;
    for s in &mut samples {
        s.sort_unstable_by(f64::total_cmp);
    }
    Ok(Run {
        dir: dir.to_owned(),
        summary,
        samples,
    })
}

/// A request's TTFT, mean inter-token gap, TPOT, E2E, and for a request that
/// reasoned its time to first answer and reasoning time, ms (the gaps of one request
/// are not independent, so a request counts once; without reasoning the first answer
/// is the first token, already compared); for speech and Realtime sessions the time
/// to first audio, and a Realtime session's time to first transcript.
fn per_request(r: &Record) -> [Option<f64>; METRICS.len()] {
    let ms = |us: Option<u64>| us.map(|us| us as f64 / 1e3);
    let reasoned = r.reasoning_us().is_some();
    let spoken = r
        .media
        .as_ref()
        .filter(|m| matches!(m.kind, MediaKind::Speech | MediaKind::Realtime));
    [
        ms(r.ttft_us()),
        ms(r.itl_mean_us),
        r.tpot_us().map(|us| us / 1e3),
        ms(r.e2e_us()),
        ms(r.time_to_first_answer_us().filter(|_| reasoned)),
        ms(r.reasoning_us()),
        ms(spoken.and_then(|m| m.time_to_first_audio_us(r))),
        ms(spoken.and_then(|m| m.time_to_first_transcript_us())),
    ]
}

/// One percentile of one metric, the baseline against another run.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub metric: &'static str,
    pub stat: &'static str,
    pub base: f64,
    pub other: f64,
    /// `other / base - 1`.
    pub change: f64,
    /// The 95 % bootstrap interval of `other - base`, ms.
    pub interval: (f64, f64),
    /// Each run has [`TAIL_SAMPLES`] above the percentile.
    pub enough: bool,
    pub beyond_noise: bool,
}

/// One metric, the baseline against another run.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricComparison {
    pub metric: &'static str,
    pub samples: (usize, usize),
    /// Two-sided p-value of Mann–Whitney U; `None` without samples on a side.
    pub p_value: Option<f64>,
    pub stats: Vec<Difference>,
}

/// Every metric with samples on both sides; changes under `min_change` (a share) are
/// within noise.
pub fn compare(base: &Run, other: &Run, min_change: f64) -> Vec<MetricComparison> {
    METRICS
        .iter()
        .enumerate()
        .filter(|(i, _)| !base.samples[*i].is_empty() && !other.samples[*i].is_empty())
        .map(|(i, metric)| {
            let (a, b) = (&base.samples[i], &other.samples[i]);
            let stats = STATS
                .iter()
                .enumerate()
                .map(|(k, (stat, q))| {
                    let seed = (i * STATS.len() + k) as u64;
                    difference(metric, stat, *q, (a, b), seed, min_change)
                })
                .collect();
            MetricComparison {
                metric,
                samples: (a.len(), b.len()),
                p_value: Some(mann_whitney(a, b)),
                stats,
            }
        })
        .collect()
}

fn difference(
    metric: &'static str,
    stat: &'static str,
    q: f64,
    (a, b): (&[f64], &[f64]),
    seed: u64,
    min_change: f64,
) -> Difference {
    let (base, other) = (quantile(a, q), quantile(b, q));
    let interval = bootstrap(a, b, q, seed, RESAMPLES);
    let change = other / base - 1.0;
    let tail = |n: usize| n as f64 * (1.0 - q) >= TAIL_SAMPLES;
    let enough = tail(a.len()) && tail(b.len());
    Difference {
        metric,
        stat,
        base,
        other,
        change,
        interval,
        enough,
        beyond_noise: enough
            && (interval.0 > 0.0 || interval.1 < 0.0)
            && change.abs() >= min_change,
    }
}

/// The `q` quantile of sorted samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The 95 % percentile-bootstrap interval of `quantile(b) - quantile(a)`.
pub fn bootstrap(a: &[f64], b: &[f64], q: f64, seed: u64, resamples: usize) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::mix_seed(&[0x424f_4f54, seed]));
    let mut draw = |from: &[f64], into: &mut Vec<f64>| {
        into.clear();
        into.extend((0..from.len()).map(|_| from[rng.random_range(0..from.len())]));
        let rank = ((into.len() as f64 * q).ceil() as usize).clamp(1, into.len());
        *into.select_nth_unstable_by(rank - 1, f64::total_cmp).1
    };
    let (mut xa, mut xb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let mut diffs: Vec<f64> = (0..resamples)
        .map(|_| draw(b, &mut xb) - draw(a, &mut xa))
        .collect();
    diffs.sort_unstable_by(f64::total_cmp);
    (quantile(&diffs, 0.025), quantile(&diffs, 0.975))
}

/// Two-sided p-value of the Mann–Whitney U test of sorted samples `a` and `b`.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    // Ranks of the pooled samples, ties given their mean rank.
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|v| (*v, true))
        .chain(b.iter().map(|v| (*v, false)))
        .collect();
    pooled.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    let (mut rank_sum_a, mut ties, mut i) = (0.0, 0.0, 0);
    while i < pooled.len() {
        let mut j = i;
        while j + 1 < pooled.len() && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        ties += t * t * t - t;
        rank_sum_a += mean_rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        i = j + 1;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let n = n1 + n2;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 1.0;
    }
    let z = (u - n1 * n2 / 2.0).abs() / variance.sqrt();
    let normal = Normal::new(0.0, 1.0).expect("the standard normal");
    (2.0 * (1.0 - normal.cdf(z))).min(1.0)
}

/// Graded accuracy, the baseline against another run (both graded): the change in
/// percentage points and its 95 % interval by Newcombe's hybrid score method (from
/// each run's Wilson interval: sound for small samples and rates near 0 or 1).
#[derive(Debug, Clone, PartialEq)]
pub struct AccuracyComparison {
    /// Correct and graded answers of each run.
    pub base: (u64, u64),
    pub other: (u64, u64),
    /// `other − base`, in percentage points.
    pub change_pp: f64,
    pub interval_pp: (f64, f64),
}

impl AccuracyComparison {
    pub fn of(base: &Summary, other: &Summary) -> Option<AccuracyComparison> {
        let (a, b) = (base.quality.as_ref()?, other.quality.as_ref()?);
        Some(Self::from_counts(
            (a.correct, a.graded),
            (b.correct, b.graded),
        ))
    }

    /// From each run's (correct, graded), graded > 0.
    pub fn from_counts(base: (u64, u64), other: (u64, u64)) -> AccuracyComparison {
        let (p1, p2) = (
            base.0 as f64 / base.1 as f64,
            other.0 as f64 / other.1 as f64,
        );
        let ((l1, u1), (l2, u2)) = (wilson(base.0, base.1), wilson(other.0, other.1));
        let d = p2 - p1;
        let lower = d - ((p2 - l2).powi(2) + (u1 - p1).powi(2)).sqrt();
        let upper = d + ((u2 - p2).powi(2) + (p1 - l1).powi(2)).sqrt();
        AccuracyComparison {
            base,
            other,
            change_pp: d * 100.0,
            interval_pp: (lower * 100.0, upper * 100.0),
        }
    }

    /// `30/60 → 24/60 correct, -10.0 points, 95% interval [-27.1, +7.6]: within noise`.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} → {}/{} correct, {:+.1} points, 95% interval [{:+.1}, {:+.1}]: {}",
            self.base.0,
            self.base.1,
            self.other.0,
            self.other.1,
            self.change_pp,
            self.interval_pp.0,
            self.interval_pp.1,
            self.verdict()
        )
    }

    pub fn verdict(&self) -> &'static str {
        match self.interval_pp {
            (lo, _) if lo > 0.0 => "more accurate",
            (_, hi) if hi < 0.0 => "less accurate",
            _ => "within noise",
        }
    }
}

/// The Wilson score 95 % interval of `k` successes in `n`.
fn wilson(k: u64, n: u64) -> (f64, f64) {
    let (k, n, z) = (k as f64, n as f64, 1.959_963_984_540_054);
    let p = k / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// `--fail-on 'ttft.p99 > +10%'` (or `> +5ms`, or `< -10%` for a drop).
#[derive(Debug, Clone, PartialEq)]
pub struct FailRule {
    pub text: String,
    pub metric: String,
    pub stat: String,
    /// A rise (`>`) or a drop (`<`).
    pub rise: bool,
    pub amount: f64,
    pub relative: bool,
}

impl FailRule {
    pub fn parse(text: &str) -> Result<FailRule> {
        let usage = || {
            format!(
                "`{text}`: write METRIC.STAT > +N% (or +Nms, or < -N%), e.g. `ttft.p99 > +10%`, or `accuracy < -Npp`; metrics {}, stats {}",
                METRICS.join(", "),
                STATS.map(|s| s.0).join(", ")
            )
        };
        let (left, rise, right) = match (text.split_once('>'), text.split_once('<')) {
            (Some((l, r)), None) => (l, true, r),
            (None, Some((l, r))) => (l, false, r),
            _ => bail!(usage()),
        };
        if left.trim() == "accuracy" {
            return FailRule::accuracy(text, rise, right).ok_or_else(|| anyhow::anyhow!(usage()));
        }
        let (metric, stat) = left
            .trim()
            .split_once('.')
            .ok_or_else(|| anyhow::anyhow!(usage()))?;
        if !METRICS.contains(&metric) || !STATS.iter().any(|s| s.0 == stat) {
            bail!(usage());
        }
        let right = right.trim();
        let (number, relative) = match (right.strip_suffix('%'), right.strip_suffix("ms")) {
            (Some(n), _) => (n, true),
            (None, Some(n)) => (n, false),
            _ => bail!(usage()),
        };
        let amount: f64 = number
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!(usage()))?;
        Ok(FailRule {
            text: text.to_owned(),
            metric: metric.to_owned(),
            stat: stat.to_owned(),
            rise,
            amount: amount.abs() / if relative { 100.0 } else { 1.0 },
            relative,
        })
    }

    /// `accuracy < -2pp`: graded accuracy down (or, with `>`, up) by more than the
    /// points, beyond noise.
    fn accuracy(text: &str, rise: bool, right: &str) -> Option<FailRule> {
        let points: f64 = right.trim().strip_suffix("pp")?.trim().parse().ok()?;
        Some(FailRule {
            text: text.to_owned(),
            metric: "accuracy".into(),
            stat: String::new(),
            rise,
            amount: points.abs(),
            relative: false,
        })
    }

    /// Whether the accuracy's change breaks an `accuracy` rule: past the points, and
    /// its interval clear of zero.
    pub fn broken_by_accuracy(&self, a: &AccuracyComparison) -> bool {
        if self.metric != "accuracy" || a.verdict() == "within noise" {
            return false;
        }
        match self.rise {
            true => a.change_pp > self.amount,
            false => -a.change_pp > self.amount,
        }
    }

    /// Whether this difference breaks the rule: past the amount, and beyond noise.
    pub fn broken_by(&self, d: &Difference) -> bool {
        if d.metric != self.metric || d.stat != self.stat || !d.beyond_noise {
            return false;
        }
        let by = if self.relative {
            d.change
        } else {
            d.other - d.base
        };
        if self.rise {
            by > self.amount
        } else {
            -by > self.amount
        }
    }
}

/// The terminal table: per compared run, each metric's percentiles and the tests.
pub fn render_terminal(base: &Run, others: &[(Run, Vec<MetricComparison>)]) -> String {
    let mut out = format!("baseline: {} ({})\n", base.dir.display(), base.summary.name);
    for (run, comparisons) in others {
        out.push_str(&format!(
            "\nvs {} ({}): delivered {:.2} → {:.2} req/s, failed {} → {}\n",
            run.dir.display(),
            run.summary.name,
            base.summary.throughput.requests_per_s,
            run.summary.throughput.requests_per_s,
            failed(&base.summary),
            failed(&run.summary),
        ));
        // As wide as the longest `metric.stat`, so the columns line up.
        let width = comparisons
            .iter()
            .flat_map(|c| c.stats.iter().map(|d| d.metric.len() + 1 + d.stat.len()))
            .max()
            .unwrap_or(0)
            .max(10);
        out.push_str(&format!(
            "  {:<width$}  base ms   this ms    change   95% interval of Δ (ms)   Mann–Whitney p   verdict\n",
            "metric"
        ));
        for c in comparisons {
            for d in &c.stats {
                out.push_str(&format!(
                    "  {:<width$} {:>8.2}  {:>8.2}  {:>+7.1}%   [{:>+8.2}, {:>+8.2}]         {:>8}   {}\n",
                    format!("{}.{}", d.metric, d.stat),
                    d.base,
                    d.other,
                    d.change * 100.0,
                    d.interval.0,
                    d.interval.1,
                    c.p_value.map_or("–".into(), |p| format!("{p:.3}")),
                    verdict(d),
                ));
            }
        }
        if let Some(a) = AccuracyComparison::of(&base.summary, &run.summary) {
            out.push_str(&format!("  accuracy: {}\n", a.describe()));
        }
    }
    out
}

fn failed(summary: &Summary) -> u64 {
    let c = &summary.requests;
    c.error + c.timeout
}

pub fn verdict(d: &Difference) -> &'static str {
    match (d.beyond_noise, d.other > d.base) {
        (false, _) if !d.enough => "too few samples",
        (false, _) => "within noise",
        (true, true) => "slower",
        (true, false) => "faster",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_with_few_samples_above_it_is_not_judged() {
        let a = normal_samples(1, 100.0, 200);
        let mut b = normal_samples(2, 100.0, 200);
        // The slowest two of 200 far slower: p99 moves a lot, on two samples.
        b.iter_mut().rev().take(2).for_each(|v| *v += 50.0);
        b.sort_by(f64::total_cmp);
        let p99 = difference("ttft", "p99", 0.99, (&a, &b), 1, MIN_CHANGE);
        assert!(!p99.enough && !p99.beyond_noise, "{p99:?}");
        assert_eq!(verdict(&p99), "too few samples");
        let p90 = difference("ttft", "p90", 0.90, (&a, &b), 1, MIN_CHANGE);
        assert!(p90.enough, "{p90:?}");
    }

    #[test]
    fn accuracy_changes_have_newcombes_interval() {
        // Newcombe (1998), Statistics in Medicine 17:873, table II, example (a):
        // 56/70 − 48/80 = 0.2000, method 10 (score, from Wilson's): 0.0524 to 0.3339.
        let a = AccuracyComparison::from_counts((48, 80), (56, 70));
        assert!((a.change_pp - 20.0).abs() < 1e-9);
        assert!((a.interval_pp.0 - 5.24).abs() < 0.01, "{a:?}");
        assert!((a.interval_pp.1 - 33.39).abs() < 0.01, "{a:?}");
        assert_eq!(a.verdict(), "more accurate");
        let rule = FailRule::parse("accuracy > +15pp").unwrap();
        assert!(rule.broken_by_accuracy(&a));
        assert!(
            !FailRule::parse("accuracy < -1pp")
                .unwrap()
                .broken_by_accuracy(&a)
        );
        let same = AccuracyComparison::from_counts((90, 100), (88, 100));
        assert_eq!(same.verdict(), "within noise");
        assert!(
            FailRule::parse("accuracy < -2%").is_err(),
            "points, not percent"
        );
    }

    fn normal_samples(seed: u64, mean: f64, n: usize) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut v: Vec<f64> = (0..n)
            .map(|_| mean + (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0)
            .collect();
        v.sort_unstable_by(f64::total_cmp);
        v
    }

    #[test]
    fn equal_distributions_are_within_noise_and_a_shift_is_found() {
        // 60 seeded pairs of 200 samples (sd 1): for equal distributions the 95 %
        // interval misses zero about 5 % of the time (3 of 60; at most 8 allows for
        // chance, P ≈ 0.3 %); a shift of one standard deviation is found every time.
        // 300 resamples keep the test quick; the interval is the same estimator.
        let (mut false_alarms, mut found, mut small_p) = (0, 0, 0);
        let beyond = |a: &[f64], b: &[f64], seed| {
            let (lo, hi) = bootstrap(a, b, 0.5, seed, 300);
            (lo > 0.0 || hi < 0.0, lo > 0.0)
        };
        for seed in 0..60 {
            let a = normal_samples(seed, 50.0, 200);
            let b = normal_samples(seed + 1000, 50.0, 200);
            let c = normal_samples(seed + 2000, 51.0, 200);
            false_alarms += beyond(&a, &b, seed).0 as u32;
            small_p += (mann_whitney(&a, &b) < 0.05) as u32;
            found += beyond(&a, &c, seed).1 as u32;
        }
        assert!(
            false_alarms <= 8,
            "{false_alarms} false alarms in 60 (5 % expected)"
        );
        assert!(small_p <= 8, "Mann–Whitney: {small_p} of 60 below 0.05");
        assert_eq!(found, 60);
    }

    #[test]
    fn mann_whitney_matches_a_known_value() {
        // U = 0 of 25, z = 12.5 / sqrt(5·5·11/12) = 2.6112, p = 2·(1 − Φ(z)) = 0.009023
        // (scipy's mannwhitneyu, asymptotic, without the continuity correction).
        let p = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 0.009_023).abs() < 1e-5, "{p}");
        // Ties: every value equal on both sides is no evidence of a shift.
        assert_eq!(mann_whitney(&[3.0; 10], &[3.0; 10]), 1.0);
    }

    #[test]
    fn rules_parse_and_say_how_to_write_them() {
        let rule = FailRule::parse("ttft.p99 > +10%").unwrap();
        assert_eq!(
            (
                rule.metric.as_str(),
                rule.stat.as_str(),
                rule.rise,
                rule.amount,
                rule.relative
            ),
            ("ttft", "p99", true, 0.10, true)
        );
        assert_eq!(FailRule::parse("e2e.p50 > 5ms").unwrap().amount, 5.0);
        assert!(!FailRule::parse("tpot.p90 < -20%").unwrap().rise);
        let error = FailRule::parse("latency.p99 > 10%")
            .unwrap_err()
            .to_string();
        assert!(error.contains("e.g. `ttft.p99 > +10%`"), "{error}");
        let d = Difference {
            metric: "ttft",
            stat: "p99",
            base: 100.0,
            other: 115.0,
            change: 0.15,
            interval: (5.0, 25.0),
            enough: true,
            beyond_noise: true,
        };
        assert!(rule.broken_by(&d));
        assert!(!rule.broken_by(&Difference {
            beyond_noise: false,
            ..d.clone()
        }));
        assert!(!rule.broken_by(&Difference {
            other: 105.0,
            change: 0.05,
            ..d
        }));
    }
}
