//! The diff, Diffy's method made aware of LLM answers. Every replayed request has
//! three answers: primary (P), candidate (C) and secondary (S, the primary's version
//! again). P–C differences are the raw signal; P–S differences are what the same
//! version does anyway (sampling at temperature > 0, IDs, timestamps). A field is
//! flagged only when its raw difference clears the noise by an absolute and a relative
//! margin with stated significance:
//! - **values** (every JSON leaf, by JSON Pointer): the share of requests where P and
//!   C differ against the share where P and S do; a one-sided two-proportion z-test
//!   and Newcombe's interval of the difference;
//! - **text** (chat content, completions): chrF of P–C against chrF of P–S; the share
//!   of P–C pairs below the noise's 5th percentile against the share of P–S pairs
//!   (the same z-test and interval; Mann–Whitney, ROUGE-L and edit similarity are
//!   reported beside it);
//! - **tool calls**: F1 over (name, arguments by value), a pair differing when F1 < 1;
//! - **timing** (TTFT, ITL, E2E, output tokens): flagged when the candidate's median
//!   is beyond both the primary's and the secondary's by the margin, the same way,
//!   with Mann–Whitney against each for significance and a bootstrap interval of the
//!   ratio to the primary;
//! - **outcome**: a failure or a different status is a difference like any value.
//!
//! Each flagged field names the module the attribution gives it.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use statrs::distribution::{ContinuousCDF, Normal};

use super::config::{ArrayMode, DiffConfig};
use super::replay::{Answer, ReplayConfig, Replayed, Side};
use super::similarity::{Similarity, tool_call_f1};
use crate::record::Outcome;
use crate::report::compare::{bootstrap, mann_whitney, quantile};

/// Examples kept per flagged field.
const EXAMPLES: usize = 3;
/// Characters of a value shown in an example.
const EXAMPLE_CHARS: usize = 160;
/// The format version of `diff.json`.
pub const DIFF_VERSION: u32 = 1;

/// What kind of field a verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    Value,
    Text,
    ToolCalls,
    Timing,
    Outcome,
}

/// What the diff concluded about a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate differs beyond the noise and the margins.
    Flagged,
    /// It differs as much between primary and secondary: ignored.
    Noise,
    /// It differs, but not beyond the margins.
    Within,
}

/// One request where primary and candidate differ in a field.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Example {
    pub trace_id: String,
    pub primary: String,
    pub candidate: String,
}

/// One field's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FieldVerdict {
    /// `METHOD /path`.
    pub endpoint: String,
    /// A JSON Pointer, or `@ttft`, `@itl`, `@e2e`, `@output_tokens`, `@outcome`.
    pub field: String,
    pub kind: FieldKind,
    /// The module the attribution gives the field; none when it names none.
    pub module: Option<String>,
    pub verdict: Verdict,
    /// What `candidate` and `noise` measure.
    pub measure: String,
    /// Requests compared.
    pub n: u64,
    /// The measure for primary vs candidate.
    pub candidate: f64,
    /// The measure for primary vs secondary.
    pub noise: f64,
    /// 95 % interval of `candidate − noise` (rates and shares) or of the candidate's
    /// median ratio (timing).
    pub interval: [f64; 2],
    /// One-sided for rates and text, two-sided for timing.
    pub p_value: f64,
    pub detail: String,
    pub examples: Vec<Example>,
}

impl FieldVerdict {
    /// How far the candidate is from the noise, for sorting by significance.
    fn effect(&self) -> f64 {
        match self.kind {
            // The candidate's distance from the nearer copy of the primary's version.
            FieldKind::Timing => {
                let to_noise = self.candidate / self.noise.max(f64::MIN_POSITIVE);
                (self.candidate - 1.0).abs().min((to_noise - 1.0).abs())
            }
            _ => self.candidate - self.noise,
        }
    }
}

/// How each side did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SideCounts {
    pub url: String,
    pub ok: u64,
    pub failed: u64,
    /// Failures by kind (`connect_refused`, `http_5xx`, `timeout`…).
    pub failures: BTreeMap<String, u64>,
}

/// `diff.json`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DiffReport {
    pub version: u32,
    pub recording: String,
    /// Requests replayed.
    pub requests: u64,
    /// `secondary`, or `primary twice` when no secondary was given.
    pub noise_baseline: String,
    pub sides: BTreeMap<String, SideCounts>,
    /// Sorted by effect, largest first.
    pub flagged: Vec<FieldVerdict>,
    /// Fields that differ as much in the baseline, with their noise.
    pub noise: Vec<FieldVerdict>,
    /// Fields that differ, within the margins.
    pub within: Vec<FieldVerdict>,
    /// Fields compared and equal on every request.
    pub same: u64,
    /// Flagged fields by module (`unattributed` for those the attribution misses).
    pub modules: BTreeMap<String, u64>,
    /// Recording lines that could not be read.
    pub skipped: Vec<String>,
}

impl DiffReport {
    pub fn has_differences(&self) -> bool {
        !self.flagged.is_empty()
    }
}

/// The JSON Schema of `diff.json`.
pub fn schema() -> Value {
    serde_json::to_value(schemars::schema_for!(DiffReport)).expect("a schema serializes")
}

/// A JSON leaf as the diff compares it.
#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    Scalar(Value),
    Text(String),
    Calls(Vec<(String, String)>),
}

impl Leaf {
    fn show(&self) -> String {
        let text = match self {
            Leaf::Scalar(v) => v.to_string(),
            Leaf::Text(t) => t.clone(),
            Leaf::Calls(calls) => calls
                .iter()
                .map(|(n, a)| format!("{n}({a})"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        crate::record::cut_to(&text, EXAMPLE_CHARS)
    }
}

/// The tallies of one field over all requests.
#[derive(Default)]
struct Tally {
    kind: Option<FieldKind>,
    raw: Counts,
    noise: Counts,
    sims_raw: Vec<Similarity>,
    sims_noise: Vec<Similarity>,
    /// Raw differences, each with its chrF for a text field (the least alike are
    /// kept), else 0 (the first are kept).
    examples: Vec<(f64, Example)>,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    n: u64,
    differ: u64,
}

impl Counts {
    fn rate(self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.differ as f64 / self.n as f64
        }
    }
}

/// Compares every replayed request's answers and judges each field.
pub fn diff(
    replayed: &[Replayed],
    config: &DiffConfig,
    sides: BTreeMap<String, SideCounts>,
    recording: &str,
    noise_baseline: &str,
) -> DiffReport {
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for r in replayed {
        let [p, c, s] = Side::ALL.map(|side| &r.answers[&side]);
        compare(&mut tallies, config, r, p, c, true);
        compare(&mut tallies, config, r, p, s, false);
    }
    let mut verdicts: Vec<FieldVerdict> = tallies
        .into_iter()
        .filter_map(|((endpoint, field), tally)| judge(&endpoint, &field, tally, config))
        .collect();
    verdicts.extend(timing_verdicts(replayed, config));
    let mut report = DiffReport {
        version: DIFF_VERSION,
        recording: recording.to_owned(),
        requests: replayed.len() as u64,
        noise_baseline: noise_baseline.to_owned(),
        sides,
        flagged: Vec::new(),
        noise: Vec::new(),
        within: Vec::new(),
        same: 0,
        modules: BTreeMap::new(),
        skipped: Vec::new(),
    };
    verdicts.sort_by(|a, b| b.effect().total_cmp(&a.effect()));
    for verdict in verdicts {
        let differed =
            verdict.candidate != 0.0 || verdict.noise != 0.0 || verdict.kind == FieldKind::Timing;
        if !differed {
            report.same += 1;
            continue;
        }
        match verdict.verdict {
            Verdict::Flagged => {
                let module = verdict.module.clone().unwrap_or("unattributed".into());
                *report.modules.entry(module).or_default() += 1;
                report.flagged.push(verdict);
            }
            Verdict::Noise => report.noise.push(verdict),
            Verdict::Within => report.within.push(verdict),
        }
    }
    report
}

/// One pair of answers (P–C when `raw`, else P–S) into the tallies.
fn compare(
    tallies: &mut BTreeMap<(String, String), Tally>,
    config: &DiffConfig,
    replayed: &Replayed,
    a: &Answer,
    b: &Answer,
    raw: bool,
) {
    let endpoint = &replayed.endpoint;
    let outcome = |x: &Answer| match &x.record.error {
        None => Leaf::Scalar(Value::from(format!("{}", x.record.status.unwrap_or(0)))),
        Some(e) => Leaf::Scalar(Value::from(format!(
            "{} {}",
            e.kind,
            x.record.status.unwrap_or(0)
        ))),
    };
    let mut add = |field: String, kind: FieldKind, x: Option<&Leaf>, y: Option<&Leaf>| {
        let tolerance = config.tolerance(endpoint, &field);
        let tally = tallies.entry((endpoint.clone(), field)).or_default();
        tally.kind.get_or_insert(kind);
        let mut alike = 0.0;
        let differ = match (x, y) {
            (Some(Leaf::Text(x)), Some(Leaf::Text(y))) => {
                let sims = if raw {
                    &mut tally.sims_raw
                } else {
                    &mut tally.sims_noise
                };
                let similarity = Similarity::of(x, y);
                alike = similarity.chrf;
                sims.push(similarity);
                x != y
            }
            (Some(Leaf::Calls(x)), Some(Leaf::Calls(y))) => tool_call_f1(x, y) < 1.0,
            (Some(x), Some(y)) => !same_value(x, y, tolerance),
            _ => true,
        };
        let counts = if raw {
            &mut tally.raw
        } else {
            &mut tally.noise
        };
        counts.n += 1;
        counts.differ += u64::from(differ);
        let kept = tally.examples.len() == EXAMPLES;
        if raw && differ && (!kept || alike < tally.examples[EXAMPLES - 1].0) {
            let show = |l: Option<&Leaf>| l.map_or("(absent)".to_owned(), Leaf::show);
            let example = Example {
                trace_id: replayed.trace_id.clone(),
                primary: show(x),
                candidate: show(y),
            };
            let at = tally.examples.partition_point(|(a, _)| *a <= alike);
            tally.examples.insert(at, (alike, example));
            tally.examples.truncate(EXAMPLES);
        }
    };
    let (oa, ob) = (outcome(a), outcome(b));
    add("@outcome".into(), FieldKind::Outcome, Some(&oa), Some(&ob));
    if a.record.outcome != Outcome::Ok || b.record.outcome != Outcome::Ok {
        return;
    }
    let (fa, fb) = (leaves(a, endpoint, config), leaves(b, endpoint, config));
    let fields: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    for field in fields {
        let (x, y) = (fa.get(field), fb.get(field));
        let kind = match x.or(y) {
            Some(Leaf::Text(_)) => FieldKind::Text,
            Some(Leaf::Calls(_)) => FieldKind::ToolCalls,
            _ => FieldKind::Value,
        };
        add(field.clone(), kind, x, y);
    }
}

fn same_value(x: &Leaf, y: &Leaf, tolerance: f64) -> bool {
    match (x, y) {
        (Leaf::Scalar(Value::Number(a)), Leaf::Scalar(Value::Number(b))) => {
            match (a.as_f64(), b.as_f64()) {
                (Some(a), Some(b)) => (a - b).abs() <= tolerance,
                _ => a == b,
            }
        }
        _ => x == y,
    }
}

/// An answer's leaves by JSON Pointer: its JSON, or its whole text at `""`.
fn leaves(answer: &Answer, endpoint: &str, config: &DiffConfig) -> BTreeMap<String, Leaf> {
    let mut out = BTreeMap::new();
    match (&answer.json, &answer.text) {
        (Some(json), _) => walk(json, String::new(), endpoint, config, &mut out),
        (None, Some(text)) => {
            out.insert(String::new(), Leaf::Text(text.clone()));
        }
        (None, None) => {}
    }
    out
}

fn walk(
    value: &Value,
    pointer: String,
    endpoint: &str,
    config: &DiffConfig,
    out: &mut BTreeMap<String, Leaf>,
) {
    if !pointer.is_empty() && config.ignored(endpoint, &pointer) {
        return;
    }
    match value {
        Value::String(text) if config.is_text(endpoint, &pointer) => {
            out.insert(pointer, Leaf::Text(text.clone()));
        }
        Value::Array(calls) if pointer.ends_with("/tool_calls") => {
            let calls = calls
                .iter()
                .map(|c| {
                    let text = |p: &str| c.pointer(p).and_then(Value::as_str).unwrap_or("");
                    (
                        text("/function/name").to_owned(),
                        text("/function/arguments").to_owned(),
                    )
                })
                .collect();
            out.insert(pointer, Leaf::Calls(calls));
        }
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let child_pointer = format!("{pointer}/{}", escape(key));
                walk(child, child_pointer, endpoint, config, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (segment, item) in array_segments(items, config.array_mode(endpoint, &pointer)) {
                walk(item, format!("{pointer}/{segment}"), endpoint, config, out);
            }
        }
        _ => {
            out.insert(pointer, Leaf::Scalar(value.clone()));
        }
    }
}

/// Each element of an array with the pointer segment that names it.
fn array_segments(items: &[Value], mode: ArrayMode) -> Vec<(String, &Value)> {
    match mode {
        ArrayMode::Ordered => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        ArrayMode::Set => {
            let mut sorted: Vec<&Value> = items.iter().collect();
            sorted.sort_by_cached_key(|v| v.to_string());
            sorted
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect()
        }
        ArrayMode::Key(field) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = match v.get(&field) {
                    Some(Value::String(s)) => escape(s),
                    Some(other) => escape(&other.to_string()),
                    None => i.to_string(),
                };
                (key, v)
            })
            .collect(),
    }
}

/// A key as a JSON Pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn judge(endpoint: &str, field: &str, tally: Tally, config: &DiffConfig) -> Option<FieldVerdict> {
    let kind = tally.kind?;
    let module = config.module(endpoint, field).map(str::to_owned);
    let verdict = match kind {
        FieldKind::Text if !tally.sims_raw.is_empty() && !tally.sims_noise.is_empty() => {
            judge_text(&tally, config)
        }
        _ => judge_rate(tally.raw, tally.noise, config),
    };
    Some(FieldVerdict {
        endpoint: endpoint.to_owned(),
        field: field.to_owned(),
        kind,
        module,
        examples: match verdict.verdict {
            Verdict::Flagged | Verdict::Within => tally.examples.into_iter().map(|e| e.1).collect(),
            Verdict::Noise => tally.examples.into_iter().take(1).map(|e| e.1).collect(),
        },
        ..verdict
    })
}

/// A verdict before its field is named.
fn unnamed(verdict: Verdict, measure: &str, n: u64) -> FieldVerdict {
    FieldVerdict {
        endpoint: String::new(),
        field: String::new(),
        kind: FieldKind::Value,
        module: None,
        verdict,
        measure: measure.to_owned(),
        n,
        candidate: 0.0,
        noise: 0.0,
        interval: [0.0, 0.0],
        p_value: 1.0,
        detail: String::new(),
        examples: Vec::new(),
    }
}

fn judge_rate(raw: Counts, noise: Counts, config: &DiffConfig) -> FieldVerdict {
    let m = &config.margins;
    let (rc, rn) = (raw.rate(), noise.rate());
    let p = one_sided_two_proportion(raw, noise);
    let interval = newcombe(raw, noise);
    let flagged = rc - rn >= m.absolute && rc >= rn * (1.0 + m.relative) && p < m.alpha;
    let verdict = if flagged {
        Verdict::Flagged
    } else if rn > 0.0 {
        Verdict::Noise
    } else {
        Verdict::Within
    };
    FieldVerdict {
        candidate: rc,
        noise: rn,
        interval,
        p_value: p,
        detail: format!(
            "differs in {} of {} requests vs the candidate, {} of {} vs the baseline",
            raw.differ, raw.n, noise.differ, noise.n
        ),
        ..unnamed(verdict, "share of requests where the field differs", raw.n)
    }
}

fn judge_text(tally: &Tally, config: &DiffConfig) -> FieldVerdict {
    let m = &config.margins;
    let chrf = |s: &[Similarity]| {
        let mut v: Vec<f64> = s.iter().map(|x| x.chrf).collect();
        v.sort_unstable_by(f64::total_cmp);
        v
    };
    let (raw, noise) = (chrf(&tally.sims_raw), chrf(&tally.sims_noise));
    let floor = quantile(&noise, 0.05);
    let below = |v: &[f64]| Counts {
        n: v.len() as u64,
        differ: v.iter().filter(|x| **x < floor).count() as u64,
    };
    let (below_raw, below_noise) = (below(&raw), below(&noise));
    // The share below the noise's 5th percentile is the stated test: a change to a
    // share of the answers moves that share a long way while it shifts the whole
    // distribution (what Mann–Whitney sees, reported beside it) only a little.
    let p = one_sided_two_proportion(below_raw, below_noise);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let two_sided = mann_whitney(&raw, &noise);
    let mann_whitney_p = if mean(&raw) < mean(&noise) {
        two_sided / 2.0
    } else {
        1.0 - two_sided / 2.0
    };
    let (sc, sn) = (below_raw.rate(), below_noise.rate());
    let flagged = sc - sn >= m.absolute && sc >= sn * (1.0 + m.relative) && p < m.alpha;
    let noisy = quantile(&noise, 0.5) < 1.0;
    let verdict = match (flagged, noisy) {
        (true, _) => Verdict::Flagged,
        (false, true) => Verdict::Noise,
        (false, false) => Verdict::Within,
    };
    let median = |pick: fn(&Similarity) -> f64, s: &[Similarity]| {
        let mut v: Vec<f64> = s.iter().map(pick).collect();
        v.sort_unstable_by(f64::total_cmp);
        quantile(&v, 0.5)
    };
    let detail = format!(
        "{} of {} answers below the baseline's 5th percentile of chrF ({floor:.3}), {} of {} baseline answers; median chrF {:.3} vs the candidate, {:.3} vs the baseline (Mann–Whitney one-sided p = {mann_whitney_p:.1e}); ROUGE-L {:.3} / {:.3}; edit similarity {:.3} / {:.3}",
        below_raw.differ,
        below_raw.n,
        below_noise.differ,
        below_noise.n,
        quantile(&raw, 0.5),
        quantile(&noise, 0.5),
        median(|s| s.rouge_l, &tally.sims_raw),
        median(|s| s.rouge_l, &tally.sims_noise),
        median(|s| s.edit, &tally.sims_raw),
        median(|s| s.edit, &tally.sims_noise),
    );
    FieldVerdict {
        candidate: sc,
        noise: sn,
        interval: newcombe(below_raw, below_noise),
        p_value: p,
        detail,
        ..unnamed(
            verdict,
            "share of answers whose chrF to the primary is below the baseline's 5th percentile",
            raw.len() as u64,
        )
    }
}

/// One timing of an answer.
type Metric = fn(&Answer) -> Option<f64>;

/// The timing fields: each side's successful requests, the medians' ratios to the
/// primary's.
fn timing_verdicts(replayed: &[Replayed], config: &DiffConfig) -> Vec<FieldVerdict> {
    let metrics: [(&str, Metric); 4] = [
        ("@ttft", |a| a.record.ttft_us().map(|us| us as f64 / 1e3)),
        ("@itl", |a| a.record.itl_mean_us.map(|us| us as f64 / 1e3)),
        ("@e2e", |a| a.record.e2e_us().map(|us| us as f64 / 1e3)),
        ("@output_tokens", |a| a.record.output_tokens.map(f64::from)),
    ];
    let mut by_endpoint: BTreeMap<&str, Vec<&Replayed>> = BTreeMap::new();
    for r in replayed {
        by_endpoint.entry(&r.endpoint).or_default().push(r);
    }
    let mut verdicts = Vec::new();
    for (endpoint, requests) in by_endpoint {
        for (field, metric) in metrics {
            let samples = Side::ALL.map(|side| {
                let mut v: Vec<f64> = requests
                    .iter()
                    .map(|r| &r.answers[&side])
                    .filter(|a| a.record.outcome == Outcome::Ok)
                    .filter_map(metric)
                    .collect();
                v.sort_unstable_by(f64::total_cmp);
                v
            });
            if samples.iter().any(|s| s.len() < 2) {
                continue;
            }
            let mut verdict = judge_timing(&samples, config);
            verdict.endpoint = endpoint.to_owned();
            verdict.field = field.to_owned();
            verdict.module = config.module(endpoint, field).map(str::to_owned);
            verdicts.push(verdict);
        }
    }
    verdicts
}

/// A timing differs when the candidate's median is beyond both copies of the
/// primary's version by the margin, the same way: two copies of one version differ
/// too (a warm cache, a busy core), and a candidate between them, or within the
/// margin of either, is not called different.
fn judge_timing([p, c, s]: &[Vec<f64>; 3], config: &DiffConfig) -> FieldVerdict {
    let m = &config.margins;
    let (median_p, median_c, median_s) = (quantile(p, 0.5), quantile(c, 0.5), quantile(s, 0.5));
    if median_p <= 0.0 || median_s <= 0.0 {
        return FieldVerdict {
            kind: FieldKind::Timing,
            ..unnamed(
                Verdict::Within,
                "median ratio to the primary",
                c.len() as u64,
            )
        };
    }
    let (to_p, to_s) = (median_c / median_p, median_c / median_s);
    let p_value = mann_whitney(p, c).max(mann_whitney(s, c));
    let (lo, hi) = bootstrap(p, c, 0.5, 0x7469_6d65, 1000);
    let beyond = |r: f64| (r - 1.0).abs() >= m.timing;
    let same_way = (to_p > 1.0) == (to_s > 1.0);
    let flagged = beyond(to_p) && beyond(to_s) && same_way && p_value < m.alpha;
    FieldVerdict {
        kind: FieldKind::Timing,
        candidate: to_p,
        noise: median_s / median_p,
        interval: [1.0 + lo / median_p, 1.0 + hi / median_p],
        p_value,
        detail: format!(
            "median {median_p:.2} (primary), {median_c:.2} (candidate, ×{to_p:.2} the primary's, ×{to_s:.2} the baseline's), {median_s:.2} (baseline)"
        ),
        ..unnamed(
            if flagged {
                Verdict::Flagged
            } else {
                Verdict::Within
            },
            "median ratio to the primary",
            c.len() as u64,
        )
    }
}

/// One-sided p-value that the raw rate exceeds the noise rate (pooled z-test).
fn one_sided_two_proportion(raw: Counts, noise: Counts) -> f64 {
    if raw.n == 0 || noise.n == 0 {
        return 1.0;
    }
    let (n1, n2) = (raw.n as f64, noise.n as f64);
    let pooled = (raw.differ + noise.differ) as f64 / (n1 + n2);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    let d = raw.rate() - noise.rate();
    if se == 0.0 {
        return if d > 0.0 { 0.0 } else { 1.0 };
    }
    let normal = Normal::new(0.0, 1.0).expect("the standard normal");
    1.0 - normal.cdf(d / se)
}

/// Wilson's 95 % score interval of a proportion.
fn wilson(c: Counts) -> (f64, f64) {
    if c.n == 0 {
        return (0.0, 1.0);
    }
    let (z, n, p) = (1.959_964, c.n as f64, c.rate());
    let centre = p + z * z / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    let denominator = 1.0 + z * z / n;
    (
        (centre - spread) / denominator,
        (centre + spread) / denominator,
    )
}

/// Newcombe's hybrid score interval of the difference of two proportions.
fn newcombe(a: Counts, b: Counts) -> [f64; 2] {
    let ((l1, u1), (l2, u2)) = (wilson(a), wilson(b));
    let (p1, p2) = (a.rate(), b.rate());
    let d = p1 - p2;
    [
        d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt(),
        d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt(),
    ]
}

/// Each side's answers: how many succeeded, and the failures by kind.
pub fn side_counts(replayed: &[Replayed], config: &ReplayConfig) -> BTreeMap<String, SideCounts> {
    let mut counts: BTreeMap<String, SideCounts> = BTreeMap::new();
    for side in Side::ALL {
        let entry = counts.entry(side.name().to_owned()).or_default();
        entry.url = config.urls[&side].clone();
        for r in replayed {
            match &r.answers[&side].record.error {
                None => entry.ok += 1,
                Some(error) => {
                    entry.failed += 1;
                    *entry.failures.entry(error.kind.clone()).or_default() += 1;
                }
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_flag_only_beyond_the_noise() {
        let config = DiffConfig::default();
        let c = |differ, n| Counts { n, differ };
        assert_eq!(
            judge_rate(c(2000, 2000), c(0, 2000), &config).verdict,
            Verdict::Flagged
        );
        // Random in both: noise.
        assert_eq!(
            judge_rate(c(2000, 2000), c(2000, 2000), &config).verdict,
            Verdict::Noise
        );
        // 1 % more than a 30 % noise: within the margins.
        assert_eq!(
            judge_rate(c(620, 2000), c(600, 2000), &config).verdict,
            Verdict::Noise
        );
        // A few differences and no noise: too few to be sure.
        assert_eq!(
            judge_rate(c(3, 2000), c(0, 2000), &config).verdict,
            Verdict::Within
        );
    }

    #[test]
    fn newcombe_matches_a_published_value() {
        // Newcombe (1998), example (a): 56/70 vs 48/80 → (0.0524, 0.3339).
        let [lo, hi] = newcombe(Counts { n: 70, differ: 56 }, Counts { n: 80, differ: 48 });
        assert!(
            (lo - 0.0524).abs() < 5e-4 && (hi - 0.3339).abs() < 5e-4,
            "{lo} {hi}"
        );
    }

    #[test]
    fn set_and_keyed_arrays_ignore_order() {
        let a = serde_json::json!([{"id": "x", "v": 1}, {"id": "y", "v": 2}]);
        let b = serde_json::json!([{"id": "y", "v": 2}, {"id": "x", "v": 1}]);
        let flat = |v: &Value, mode: ArrayMode| {
            let mut out = BTreeMap::new();
            let mut config = DiffConfig::default();
            config.arrays.insert("/s".into(), mode);
            walk(v, "/s".into(), "POST /", &config, &mut out);
            out
        };
        assert_eq!(flat(&a, ArrayMode::Set), flat(&b, ArrayMode::Set));
        assert_eq!(
            flat(&a, ArrayMode::Key("id".into())),
            flat(&b, ArrayMode::Key("id".into()))
        );
        assert!(flat(&a, ArrayMode::Key("id".into())).contains_key("/s/x/v"));
        assert_ne!(flat(&a, ArrayMode::Ordered), flat(&b, ArrayMode::Ordered));
    }
}
