//! Why the root changed between a baseline and an incident: the model is fitted on
//! the baseline, both sets of rows are turned into noise, and the root is rerun on
//! noise mixed from the two — a node in the coalition keeps its incident noise, the
//! others take a baseline row's. A node's Shapley value over those coalitions is its
//! share of the change in the measure (DoWhy's `distribution_change` with the
//! mechanisms held at the baseline's); the coalition of all nodes but one is the
//! intervention `do(node = baseline)`. Bootstrap over both sets of rows, refitting
//! each time, gives the intervals.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::model::{Mechanism, Model, Noise};
use super::shapley::{ShapleyCost, shapley};
use super::table::{Row, Table};

/// What is measured at the root.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Measure {
    /// Mean latency, ms.
    Mean,
    /// A latency quantile, ms (`q` in (0, 1)).
    Quantile { q: f64 },
    /// The share of traces that failed or took `above_ms` or longer. (At or above:
    /// when the threshold is a baseline's own quantile, the trace it was read from
    /// counts, so the baseline's rate is what a fresh sample would show rather than
    /// one trace too few.)
    Breach { above_ms: f64 },
    /// The share of traces that failed.
    FailureRate,
}

impl Measure {
    fn of(&self, outcomes: &mut [(f64, bool)]) -> f64 {
        let n = outcomes.len().max(1) as f64;
        match *self {
            Measure::Mean => outcomes.iter().map(|o| o.0).sum::<f64>() / n,
            Measure::Quantile { q } => quantile(outcomes, q),
            Measure::Breach { above_ms } => {
                outcomes.iter().filter(|o| o.1 || o.0 >= above_ms).count() as f64 / n
            }
            Measure::FailureRate => outcomes.iter().filter(|o| o.1).count() as f64 / n,
        }
    }

    /// A rate (of traces) rather than a latency.
    pub fn is_rate(&self) -> bool {
        matches!(self, Measure::Breach { .. } | Measure::FailureRate)
    }

    pub fn describe(&self) -> String {
        match *self {
            Measure::Mean => "mean latency".into(),
            Measure::Quantile { q } => format!("p{} latency", q * 100.0),
            Measure::Breach { above_ms } => {
                format!("breaches (failed, or took {above_ms:.1} ms or more)")
            }
            Measure::FailureRate => "failure rate".into(),
        }
    }

    /// The smallest change worth a cause: a point of a rate, or 5 % of a latency.
    fn min_effect(&self, baseline: f64) -> f64 {
        if self.is_rate() {
            0.01
        } else {
            0.05 * baseline.abs()
        }
    }
}

fn quantile(outcomes: &mut [(f64, bool)], q: f64) -> f64 {
    outcomes.sort_by(|a, b| a.0.total_cmp(&b.0));
    nearest_rank(outcomes.len(), q).map_or(f64::NAN, |at| outcomes[at].0)
}

/// The index of the q-quantile among `n` sorted values (nearest rank: the smallest
/// value with at least a share q at or below it).
pub(super) fn nearest_rank(n: usize, q: f64) -> Option<usize> {
    (n > 0).then(|| ((q * n as f64).ceil() as usize).clamp(1, n) - 1)
}

/// A percentile of sorted bootstrap resamples (interpolated by rank, rounded).
fn resample_percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// How hard to look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub measure: Measure,
    /// What counts as a breach in the root statistics (and for `Measure::Breach`).
    pub breach_above_ms: f64,
    /// When that threshold is the baseline's own quantile (none was given), which one:
    /// the change's interval then reads it again from each resampled baseline.
    pub breach_quantile: Option<f64>,
    /// Bootstrap resamples for the intervals.
    pub bootstrap: usize,
    /// Mixed rows run per coalition.
    pub samples: usize,
    /// Orders sampled when there are too many nodes for every coalition.
    pub orders: usize,
    pub seed: u64,
}

/// The root over a set of traces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RootStats {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub failure_rate: f64,
    pub breach_rate: f64,
}

impl RootStats {
    fn of(outcomes: &mut [(f64, bool)], breach_above_ms: f64) -> RootStats {
        RootStats {
            mean_ms: Measure::Mean.of(outcomes),
            p50_ms: quantile(outcomes, 0.5),
            p99_ms: quantile(outcomes, 0.99),
            failure_rate: Measure::FailureRate.of(outcomes),
            breach_rate: Measure::Breach {
                above_ms: breach_above_ms,
            }
            .of(outcomes),
        }
    }
}

/// A node over a set of traces, as observed.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct NodeStats {
    /// Traces it ran in.
    pub runs: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Of the traces it ran in.
    pub failure_rate: f64,
    /// Failures that began here (none of its callees failed), of the traces it ran
    /// in: with spans, the operation where an error started, not the callers it
    /// passed through.
    pub began_here_rate: f64,
    /// Its most frequent error kind.
    pub top_error: Option<String>,
}

/// An estimate with its bootstrap interval (5th to 95th percentile).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Interval {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// Clear of zero on the side of `sign`.
    fn excludes_zero(&self, sign: f64) -> bool {
        if sign >= 0.0 {
            self.low > 0.0
        } else {
            self.high < 0.0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct NodeAttribution {
    pub node: String,
    pub service: Option<String>,
    pub mechanism: Mechanism,
    /// Its share of the change in the measure, in the measure's units.
    pub contribution: Interval,
    /// contribution / change.
    pub share: f64,
    /// Its interval is clear of zero, it carries at least a fifth of the change, and
    /// the change itself is significant.
    pub confident: bool,
    pub baseline: NodeStats,
    pub incident: NodeStats,
    /// `do(node = baseline)`: the incident's root with this node's own behaviour at
    /// the baseline's.
    pub counterfactual: RootStats,
    /// Share of the change the intervention undoes.
    pub undoes: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Attribution {
    pub measure: Measure,
    pub baseline_traces: usize,
    pub incident_traces: usize,
    pub baseline: RootStats,
    pub incident: RootStats,
    /// The measure's change from baseline to incident.
    pub change: Interval,
    /// The change's interval is clear of zero and it is at least the smallest effect
    /// worth a cause (a point of a rate, 5 % of a latency).
    pub significant: bool,
    /// Every node, largest contribution first.
    pub nodes: Vec<NodeAttribution>,
    /// Services with more than one node (a tools service behind two steps): their
    /// nodes together, largest contribution first.
    pub services: Vec<ServiceAttribution>,
    pub shapley: ShapleyCost,
    pub bootstrap: usize,
}

/// A service's nodes taken together: Shapley values add up over a group, and the
/// intervention puts all of them at the baseline at once.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ServiceAttribution {
    pub service: String,
    pub nodes: Vec<String>,
    pub contribution: Interval,
    pub share: f64,
    pub counterfactual: RootStats,
    pub undoes: f64,
}

/// The coalition game over one baseline and one incident set of rows.
struct Game<'a> {
    table: &'a Table,
    model: Model,
    baseline: Vec<Noise>,
    incident: Vec<Noise>,
    /// (incident row, baseline row) per mixed row.
    pairs: Vec<(usize, usize)>,
    seed: u64,
    values: Vec<(f64, bool)>,
    outcomes: Vec<(f64, bool)>,
}

impl<'a> Game<'a> {
    fn new(
        table: &'a Table,
        baseline: &[&Row],
        incident: &[&Row],
        samples: usize,
        rng: &mut ChaCha8Rng,
    ) -> Game<'a> {
        let model = Model::fit(table, baseline);
        let noise = |rows: &[&Row]| {
            rows.iter()
                .map(|r| model.noise(table, r))
                .collect::<Vec<_>>()
        };
        let (baseline_noise, incident_noise) = (noise(baseline), noise(incident));
        let count = samples.max(1);
        let pairs = (0..count)
            .map(|k| {
                let i = if incident.len() <= count {
                    k % incident.len()
                } else {
                    rng.random_range(0..incident.len())
                };
                (i, rng.random_range(0..baseline.len()))
            })
            .collect();
        Game {
            table,
            model,
            baseline: baseline_noise,
            incident: incident_noise,
            pairs,
            seed: rng.random(),
            values: Vec::new(),
            outcomes: Vec::new(),
        }
    }

    /// The root over the mixed rows, `mask`'s nodes keeping their incident noise.
    fn run(&mut self, mask: u64) -> &mut [(f64, bool)] {
        self.outcomes.clear();
        for (k, &(i, b)) in self.pairs.iter().enumerate() {
            let (incident, baseline) = (&self.incident[i], &self.baseline[b]);
            let pick = |node: usize| {
                let (first, second) = if mask & (1 << node) != 0 {
                    (incident, baseline)
                } else {
                    (baseline, incident)
                };
                // A node that did not run in the chosen row (cut short by an earlier
                // failure) takes the other row's part rather than vanishing.
                let from = if first.latency[node].is_nan() {
                    second
                } else {
                    first
                };
                (from.latency[node], from.failed[node])
            };
            let seed = self.seed;
            let draw = |node: usize, callee: usize| {
                let bits = crate::seed::mix_seed(&[seed, k as u64, node as u64, callee as u64]);
                (bits >> 11) as f64 / (1u64 << 53) as f64
            };
            let outcome = self.model.run(self.table, pick, draw, &mut self.values);
            if !outcome.0.is_nan() {
                self.outcomes.push(outcome);
            }
        }
        &mut self.outcomes
    }

    fn value(&mut self, mask: u64, measure: Measure) -> f64 {
        measure.of(self.run(mask))
    }

    /// Shapley values and the change (all − none).
    fn attribute(
        &mut self,
        settings: &Settings,
        rng: &mut ChaCha8Rng,
    ) -> (Vec<f64>, f64, ShapleyCost) {
        let n = self.table.nodes.len();
        let (phi, cost) = shapley(n, settings.orders, rng, |mask| {
            self.value(mask, settings.measure)
        });
        let all = (1u64 << n) - 1;
        let change = self.value(all, settings.measure) - self.value(0, settings.measure);
        (phi, change, cost)
    }
}

/// Attributes the change of the root's measure from `baseline` to `incident` rows.
pub fn attribute(
    table: &Table,
    baseline: &[&Row],
    incident: &[&Row],
    settings: &Settings,
) -> Attribution {
    assert!(
        !baseline.is_empty() && !incident.is_empty(),
        "callers check both sets"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut game = Game::new(table, baseline, incident, settings.samples, &mut rng);
    let (phi, change, cost) = game.attribute(settings, &mut rng);
    let n = table.nodes.len();
    let all = (1u64 << n) - 1;
    let (base_value, inc_value) = (
        game.value(0, settings.measure),
        game.value(all, settings.measure),
    );
    let root_stats =
        |game: &mut Game, mask: u64| RootStats::of(game.run(mask), settings.breach_above_ms);
    let (baseline_root, incident_root) = (root_stats(&mut game, 0), root_stats(&mut game, all));
    let mut resampled: Vec<(Vec<f64>, f64)> = Vec::with_capacity(settings.bootstrap);
    for _ in 0..settings.bootstrap {
        let b = resample(baseline, &mut rng);
        let i = resample(incident, &mut rng);
        let mut game = Game::new(table, &b, &i, settings.samples / 2, &mut rng);
        let (phi, change, _) = game.attribute(settings, &mut rng);
        resampled.push((phi, change));
    }
    let change = observed_change(table, baseline, incident, settings, &mut rng, change);
    // Only a rise has causes to blame: a measure that fell is an improvement.
    let significant = change.low > 0.0 && change.value >= settings.measure.min_effect(base_value);
    let mut nodes: Vec<NodeAttribution> = (0..n)
        .map(|node| {
            let contribution = interval(phi[node], resampled.iter().map(|r| r.0[node]));
            let without = all & !(1 << node);
            let counterfactual_value = game.value(without, settings.measure);
            let counterfactual = root_stats(&mut game, without);
            let share = if change.value == 0.0 {
                0.0
            } else {
                contribution.value / change.value
            };
            NodeAttribution {
                node: table.nodes[node].name.clone(),
                service: table.nodes[node].service.clone(),
                mechanism: game.model.mechanisms[node].clone(),
                contribution,
                share,
                confident: significant && contribution.excludes_zero(change.value) && share >= 0.2,
                baseline: node_stats(table, baseline, node),
                incident: node_stats(table, incident, node),
                counterfactual,
                undoes: if inc_value == base_value {
                    0.0
                } else {
                    (inc_value - counterfactual_value) / (inc_value - base_value)
                },
            }
        })
        .collect();
    nodes.sort_by(|a, b| {
        (b.contribution.value * change.value.signum())
            .total_cmp(&(a.contribution.value * change.value.signum()))
    });
    let services = services(
        table, &mut game, settings, &phi, &resampled, change, inc_value, base_value,
    );
    Attribution {
        measure: settings.measure,
        baseline_traces: baseline.len(),
        incident_traces: incident.len(),
        baseline: baseline_root,
        incident: incident_root,
        change,
        significant,
        nodes,
        services,
        shapley: cost,
        bootstrap: settings.bootstrap,
    }
}

/// Every service with several nodes, its nodes' contributions summed (in each
/// resample too) and intervened on together.
#[allow(clippy::too_many_arguments)]
fn services(
    table: &Table,
    game: &mut Game,
    settings: &Settings,
    phi: &[f64],
    resampled: &[(Vec<f64>, f64)],
    change: Interval,
    inc_value: f64,
    base_value: f64,
) -> Vec<ServiceAttribution> {
    let mut groups: std::collections::BTreeMap<&str, Vec<usize>> =
        std::collections::BTreeMap::new();
    for (node, spec) in table.nodes.iter().enumerate() {
        if let Some(service) = &spec.service {
            groups.entry(service.as_str()).or_default().push(node);
        }
    }
    let all = (1u64 << table.nodes.len()) - 1;
    let mut services: Vec<ServiceAttribution> = groups
        .into_iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(service, nodes)| {
            let sum = |values: &[f64]| nodes.iter().map(|&n| values[n]).sum::<f64>();
            let contribution = interval(sum(phi), resampled.iter().map(|r| sum(&r.0)));
            let without = nodes.iter().fold(all, |mask, &n| mask & !(1 << n));
            let counterfactual_value = game.value(without, settings.measure);
            ServiceAttribution {
                service: service.to_owned(),
                nodes: nodes.iter().map(|&n| table.nodes[n].name.clone()).collect(),
                contribution,
                share: if change.value == 0.0 {
                    0.0
                } else {
                    contribution.value / change.value
                },
                counterfactual: RootStats::of(game.run(without), settings.breach_above_ms),
                undoes: if inc_value == base_value {
                    0.0
                } else {
                    (inc_value - counterfactual_value) / (inc_value - base_value)
                },
            }
        })
        .collect();
    services.sort_by(|a, b| b.contribution.value.total_cmp(&a.contribution.value));
    services
}

/// Resamples of the observed change behind the change's interval: cheap (no model),
/// so many, for the tails of a 98 % interval.
const CHANGE_RESAMPLES: usize = 2000;

/// The change with a 98 % percentile bootstrap interval (its low end is a 99 %
/// one-sided bound: a rise is called only past it) over the roots as observed,
/// each set resampled at its own size.
fn observed_change(
    table: &Table,
    baseline: &[&Row],
    incident: &[&Row],
    settings: &Settings,
    rng: &mut ChaCha8Rng,
    change: f64,
) -> Interval {
    let roots = |rows: &[&Row]| -> Vec<(f64, bool)> {
        rows.iter()
            .map(|r| (r.latency[table.root], r.failed[table.root]))
            .filter(|o| !o.0.is_nan())
            .collect()
    };
    let (baseline, incident) = (roots(baseline), roots(incident));
    let draw = |from: &[(f64, bool)], rng: &mut ChaCha8Rng| -> Vec<(f64, bool)> {
        (0..from.len())
            .map(|_| from[rng.random_range(0..from.len())])
            .collect()
    };
    let mut changes: Vec<f64> = (0..CHANGE_RESAMPLES)
        .map(|_| {
            let (mut b, mut i) = (draw(&baseline, rng), draw(&incident, rng));
            let measure = match (settings.measure, settings.breach_quantile) {
                // A p99 read from a couple of hundred baseline traces is set by the
                // slowest two or three: held fixed, its own noise would pass for a
                // change (a clean run was blamed so, against a 24-second baseline).
                (Measure::Breach { .. }, Some(q)) => Measure::Breach {
                    above_ms: quantile(&mut b, q),
                },
                (measure, _) => measure,
            };
            measure.of(&mut i) - measure.of(&mut b)
        })
        .collect();
    changes.sort_by(f64::total_cmp);
    Interval {
        value: change,
        low: resample_percentile(&changes, 0.01),
        high: resample_percentile(&changes, 0.99),
    }
}

/// Rows drawn with replacement (as references into the same table).
fn resample<'r>(rows: &[&'r Row], rng: &mut ChaCha8Rng) -> Vec<&'r Row> {
    (0..rows.len())
        .map(|_| rows[rng.random_range(0..rows.len())])
        .collect()
}

fn interval(value: f64, resampled: impl Iterator<Item = f64>) -> Interval {
    let mut values: Vec<f64> = resampled.collect();
    if values.is_empty() {
        return Interval {
            value,
            low: value,
            high: value,
        };
    }
    values.sort_by(f64::total_cmp);
    Interval {
        value,
        low: resample_percentile(&values, 0.05),
        high: resample_percentile(&values, 0.95),
    }
}

fn node_stats(table: &Table, rows: &[&Row], node: usize) -> NodeStats {
    let mut latencies: Vec<f64> = rows
        .iter()
        .map(|r| r.latency[node])
        .filter(|l| !l.is_nan())
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| nearest_rank(latencies.len(), q).map(|i| latencies[i]);
    let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for kind in rows.iter().filter_map(|r| r.kinds[node].as_deref()) {
        *kinds.entry(kind).or_default() += 1;
    }
    let failed = rows.iter().filter(|r| r.failed[node]).count();
    let callees = &table.nodes[node].callees;
    let began_here = rows
        .iter()
        .filter(|r| r.failed[node] && !callees.iter().any(|&c| r.failed[c]))
        .count();
    let rate = |count: usize| {
        if latencies.is_empty() {
            0.0
        } else {
            count as f64 / latencies.len() as f64
        }
    };
    NodeStats {
        runs: latencies.len(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        failure_rate: rate(failed),
        began_here_rate: rate(began_here),
        top_error: kinds
            .into_iter()
            .max_by_key(|&(k, n)| (n, std::cmp::Reverse(k)))
            .map(|(k, _)| k.to_owned()),
    }
}
