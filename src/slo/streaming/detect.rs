//! Drift detectors over one series of window values. Each learns a baseline from its
//! first windows, then judges every window: over (worse), under (better) or normal.
//!
//! Standardising: a baseline σ below 5 % of the baseline mean is raised to 5 %. A σ
//! from a few windows is often half the truth (and a series that barely moves while it
//! is learnt, like the simulator's, has almost none), and thresholds in such σ alarm on
//! jitter: with a 2 % floor, 39 of 100 stationary series alarmed under Page–Hinkley.
//! So a change under about a tenth of the level is not what these detectors are for. All three detectors see overlapping windows, whose values
//! are correlated; their thresholds are in baseline σ of those values.

/// The smallest baseline σ, as a share of the baseline mean.
const SIGMA_FLOOR: f64 = 0.05;

/// What a detector said of a window.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Still learning the baseline.
    Learning,
    Normal,
    /// A violation: the series is worse than its baseline.
    Over,
    /// A shift to better than the baseline (two-sided detectors only): reported, not a
    /// violation.
    Under,
}

/// A detector's judgement of one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    pub state: State,
    /// The value the window was held against, where the detector has one (EWMA's
    /// μ + kσ); in the series' unit.
    pub threshold: Option<f64>,
}

/// The source document's rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EwmaRule {
    pub alpha: f64,
    pub k: f64,
    /// 0.4 for "σ grows by more than 40 %".
    pub sigma_growth: f64,
    pub confirm: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageHinkleyRule {
    pub delta: f64,
    pub lambda: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CusumRule {
    pub k: f64,
    pub h: f64,
}

/// A fixed limit held for a number of windows: `p99 <= 800ms over 30s for 3 windows`
/// (what most people write first). No baseline: it judges from the first window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdRule {
    pub limit: f64,
    /// `<=`: the limit itself is within bounds; `<`: it is over.
    pub inclusive: bool,
    /// Consecutive windows past the limit before the violation opens.
    pub windows: u32,
}

/// Which detector, with its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    Ewma(EwmaRule),
    PageHinkley(PageHinkleyRule),
    Cusum(CusumRule),
    Threshold(ThresholdRule),
}

impl Rule {
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Ewma(_) => "ewma",
            Rule::PageHinkley(_) => "page_hinkley",
            Rule::Cusum(_) => "cusum",
            Rule::Threshold(_) => "threshold",
        }
    }
}

/// Weight of a window in the reference of Page–Hinkley and CUSUM once learnt.
const REFERENCE_ALPHA: f64 = 0.05;

/// The baseline learnt from the first windows.
#[derive(Debug, Clone, Default)]
struct Learning {
    values: Vec<f64>,
    spreads: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
struct Baseline {
    mean: f64,
    sd: f64,
    spread: f64,
    /// The smallest σ in the series' unit (see [`Detector::with_floor`]).
    floor: f64,
}

impl Baseline {
    fn floored(&self, sd: f64) -> f64 {
        sd.max(SIGMA_FLOOR * self.mean.abs())
            .max(self.floor)
            .max(f64::MIN_POSITIVE)
    }
}

impl Baseline {
    /// A reference from a few windows misplaces the mean by a good part of σ, and a
    /// cumulative sum then drifts to an alarm on noise alone (27 of 100 stationary
    /// series of 200 windows did). So Page–Hinkley and CUSUM keep refining it, slowly
    /// and only from windows within 2σ, so a shift is not learnt as the new normal.
    fn keep_learning(&mut self, value: f64, z: f64) {
        if z.abs() >= 2.0 {
            return;
        }
        let a = REFERENCE_ALPHA;
        let diff = value - self.mean;
        self.mean += a * diff;
        let var = (1.0 - a) * (self.sd.powi(2) + a * diff * diff);
        self.sd = self.floored(var.sqrt());
    }
}

impl Learning {
    fn baseline(&self, floor: f64) -> Baseline {
        let n = self.values.len() as f64;
        let mean = self.values.iter().sum::<f64>() / n;
        let var = self.values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut base = Baseline {
            mean,
            sd: 0.0,
            spread: self.spreads.iter().sum::<f64>() / n,
            floor,
        };
        base.sd = base.floored(var.sqrt());
        base
    }
}

/// A detector's running state.
#[derive(Debug, Clone)]
enum Running {
    Ewma {
        rule: EwmaRule,
        base: Baseline,
        /// Consecutive windows whose spread grew past the rule's share.
        grown: u32,
    },
    PageHinkley {
        rule: PageHinkleyRule,
        base: Baseline,
        /// Cumulative sums for a rise and for a fall, and their running minima.
        up: (f64, f64),
        down: (f64, f64),
    },
    Cusum {
        rule: CusumRule,
        base: Baseline,
        up: f64,
        down: f64,
    },
    Threshold {
        rule: ThresholdRule,
        /// Consecutive windows past the limit.
        past: u32,
    },
}

/// One series' detector.
#[derive(Debug, Clone)]
pub struct Detector {
    rule: Rule,
    baseline_windows: usize,
    floor: f64,
    learning: Learning,
    running: Option<Running>,
}

impl Detector {
    pub fn new(rule: Rule, baseline_windows: u32) -> Detector {
        Detector {
            rule,
            baseline_windows: baseline_windows.max(2) as usize,
            floor: 0.0,
            learning: Learning::default(),
            // A fixed limit has nothing to learn.
            running: match rule {
                Rule::Threshold(rule) => Some(Running::Threshold { rule, past: 0 }),
                _ => None,
            },
        }
    }

    /// A smallest baseline σ in the series' unit, beside the 5 % of its mean: a series
    /// whose baseline is zero (no errors) would otherwise call its first error a drift.
    pub fn with_floor(mut self, floor: f64) -> Detector {
        self.floor = floor;
        self
    }

    /// Judges one window's value and spread (the σ of its samples; none where the
    /// source gives only the value, as a Prometheus query does).
    pub fn observe(&mut self, value: f64, spread: Option<f64>) -> Judged {
        let Some(running) = &mut self.running else {
            self.learning.values.push(value);
            self.learning.spreads.push(spread.unwrap_or(0.0));
            if self.learning.values.len() == self.baseline_windows {
                let base = self.learning.baseline(self.floor);
                self.running = Some(match self.rule {
                    Rule::Ewma(rule) => Running::Ewma {
                        rule,
                        base,
                        grown: 0,
                    },
                    Rule::PageHinkley(rule) => Running::PageHinkley {
                        rule,
                        base,
                        up: (0.0, 0.0),
                        down: (0.0, 0.0),
                    },
                    Rule::Cusum(rule) => Running::Cusum {
                        rule,
                        base,
                        up: 0.0,
                        down: 0.0,
                    },
                    Rule::Threshold(rule) => Running::Threshold { rule, past: 0 },
                });
            }
            return Judged {
                state: State::Learning,
                threshold: None,
            };
        };
        match running {
            Running::Ewma { rule, base, grown } => ewma(*rule, base, grown, value, spread),
            Running::PageHinkley {
                rule,
                base,
                up,
                down,
            } => {
                let z = (value - base.mean) / base.sd;
                let rise = page_hinkley_step(up, z - rule.delta);
                let fall = page_hinkley_step(down, -z - rule.delta);
                base.keep_learning(value, z);
                two_sided(rise > rule.lambda, fall > rule.lambda)
            }
            Running::Cusum {
                rule,
                base,
                up,
                down,
            } => {
                let z = (value - base.mean) / base.sd;
                *up = (*up + z - rule.k).max(0.0);
                *down = (*down - z - rule.k).max(0.0);
                base.keep_learning(value, z);
                two_sided(*up > rule.h, *down > rule.h)
            }
            Running::Threshold { rule, past } => {
                let breaks = if rule.inclusive {
                    value > rule.limit
                } else {
                    value >= rule.limit
                };
                *past = if breaks { *past + 1 } else { 0 };
                Judged {
                    state: if *past >= rule.windows {
                        State::Over
                    } else {
                        State::Normal
                    },
                    threshold: Some(rule.limit),
                }
            }
        }
    }
}

/// Over when the value is past μ + kσ and the spread has grown for `confirm` windows;
/// the baseline learns only from windows within the threshold, so a degradation does
/// not become the new normal. A series without a spread (a Prometheus query's value)
/// confirms drift by `confirm` windows in a row past μ + kσ instead.
fn ewma(
    rule: EwmaRule,
    base: &mut Baseline,
    grown: &mut u32,
    value: f64,
    spread: Option<f64>,
) -> Judged {
    let threshold = base.mean + rule.k * base.sd;
    let grew = match spread {
        Some(spread) => spread > (1.0 + rule.sigma_growth) * base.spread,
        None => value > threshold,
    };
    *grown = if grew { *grown + 1 } else { 0 };
    let over = value > threshold && *grown >= rule.confirm;
    if value <= threshold {
        let a = rule.alpha;
        let diff = value - base.mean;
        base.mean += a * diff;
        let var = (1.0 - a) * (base.sd.powi(2) + a * diff * diff);
        base.sd = base.floored(var.sqrt());
        if let Some(spread) = spread {
            base.spread += a * (spread - base.spread);
        }
    }
    Judged {
        state: if over { State::Over } else { State::Normal },
        threshold: Some(threshold),
    }
}

/// One Page–Hinkley step: the cumulative sum and its minimum; returns their distance.
fn page_hinkley_step((sum, min): &mut (f64, f64), increment: f64) -> f64 {
    *sum += increment;
    *min = min.min(*sum);
    *sum - *min
}

fn two_sided(rise: bool, fall: bool) -> Judged {
    Judged {
        state: match (rise, fall) {
            (true, _) => State::Over,
            (false, true) => State::Under,
            (false, false) => State::Normal,
        },
        threshold: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Normal};

    pub(crate) const EWMA: Rule = Rule::Ewma(EwmaRule {
        alpha: 0.2,
        k: 2.5,
        sigma_growth: 0.4,
        confirm: 3,
    });
    const PAGE_HINKLEY: Rule = Rule::PageHinkley(PageHinkleyRule {
        delta: 0.5,
        lambda: 8.0,
    });
    const CUSUM: Rule = Rule::Cusum(CusumRule { k: 0.5, h: 8.0 });

    /// Windows of a series: `n` values around 100 with 3 % noise, the spread 20; from
    /// window `change` on, the value rises by `shift` (a share) and the spread by twice
    /// that, as when a share of requests is delayed.
    fn series(seed: u64, n: usize, change: usize, shift: f64) -> Vec<(f64, f64)> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let noise = Normal::new(0.0, 3.0).unwrap();
        (0..n)
            .map(|i| {
                let shift = if i >= change { shift } else { 0.0 };
                (
                    100.0 * (1.0 + shift) + noise.sample(&mut rng),
                    20.0 * (1.0 + 2.0 * shift) + noise.sample(&mut rng) / 3.0,
                )
            })
            .collect()
    }

    fn first_over(rule: Rule, windows: &[(f64, f64)]) -> Option<usize> {
        let mut d = Detector::new(rule, 5);
        windows
            .iter()
            .position(|(v, s)| d.observe(*v, Some(*s)).state == State::Over)
    }

    /// On 100 stationary series of 200 windows (20,000 windows), no detector raises a
    /// violation; after a 50 % rise at window 100 each does within 3 windows.
    #[test]
    fn no_false_alarms_when_stationary_and_a_rise_is_found_within_three_windows() {
        for rule in [EWMA, PAGE_HINKLEY, CUSUM] {
            let mut false_alarms = 0;
            for seed in 0..100 {
                false_alarms +=
                    usize::from(first_over(rule, &series(seed, 200, usize::MAX, 0.0)).is_some());
            }
            assert_eq!(false_alarms, 0, "{}", rule.name());
            for seed in 0..20 {
                let at = first_over(rule, &series(seed, 200, 100, 0.5));
                assert!(
                    at.is_some_and(|at| (100..103).contains(&at)),
                    "{}: {at:?}",
                    rule.name()
                );
            }
        }
    }

    /// The source's rule wants the spread to grow too: a shift of the level alone is
    /// for Page–Hinkley and CUSUM.
    #[test]
    fn ewma_needs_the_spread_to_grow_and_the_others_do_not() {
        let mut windows = series(7, 60, usize::MAX, 0.0);
        for w in &mut windows[30..] {
            w.0 += 30.0;
        }
        assert_eq!(first_over(EWMA, &windows), None);
        assert!(first_over(PAGE_HINKLEY, &windows).is_some_and(|at| (30..33).contains(&at)));
        assert!(first_over(CUSUM, &windows).is_some_and(|at| (30..33).contains(&at)));
    }

    #[test]
    fn a_fall_is_reported_as_under_not_as_a_violation() {
        let mut d = Detector::new(CUSUM, 5);
        let states: Vec<State> = series(3, 40, 20, -0.5)
            .iter()
            .map(|(v, s)| d.observe(*v, Some(*s)).state)
            .collect();
        assert!(!states.contains(&State::Over));
        assert!(states[20..24].contains(&State::Under), "{states:?}");
    }

    /// Without spreads (a Prometheus series) the source's rule still finds the rise of
    /// the first test, confirmed by windows past μ + kσ, and stays quiet when stationary.
    #[test]
    fn ewma_without_spreads_confirms_by_windows_past_the_threshold() {
        let first = |windows: Vec<(f64, f64)>| {
            let mut d = Detector::new(EWMA, 5);
            windows
                .iter()
                .position(|(v, _)| d.observe(*v, None).state == State::Over)
        };
        for seed in 0..50 {
            assert_eq!(
                first(series(seed, 200, usize::MAX, 0.0)),
                None,
                "seed {seed}"
            );
            let at = first(series(seed, 200, 100, 0.5));
            assert!(at.is_some_and(|at| (102..105).contains(&at)), "{at:?}");
        }
    }

    #[test]
    fn a_threshold_opens_after_its_windows_in_a_row_and_minds_its_operator() {
        let rule = |inclusive| {
            Rule::Threshold(ThresholdRule {
                limit: 800.0,
                inclusive,
                windows: 3,
            })
        };
        let mut d = Detector::new(rule(true), 5);
        let states: Vec<State> = [
            900.0, 900.0, 700.0, 900.0, 900.0, 800.0, 900.0, 900.0, 900.0,
        ]
        .iter()
        .map(|v| d.observe(*v, None).state)
        .collect();
        let over: Vec<usize> = (0..states.len())
            .filter(|i| states[*i] == State::Over)
            .collect();
        // Judged from the first window; a window at the limit is within `<=`.
        assert_eq!(over, [8]);
        let mut strict = Detector::new(rule(false), 5);
        let at_limit: Vec<State> = (0..3).map(|_| strict.observe(800.0, None).state).collect();
        assert_eq!(at_limit[2], State::Over);
    }
}
