//! The explanation as text: the verdict, the top causes with what to do, and the
//! table of every node's contribution with its interval and intervention.

use std::fmt::Write;

use super::attribute::{Attribution, Measure, NodeAttribution, RootStats};
use super::{Explanation, Mode};

/// A change in the measure's units, with its sign.
pub fn signed(value: f64, measure: &Measure) -> String {
    if measure.is_rate() {
        format!("{:+.1} pts", value * 100.0)
    } else {
        format!("{value:+.1} ms")
    }
}

fn level(value: f64, measure: &Measure) -> String {
    if measure.is_rate() {
        format!("{:.1} %", value * 100.0)
    } else {
        format!("{value:.1} ms")
    }
}

fn label(node: &NodeAttribution) -> String {
    match &node.service {
        Some(service) if *service != node.node => format!("`{}` ({service})", node.node),
        _ => format!("`{}`", node.node),
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or("–".into(), |v| format!("{v:.0}"))
}

/// What the intervention on `node` does to the incident, in the measure's words.
fn effect(attribution: &Attribution, node: &NodeAttribution) -> String {
    let (incident, after) = (&attribution.incident, &node.counterfactual);
    let gone = |now: f64, then: f64| {
        if now > 0.0 {
            (now - then).max(0.0) / now * 100.0
        } else {
            0.0
        }
    };
    match attribution.measure {
        Measure::Breach { .. } => format!(
            "with it at baseline, {:.0} % of the breaches disappear ({:.1} % → {:.1} % of traces)",
            gone(incident.breach_rate, after.breach_rate),
            incident.breach_rate * 100.0,
            after.breach_rate * 100.0
        ),
        Measure::FailureRate => format!(
            "with it at baseline, {:.0} % of the failures disappear ({:.1} % → {:.1} %)",
            gone(incident.failure_rate, after.failure_rate),
            incident.failure_rate * 100.0,
            after.failure_rate * 100.0
        ),
        Measure::Mean => format!(
            "with it at baseline, the mean would be {:.1} ms instead of {:.1} ms (baseline {:.1} ms)",
            after.mean_ms, incident.mean_ms, attribution.baseline.mean_ms
        ),
        Measure::Quantile { q } => format!(
            "with it at baseline, p{} would undo {:.0} % of the change",
            q * 100.0,
            node.undoes * 100.0
        ),
    }
}

/// A plain suggestion from the node, how it changed and what fixing it would do.
pub fn suggestion(attribution: &Attribution, node: &NodeAttribution, mode: Mode) -> String {
    let who = label(node);
    let place = node.service.as_deref().unwrap_or(&node.node);
    let compared = match mode {
        Mode::Tail => "the run as a whole",
        _ => "baseline",
    };
    let failure_rise = node.incident.failure_rate - node.baseline.failure_rate;
    let effect = effect(attribution, node);
    // Failures explain a node's share of a rate when they rose by at least half of
    // it; of a latency, only when its latency did not rise.
    let slower = match (node.baseline.p99_ms, node.incident.p99_ms) {
        (Some(before), Some(after)) => after > 1.1 * before,
        _ => false,
    };
    let by_failures = failure_rise >= 0.005
        && if attribution.measure.is_rate() {
            failure_rise >= 0.5 * node.contribution.value
        } else {
            !slower
        };
    if by_failures {
        let kind = node
            .incident
            .top_error
            .as_deref()
            .map_or(String::new(), |k| format!(", mostly `{k}`"));
        let passed_on = node.incident.failure_rate - node.incident.began_here_rate;
        let source = if passed_on >= 0.005 {
            format!(
                " ({:.1} % began in what it calls: look there too)",
                passed_on * 100.0
            )
        } else {
            String::new()
        };
        format!(
            "{who} failed in {:.1} % of its calls ({compared}: {:.1} %){kind}{source}; {effect}. Look first at the errors of {place} itself: its callers only pass them on.",
            node.incident.failure_rate * 100.0,
            node.baseline.failure_rate * 100.0,
        )
    } else {
        format!(
            "{who}'s latency p99 went from {} to {} ms (p50 {} → {}; {compared} first); {effect}. Its own time grew, not its callees': look at {place} itself (load, queueing, a fault in front of it).",
            ms(node.baseline.p99_ms),
            ms(node.incident.p99_ms),
            ms(node.baseline.p50_ms),
            ms(node.incident.p50_ms),
        )
    }
}

fn stats(s: &RootStats) -> String {
    format!(
        "mean {:.1} ms · p50 {:.1} · p99 {:.1} · failed {:.2} % · breached {:.2} %",
        s.mean_ms,
        s.p50_ms,
        s.p99_ms,
        s.failure_rate * 100.0,
        s.breach_rate * 100.0
    )
}

/// The explanation for a terminal.
pub fn render(explanation: &Explanation) -> String {
    let a = &explanation.attribution;
    let mut out = String::new();
    let against = match explanation.mode {
        Mode::BaselineRun => "this run against the baseline run",
        Mode::Window => "the incident window against the rest of the run",
        Mode::Tail => "the breaching traces against the whole run",
    };
    let _ = writeln!(
        out,
        "explain `{}`: {against} ({} vs {} traces), by {}",
        explanation.root,
        a.incident_traces,
        a.baseline_traces,
        a.measure.describe()
    );
    let _ = writeln!(out, "  baseline  {}", stats(&a.baseline));
    let _ = writeln!(out, "  incident  {}", stats(&a.incident));
    let _ = writeln!(
        out,
        "  change    {} [{} … {}] (98 % bootstrap interval; contributions: 90 %, {} resamples){}",
        signed(a.change.value, &a.measure),
        signed(a.change.low, &a.measure),
        signed(a.change.high, &a.measure),
        a.bootstrap,
        if a.significant {
            ""
        } else {
            " — not significant"
        }
    );
    if explanation.causes.is_empty() {
        let why = explanation.no_cause.as_deref().unwrap_or("no cause");
        let _ = writeln!(out, "\n  no cause: {why}");
    } else {
        let _ = writeln!(out, "\n  causes:");
        for (rank, cause) in explanation.causes.iter().enumerate() {
            let _ = writeln!(out, "  {}. {}", rank + 1, cause.suggestion);
        }
        for service in a
            .services
            .iter()
            .filter(|s| a.significant && s.share >= 0.5)
        {
            let _ = writeln!(
                out,
                "  {} as a whole ({}): {:.0} % of the change; at baseline it would undo {:.0} % of it.",
                service.service,
                service.nodes.join(", "),
                service.share * 100.0,
                service.undoes * 100.0
            );
        }
    }
    let _ = writeln!(
        out,
        "\n  {:<28} {:>12} {:>23} {:>7} {:>8}  mechanism",
        "node", "contribution", "interval", "share", "undoes"
    );
    for node in &a.nodes {
        let name = match &node.service {
            Some(s) if *s != node.node => format!("{} ({s})", node.node),
            _ => node.node.clone(),
        };
        let _ = writeln!(
            out,
            "  {:<28} {:>12} {:>23} {:>6.0}% {:>7.0}%  {}{}",
            name,
            signed(node.contribution.value, &a.measure),
            format!(
                "[{} … {}]",
                signed(node.contribution.low, &a.measure),
                signed(node.contribution.high, &a.measure)
            ),
            node.share * 100.0,
            node.undoes * 100.0,
            node.mechanism.describe(),
            if node.confident { "  ◀" } else { "" }
        );
    }
    let _ = writeln!(
        out,
        "  ({} level: incident {}, baseline {}; Shapley {}; {:.2} s)",
        a.measure.describe(),
        level(measure_value(&a.incident, &a.measure), &a.measure),
        level(measure_value(&a.baseline, &a.measure), &a.measure),
        if a.shapley.exact {
            format!("exact over {} coalitions", a.shapley.evaluations)
        } else {
            format!("over {} sampled orders", a.shapley.orders)
        },
        explanation.seconds
    );
    for note in &explanation.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

fn measure_value(stats: &RootStats, measure: &Measure) -> f64 {
    match measure {
        Measure::Mean => stats.mean_ms,
        Measure::Quantile { q } if *q <= 0.5 => stats.p50_ms,
        Measure::Quantile { .. } => stats.p99_ms,
        Measure::Breach { .. } => stats.breach_rate,
        Measure::FailureRate => stats.failure_rate,
    }
}
