//! The structural model: each node's latency is a function of its callees' latencies
//! plus its own (intrinsic) noise, and it fails when it fails by itself or a callee's
//! failure reaches it (noisy-OR). Fitted on a baseline; inverted on any row to give
//! that row's noise; run forward on mixed noise for counterfactuals.

use nalgebra::{DMatrix, DVector};
use serde::Serialize;

use super::table::{Row, Table};

/// How a node's latency follows from its callees', chosen by fit on the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mechanism {
    /// Calls nothing: its latency is its noise.
    Leaf,
    /// Calls its callees one after another.
    Sum,
    /// Calls its callees in parallel and waits for all.
    Max,
    /// Least squares over its callees (a cache in front of a store: about half of it).
    Linear { intercept: f64, weights: Vec<f64> },
}

/// A linear fit must explain this much more of the variance than a sum or a max to be
/// chosen over them: they are what services do, and need no coefficients.
const LINEAR_GAIN: f64 = 0.9;

impl Mechanism {
    fn apply(&self, callees: impl Iterator<Item = f64>) -> f64 {
        let callees = callees.map(|x| if x.is_nan() { 0.0 } else { x });
        match self {
            Mechanism::Leaf => 0.0,
            Mechanism::Sum => callees.sum(),
            Mechanism::Max => callees.fold(0.0, f64::max),
            Mechanism::Linear { intercept, weights } => {
                intercept + callees.zip(weights).map(|(x, w)| x * w).sum::<f64>()
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Mechanism::Leaf => "own time".into(),
            Mechanism::Sum => "sum of its calls + own time".into(),
            Mechanism::Max => "slowest of its parallel calls + own time".into(),
            Mechanism::Linear { weights, .. } => {
                let weights: Vec<String> = weights.iter().map(|w| format!("{w:.2}")).collect();
                format!("linear in its calls ({}) + own time", weights.join(", "))
            }
        }
    }
}

/// A node's intrinsic part in one row: the latency its callees do not explain and
/// whether it failed by itself. NaN and false when it did not run.
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    pub latency: Vec<f64>,
    pub failed: Vec<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub mechanisms: Vec<Mechanism>,
    /// Per node, per callee (in `callees` order): how often the callee's failure made
    /// the node fail, on the fitted rows (1 when the callee never failed there).
    pub reach: Vec<Vec<f64>>,
}

impl Model {
    /// Fits every node's mechanism and failure reach on `rows` of the table.
    pub fn fit(table: &Table, rows: &[&Row]) -> Model {
        let mechanisms = (0..table.nodes.len())
            .map(|node| fit_mechanism(table, node, rows))
            .collect();
        let reach = table
            .nodes
            .iter()
            .enumerate()
            .map(|(node, n)| {
                n.callees
                    .iter()
                    .map(|&callee| {
                        let failed: Vec<&&Row> = rows.iter().filter(|r| r.failed[callee]).collect();
                        if failed.is_empty() {
                            1.0
                        } else {
                            failed.iter().filter(|r| r.failed[node]).count() as f64
                                / failed.len() as f64
                        }
                    })
                    .collect()
            })
            .collect();
        Model { mechanisms, reach }
    }

    /// The row's noise under this model.
    pub fn noise(&self, table: &Table, row: &Row) -> Noise {
        let n = table.nodes.len();
        let mut noise = Noise {
            latency: vec![f64::NAN; n],
            failed: vec![false; n],
        };
        for (node, spec) in table.nodes.iter().enumerate() {
            if row.latency[node].is_nan() {
                continue;
            }
            let explained =
                self.mechanisms[node].apply(spec.callees.iter().map(|&c| row.latency[c]));
            noise.latency[node] = row.latency[node] - explained;
            noise.failed[node] = row.failed[node]
                && !spec
                    .callees
                    .iter()
                    .zip(&self.reach[node])
                    .any(|(&c, &reach)| row.failed[c] && reach > 0.0);
        }
        noise
    }

    /// The root's latency and failure for noise given per node by `pick` (NaN: the
    /// node does not run). `draw(node, callee)` is a uniform in [0, 1) that decides
    /// whether a callee's failure reaches a node whose reach is below 1.
    pub fn run(
        &self,
        table: &Table,
        pick: impl Fn(usize) -> (f64, bool),
        draw: impl Fn(usize, usize) -> f64,
        values: &mut Vec<(f64, bool)>,
    ) -> (f64, bool) {
        values.clear();
        values.resize(table.nodes.len(), (f64::NAN, false));
        for &node in &table.order {
            let (noise, failed_alone) = pick(node);
            if noise.is_nan() {
                continue;
            }
            let callees = &table.nodes[node].callees;
            let latency = noise + self.mechanisms[node].apply(callees.iter().map(|&c| values[c].0));
            let failed = failed_alone
                || callees
                    .iter()
                    .zip(&self.reach[node])
                    .any(|(&c, &reach)| values[c].1 && (reach >= 1.0 || draw(node, c) < reach));
            values[node] = (latency, failed);
        }
        values[table.root]
    }
}

fn fit_mechanism(table: &Table, node: usize, rows: &[&Row]) -> Mechanism {
    let callees = &table.nodes[node].callees;
    if callees.is_empty() {
        return Mechanism::Leaf;
    }
    let present: Vec<&&Row> = rows.iter().filter(|r| !r.latency[node].is_nan()).collect();
    if present.len() < 2 {
        return Mechanism::Sum;
    }
    let variance_of = |mechanism: &Mechanism| {
        let residuals: Vec<f64> = present
            .iter()
            .map(|r| r.latency[node] - mechanism.apply(callees.iter().map(|&c| r.latency[c])))
            .collect();
        variance(&residuals)
    };
    let simple = [Mechanism::Sum, Mechanism::Max]
        .into_iter()
        .map(|m| (variance_of(&m), m))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("two");
    match least_squares(node, callees, &present) {
        Some(linear) if variance_of(&linear) < LINEAR_GAIN * simple.0 => linear,
        _ => simple.1,
    }
}

/// Ordinary least squares with an intercept, through the normal equations (a handful
/// of callees: the matrix is tiny whatever the number of rows).
fn least_squares(node: usize, callees: &[usize], rows: &[&&Row]) -> Option<Mechanism> {
    let k = callees.len() + 1;
    let mut xtx = DMatrix::<f64>::zeros(k, k);
    let mut xty = DVector::<f64>::zeros(k);
    let mut x = vec![0.0; k];
    for row in rows {
        x[0] = 1.0;
        for (slot, &c) in x[1..].iter_mut().zip(callees) {
            *slot = if row.latency[c].is_nan() {
                0.0
            } else {
                row.latency[c]
            };
        }
        for i in 0..k {
            xty[i] += x[i] * row.latency[node];
            for j in 0..k {
                xtx[(i, j)] += x[i] * x[j];
            }
        }
    }
    let solution = xtx.lu().solve(&xty)?;
    if solution.iter().any(|v| !v.is_finite()) {
        return None;
    }
    Some(Mechanism::Linear {
        intercept: solution[0],
        weights: solution.iter().skip(1).copied().collect(),
    })
}

pub(super) fn variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::table::from_csv;

    fn table(csv: &str, graph: &str) -> Table {
        from_csv(csv, graph, None).unwrap()
    }

    #[test]
    fn the_fit_tells_sequential_from_parallel_calls_and_inverts_exactly() {
        // web = a + b + noise; par = max(a, b) + noise.
        let mut seq = String::from("web,a,b\n");
        let mut par = String::from("par,a,b\n");
        for i in 0..200 {
            let (a, b) = ((i % 7) as f64 + 1.0, ((i * 3) % 11) as f64 + 1.0);
            let own = (i % 5) as f64 * 0.1;
            seq += &format!("{},{a},{b}\n", a + b + own);
            par += &format!("{},{a},{b}\n", a.max(b) + own);
        }
        let seq = table(&seq, "web -> a\nweb -> b\n");
        let par = table(&par, "par -> a\npar -> b\n");
        fn rows(t: &Table) -> Vec<&Row> {
            t.rows.iter().collect()
        }
        let seq_model = Model::fit(&seq, &rows(&seq));
        let par_model = Model::fit(&par, &rows(&par));
        assert_eq!(seq_model.mechanisms[0], Mechanism::Sum);
        assert_eq!(par_model.mechanisms[0], Mechanism::Max);
        // Run forward on a row's own noise: the row comes back.
        let row = &seq.rows[17];
        let noise = seq_model.noise(&seq, row);
        let mut values = Vec::new();
        let (latency, failed) = seq_model.run(
            &seq,
            |n| (noise.latency[n], noise.failed[n]),
            |_, _| 0.0,
            &mut values,
        );
        assert!((latency - row.latency[0]).abs() < 1e-9 && !failed);
    }

    #[test]
    fn a_callee_that_always_takes_its_caller_down_reaches_it_and_is_not_its_callers_fault() {
        let table = table(
            "web,db,failed_web,failed_db\n5,1,0,0\n5,1,1,1\n5,1,1,1\n5,1,1,0\n",
            "web -> db\n",
        );
        let rows: Vec<&Row> = table.rows.iter().collect();
        let model = Model::fit(&table, &rows);
        assert_eq!(model.reach[0], vec![1.0]);
        let noise = |r: usize| model.noise(&table, &table.rows[r]).failed;
        assert_eq!(
            noise(1),
            vec![false, true],
            "the db's failure, not the web's"
        );
        assert_eq!(noise(3), vec![true, false], "the web failed by itself");
    }
}
