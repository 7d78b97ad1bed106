//! Reports: the JSON summary (a stable schema, `docs/summary.schema.json`) and the
//! terminal table rendered from it. Rendering is pure; callers write the bytes.

use serde::{Deserialize, Serialize};

use crate::metrics::{Aggregator, Counts, Dist, FailureCount, Window};

/// Version of the summary's shape; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub schema_version: u32,
    pub name: String,
    pub target: String,
    pub model: String,
    /// Stopped early by Ctrl-C or SIGTERM: the figures cover what ran.
    pub interrupted: bool,
    pub elapsed_s: f64,
    pub stages: Vec<String>,
    /// All requests, every phase.
    pub requests: Counts,
    /// Requests of the measured phase (warm-up and cool-down excluded).
    pub measured: Counts,
    pub measured_window_s: f64,
    pub throughput: Throughput,
    /// Measured requests with no failure of any kind.
    pub pass_rate: Option<f64>,
    /// Measured requests not failed by unavailability (refused/reset, 5xx, timeout).
    pub availability: Option<f64>,
    pub latency_ms: Latency,
    pub tokens: Tokens,
    pub errors: Vec<FailureCount>,
    pub server: ServerSide,
    /// Per second of the run, by completion time.
    pub timeseries: Vec<TimePoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Latency {
    /// Send → first content token.
    pub ttft: Dist,
    /// Intended start → first content token (includes schedule lag).
    pub ttft_from_intended: Dist,
    pub time_to_second_token: Dist,
    /// Gaps between content events, pooled over requests.
    pub itl: Dist,
    /// Per-request mean gap.
    pub itl_per_request: Dist,
    /// (E2E − TTFT) / (output tokens − 1).
    pub tpot: Dist,
    /// Send → last byte.
    pub e2e: Dist,
    pub e2e_from_intended: Dist,
    /// Actual send − intended start.
    pub send_lag: Dist,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tokens {
    pub input_total: u64,
    pub output_total: u64,
    pub input: Dist,
    pub output: Dist,
    /// Requests whose output count is a local estimate (the server sent no usage).
    pub estimated_requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerSide {
    /// Requests the server reported as preempted (simulator ground truth).
    pub preempted_requests: u64,
    pub cached_prompt_tokens: u64,
    /// Client TTFT minus the server's own (first token − arrival): network and client
    /// overhead, where the server reports its timeline.
    pub ttft_client_overhead_ms: Dist,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimePoint {
    pub second: u64,
    #[serde(flatten)]
    pub window: Window,
}

/// Everything the summary needs that the aggregator does not know.
pub struct RunInfo<'a> {
    pub name: &'a str,
    pub target: &'a str,
    pub model: &'a str,
    pub interrupted: bool,
    pub elapsed_s: f64,
    pub stages: Vec<String>,
}

pub fn summarize(agg: &Aggregator, info: RunInfo) -> Summary {
    let window_s = match (agg.window_start_us, agg.window_end_us) {
        (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
        _ => 0.0,
    };
    let per_s = |n: u64| {
        if window_s > 0.0 {
            n as f64 / window_s
        } else {
            0.0
        }
    };
    let m = &agg.measured;
    let attempted = m.scheduled - m.dropped - m.cancelled;
    let ratio = |n: u64| (attempted > 0).then(|| n as f64 / attempted as f64);
    let d = &agg.dist;
    let ms = |h| Dist::of(h, 1e3);
    Summary {
        schema_version: SCHEMA_VERSION,
        name: info.name.to_owned(),
        target: info.target.to_owned(),
        model: info.model.to_owned(),
        interrupted: info.interrupted,
        elapsed_s: info.elapsed_s,
        stages: info.stages,
        requests: agg.counts,
        measured: agg.measured,
        measured_window_s: window_s,
        throughput: Throughput {
            requests_per_s: per_s(m.ok),
            output_tokens_per_s: per_s(agg.output_tokens),
            total_tokens_per_s: per_s(agg.output_tokens + agg.input_tokens),
        },
        pass_rate: ratio(m.ok),
        availability: ratio(attempted - agg.unavailable),
        latency_ms: Latency {
            ttft: ms(&d.ttft),
            ttft_from_intended: ms(&d.ttft_intended),
            time_to_second_token: ms(&d.time_to_second_token),
            itl: ms(&d.itl),
            itl_per_request: ms(&d.itl_request_mean),
            tpot: ms(&d.tpot),
            e2e: ms(&d.e2e),
            e2e_from_intended: ms(&d.e2e_intended),
            send_lag: ms(&d.send_lag),
        },
        tokens: Tokens {
            input_total: agg.input_tokens,
            output_total: agg.output_tokens,
            input: Dist::of(&d.input_tokens, 1.0),
            output: Dist::of(&d.output_tokens, 1.0),
            estimated_requests: agg.estimated_token_records,
        },
        errors: agg.failure_counts(),
        server: ServerSide {
            preempted_requests: agg.preempted,
            cached_prompt_tokens: agg.cached_prompt_tokens,
            ttft_client_overhead_ms: ms(&d.ttft_client_overhead),
        },
        timeseries: agg
            .windows
            .iter()
            .map(|(second, window)| TimePoint {
                second: *second,
                window: *window,
            })
            .collect(),
    }
}

/// The JSON Schema of `summary.json` (committed as `docs/summary.schema.json`).
pub fn summary_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Summary)).expect("a schema serializes")
}

/// The JSON Schema of one line of `records.jsonl` (`docs/record.schema.json`).
pub fn record_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(crate::record::Record)).expect("a schema serializes")
}

/// The JSON summary.
pub fn render_json(summary: &Summary) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(summary).expect("a summary always serializes");
    out.push(b'\n');
    out
}

/// The terminal summary.
pub fn render_terminal(s: &Summary) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    let state = if s.interrupted {
        "  (interrupted: partial results)"
    } else {
        ""
    };
    line(format!(
        "redline · {} → {} ({}){state}",
        s.name, s.target, s.model
    ));
    for (i, stage) in s.stages.iter().enumerate() {
        line(format!("  stage {i}: {stage}"));
    }
    let r = &s.requests;
    line(format!(
        "  requests: {} scheduled · {} ok · {} failed · {} timed out · {} cancelled · {} dropped   ({:.1}s)",
        r.scheduled, r.ok, r.error, r.timeout, r.cancelled, r.dropped, s.elapsed_s
    ));
    let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{:.3}%", v * 100.0));
    line(format!(
        "  measured: {} requests over {:.1}s · {:.2} req/s{} · pass {} · availability {}",
        s.measured.scheduled,
        s.measured_window_s,
        s.throughput.requests_per_s,
        // Plain HTTP runs have no tokens: say nothing rather than "0.0 tok/s".
        if s.tokens.output_total > 0 {
            format!(
                " · {:.1} output tok/s · {:.1} total tok/s",
                s.throughput.output_tokens_per_s, s.throughput.total_tokens_per_s
            )
        } else {
            String::new()
        },
        pct(s.pass_rate),
        pct(s.availability)
    ));
    line(String::new());
    line(format!(
        "  {:<22}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "mean", "p50", "p90", "p95", "p99", "max"
    ));
    let l = &s.latency_ms;
    for (name, d) in [
        ("TTFT", &l.ttft),
        ("TTFT from intended", &l.ttft_from_intended),
        ("time to 2nd token", &l.time_to_second_token),
        ("ITL (pooled)", &l.itl),
        ("ITL (per request)", &l.itl_per_request),
        ("TPOT", &l.tpot),
        ("E2E", &l.e2e),
        ("E2E from intended", &l.e2e_from_intended),
        ("send lag", &l.send_lag),
    ] {
        if d.count > 0 {
            line(format!(
                "  {name:<22}{:>9}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}",
                d.count, d.mean, d.p50, d.p90, d.p95, d.p99, d.max
            ));
        }
    }
    let t = &s.tokens;
    let estimated = if t.estimated_requests > 0 {
        format!(
            " ({} requests estimated locally: the server sent no usage)",
            t.estimated_requests
        )
    } else {
        String::new()
    };
    if t.output_total > 0 {
        line(format!(
            "  tokens: input {} (mean {:.1}) · output {} (mean {:.1}){estimated}",
            t.input_total, t.input.mean, t.output_total, t.output.mean
        ));
    }
    if s.server.ttft_client_overhead_ms.count > 0 {
        let o = &s.server.ttft_client_overhead_ms;
        line(format!(
            "  server truth: client TTFT − server TTFT p50 {:.3} ms, p99 {:.3} ms · {} preempted · {} cached prompt tokens",
            o.p50, o.p99, s.server.preempted_requests, s.server.cached_prompt_tokens
        ));
    }
    if !s.errors.is_empty() {
        line("  errors:".into());
        for e in &s.errors {
            let stage = serde_json::to_value(e.stage)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            line(format!(
                "    {:>7} × {stage}/{}: {}",
                e.count, e.kind, e.example
            ));
        }
    }
    out
}
