//! Percentiles of the measured starts, by kind and phase, each phase's share of the
//! time to the first token, and the terminal table.

use serde::Serialize;

use super::{Measured, StartKind, StartRun};
use crate::report::compare::quantile;

/// The starts of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct KindSummary {
    pub kind: StartKind,
    pub starts: usize,
    pub phases: Vec<PhaseStats>,
    /// Spawn (or wake request) to the first token; to ready without a probe.
    pub total: PhaseStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_ttft_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_tokens_per_s_p50: Option<f64>,
    pub peak_rss_bytes_max: u64,
    pub steady_rss_bytes_p50: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes_max: Option<u64>,
}

/// One phase over the starts of a kind, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub phase: &'static str,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Its share of the total, from the means.
    pub share: f64,
}

/// The phases of one start, in order: name and milliseconds.
pub fn phases_of(run: &StartRun) -> Vec<(&'static str, f64)> {
    let mut phases = Vec::new();
    let before_ready = match (run.port_open_ms, run.wake_ms) {
        (Some(port), _) => {
            phases.push(("spawn → port open", port));
            phases.push(("port open → ready", run.ready_ms - port));
            run.ready_ms
        }
        (None, Some(wake)) => {
            phases.push(("wake request → woken", wake));
            phases.push(("woken → ready", run.ready_ms - wake));
            run.ready_ms
        }
        (None, None) => {
            phases.push(("to ready", run.ready_ms));
            run.ready_ms
        }
    };
    if let Some(first) = run.first_token_ms {
        phases.push(("ready → first token", first - before_ready));
    }
    phases
}

/// The total of a start: to its first token, or to ready without a probe.
pub fn total_of(run: &StartRun) -> f64 {
    run.first_token_ms.unwrap_or(run.ready_ms)
}

/// Summaries of each kind that has starts, cold first.
pub fn summarize(measured: &Measured) -> Vec<KindSummary> {
    [StartKind::Cold, StartKind::Warm, StartKind::Wake]
        .into_iter()
        .filter_map(|kind| {
            let runs: Vec<&StartRun> = measured.runs.iter().filter(|r| r.kind == kind).collect();
            (!runs.is_empty()).then(|| summarize_kind(kind, &runs))
        })
        .collect()
}

fn summarize_kind(kind: StartKind, runs: &[&StartRun]) -> KindSummary {
    let totals: Vec<f64> = runs.iter().map(|r| total_of(r)).collect();
    let mut total = stats("to first token", totals, 0.0);
    total.share = 1.0;
    let names: Vec<&'static str> = phases_of(runs[0]).into_iter().map(|(n, _)| n).collect();
    let phases = names
        .iter()
        .map(|name| {
            let values = runs
                .iter()
                .filter_map(|r| phases_of(r).into_iter().find(|(n, _)| n == name))
                .map(|(_, ms)| ms)
                .collect();
            stats(name, values, total.mean_ms)
        })
        .collect();
    let median = |values: Vec<f64>| (!values.is_empty()).then(|| p(values, 0.5));
    KindSummary {
        kind,
        starts: runs.len(),
        phases,
        total,
        probe_ttft_ms_p50: median(runs.iter().filter_map(|r| r.probe_ttft_ms).collect()),
        decode_tokens_per_s_p50: median(
            runs.iter().filter_map(|r| r.decode_tokens_per_s).collect(),
        ),
        peak_rss_bytes_max: runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0),
        steady_rss_bytes_p50: p(
            runs.iter().map(|r| r.steady_rss_bytes as f64).collect(),
            0.5,
        ) as u64,
        gpu_memory_bytes_max: runs.iter().filter_map(|r| r.gpu_memory_bytes).max(),
    }
}

fn p(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(&values, q)
}

fn stats(phase: &'static str, mut values: Vec<f64>, total_mean: f64) -> PhaseStats {
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    PhaseStats {
        phase,
        p50_ms: quantile(&values, 0.5),
        p90_ms: quantile(&values, 0.9),
        min_ms: values[0],
        max_ms: values[values.len() - 1],
        mean_ms: mean,
        share: if total_mean > 0.0 {
            mean / total_mean
        } else {
            0.0
        },
    }
}

/// The terminal table: each kind's phases, then warm against cold.
pub fn render(kinds: &[KindSummary], gpu_note: Option<&str>) -> String {
    let mut out = String::new();
    for kind in kinds {
        out.push_str(&format!(
            "{} ({} starts)            p50         p90         min         max   share\n",
            kind.kind.as_str(),
            kind.starts
        ));
        for phase in kind.phases.iter().chain([&kind.total]) {
            out.push_str(&format!(
                "  {:<22} {:>9}   {:>9}   {:>9}   {:>9}   {:>4.0} %\n",
                phase.phase,
                fmt_ms(phase.p50_ms),
                fmt_ms(phase.p90_ms),
                fmt_ms(phase.min_ms),
                fmt_ms(phase.max_ms),
                phase.share * 100.0
            ));
        }
        let mut facts = vec![format!(
            "peak RSS {} (most), steady {} (p50)",
            fmt_bytes(kind.peak_rss_bytes_max),
            fmt_bytes(kind.steady_rss_bytes_p50)
        )];
        if let Some(ttft) = kind.probe_ttft_ms_p50 {
            facts.push(format!("probe TTFT {}", fmt_ms(ttft)));
        }
        if let Some(rate) = kind.decode_tokens_per_s_p50 {
            facts.push(format!("decode {rate:.1} tok/s"));
        }
        if let Some(gpu) = kind.gpu_memory_bytes_max {
            facts.push(format!("GPU memory {}", fmt_bytes(gpu)));
        }
        out.push_str(&format!("  {}\n", facts.join(" · ")));
    }
    let cold = kinds.iter().find(|k| k.kind == StartKind::Cold);
    for warm in kinds.iter().filter(|k| k.kind != StartKind::Cold) {
        if let Some(cold) = cold {
            out.push_str(&format!(
                "{} / cold, to first token (p50): {:.2}×\n",
                warm.kind.as_str(),
                warm.total.p50_ms / cold.total.p50_ms
            ));
        }
    }
    if let Some(note) = gpu_note {
        out.push_str(&format!("{note}\n"));
    }
    out
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

/// Bytes in binary units.
pub fn fmt_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}
