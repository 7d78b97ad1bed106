//! Shapley values of a set function over nodes: exact over every subset for a few
//! nodes, else sampled over random orders (each with its reverse, which halves the
//! variance for near-additive games) with the subsets' values cached.

use std::collections::HashMap;

use rand::Rng;
use rand::seq::SliceRandom;

/// Up to this many players every subset is evaluated (2^10 = 1,024 values).
pub const EXACT_MAX: usize = 10;

/// How the values were computed, for the report.
#[derive(
    Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ShapleyCost {
    /// Every subset (true) or sampled orders.
    pub exact: bool,
    /// Orders sampled (0 when exact).
    pub orders: usize,
    /// Subsets whose value was computed.
    pub evaluations: usize,
}

/// Each player's Shapley value of `value` (a function of the subset as a bit mask).
pub fn shapley(
    players: usize,
    orders: usize,
    rng: &mut impl Rng,
    mut value: impl FnMut(u64) -> f64,
) -> (Vec<f64>, ShapleyCost) {
    assert!(players < 64, "a bit mask holds the subset");
    if players <= EXACT_MAX {
        exact(players, value)
    } else {
        let mut cache: HashMap<u64, f64> = HashMap::new();
        let mut cached = |mask: u64| *cache.entry(mask).or_insert_with(|| value(mask));
        let mut phi = vec![0.0; players];
        let mut order: Vec<usize> = (0..players).collect();
        let pairs = orders.div_ceil(2).max(1);
        for _ in 0..pairs {
            order.shuffle(rng);
            for pass in [
                &order[..],
                &order.iter().rev().copied().collect::<Vec<_>>()[..],
            ] {
                let mut mask = 0u64;
                let mut before = cached(mask);
                for &player in pass {
                    mask |= 1 << player;
                    let after = cached(mask);
                    phi[player] += after - before;
                    before = after;
                }
            }
        }
        let n = (2 * pairs) as f64;
        phi.iter_mut().for_each(|p| *p /= n);
        let cost = ShapleyCost {
            exact: false,
            orders: 2 * pairs,
            evaluations: cache.len(),
        };
        (phi, cost)
    }
}

fn exact(players: usize, mut value: impl FnMut(u64) -> f64) -> (Vec<f64>, ShapleyCost) {
    let subsets = 1usize << players;
    let values: Vec<f64> = (0..subsets as u64).map(&mut value).collect();
    // weight(s) = s! (n − s − 1)! / n!, for a subset of size s without the player.
    let weight: Vec<f64> = (0..players)
        .map(|s| 1.0 / (players as f64 * binomial(players - 1, s)))
        .collect();
    let mut phi = vec![0.0; players];
    for mask in 0..subsets as u64 {
        let size = mask.count_ones() as usize;
        for (player, p) in phi.iter_mut().enumerate() {
            let bit = 1u64 << player;
            if mask & bit == 0 {
                *p += weight[size] * (values[(mask | bit) as usize] - values[mask as usize]);
            }
        }
    }
    let cost = ShapleyCost {
        exact: true,
        orders: 0,
        evaluations: subsets,
    };
    (phi, cost)
}

fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// v(S) = Σ w_i over S, plus a bonus when both 0 and 1 are in: the bonus splits
    /// evenly between them.
    fn game(mask: u64) -> f64 {
        let weights = [1.0, 2.0, 3.0, 0.5, 0.0, 4.0, 1.5, 2.5, 0.25, 1.0, 3.0, 0.75];
        let additive: f64 = (0..12)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| weights[i])
            .sum();
        additive + if mask & 0b11 == 0b11 { 6.0 } else { 0.0 }
    }

    #[test]
    fn exact_values_split_an_interaction_evenly_and_sum_to_the_whole() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let (phi, cost) = shapley(5, 0, &mut rng, game);
        assert!(cost.exact);
        let expected = [4.0, 5.0, 3.0, 0.5, 0.0];
        for (p, e) in phi.iter().zip(expected) {
            assert!((p - e).abs() < 1e-12, "{phi:?}");
        }
    }

    #[test]
    fn sampled_orders_are_efficient_and_close_to_the_exact_values() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let (phi, cost) = shapley(12, 200, &mut rng, game);
        assert!(!cost.exact && cost.orders == 200);
        let total: f64 = phi.iter().sum();
        assert!((total - game((1 << 12) - 1)).abs() < 1e-9);
        assert!(
            (phi[0] - 4.0).abs() < 0.5 && (phi[1] - 5.0).abs() < 0.5,
            "{phi:?}"
        );
        assert!(
            (phi[5] - 4.0).abs() < 1e-9,
            "an additive player is exact: {phi:?}"
        );
    }
}
