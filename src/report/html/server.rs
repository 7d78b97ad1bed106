//! The server's side of the run: its queue and KV cache as scraped, the prefix
//! cache's hit rate, and the server's own account of its time.

use std::fmt::Write;

use super::digest::Digest;
use super::parts::section;
use super::sections::{distribution, per_second, quantile};
use super::svg::{self, Marks, Series, escape};
use crate::prometheus::scrape::ServerSample;
use crate::report::Summary;

/// The server's side: its queue and KV cache as scraped, and the prefix cache's hit
/// rate over time — as scraped, as the server reported it per request, and what the
/// prompts sent made possible.
pub fn server(summary: &Summary, digest: &Digest) -> Option<String> {
    let mut body = String::new();
    let samples = summary
        .server_metrics
        .as_ref()
        .map_or(&[][..], |m| m.samples.as_slice());
    let series = |name: &str, f: fn(&ServerSample) -> Option<f64>| Series {
        name: name.into(),
        points: samples
            .iter()
            .filter_map(|s| Some((s.t_s, f(s)?)))
            .collect(),
        dashed: false,
    };
    let x = "seconds into the run";
    if let Some(metrics) = summary
        .server_metrics
        .as_ref()
        .filter(|_| !samples.is_empty())
    {
        let _ = write!(
            body,
            r#"<p class="note">Scraped from <code>{}</code>.</p>"#,
            escape(&metrics.url)
        );
        let queue = [
            series("running", |s| s.running),
            series("waiting", |s| s.waiting),
        ];
        body.push_str(&svg::lines(
            "server queue",
            x,
            "requests",
            &queue,
            &Marks::default(),
        ));
        let kv = [series("KV cache usage", |s| s.kv_cache_usage)];
        if kv[0].points.iter().any(|p| p.1 > 0.0) {
            body.push_str(&svg::lines("KV cache", x, "share", &kv, &Marks::default()));
        }
    }
    let cache = [
        Series {
            name: "scraped hit rate".into(),
            points: scraped_hit_rate(samples),
            dashed: false,
        },
        Series {
            name: "reported per request".into(),
            points: per_second(&digest.seconds, |s| {
                share(s.cached_prompt_tokens, s.truth_prompt_tokens)
            }),
            dashed: false,
        },
        Series {
            name: "possible (prefixes sent before)".into(),
            points: per_second(&digest.seconds, |s| {
                share(s.repeated_prefix_tokens, s.prefix_prompt_tokens)
            }),
            dashed: true,
        },
    ];
    let cached_anything = cache[0]
        .points
        .iter()
        .chain(&cache[1].points)
        .any(|p| p.1 > 0.0);
    if cached_anything || !cache[2].points.is_empty() {
        body.push_str(r#"<h3>Prefix cache</h3><p class="note">Share of prompt tokens served from the prefix cache: between scrapes from the server's hit and query counters, per second from what the server reported on each answer, and (dashed) the share of prompt tokens that repeated a prefix sent earlier, the most a cache could hit.</p>"#);
        body.push_str(&svg::lines(
            "prefix cache hit rate",
            x,
            "share",
            &cache,
            &Marks::default(),
        ));
    }
    reported_times(summary, digest, &mut body);
    (!body.is_empty()).then(|| section("server", "Server and cache", &body))
}

/// What the server said of its own time (Ollama's durations, TGI's headers) beside the
/// client's E2E: its totals, the client's time beyond them, and per second the
/// medians of each part it named.
fn reported_times(summary: &Summary, digest: &Digest, body: &mut String) {
    let Some(reported) = &summary.server.reported else {
        return;
    };
    body.push_str(r#"<h3>The server's own account</h3><p class="note">What the server's API said of each request's time (Ollama's durations, TGI's headers), beside the client's: the client's end to end beyond the server's total is transport, the server's HTTP layer, any queue it does not count, and the client.</p>"#);
    for (title, histogram, dist) in [
        (
            "Server-reported total",
            &digest.server_total,
            &reported.total_ms,
        ),
        (
            "Client end to end beyond the server's total",
            &digest.e2e_beyond_server,
            &reported.client_e2e_beyond_ms,
        ),
    ] {
        if !histogram.is_empty() {
            body.push_str(&distribution(title, "ms", histogram, 1e3, dist));
        }
    }
    let parts: Vec<Series> = super::digest::REPORTED_PARTS
        .into_iter()
        .map(|name| Series {
            name: name.into(),
            points: per_second(&digest.seconds, |s| quantile(s.reported_us.get(name)?, 0.5)),
            dashed: name == "client E2E",
        })
        .filter(|series| !series.points.is_empty())
        .collect();
    body.push_str("<h3>Per second, the median of each part</h3>");
    body.push_str(&svg::lines(
        "server-reported time per second",
        "seconds into the run",
        "ms",
        &parts,
        &Marks::default(),
    ));
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Hits over queries between consecutive scrapes of the counters.
fn scraped_hit_rate(samples: &[ServerSample]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter_map(|pair| {
            let (h0, q0) = pair[0]
                .prefix_cache_hits
                .zip(pair[0].prefix_cache_queries)?;
            let (h1, q1) = pair[1]
                .prefix_cache_hits
                .zip(pair[1].prefix_cache_queries)?;
            (q1 > q0).then(|| ((pair[0].t_s + pair[1].t_s) / 2.0, (h1 - h0) / (q1 - q0)))
        })
        .collect()
}
