//! The simulator's `/metrics`, under vLLM's metric names so that dashboards, scrapers
//! and redline's own server-metric probe see what they would see on vLLM.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::planted::Spoil;
use super::scheduler::{Counters, Timeline};
use super::text::{FinishReason, ToolCall};

/// Latency buckets in seconds, as vLLM's (1 ms to 80 s, coarser at the top).
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// Step-clock lag buckets in seconds: how late the engine woke for a step.
const LAG_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.05,
];

type Labels = Vec<(&'static str, &'static str)>;

/// Every metric the simulator exports.
pub struct SimMetrics {
    registry: Registry,
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge<f64, AtomicU64>,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    prefix_queries: Counter,
    prefix_hits: Counter,
    preemptions: Counter,
    success: Family<Labels, Counter>,
    ttft: Histogram,
    inter_token: Histogram,
    e2e: Histogram,
    queue_time: Histogram,
    step_lag: Histogram,
    steps: Counter,
    truth: std::sync::Mutex<Truth>,
}

/// Exact distributions of the engine's own timeline since start or the last reset,
/// served at `/redline/truth`: the ground truth any client's figures (redline's,
/// GuideLLM's, AIPerf's) can be held against. HDR histograms in microseconds.
struct Truth {
    ttft: hdrhistogram::Histogram<u64>,
    inter_token: hdrhistogram::Histogram<u64>,
    e2e: hdrhistogram::Histogram<u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Arrivals of the first and last request to arrive, engine nanoseconds.
    arrivals_ns: Option<(u64, u64)>,
    tool_calls: ToolCallTruth,
}

/// Tool calls answered, and those the load spoiled (`Planted::tool_calls_spoiled_above`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallTruth {
    pub answered: u64,
    /// Arguments cut short: no longer JSON.
    pub cut: u64,
    /// One value changed.
    pub changed: u64,
}

impl Truth {
    fn new() -> Truth {
        let histogram = || {
            hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("static bounds are valid")
        };
        Truth {
            ttft: histogram(),
            inter_token: histogram(),
            e2e: histogram(),
            prompt_tokens: 0,
            completion_tokens: 0,
            arrivals_ns: None,
            tool_calls: ToolCallTruth::default(),
        }
    }
}

/// What `/redline/truth` answers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TruthReport {
    /// Requests finished.
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Requests per second as they arrived (first to last arrival): the rate a
    /// client really sent, whatever it reports of itself.
    pub arrival_rate_per_s: Option<f64>,
    /// Engine arrival → first token.
    pub ttft_ms: redline_base::histogram::Dist,
    /// Engine gaps between a sequence's consecutive tokens.
    pub inter_token_ms: redline_base::histogram::Dist,
    /// Engine arrival → finish.
    pub e2e_ms: redline_base::histogram::Dist,
    /// Tool calls answered, and those spoiled.
    #[serde(default)]
    pub tool_calls: ToolCallTruth,
}

impl SimMetrics {
    pub fn new(model: &str) -> Self {
        let latency = || Histogram::new(LATENCY_BUCKETS.iter().copied());
        let mut m = SimMetrics {
            running: Gauge::default(),
            waiting: Gauge::default(),
            kv_usage: Gauge::default(),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            prefix_queries: Counter::default(),
            prefix_hits: Counter::default(),
            preemptions: Counter::default(),
            success: Family::default(),
            ttft: latency(),
            inter_token: latency(),
            e2e: latency(),
            queue_time: latency(),
            step_lag: Histogram::new(LAG_BUCKETS.iter().copied()),
            steps: Counter::default(),
            truth: std::sync::Mutex::new(Truth::new()),
            registry: Registry::with_labels(
                [("model_name".into(), model.to_owned().into())].into_iter(),
            ),
        };
        let registry = &mut m.registry;
        registry.register(
            "vllm:num_requests_running",
            "Requests in the running batch",
            m.running.clone(),
        );
        registry.register(
            "vllm:num_requests_waiting",
            "Requests waiting to be scheduled",
            m.waiting.clone(),
        );
        registry.register(
            "vllm:kv_cache_usage_perc",
            "Fraction of KV-cache blocks in use (1 = 100%)",
            m.kv_usage.clone(),
        );
        registry.register(
            "vllm:prompt_tokens",
            "Prefill tokens processed",
            m.prompt_tokens.clone(),
        );
        registry.register(
            "vllm:generation_tokens",
            "Generation tokens processed",
            m.generation_tokens.clone(),
        );
        registry.register(
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache",
            m.prefix_queries.clone(),
        );
        registry.register(
            "vllm:prefix_cache_hits",
            "Prompt tokens found in the prefix cache",
            m.prefix_hits.clone(),
        );
        registry.register(
            "vllm:num_preemptions",
            "Preemptions of running requests",
            m.preemptions.clone(),
        );
        registry.register(
            "vllm:request_success",
            "Finished requests by finish reason",
            m.success.clone(),
        );
        registry.register(
            "vllm:time_to_first_token_seconds",
            "Arrival to first token",
            m.ttft.clone(),
        );
        registry.register(
            "vllm:inter_token_latency_seconds",
            "Time between consecutive tokens",
            m.inter_token.clone(),
        );
        registry.register(
            "vllm:e2e_request_latency_seconds",
            "Arrival to last token",
            m.e2e.clone(),
        );
        registry.register(
            "vllm:request_queue_time_seconds",
            "Arrival to first scheduled",
            m.queue_time.clone(),
        );
        registry.register(
            "redline_sim_step_lag_seconds",
            "How late the engine clock woke for a step, against the model's step end",
            m.step_lag.clone(),
        );
        registry.register("redline_sim_steps", "Engine steps run", m.steps.clone());
        m
    }

    /// Requests in the engine, running and waiting, at its last step.
    pub fn load(&self) -> u32 {
        (self.running.get() + self.waiting.get()).max(0) as u32
    }

    /// A planned answer: a tool call, spoiled or not, is counted in the truth.
    pub fn planned(&self, tool_call: Option<&ToolCall>) {
        let Some(call) = tool_call else {
            return;
        };
        let mut truth = self.truth();
        truth.tool_calls.answered += 1;
        match call.spoiled {
            None => {}
            Some(Spoil::Cut) => truth.tool_calls.cut += 1,
            Some(Spoil::Changed) => truth.tool_calls.changed += 1,
        }
    }

    /// Updates the gauges, and the counters by what the step added (`added`).
    pub fn after_step(
        &self,
        running: usize,
        waiting: usize,
        kv_usage: f64,
        added: Counters,
        lag_ns: u64,
    ) {
        self.running.set(running as i64);
        self.waiting.set(waiting as i64);
        self.kv_usage.set(kv_usage);
        self.step_lag.observe(lag_ns as f64 / 1e9);
        self.prompt_tokens.inc_by(added.prompt_tokens);
        self.generation_tokens.inc_by(added.generation_tokens);
        self.prefix_queries.inc_by(added.prefix_queries);
        self.prefix_hits.inc_by(added.prefix_hits);
        self.preemptions.inc_by(added.preemptions);
        self.steps.inc_by(added.steps);
    }

    pub fn inter_token(&self, gap_ns: u64) {
        self.inter_token.observe(gap_ns as f64 / 1e9);
        self.truth()
            .inter_token
            .saturating_record((gap_ns / 1_000).max(1));
    }

    fn truth(&self) -> std::sync::MutexGuard<'_, Truth> {
        // Only the engine thread records and a handler reads; a panic while holding
        // the lock leaves whole histograms behind, so the data is still good.
        self.truth
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The ground truth so far; `reset` starts it afresh (e.g. after a warm-up).
    pub fn truth_report(&self, reset: bool) -> TruthReport {
        let mut truth = self.truth();
        let ms = |h: &hdrhistogram::Histogram<u64>| redline_base::histogram::Dist::of(h, 1e3);
        let report = TruthReport {
            requests: truth.e2e.len(),
            prompt_tokens: truth.prompt_tokens,
            completion_tokens: truth.completion_tokens,
            arrival_rate_per_s: truth.arrivals_ns.and_then(|(first, last)| {
                (last > first).then(|| (truth.e2e.len() - 1) as f64 / ((last - first) as f64 / 1e9))
            }),
            ttft_ms: ms(&truth.ttft),
            inter_token_ms: ms(&truth.inter_token),
            e2e_ms: ms(&truth.e2e),
            tool_calls: truth.tool_calls,
        };
        if reset {
            *truth = Truth::new();
        }
        report
    }

    pub fn finished(&self, reason: FinishReason, t: &Timeline) {
        let secs = |ns: u64| ns as f64 / 1e9;
        self.success
            .get_or_create(&vec![("finished_reason", reason.as_str())])
            .inc();
        self.ttft.observe(secs(t.first_token_ns - t.arrival_ns));
        self.e2e.observe(secs(t.finish_ns - t.arrival_ns));
        self.queue_time.observe(secs(t.scheduled_ns - t.arrival_ns));
        let us = |ns: u64| (ns / 1_000).max(1);
        let mut truth = self.truth();
        truth
            .ttft
            .saturating_record(us(t.first_token_ns - t.arrival_ns));
        truth.e2e.saturating_record(us(t.finish_ns - t.arrival_ns));
        truth.prompt_tokens += u64::from(t.prompt_tokens);
        truth.completion_tokens += u64::from(t.completion_tokens);
        truth.arrivals_ns = Some(match truth.arrivals_ns {
            None => (t.arrival_ns, t.arrival_ns),
            Some((first, last)) => (first.min(t.arrival_ns), last.max(t.arrival_ns)),
        });
    }

    /// The exposition text.
    /// Adds the GPU's gauges (DCGM's names) to what `/metrics` serves.
    pub fn register_gpu(&mut self, gpu: &super::gpu::Gpu) {
        gpu.register(&mut self.registry);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_vllm_names_with_the_model_label() {
        let m = SimMetrics::new("sim-7b");
        let counters = Counters {
            prefix_queries: 2048,
            prefix_hits: 1024,
            ..Counters::default()
        };
        m.after_step(3, 2, 0.25, counters, 10_000);
        let text = m.render();
        for line in [
            "vllm:num_requests_running{model_name=\"sim-7b\"} 3",
            "vllm:num_requests_waiting{model_name=\"sim-7b\"} 2",
            "vllm:kv_cache_usage_perc{model_name=\"sim-7b\"} 0.25",
            "vllm:prefix_cache_queries_total{model_name=\"sim-7b\"} 2048",
            "vllm:prefix_cache_hits_total{model_name=\"sim-7b\"} 1024",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
