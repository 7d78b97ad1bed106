//! The report's sections, each `None` when the run has nothing for it. Figures shown
//! as numbers carry `data-metric`/`data-value` with the value `summary.json` holds.

use std::fmt::Write;

use hdrhistogram::Histogram;

use super::digest::{Digest, Second};
use super::parts::{section, window_key, wire_name};
use super::svg::{self, Bar, Marks, Series, escape, num};
use crate::metrics::Dist;
use crate::report::{Quality, StageSummary, Summary};
use crate::slo::Judgement;

/// A figure with the exact value it shows, for tools and tests.
fn card(metric: &str, label: &str, value: f64, unit: &str) -> String {
    format!(
        r#"<div class="card"><b data-metric="{metric}" data-value="{value}">{} {unit}</b><span>{label}</span></div>"#,
        num(value)
    )
}

pub fn verdicts(summary: &Summary) -> Option<String> {
    let mut body = String::new();
    if let Some(aborted) = &summary.aborted {
        let why = match &aborted.episode {
            Some(e) => format!("a streaming SLO opened an episode ({})", escape(&e.series)),
            None => "the SLOs could no longer pass".into(),
        };
        let _ = write!(
            body,
            r#"<div class="banner fail">Stopped {} s in: {why}</div>"#,
            num(aborted.at_s)
        );
    }
    if let Some(d) = summary.drift.as_ref().filter(|d| !d.episodes.is_empty()) {
        let series: std::collections::BTreeSet<&str> =
            d.episodes.iter().map(|e| e.series.as_str()).collect();
        let _ = write!(
            body,
            r#"<div class="banner fail">Streaming SLOs: {} episodes ({}) — see Streaming SLOs below</div>"#,
            d.episodes.len(),
            escape(&series.into_iter().collect::<Vec<_>>().join(", "))
        );
    }
    match (&summary.verdicts, &summary.default_gate) {
        (Some(verdicts), _) => {
            let (class, text) = if verdicts.iter().any(|v| v.outcome == Judgement::Fail) {
                ("fail", "SLOs failed")
            } else if verdicts.iter().any(|v| v.outcome == Judgement::NotProven) {
                (
                    "unproven",
                    "SLOs not proven (not enough samples to be sure)",
                )
            } else {
                ("pass", "Every SLO passed")
            };
            let _ = write!(body, r#"<div class="banner {class}">{text}</div>"#);
            body.push_str(r#"<table><tr><th>SLO</th><th>outcome</th><th class="n">observed</th><th class="n">bound</th><th class="n">samples</th><th class="n">more needed</th></tr>"#);
            for v in verdicts {
                let outcome = wire_name(v.outcome);
                let _ = write!(
                    body,
                    r#"<tr><td><code>{} {}</code></td><td class="{outcome}" data-slo="{}" data-outcome="{outcome}">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
                    escape(&v.slo),
                    escape(&v.expression),
                    escape(&v.slo),
                    outcome.replace('_', " "),
                    v.observed.map_or("–".into(), |o| format!(
                        "{} {}",
                        num(o),
                        escape(v.unit.as_str())
                    )),
                    v.bound.map_or("–".into(), |b| format!(
                        "{} {}",
                        num(b),
                        escape(v.unit.as_str())
                    )),
                    v.samples,
                    v.samples_to_decide.map_or(String::new(), |n| n.to_string()),
                );
            }
            body.push_str("</table>");
        }
        (None, Some(gate)) => {
            let class = if gate.passed { "pass" } else { "fail" };
            let _ = write!(
                body,
                r#"<div class="banner {class}">{} of {} requests failed (the bound without SLOs is {} %)</div>"#,
                gate.failed,
                gate.attempted,
                num(gate.bound * 100.0)
            );
        }
        (None, None) if body.is_empty() => return None,
        (None, None) => {}
    }
    Some(section("verdicts", "Verdict", &body))
}

pub fn overview(summary: &Summary) -> Option<String> {
    let c = &summary.requests;
    let l = &summary.latency_ms;
    let mut cards = String::new();
    for (metric, label, dist, p99) in [
        ("ttft", "TTFT", &l.ttft, true),
        ("itl", "ITL", &l.itl, false),
        ("tpot", "TPOT", &l.tpot, false),
        ("e2e", "E2E", &l.e2e, true),
    ] {
        if dist.count == 0 {
            continue;
        }
        cards.push_str(&card(
            &format!("{metric}.p50"),
            &format!("{label} p50"),
            dist.p50,
            "ms",
        ));
        if p99 {
            cards.push_str(&card(
                &format!("{metric}.p99"),
                &format!("{label} p99"),
                dist.p99,
                "ms",
            ));
        }
    }
    let t = &summary.throughput;
    cards.push_str(&card(
        "throughput.requests_per_s",
        "requests/s",
        t.requests_per_s,
        "",
    ));
    if t.output_tokens_per_s > 0.0 {
        cards.push_str(&card(
            "throughput.output_tokens_per_s",
            "output tokens/s",
            t.output_tokens_per_s,
            "",
        ));
    }
    let counts = format!(
        r#"<p data-counts="{} {} {} {} {} {}">{} scheduled = {} ok + {} failed ({} errors, {} timeouts) + {} cancelled + {} dropped</p>"#,
        c.scheduled,
        c.ok,
        c.error,
        c.timeout,
        c.cancelled,
        c.dropped,
        c.scheduled,
        c.ok,
        c.error + c.timeout,
        c.error,
        c.timeout,
        c.cancelled,
        c.dropped
    );
    let mut rates = String::new();
    for stage in &summary.stages {
        if let Some(offered) = stage.offered_rate_per_s {
            let _ = write!(
                rates,
                "<li>{}: {} of {} /s delivered</li>",
                escape(&stage.description),
                num(stage.achieved_rate_per_s),
                num(offered)
            );
        }
    }
    if !rates.is_empty() {
        rates = format!("<ul>{rates}</ul>");
    }
    let warnings: String = summary
        .warnings
        .iter()
        .map(|w| format!(r#"<p class="banner unproven">{}</p>"#, escape(w)))
        .collect();
    Some(section(
        "overview",
        "Overview",
        &format!(r#"{warnings}<div class="cards">{cards}</div>{counts}{rates}"#),
    ))
}

/// Forty bins from the smallest value to the 99.9th percentile (the rest in the last),
/// in display units (`scale` per unit).
fn bins(histogram: &Histogram<u64>, scale: f64) -> Vec<(f64, f64, u64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let lo = histogram.min() as f64 / scale;
    let hi = (histogram.value_at_quantile(0.999) as f64 / scale).max(lo + 1.0 / scale);
    let width = (hi - lo) / 40.0;
    let mut out: Vec<(f64, f64, u64)> = (0..40)
        .map(|i| (lo + width * i as f64, lo + width * (i + 1) as f64, 0))
        .collect();
    for value in histogram.iter_recorded() {
        let v = histogram.median_equivalent(value.value_iterated_to()) as f64 / scale;
        let i = (((v - lo) / width) as usize).min(39);
        out[i].2 += value.count_at_value();
    }
    out
}

pub(super) fn distribution(
    title: &str,
    unit: &str,
    histogram: &Histogram<u64>,
    scale: f64,
    dist: &Dist,
) -> String {
    let marks = [("p50", dist.p50), ("p90", dist.p90), ("p99", dist.p99)];
    format!(
        "<h3>{}</h3>{}",
        escape(title),
        svg::histogram(title, unit, &bins(histogram, scale), &marks)
    )
}

pub fn distributions(summary: &Summary, digest: &Digest) -> Option<String> {
    let l = &summary.latency_ms;
    let t = &summary.tokens;
    let mut body = String::new();
    for (title, unit, histogram, scale, dist) in [
        ("Time to first token", "ms", &digest.ttft, 1e3, &l.ttft),
        (
            "Time to first token from the intended start",
            "ms",
            &digest.ttft_intended,
            1e3,
            &l.ttft_from_intended,
        ),
        (
            "Inter-token latency (every gap)",
            "ms",
            &digest.itl,
            1e3,
            &l.itl,
        ),
        ("Time per output token", "ms", &digest.tpot, 1e3, &l.tpot),
        ("End to end", "ms", &digest.e2e, 1e3, &l.e2e),
        (
            "Input tokens",
            "tokens",
            &digest.input_tokens,
            1.0,
            &t.input,
        ),
        (
            "Output tokens",
            "tokens",
            &digest.output_tokens,
            1.0,
            &t.output,
        ),
    ] {
        if !histogram.is_empty() {
            body.push_str(&distribution(title, unit, histogram, scale, dist));
        }
    }
    (!body.is_empty()).then(|| {
        section(
            "distributions",
            "Distributions",
            &format!(r#"<p class="note">Bars: requests per bin; orange line: the share at or below; dashed: p50, p90, p99 as summary.json has them.</p>{body}"#),
        )
    })
}

pub(super) fn quantile(sorted: &[u64], q: f64) -> Option<f64> {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).map(|v| *v as f64 / 1e3)
}

/// What every time axis shows behind its lines: stage starts, the abort, and the
/// windows in which each fault rule injected.
pub(super) fn marks(summary: &Summary, digest: &Digest) -> Marks {
    let mut moments: Vec<(f64, String)> = digest
        .stage_starts
        .iter()
        .filter(|(stage, _)| **stage > 0)
        .map(|(stage, at)| {
            let name = summary
                .stages
                .get(*stage as usize)
                .map_or_else(|| format!("stage {stage}"), |s| s.description.clone());
            (*at as f64 / 1e6, format!("stage starts: {name}"))
        })
        .collect();
    if let Some(aborted) = &summary.aborted {
        let why = match aborted.episode {
            Some(_) => "aborted: a streaming SLO episode",
            None => "aborted: SLOs certain to fail",
        };
        moments.push((aborted.at_s, why.into()));
    }
    let mut rules: Vec<String> = Vec::new();
    let windows = digest
        .fault_windows()
        .into_iter()
        .map(|w| {
            let colour = rules.iter().position(|r| *r == w.fault).unwrap_or_else(|| {
                rules.push(w.fault.clone());
                rules.len() - 1
            });
            let label = format!(
                "{}: {} faults injected, {}–{} s",
                w.fault, w.count, w.from_s, w.to_s
            );
            (w.from_s as f64, w.to_s as f64, label, colour)
        })
        .collect();
    let mut marks = Marks { moments, windows };
    super::drift::add_episodes(summary, &mut marks);
    super::disruptions::add_steps(summary, &mut marks);
    marks
}

/// The rate each second was meant to see: its stage's offered rate, where the stage
/// has one (open loops at a fixed rate).
fn offered_per_second(summary: &Summary, digest: &Digest) -> Vec<(f64, f64)> {
    let starts: Vec<(f64, Option<f64>)> = digest
        .stage_starts
        .iter()
        .map(|(stage, at)| {
            let offered = summary
                .stages
                .get(*stage as usize)
                .and_then(|s| s.offered_rate_per_s);
            (*at as f64 / 1e6, offered)
        })
        .collect();
    (0..summary.timeseries.len())
        .filter_map(|second| {
            let t = second as f64 + 0.5;
            let (_, offered) = starts.iter().rev().find(|(at, _)| *at <= t)?;
            Some((t, (*offered)?))
        })
        .collect()
}

pub(super) fn per_second(
    seconds: &[Second],
    f: impl Fn(&Second) -> Option<f64>,
) -> Vec<(f64, f64)> {
    seconds
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i as f64 + 0.5, f(s)?)))
        .collect()
}

pub fn over_time(summary: &Summary, digest: &Digest) -> Option<String> {
    if summary.timeseries.is_empty() {
        return None;
    }
    let marks = marks(summary, digest);
    let achieved = Series {
        name: "completed/s".into(),
        points: summary
            .timeseries
            .iter()
            .map(|p| (p.second as f64 + 0.5, p.window.completed as f64))
            .collect(),
        dashed: false,
    };
    let target = Series {
        name: "offered/s".into(),
        points: offered_per_second(summary, digest),
        dashed: true,
    };
    let failed = Series {
        name: "failed/s".into(),
        points: summary
            .timeseries
            .iter()
            .map(|p| (p.second as f64 + 0.5, p.window.failed as f64))
            .collect(),
        dashed: false,
    };
    let seconds = &digest.seconds;
    let latency = [("TTFT p50", 0.5), ("TTFT p99", 0.99)].map(|(name, q)| Series {
        name: name.into(),
        points: per_second(seconds, |s| quantile(&s.ttft_us, q)),
        dashed: false,
    });
    let in_flight = Series {
        name: "in flight".into(),
        points: per_second(seconds, |s| Some(s.in_flight as f64)),
        dashed: false,
    };
    let lag = Series {
        name: "mean send lag (ms)".into(),
        points: per_second(seconds, |s| {
            (s.sent > 0).then(|| s.send_lag_sum_us as f64 / s.sent as f64 / 1e3)
        }),
        dashed: false,
    };
    let mut body = String::new();
    let x = "seconds into the run";
    body.push_str(&svg::lines(
        "requests per second",
        x,
        "per second",
        &[achieved, failed, target],
        &marks,
    ));
    body.push_str(&svg::lines("latency per second", x, "ms", &latency, &marks));
    body.push_str(&svg::lines(
        "in flight and send lag",
        x,
        "requests / ms",
        &[in_flight, lag],
        &marks,
    ));
    if let Some(errors) = errors_over_time(digest, &marks) {
        body.push_str(&errors);
    }
    Some(section(
        "over-time",
        "Over time",
        &format!(
            r#"<p class="note">By completion second; dotted lines mark stage starts and an abort, shaded bands the seconds in which a fault rule injected (by the requests' intended start) and the streaming SLOs' episodes.</p>{}{body}"#,
            window_key(&marks)
        ),
    ))
}

fn errors_over_time(digest: &Digest, marks: &Marks) -> Option<String> {
    let mut kinds: Vec<(String, u64)> = Vec::new();
    for s in &digest.seconds {
        for (kind, n) in &s.errors {
            match kinds.iter_mut().find(|(k, _)| k == kind) {
                Some((_, total)) => *total += n,
                None => kinds.push((kind.clone(), *n)),
            }
        }
    }
    let faults: Vec<(f64, f64)> = digest
        .faults_per_second
        .iter()
        .map(|(s, n)| (*s as f64 + 0.5, *n as f64))
        .collect();
    if kinds.is_empty() && faults.is_empty() {
        return None;
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    let mut series: Vec<Series> = kinds
        .iter()
        .take(5)
        .map(|(kind, _)| Series {
            name: kind.clone(),
            points: per_second(&digest.seconds, |s| {
                Some(*s.errors.get(kind).unwrap_or(&0) as f64)
            }),
            dashed: false,
        })
        .collect();
    if !faults.is_empty() {
        series.push(Series {
            name: "faults injected".into(),
            points: faults,
            dashed: true,
        });
    }
    Some(svg::lines(
        "errors by kind",
        "seconds into the run",
        "per second",
        &series,
        marks,
    ))
}

pub fn timeline(digest: &Digest) -> Option<String> {
    if digest.timeline.is_empty() {
        return None;
    }
    let bars: Vec<Bar> = digest
        .timeline
        .iter()
        .map(|r| Bar {
            name: match &r.label {
                Some(label) => format!("#{} {label}", r.seq),
                None => format!("#{}", r.seq),
            },
            intended: r.intended_us as f64 / 1e6,
            sent: r.sent_us.map(|us| us as f64 / 1e6),
            first_token: r.first_token_us.map(|us| us as f64 / 1e6),
            done: r.done_us as f64 / 1e6,
            failed: r.failed.clone(),
            stalls: r
                .stalls
                .iter()
                .map(|(at, gap)| (*at as f64 / 1e6, *gap as f64 / 1e6))
                .collect(),
        })
        .collect();
    let sampled = if digest.step > 1 {
        format!(
            "{} of {} requests, every {}th by sequence number",
            bars.len(),
            digest.records,
            digest.step
        )
    } else {
        format!("all {} requests", bars.len())
    };
    let key = r#"<p class="key"><span class="wait"></span>waiting to send<span class="ttft"></span>to first token<span class="decode"></span>decoding<span class="stall"></span>a gap over 250 ms<span class="failed"></span>failed</p>"#;
    Some(section(
        "timeline",
        "Request timeline",
        &format!(
            r#"<p class="note">{sampled}; one row each.</p>{key}{}"#,
            svg::timeline("request timeline", &bars)
        ),
    ))
}

pub fn sweep(summary: &Summary) -> Option<String> {
    let sweep = summary.sweep.as_ref()?;
    let points: Vec<_> = summary
        .stages
        .iter()
        .filter(|s| s.sweep.is_some())
        .collect();
    let latency = [("TTFT p50", false), ("TTFT p99", true)].map(|(name, p99)| Series {
        name: name.into(),
        points: points
            .iter()
            .map(|s| {
                (
                    s.achieved_rate_per_s,
                    if p99 { s.ttft_ms.p99 } else { s.ttft_ms.p50 },
                )
            })
            .collect(),
        dashed: false,
    });
    let knee = Marks {
        moments: sweep
            .knee_rate_per_s
            .map(|r| (r, format!("knee: {} /s", num(r))))
            .into_iter()
            .collect(),
        windows: Vec::new(),
    };
    let mut frontier: Vec<(f64, f64)> = points
        .iter()
        .filter(|s| s.tpot_ms.p50 > 0.0)
        .map(|s| (s.output_tokens_per_s, 1e3 / s.tpot_ms.p50))
        .collect();
    frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pareto = Series {
        name: "per-user tokens/s".into(),
        points: frontier,
        dashed: false,
    };
    let mut table = String::from(
        r#"<table><tr><th class="n">offered /s</th><th class="n">achieved /s</th><th class="n">TTFT p99 ms</th><th class="n">output tok/s</th><th class="n">goodput /s</th><th class="n">accuracy %</th><th class="n">unparsed %</th></tr>"#,
    );
    let pct = |q: Option<&Quality>, of: fn(&Quality) -> f64| {
        q.map_or("–".into(), |q| num(of(q) * 100.0))
    };
    for s in &points {
        let q = s.quality.as_ref();
        let _ = write!(
            table,
            r#"<tr><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            s.offered_rate_per_s.map_or("–".into(), num),
            num(s.achieved_rate_per_s),
            num(s.ttft_ms.p99),
            num(s.output_tokens_per_s),
            s.goodput_per_s.map_or("–".into(), num),
            pct(q, |q| q.accuracy),
            pct(q, |q| q.unparsed_rate),
        );
    }
    table.push_str("</table>");
    let answers = answers_against_load(&points);
    let verdict = match sweep.knee_rate_per_s {
        Some(rate) => format!(
            r#"<p>Knee at <b data-metric="sweep.knee_rate_per_s" data-value="{rate}">{} /s</b> ({}).</p>"#,
            num(rate),
            escape(&sweep.rule)
        ),
        None => format!(
            "<p>No knee up to {} /s ({}).</p>",
            num(sweep.highest_rate_per_s),
            escape(&sweep.rule)
        ),
    };
    Some(section(
        "sweep",
        "Sweep",
        &format!(
            "{verdict}{}{}{table}{answers}",
            svg::lines(
                "latency against achieved rate",
                "achieved requests/s",
                "ms",
                &latency,
                &knee
            ),
            svg::lines(
                "per-user against total throughput",
                "output tokens/s, all users",
                "tokens/s per user",
                &[pareto],
                &Marks::default()
            ),
        ),
    ))
}

/// Accuracy and the unparsed rate against the achieved rate, beside latency: where
/// the answers break, not only where the latency does. Empty without graded answers.
fn answers_against_load(points: &[&StageSummary]) -> String {
    let graded: Vec<_> = points.iter().filter(|s| s.quality.is_some()).collect();
    if graded.is_empty() {
        return String::new();
    }
    let series = [("accuracy %", false), ("unparsed %", true)].map(|(name, unparsed)| Series {
        name: name.into(),
        points: graded
            .iter()
            .filter_map(|s| {
                let q = s.quality.as_ref()?;
                let share = if unparsed {
                    q.unparsed_rate
                } else {
                    q.accuracy
                };
                Some((s.achieved_rate_per_s, share * 100.0))
            })
            .collect(),
        dashed: unparsed,
    });
    svg::lines(
        "graded answers against achieved rate",
        "achieved requests/s",
        "%",
        &series,
        &Marks::default(),
    )
}

pub fn sessions(summary: &Summary) -> Option<String> {
    if summary.turns.is_empty() {
        return None;
    }
    let mut table = String::from(
        r#"<table><tr><th>turn</th><th class="n">requests</th><th class="n">ok</th><th class="n">TTFT p50 ms</th><th class="n">TTFT p99 ms</th><th class="n">prompt tokens</th><th class="n">cached share</th></tr>"#,
    );
    for t in &summary.turns {
        let _ = write!(
            table,
            r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{} %</td></tr>"#,
            t.turn,
            t.requests,
            t.ok,
            num(t.ttft_ms.p50),
            num(t.ttft_ms.p99),
            num(t.mean_prompt_tokens),
            num(t.cached_share * 100.0)
        );
    }
    table.push_str("</table>");
    Some(section("sessions", "Sessions, turn by turn", &table))
}

/// Reasoning as its own phase: when the model began to think, when it began to
/// answer, how long and how much it thought (docs/metrics.md defines each).
pub fn reasoning(summary: &Summary) -> Option<String> {
    let r = summary.reasoning.as_ref()?;
    let l = &summary.latency_ms;
    let mut table = String::from(
        r#"<table><tr><th>per request</th><th class="n">count</th><th class="n">p50</th><th class="n">p90</th><th class="n">p99</th><th>unit</th></tr>"#,
    );
    for (id, name, d, unit) in [
        ("ttft", "time to first token", &l.ttft, "ms"),
        (
            "time_to_first_reasoning",
            "time to first reasoning token",
            &l.time_to_first_reasoning,
            "ms",
        ),
        (
            "time_to_first_answer",
            "time to first answer token",
            &l.time_to_first_answer,
            "ms",
        ),
        ("reasoning_time", "reasoning time", &l.reasoning, "ms"),
        ("reasoning_tokens", "reasoning tokens", &r.tokens, "tokens"),
        ("answer_tokens", "answer tokens", &r.answer_tokens, "tokens"),
        (
            "reasoning_share",
            "reasoning's share of E2E",
            &r.share_of_e2e_pct,
            "%",
        ),
    ] {
        let _ = write!(
            table,
            r#"<tr data-metric="{id}"><td>{name}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{unit}</td></tr>"#,
            d.count,
            num(d.p50),
            num(d.p90),
            num(d.p99)
        );
    }
    table.push_str("</table>");
    let heading = format!("Reasoning ({} requests)", r.requests);
    Some(section("reasoning", &heading, &table))
}

/// Graded answers: correct, wrong, unparsed, and the accuracy with its interval.
pub fn quality(summary: &Summary) -> Option<String> {
    let q = summary.quality.as_ref()?;
    let pct = |x: f64| num(x * 100.0);
    let mut table = String::from(
        r#"<table><tr><th>graded</th><th class="n">correct</th><th class="n">wrong</th><th class="n">unparsed</th><th class="n">accuracy %</th><th class="n">95% interval %</th><th class="n">unparsed %</th></tr>"#,
    );
    let _ = write!(
        table,
        r#"<tr data-metric="accuracy"><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{} – {}</td><td class="n">{}</td></tr></table>"#,
        q.graded,
        q.correct,
        q.wrong,
        q.unparsed,
        pct(q.accuracy),
        pct(q.accuracy_interval[0]),
        pct(q.accuracy_interval[1]),
        pct(q.unparsed_rate)
    );
    if !q.buckets.is_empty() {
        table.push_str(
            r#"<table><tr><th>tool calls not correct, by why</th><th class="n">answers</th></tr>"#,
        );
        for (bucket, count) in &q.buckets {
            let _ = write!(
                table,
                r#"<tr data-bucket="{bucket}"><td>{}</td><td class="n">{count}</td></tr>"#,
                bucket.replace('_', " ")
            );
        }
        table.push_str("</table>");
    }
    Some(section("quality", "Graded answers", &table))
}

pub fn errors(summary: &Summary) -> Option<String> {
    if summary.errors.is_empty() {
        return None;
    }
    let mut table = String::from(
        r#"<table><tr><th>kind</th><th>where</th><th class="n">count</th><th>example</th></tr>"#,
    );
    for e in &summary.errors {
        let stage = wire_name(e.stage);
        let _ = write!(
            table,
            r#"<tr><td><code>{}</code></td><td>{}</td><td class="n" data-error="{}">{}</td><td>{}</td></tr>"#,
            escape(&e.kind),
            escape(&stage),
            escape(&e.kind),
            e.count,
            escape(&e.example)
        );
    }
    table.push_str("</table>");
    Some(section("errors", "Errors", &table))
}
