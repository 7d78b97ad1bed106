//! `report.html`: one file a person opens first. Everything is inline — styles, charts
//! (SVG drawn here), the summary as embedded JSON — and a Content-Security-Policy
//! that forbids any request, so a saved report opens from `file://` with the network
//! off and never goes blank when a host moves. Values show on hover (SVG titles) and
//! the page prints as it looks; one small inline script, allowed by its hash, zooms
//! the time axes (drag; double-click resets) and toggles series (click the legend).
//! Each section appears only when the run has its data.

mod about;
mod digest;
mod disruptions;
mod drift;
mod explain;
mod flow_sessions;
mod flows;
mod heal;
mod mcp;
mod media;
mod parts;
mod sections;
mod server;
pub mod svg;

use std::path::Path;

use anyhow::Result;

pub use digest::{Digest, STALL_GAP_US, TIMELINE_ROWS};

use super::Summary;

/// One pass over the records; `scheduled` (one record each) samples the timeline.
pub fn digest_of(records: &Path, scheduled: u64) -> Result<Digest> {
    let mut digest = Digest::new(scheduled);
    crate::record::read_records(records, None, |record| digest.add(&record))?;
    Ok(digest.finish())
}

/// The page.
pub fn render(summary: &Summary, digest: &Digest) -> String {
    let mut page = String::with_capacity(256 * 1024);
    page.push_str(&head(summary));
    for section in [
        sections::verdicts(summary),
        sections::overview(summary),
        sections::distributions(summary, digest),
        sections::over_time(summary, digest),
        drift::drift(summary, &sections::marks(summary, digest)),
        disruptions::disruptions(summary, &sections::marks(summary, digest)),
        explain::explanation(summary),
        heal::heal(summary),
        sections::timeline(digest),
        sections::sweep(summary),
        sections::sessions(summary),
        sections::reasoning(summary),
        sections::quality(summary),
        flows::flow(summary, digest),
        media::media(summary, &sections::marks(summary, digest)),
        mcp::mcp(summary),
        server::server(summary, digest),
        sections::errors(summary),
        about::samples(summary),
    ]
    .into_iter()
    .flatten()
    {
        page.push_str(&section);
    }
    page.push_str(&about::about(summary, digest));
    page.push_str(&embedded_summary(summary));
    page.push_str("</main><script>");
    page.push_str(SCRIPT);
    page.push_str("</script></body></html>\n");
    page
}

/// The page's one script: zoom and series toggles on line charts (the page works
/// without it). Inline, and allowed by its hash alone: no other script can run.
const SCRIPT: &str = include_str!("report.js");

/// The CSP source that allows [`SCRIPT`]: `sha256-` and its digest in base64.
fn script_hash() -> String {
    use base64::Engine;
    let digest = ring::digest::digest(&ring::digest::SHA256, SCRIPT.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

fn head(summary: &Summary) -> String {
    let title = svg::escape(&format!("redline · {}", summary.name));
    format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{}'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{STYLE}</style></head><body><main>
<h1>{title}</h1>
<p class="lede">{} against <code>{}</code>{} · {} s</p>
"##,
        script_hash(),
        if summary.interrupted {
            "Interrupted run"
        } else {
            "Run"
        },
        svg::escape(&summary.target),
        if summary.model.is_empty() {
            String::new()
        } else {
            format!(", model <code>{}</code>", svg::escape(&summary.model))
        },
        svg::num(summary.elapsed_s)
    )
}

/// The summary as JSON, for tools and for the test that checks the page against
/// `summary.json` (`</` is escaped so the data cannot end the element).
fn embedded_summary(summary: &Summary) -> String {
    let json = serde_json::to_string(summary)
        .expect("a summary serializes")
        .replace("</", "<\\/");
    format!(r#"<script type="application/json" id="summary-json">{json}</script>"#)
}

/// A page of its own in the report's style (no script; the CSP allows none):
/// `body` is HTML the caller built and escaped.
pub fn standalone_page(title: &str, body: &str) -> String {
    format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{}</title><style>{STYLE}</style></head><body><main>{body}</main></body></html>
"##,
        svg::escape(title)
    )
}

const STYLE: &str = r#"
:root { --fg: #1d2430; --muted: #5b6575; --line: #d9dee6; --ok: #0a7d45; --bad: #b3261e; --warn: #946200; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); margin: 0; background: #fff; }
main { max-width: 820px; margin: 0 auto; padding: 20px 24px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 4px; } .lede, .note { color: var(--muted); } code { font-size: 12.5px; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); } td.n, th.n { text-align: right; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 12px 0; font-weight: 600; }
.banner.pass { background: #e6f4ec; color: var(--ok); } .banner.fail { background: #fbe9e7; color: var(--bad); } .banner.unproven { background: #fff4d6; color: var(--warn); }
.pass { color: var(--ok); } .fail { color: var(--bad); } .not_proven { color: var(--warn); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 8px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; } .card b { display: block; font-size: 18px; }
.card span { color: var(--muted); font-size: 12px; }
svg { display: block; margin: 4px 0 10px; } .grid { stroke: #eef1f5; } .axis { stroke: #9aa3b0; }
.tick, .legend, .mark-label { font-size: 10.5px; fill: var(--muted); } .label { font-size: 11px; fill: var(--muted); }
.series.hidden { display: none; } .key-item { cursor: pointer; } .key-item.off { opacity: 0.35; }
svg.lines { cursor: crosshair; user-select: none; } .zoom-band { fill: #0072b2; fill-opacity: 0.12; }
.bar { fill: #9ec5e8; } .bar:hover { fill: #0072b2; } .cdf { fill: none; stroke: #d55e00; stroke-width: 1.4; } .cdf-tick { fill: #d55e00; }
.mark { stroke: #1d2430; stroke-dasharray: 3 3; } .window { fill-opacity: 0.12; } .event { stroke: #cc79a7; stroke-width: 1.2; stroke-dasharray: 2 2; }
.wait { fill: #c9ced6; } .ttft { fill: #e69f00; } .decode { fill: #0072b2; } .stall { fill: #d55e00; } .failed { fill: #b3261e; }
.key span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; vertical-align: -1px; }
ul.key.windows { list-style: none; padding: 0; margin: 4px 0; color: var(--muted); font-size: 12px; } ul.key.windows span { opacity: 0.35; margin-left: 0; }
.key .wait { background: #c9ced6; } .key .ttft { background: #e69f00; } .key .decode { background: #0072b2; } .key .stall { background: #d55e00; } .key .failed { background: #b3261e; border-radius: 5px; }
pre { background: #f5f7fa; padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; word-break: break-word; }
.exchange pre.prompt { border-left: 3px solid #c9ced6; } .exchange pre.answer { border-left: 3px solid #0072b2; }
.exchange pre::before { display: block; color: var(--muted); font: 600 11px system-ui, sans-serif; margin-bottom: 2px; }
.exchange pre.prompt::before { content: "prompt"; } .exchange pre.answer::before { content: "answer"; }
summary { cursor: pointer; color: var(--muted); }
@media print { main { max-width: none; } h2 { break-after: avoid; } svg, table { break-inside: avoid; } }
"#;

/// The page of `redline compare`: the tables, overlaid CDFs per metric, and completed
/// requests per second of each run on one axis.
pub fn compare_page(
    base: &super::compare::Run,
    others: &[(super::compare::Run, Vec<super::compare::MetricComparison>)],
) -> String {
    use std::fmt::Write;
    let name = |run: &super::compare::Run| format!("{} ({})", run.summary.name, run.dir.display());
    let mut page = format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>redline compare</title><style>{STYLE}</style></head><body><main><h1>redline compare</h1>
<p class="lede">Baseline: {}</p>"##,
        svg::escape(&name(base))
    );
    for (run, comparisons) in others {
        let _ = write!(
            page,
            r#"<section id="vs"><h2>{}</h2><table><tr><th>metric</th><th class="n">base ms</th><th class="n">this ms</th><th class="n">change</th><th class="n">95 % interval of Δ</th><th class="n">Mann–Whitney p</th><th>verdict</th></tr>"#,
            svg::escape(&name(run))
        );
        for c in comparisons {
            for d in &c.stats {
                let _ = write!(
                    page,
                    r#"<tr><td>{}.{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{:+.1} %</td><td class="n">[{}, {}]</td><td class="n">{}</td><td data-verdict="{}.{}">{}</td></tr>"#,
                    d.metric,
                    d.stat,
                    svg::num(d.base),
                    svg::num(d.other),
                    d.change * 100.0,
                    svg::num(d.interval.0),
                    svg::num(d.interval.1),
                    c.p_value.map_or("–".into(), |p| format!("{p:.3}")),
                    d.metric,
                    d.stat,
                    super::compare::verdict(d)
                );
            }
        }
        page.push_str("</table>");
        if let Some(a) = super::compare::AccuracyComparison::of(&base.summary, &run.summary) {
            let _ = write!(
                page,
                r#"<p data-verdict="accuracy">Graded accuracy: {}</p>"#,
                a.describe()
            );
        }
        page.push_str("</section>");
    }
    let runs: Vec<&super::compare::Run> = std::iter::once(base)
        .chain(others.iter().map(|(r, _)| r))
        .collect();
    page.push_str(r#"<section id="cdfs"><h2>Distributions, overlaid</h2>"#);
    page.push_str(&overlaid_cdfs(&runs));
    let rates: Vec<svg::Series> = runs
        .iter()
        .map(|r| svg::Series {
            name: r.summary.name.clone(),
            points: r
                .summary
                .timeseries
                .iter()
                .map(|p| (p.second as f64 + 0.5, p.window.completed as f64))
                .collect(),
            dashed: false,
        })
        .collect();
    let _ = write!(
        page,
        "<h3>completed per second</h3>{}</section></main></body></html>",
        svg::lines(
            "completed per second",
            "seconds into the run",
            "per second",
            &rates,
            &svg::Marks::default()
        )
    );
    page
}

/// Each metric's distribution in every run that has it, as overlaid CDFs (300 points
/// a run at most).
fn overlaid_cdfs(runs: &[&super::compare::Run]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for (i, metric) in super::compare::METRICS.iter().enumerate() {
        let series: Vec<svg::Series> = runs
            .iter()
            .filter(|r| !r.samples[i].is_empty())
            .map(|r| {
                let n = r.samples[i].len();
                let step = n.div_ceil(300).max(1);
                svg::Series {
                    name: r.summary.name.clone(),
                    points: r.samples[i]
                        .iter()
                        .enumerate()
                        .step_by(step)
                        .map(|(k, v)| (*v, (k + 1) as f64 / n as f64))
                        .collect(),
                    dashed: false,
                }
            })
            .collect();
        if series.len() > 1 {
            let _ = write!(
                out,
                "<h3>{metric}</h3>{}",
                svg::lines(
                    metric,
                    "ms",
                    "share at or below",
                    &series,
                    &svg::Marks::default()
                )
            );
        }
    }
    out
}
