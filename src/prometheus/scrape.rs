//! The server's own view during a run: its Prometheus `/metrics` scraped on an
//! interval, so the report can put KV-cache usage, queue length, prefix-cache hits and
//! preemptions next to the client's figures.
//!
//! Serving engines rename metrics between versions (vLLM's `gpu_cache_usage_perc`
//! became `kv_cache_usage_perc`; prefix-cache hits moved from a rate gauge to
//! `prefix_cache_hits`/`prefix_cache_queries` counters), so each figure is probed under
//! every name it has had, and the report says which names the server had.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Uri;
use hyper::body::Bytes;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::client::{HttpClient, RunClock};

/// Each figure under the names serving engines have given it, newest first.
const RUNNING: &[&str] = &["vllm:num_requests_running"];
const WAITING: &[&str] = &["vllm:num_requests_waiting"];
const KV_USAGE: &[&str] = &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
const PREFIX_HITS: &[&str] = &[
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_hits_total",
];
const PREFIX_QUERIES: &[&str] = &[
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_queries_total",
];
const PREEMPTIONS: &[&str] = &["vllm:num_preemptions_total", "vllm:num_preemptions"];

/// One scrape.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerSample {
    /// Seconds into the run.
    pub t_s: f64,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// Fraction of the KV cache in use.
    pub kv_cache_usage: Option<f64>,
    /// Cumulative prefix-cache hits and queries (tokens, on vLLM).
    pub prefix_cache_hits: Option<f64>,
    pub prefix_cache_queries: Option<f64>,
    pub preemptions: Option<f64>,
}

/// What the scrapes of a run found.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerMetrics {
    pub url: String,
    /// The metric names the server had, of those redline looks for.
    pub found: Vec<String>,
    pub samples: Vec<ServerSample>,
    /// Scrapes that failed (unreachable, non-200, unreadable).
    pub failed_scrapes: u64,
    /// Prefix-cache hits over queries between the first and last scrape.
    pub prefix_hit_rate: Option<f64>,
}

/// Scrapes `url` every `interval` until `stop`, then one last time.
pub async fn scrape(
    http: HttpClient,
    url: Uri,
    interval: Duration,
    clock: RunClock,
    stop: CancellationToken,
) -> ServerMetrics {
    let mut out = ServerMetrics {
        url: url.to_string(),
        ..ServerMetrics::default()
    };
    let mut tick = tokio::time::interval(interval);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.cancelled() => true,
        };
        match fetch(&http, &url).await {
            Some(text) => {
                let (sample, found) = parse(&text, clock.start().elapsed().as_secs_f64());
                for name in found {
                    if !out.found.contains(&name) {
                        out.found.push(name);
                    }
                }
                out.samples.push(sample);
            }
            None => out.failed_scrapes += 1,
        }
        if last {
            break;
        }
    }
    let counters = |s: &ServerSample| s.prefix_cache_hits.zip(s.prefix_cache_queries);
    if let (Some((h0, q0)), Some((h1, q1))) = (
        out.samples.iter().find_map(counters),
        out.samples.iter().rev().find_map(counters),
    ) && q1 > q0
    {
        out.prefix_hit_rate = Some((h1 - h0) / (q1 - q0));
    }
    out
}

async fn fetch(http: &HttpClient, url: &Uri) -> Option<String> {
    let request = hyper::Request::get(url.clone())
        .body(http_body_util::Full::new(Bytes::new()))
        .ok()?;
    let response = tokio::time::timeout(Duration::from_secs(5), crate::client::send(http, request))
        .await
        .ok()?
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = response.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(body.to_vec()).ok()
}

/// The figures of one exposition, and the names found. Values of the same name with
/// different labels (per model, per engine) are summed.
fn parse(text: &str, t_s: f64) -> (ServerSample, Vec<String>) {
    let mut found = Vec::new();
    let mut value = |names: &[&str]| -> Option<f64> {
        for name in names {
            let mut sum = None;
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let Some(rest) = line.strip_prefix(name) else {
                    continue;
                };
                // The name must end here: `{labels} value` or ` value`.
                let rest = match rest.chars().next() {
                    Some('{') => rest.split_once('}').map(|(_, v)| v),
                    Some(' ') => Some(rest),
                    _ => None,
                };
                if let Some(v) = rest.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                {
                    sum = Some(sum.unwrap_or(0.0) + v);
                }
            }
            if sum.is_some() {
                found.push((*name).to_owned());
                return sum;
            }
        }
        None
    };
    let sample = ServerSample {
        t_s,
        running: value(RUNNING),
        waiting: value(WAITING),
        kv_cache_usage: value(KV_USAGE),
        prefix_cache_hits: value(PREFIX_HITS),
        prefix_cache_queries: value(PREFIX_QUERIES),
        preemptions: value(PREEMPTIONS),
    };
    (sample, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_and_new_vllm_names_are_both_read_and_labels_summed() {
        let old = "# HELP x\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\nvllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 3\nvllm:num_requests_waiting_by_reason 9\n";
        let (sample, found) = parse(old, 1.0);
        assert_eq!(sample.kv_cache_usage, Some(0.25));
        assert_eq!(
            sample.waiting,
            Some(5.0),
            "summed over labels, not the longer name"
        );
        assert_eq!(sample.prefix_cache_hits, None);
        assert_eq!(
            found,
            ["vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"]
        );
        let new = "vllm:kv_cache_usage_perc 0.5\nvllm:prefix_cache_hits_total{m=\"x\"} 10\nvllm:prefix_cache_queries_total{m=\"x\"} 40\n";
        let (sample, _) = parse(new, 2.0);
        assert_eq!(sample.kv_cache_usage, Some(0.5));
        assert_eq!(
            (sample.prefix_cache_hits, sample.prefix_cache_queries),
            (Some(10.0), Some(40.0))
        );
    }
}
