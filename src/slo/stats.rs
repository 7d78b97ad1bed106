//! One-sided confidence bounds that make a verdict defensible: exact (Clopper–Pearson)
//! bounds for the share of bad events, and distribution-free order-statistic bounds for
//! percentiles. A percentile SLO is a statement about a share — "p99 ≤ 350 ms" means at
//! most 1 % of requests take longer than 350 ms — so both kinds come down to counting
//! bad events among independent trials.

use statrs::distribution::{Beta, Binomial, ContinuousCDF, DiscreteCDF, Normal};

/// Upper one-sided bound at `confidence` on a proportion, `bad` events in `n` trials.
pub fn upper_bound(bad: u64, n: u64, confidence: f64) -> f64 {
    if n == 0 || bad >= n {
        return 1.0;
    }
    beta_quantile(bad as f64 + 1.0, (n - bad) as f64, confidence)
}

/// Lower one-sided bound at `confidence` on a proportion.
pub fn lower_bound(bad: u64, n: u64, confidence: f64) -> f64 {
    if n == 0 || bad == 0 {
        return 0.0;
    }
    beta_quantile(bad as f64, (n - bad + 1) as f64, 1.0 - confidence)
}

/// The `p` quantile of Beta(a, b), by bisection on its CDF: exact to well below the
/// rates SLOs name (10⁻⁶ and up).
fn beta_quantile(a: f64, b: f64, p: f64) -> f64 {
    let beta = Beta::new(a, b).expect("shape parameters are positive");
    let (mut low, mut high) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if beta.cdf(mid) < p {
            low = mid;
        } else {
            high = mid;
        }
        if high - low <= high * 1e-12 {
            break;
        }
    }
    high
}

/// The standard normal quantile: 1.645 at 0.95.
pub fn normal_quantile(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// How a proportion compares with the most it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The upper bound is within the allowance.
    Within,
    /// The lower bound is beyond it.
    Beyond,
    /// Neither, yet.
    Undecided,
}

/// Whether `bad` of `n` is, at `confidence`, within a share of `allowed` (inclusive
/// when `inclusive`, as in `<=`).
pub fn decide(bad: u64, n: u64, allowed: f64, inclusive: bool, confidence: f64) -> Decision {
    let within = |bound: f64| {
        if inclusive {
            bound <= allowed
        } else {
            bound < allowed
        }
    };
    if n > 0 && within(upper_bound(bad, n, confidence)) {
        Decision::Within
    } else if n > 0 && !within(lower_bound(bad, n, confidence)) {
        Decision::Beyond
    } else {
        Decision::Undecided
    }
}

/// Trials in all (counting those seen) that would decide the question if the share of
/// bad events stayed as observed; `None` when it never would (the share sits exactly
/// on the allowance) or only past 10¹².
pub fn trials_to_decide(
    bad: u64,
    n: u64,
    allowed: f64,
    inclusive: bool,
    confidence: f64,
) -> Option<u64> {
    let share = if n == 0 { 0.0 } else { bad as f64 / n as f64 };
    let decided = |trials: u64| {
        let bad = (share * trials as f64).round() as u64;
        decide(bad, trials, allowed, inclusive, confidence) != Decision::Undecided
    };
    let mut high = n.max(1);
    while !decided(high) {
        high = high.checked_mul(2)?;
        if high > 1_000_000_000_000 {
            return None;
        }
    }
    // The smallest deciding count between the last undecided power and `high`.
    let mut low = high / 2;
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if decided(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    Some(high)
}

/// The 1-based rank of the order statistic that bounds the `q` quantile of `n`
/// samples from above at `confidence`: the smallest k with P(Binomial(n, q) < k) ≥
/// confidence. `None` when even the largest sample is not enough.
pub fn upper_rank(n: u64, q: f64, confidence: f64) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let binomial = Binomial::new(q, n).expect("q is a probability");
    let covered = |k: u64| binomial.cdf(k - 1) >= confidence;
    if !covered(n) {
        return None;
    }
    let (mut low, mut high) = (0, n);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if covered(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    Some(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Exp};

    #[test]
    fn a_thousand_clean_requests_cannot_prove_five_nines_and_a_half() {
        // pass_rate ≥ 99.995 %: at most 5 × 10⁻⁵ may fail.
        assert_eq!(decide(0, 1_000, 5e-5, true, 0.95), Decision::Undecided);
        let needed = trials_to_decide(0, 1_000, 5e-5, true, 0.95).unwrap();
        // (1 − 5 × 10⁻⁵)ⁿ ≤ 0.05 ⇔ n ≥ ln 0.05 / ln(1 − 5 × 10⁻⁵) ≈ 59,914.
        assert!((59_900..=59_930).contains(&needed), "{needed}");
    }

    #[test]
    fn five_failures_need_four_hundred_thousand_requests() {
        // The exact one-sided 95 % bound for 5 of 200,000 is 10.513 / 200,000.
        let bound = upper_bound(5, 200_000, 0.95);
        assert!((bound - 5.2565e-5).abs() < 0.001e-5, "{bound}");
        assert_eq!(decide(5, 200_000, 5e-5, true, 0.95), Decision::Undecided);
        assert_eq!(decide(5, 400_000, 5e-5, true, 0.95), Decision::Within);
        // Far too many failures is proven at once.
        assert_eq!(decide(50, 100_000, 5e-5, true, 0.95), Decision::Beyond);
    }

    #[test]
    fn bounds_bracket_the_observed_share() {
        for (bad, n) in [(1, 10), (37, 1_000), (999, 1_000)] {
            let share = bad as f64 / n as f64;
            assert!(lower_bound(bad, n, 0.95) < share && share < upper_bound(bad, n, 0.95));
        }
    }

    #[test]
    fn the_order_statistic_bound_on_p99_covers_the_true_p99_at_95_percent() {
        // Exponential(1): p99 = ln 100. 1,000 runs of 2,000 samples each.
        let true_p99 = 100f64.ln();
        let exp = Exp::new(1.0).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(2026);
        let n = 2_000;
        let k = upper_rank(n, 0.99, 0.95).unwrap() as usize;
        let mut covered = 0;
        for _ in 0..1_000 {
            let mut samples: Vec<f64> = (0..n).map(|_| exp.sample(&mut rng)).collect();
            samples.sort_by(f64::total_cmp);
            if samples[k - 1] >= true_p99 {
                covered += 1;
            }
        }
        assert!(covered >= 940, "covered {covered} of 1000");
        // And not absurdly loose: the bound sits above the p99 rank, not at the top.
        assert!(k > 1_980 && k < 2_000, "{k}");
    }

    #[test]
    fn too_few_samples_have_no_percentile_bound() {
        // 100 samples cannot bound a p99 at 95 %: even the largest falls short.
        assert_eq!(upper_rank(100, 0.99, 0.95), None);
        assert!(upper_rank(300, 0.99, 0.95).is_some());
    }
}
