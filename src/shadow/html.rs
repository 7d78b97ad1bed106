//! The diff as a page (`diff.html`): each side's outcome, the flagged fields with
//! their figures, module and examples, the noise that was ignored, and TTFT and E2E
//! of the three sides overlaid.

use std::fmt::Write;

use super::diff::{DiffReport, FieldKind, FieldVerdict};
use super::replay::{Replayed, Side};
use crate::record::Outcome;
use crate::report::html::{standalone_page, svg};

pub fn page(report: &DiffReport, replayed: &[Replayed]) -> String {
    let mut body = format!(
        r#"<h1>redline replay</h1><p class="lede">{} requests from <code>{}</code>; noise baseline: {}.</p>"#,
        report.requests,
        svg::escape(&report.recording),
        svg::escape(&report.noise_baseline)
    );
    let verdict = if report.flagged.is_empty() {
        r#"<div class="banner pass">No field differs beyond the noise.</div>"#.to_owned()
    } else {
        format!(
            r#"<div class="banner fail">{} field(s) differ beyond the noise.</div>"#,
            report.flagged.len()
        )
    };
    body.push_str(&verdict);
    sides(&mut body, report);
    fields(
        &mut body,
        "flagged",
        "Flagged, largest first",
        &report.flagged,
    );
    modules(&mut body, report);
    fields(&mut body, "noise", "Noise, ignored", &report.noise);
    fields(&mut body, "within", "Within the margins", &report.within);
    distributions(&mut body, replayed);
    standalone_page("redline replay", &body)
}

fn sides(body: &mut String, report: &DiffReport) {
    body.push_str(r#"<section id="sides"><h2>Sides</h2><table><tr><th>side</th><th>URL</th><th class="n">ok</th><th class="n">failed</th><th>failures</th></tr>"#);
    for (side, counts) in &report.sides {
        let failures: Vec<String> = counts
            .failures
            .iter()
            .map(|(k, n)| format!("{} {n}", svg::escape(k)))
            .collect();
        let _ = write!(
            body,
            r#"<tr><td>{}</td><td><code>{}</code></td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            svg::escape(side),
            svg::escape(&counts.url),
            counts.ok,
            counts.failed,
            failures.join(", ")
        );
    }
    body.push_str("</table>");
    for skipped in &report.skipped {
        let _ = write!(body, r#"<p class="note">{}</p>"#, svg::escape(skipped));
    }
    body.push_str("</section>");
}

fn fields(body: &mut String, id: &str, title: &str, verdicts: &[FieldVerdict]) {
    if verdicts.is_empty() {
        return;
    }
    let _ = write!(
        body,
        r#"<section id="{id}"><h2>{title}</h2><table><tr><th>field</th><th>module</th><th class="n">candidate</th><th class="n">baseline</th><th class="n">95 % interval</th><th class="n">p</th></tr>"#
    );
    for v in verdicts {
        let (candidate, noise, interval) = match v.kind {
            FieldKind::Timing => (
                format!("×{:.2}", v.candidate),
                format!("×{:.2}", v.noise),
                format!("×{:.2} – ×{:.2}", v.interval[0], v.interval[1]),
            ),
            _ => (
                format!("{:.1} %", v.candidate * 100.0),
                format!("{:.1} %", v.noise * 100.0),
                format!(
                    "{:+.1} – {:+.1} pts",
                    v.interval[0] * 100.0,
                    v.interval[1] * 100.0
                ),
            ),
        };
        let _ = write!(
            body,
            r#"<tr data-field="{}"><td><code>{} {}</code></td><td>{}</td><td class="n">{candidate}</td><td class="n">{noise}</td><td class="n">{interval}</td><td class="n">{:.1e}</td></tr>"#,
            svg::escape(&v.field),
            svg::escape(&v.endpoint),
            svg::escape(&v.field),
            svg::escape(v.module.as_deref().unwrap_or("unattributed")),
            v.p_value
        );
        let _ = write!(
            body,
            r#"<tr><td colspan="6" class="note">{}: {}{}</td></tr>"#,
            svg::escape(&v.measure),
            svg::escape(&v.detail),
            examples(v)
        );
    }
    body.push_str("</table></section>");
}

fn examples(v: &FieldVerdict) -> String {
    let mut out = String::new();
    for e in &v.examples {
        let _ = write!(
            out,
            r#"<details><summary>trace {}</summary><pre>primary:   {}
candidate: {}</pre></details>"#,
            svg::escape(&e.trace_id),
            svg::escape(&e.primary),
            svg::escape(&e.candidate)
        );
    }
    out
}

fn modules(body: &mut String, report: &DiffReport) {
    if report.modules.is_empty() {
        return;
    }
    body.push_str(r#"<section id="modules"><h2>By module</h2><table><tr><th>module</th><th class="n">flagged fields</th></tr>"#);
    for (module, n) in &report.modules {
        let _ = write!(
            body,
            r#"<tr><td>{}</td><td class="n">{n}</td></tr>"#,
            svg::escape(module)
        );
    }
    body.push_str("</table></section>");
}

/// One timing of a record, in µs.
type RecordMetric = fn(&crate::record::Record) -> Option<u64>;

/// TTFT and E2E of each side's successful requests as CDFs on one axis.
fn distributions(body: &mut String, replayed: &[Replayed]) {
    body.push_str(r#"<section id="distributions"><h2>Distributions, overlaid</h2>"#);
    let metrics: [(&str, RecordMetric); 2] = [("TTFT", |r| r.ttft_us()), ("E2E", |r| r.e2e_us())];
    for (name, metric) in metrics {
        let series: Vec<svg::Series> = Side::ALL
            .iter()
            .map(|side| {
                let mut ms: Vec<f64> = replayed
                    .iter()
                    .map(|r| &r.answers[side].record)
                    .filter(|r| r.outcome == Outcome::Ok)
                    .filter_map(metric)
                    .map(|us| us as f64 / 1e3)
                    .collect();
                ms.sort_unstable_by(f64::total_cmp);
                let n = ms.len();
                let step = n.div_ceil(300).max(1);
                svg::Series {
                    name: side.name().to_owned(),
                    points: ms
                        .iter()
                        .enumerate()
                        .step_by(step)
                        .map(|(k, v)| (*v, (k + 1) as f64 / n as f64))
                        .collect(),
                    dashed: *side == Side::Secondary,
                }
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            let chart = svg::lines(
                name,
                "ms",
                "share at or below",
                &series,
                &Default::default(),
            );
            let _ = write!(body, "<h3>{name}</h3>{chart}");
        }
    }
    body.push_str("</section>");
}
