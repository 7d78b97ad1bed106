//! Why did it fail: causal attribution over the call graph (`redline explain`).
//!
//! The causal graph is the call graph reversed: a callee's latency and failures cause
//! its caller's. Each node's latency is a fitted function of its callees' plus its own
//! noise, and its failure a noisy-OR of theirs and its own ([`model`]). A change at the
//! root between a baseline and an incident is split among the nodes' own noise by
//! Shapley values, with bootstrap intervals, and each node's intervention
//! `do(node = baseline)` says how much of the change it would undo ([`attribute`]).
//!
//! # Layout
//! - [`table`] — the rows: flow sessions from records, a CSV with a call graph
//! - [`spans`] — server spans under the requests, deepening the graph
//! - [`files`] — a run folder's records and spans, read into a table
//! - [`model`] — mechanisms fitted, noise inverted, the root rerun
//! - [`shapley`] — exact or sampled Shapley values
//! - [`attribute`] — the game, the bootstrap, the interventions
//! - [`render`] — the terminal text

pub mod attribute;
pub mod files;
pub mod model;
pub mod render;
pub mod shapley;
pub mod spans;
pub mod table;

use serde::Serialize;

pub use attribute::{Attribution, Measure, NodeAttribution, Settings};
pub use table::Table;

/// What the incident is compared with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Another run (`--baseline`): the incident is this run, or its `--incident` window.
    BaselineRun,
    /// A window of the run (`--incident`) against the rest of it.
    Window,
    /// The run's breaching traces against the run as a whole (DoWhy's
    /// `attribute_anomalies`, for a set of outliers).
    Tail,
}

/// One of the top causes, with what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Cause {
    pub node: String,
    pub service: Option<String>,
    /// Share of the change.
    pub share: f64,
    /// Share of the change `do(node = baseline)` undoes.
    pub undoes: f64,
    pub suggestion: String,
}

/// What `redline explain` found, as `explain.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Explanation {
    pub mode: Mode,
    /// The node explained: `session` for a flow.
    pub root: String,
    /// The call graph: each node and the nodes it calls.
    pub graph: Vec<(String, Vec<String>)>,
    /// Up to three causes held with confidence; none when the change is not
    /// significant or no node carries it alone.
    pub causes: Vec<Cause>,
    /// Why there are no causes, when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_cause: Option<String>,
    pub attribution: Attribution,
    /// What was left out or assumed.
    pub notes: Vec<String>,
    /// Wall time of the attribution, seconds.
    pub seconds: f64,
}

/// Which rows are the incident and which the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub from_us: u64,
    pub to_us: u64,
}

/// The measure to explain, as chosen on the command line; the breach threshold
/// defaults to the baseline root's p99.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub measure: MeasureChoice,
    pub breach_above_ms: Option<f64>,
    pub bootstrap: usize,
    pub samples: usize,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeasureChoice {
    /// Failed, or slower than the breach threshold.
    Breach,
    Mean,
    P50,
    P99,
    Failures,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            measure: MeasureChoice::Breach,
            breach_above_ms: None,
            bootstrap: 30,
            samples: 4000,
            seed: 42,
        }
    }
}

/// A breach, unless `--breach-above` says otherwise: slower than the baseline's p99.
const BREACH_QUANTILE: f64 = 0.99;

/// Explains `table` (an incident run) against `baseline` (another run), a window of
/// it, or its own tail.
pub fn explain(
    table: Table,
    baseline: Option<Table>,
    window: Option<Window>,
    options: &Options,
) -> Result<Explanation, String> {
    let started = std::time::Instant::now();
    let mut table = table;
    let (mode, baseline_rows, incident_rows) = split(&mut table, baseline, window)?;
    let root_latencies: Vec<f64> = baseline_rows
        .iter()
        .map(|&r| table.rows[r].latency[table.root])
        .collect();
    let breach_above_ms = options
        .breach_above_ms
        .unwrap_or_else(|| percentile(root_latencies, BREACH_QUANTILE));
    let (baseline_rows, incident_rows) = match mode {
        Mode::Tail => {
            let breaching: Vec<usize> = incident_rows
                .into_iter()
                .filter(|&r| {
                    let row = &table.rows[r];
                    row.failed[table.root] || row.latency[table.root] >= breach_above_ms
                })
                .collect();
            if breaching.is_empty() {
                return Err(format!(
                    "no trace failed or took {breach_above_ms:.1} ms or more: nothing to explain (set --breach-above lower, or give a --baseline)"
                ));
            }
            (baseline_rows, breaching)
        }
        _ => (baseline_rows, incident_rows),
    };
    let settings = Settings {
        measure: match options.measure {
            MeasureChoice::Breach => Measure::Breach {
                above_ms: breach_above_ms,
            },
            MeasureChoice::Mean => Measure::Mean,
            MeasureChoice::P50 => Measure::Quantile { q: 0.5 },
            MeasureChoice::P99 => Measure::Quantile { q: 0.99 },
            MeasureChoice::Failures => Measure::FailureRate,
        },
        breach_above_ms,
        breach_quantile: options.breach_above_ms.is_none().then_some(BREACH_QUANTILE),
        bootstrap: options.bootstrap,
        samples: options.samples,
        orders: 64,
        seed: options.seed,
    };
    let rows = |which: &[usize]| which.iter().map(|&r| &table.rows[r]).collect::<Vec<_>>();
    let attribution = attribute::attribute(
        &table,
        &rows(&baseline_rows),
        &rows(&incident_rows),
        &settings,
    );
    let (causes, no_cause) = causes(&attribution, mode);
    Ok(Explanation {
        mode,
        root: table.nodes[table.root].name.clone(),
        graph: table
            .nodes
            .iter()
            .map(|n| {
                let callees = n.callees.iter().map(|&c| table.nodes[c].name.clone());
                (n.name.clone(), callees.collect())
            })
            .collect(),
        causes,
        no_cause,
        attribution,
        notes: table.notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The mode, and the baseline and incident rows (indices into `table.rows`, the
/// baseline run's rows appended to it).
fn split(
    table: &mut Table,
    baseline: Option<Table>,
    window: Option<Window>,
) -> Result<(Mode, Vec<usize>, Vec<usize>), String> {
    let in_window = |row: &table::Row, w: &Window| (w.from_us..w.to_us).contains(&row.start_us);
    let own: Vec<usize> = match window {
        Some(w) => (0..table.rows.len())
            .filter(|&r| in_window(&table.rows[r], &w))
            .collect(),
        None => (0..table.rows.len()).collect(),
    };
    if own.is_empty() {
        return Err("no trace started in the --incident window".into());
    }
    match (baseline, window) {
        (Some(baseline), _) => {
            let added = append(table, baseline)?;
            Ok((Mode::BaselineRun, added, own))
        }
        (None, Some(_)) => {
            let rest: Vec<usize> = (0..table.rows.len()).filter(|r| !own.contains(r)).collect();
            if rest.len() < 10 {
                return Err(format!(
                    "only {} traces outside the --incident window: too few for a baseline (give a --baseline run)",
                    rest.len()
                ));
            }
            Ok((Mode::Window, rest, own))
        }
        (None, None) => Ok((Mode::Tail, own.clone(), own)),
    }
}

/// Appends the baseline's rows, its columns matched to the table's by name; a
/// baseline whose graph differs is another test, not a baseline.
fn append(table: &mut Table, baseline: Table) -> Result<Vec<usize>, String> {
    let missing: Vec<&str> = table
        .nodes
        .iter()
        .filter(|n| baseline.index(&n.name).is_none())
        .map(|n| n.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the baseline has no {}: is it a run of another spec? A baseline must run the same flow",
            missing.join(", ")
        ));
    }
    for node in &table.nodes {
        let theirs = &baseline.nodes[baseline.index(&node.name).expect("checked")];
        let names = |t: &Table, callees: &[usize]| {
            let mut names: Vec<String> = callees.iter().map(|&c| t.nodes[c].name.clone()).collect();
            names.sort();
            names
        };
        if names(table, &node.callees) != names(&baseline, &theirs.callees) {
            return Err(format!(
                "`{}` calls other nodes in the baseline: is it a run of another spec?",
                node.name
            ));
        }
    }
    if baseline.rows.is_empty() {
        return Err("the baseline has no complete traces".into());
    }
    let columns: Vec<usize> = table
        .nodes
        .iter()
        .map(|n| baseline.index(&n.name).expect("checked"))
        .collect();
    let first = table.rows.len();
    for row in baseline.rows {
        table.rows.push(table::Row {
            start_us: row.start_us,
            latency: columns.iter().map(|&c| row.latency[c]).collect(),
            failed: columns.iter().map(|&c| row.failed[c]).collect(),
            kinds: columns.iter().map(|&c| row.kinds[c].clone()).collect(),
        });
    }
    Ok((first..table.rows.len()).collect())
}

/// The q-quantile of the values that are numbers; none is infinitely far.
fn percentile(mut values: Vec<f64>, q: f64) -> f64 {
    values.retain(|v| !v.is_nan());
    values.sort_by(f64::total_cmp);
    attribute::nearest_rank(values.len(), q).map_or(f64::INFINITY, |at| values[at])
}

/// The top three confident nodes, each with a suggestion; or why there is none.
fn causes(attribution: &Attribution, mode: Mode) -> (Vec<Cause>, Option<String>) {
    if !attribution.significant {
        let change = &attribution.change;
        return (
            Vec::new(),
            Some(format!(
                "the {} did not change significantly ({} [{} … {}]): nothing to blame",
                attribution.measure.describe(),
                render::signed(change.value, &attribution.measure),
                render::signed(change.low, &attribution.measure),
                render::signed(change.high, &attribution.measure),
            )),
        );
    }
    let causes: Vec<Cause> = attribution
        .nodes
        .iter()
        .filter(|n| n.confident)
        .take(3)
        .map(|n| Cause {
            node: n.node.clone(),
            service: n.service.clone(),
            share: n.share,
            undoes: n.undoes,
            suggestion: render::suggestion(attribution, n, mode),
        })
        .collect();
    let none = causes.is_empty().then(|| {
        "the change is significant but spread: no node carries a fifth of it with confidence"
            .to_owned()
    });
    (causes, none)
}
