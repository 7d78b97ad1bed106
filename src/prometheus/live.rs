//! A run's own metrics while it runs, in Prometheus's text format
//! (`redline run --metrics-addr 127.0.0.1:9464`), for a dashboard to watch a long run
//! (`deploy/grafana/redline.json`). The collector observes each record as it is
//! written, so these agree with `records.jsonl` at every scrape.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use tokio::net::TcpListener;

use crate::record::{Outcome, Phase, Record, SessionOutcome};

/// Latency buckets in seconds: 1 ms to 2 min.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1.0, 1.5,
    2.5, 3.2, 5.0, 10.0, 20.0, 60.0, 120.0,
];

type Labels = Vec<(&'static str, String)>;

/// What the streaming-SLO gauges show of one series' latest window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowGauges {
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    /// 0 within bounds (or learning), 1 WARN, 2 CRITICAL.
    pub state: i64,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

/// Every metric a run exports.
pub struct LiveMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    ttft: Family<Labels, Histogram, fn() -> Histogram>,
    first_answer: Family<Labels, Histogram, fn() -> Histogram>,
    first_reasoning: Family<Labels, Histogram, fn() -> Histogram>,
    reasoning: Family<Labels, Histogram, fn() -> Histogram>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    itl: Histogram,
    tokens: Family<Labels, Counter>,
    sessions: Family<Labels, Counter>,
    faults: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    /// Graded answers, by verdict.
    graded: Family<Labels, Counter>,
    send_lag: Histogram,
    /// Seconds since the run started, at the latest record.
    elapsed: Gauge<f64, AtomicU64>,
    windows: WindowMetrics,
    media: MediaMetrics,
    mcp: McpMetrics,
    feedback: FeedbackMetrics,
}

/// MCP calls, by method and tool (or prompt), and the sessions they opened and ended.
struct McpMetrics {
    calls: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    handshake: Histogram,
    sessions_ended: Counter,
    reinitialized: Counter,
}

/// Streaming SLOs: each series' latest window, its threshold and its state.
struct WindowMetrics {
    value: Family<Labels, Gauge<f64, AtomicU64>>,
    threshold: Family<Labels, Gauge<f64, AtomicU64>>,
    state: Family<Labels, Gauge>,
}

/// Image, transcription and speech requests, by kind.
struct MediaMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    rtfx: Family<Labels, Histogram, fn() -> Histogram>,
}

/// The feedback controller: each service's rate, the last reading, failed readings.
struct FeedbackMetrics {
    rate: Family<Labels, Gauge<f64, AtomicU64>>,
    reading: Gauge<f64, AtomicU64>,
    failures: Counter,
}

/// RTFx buckets: 1× (real time) to 1000×.
const RTFX_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

fn rtfx_histogram() -> Histogram {
    Histogram::new(RTFX_BUCKETS.iter().copied())
}

impl Default for LiveMetrics {
    fn default() -> Self {
        LiveMetrics::new()
    }
}

/// `metric`, registered under `name` with its help.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl WindowMetrics {
    fn register(r: &mut Registry) -> WindowMetrics {
        WindowMetrics {
            value: registered(
                r,
                "slo_window_value",
                "Streaming SLOs: the latest closed window's value of each watched series (its unit in the `unit` label)",
                Family::<Labels, Gauge<f64, AtomicU64>>::default(),
            ),
            threshold: registered(
                r,
                "slo_window_threshold",
                "Streaming SLOs: the threshold the latest window was held against, where the detector has one",
                Family::<Labels, Gauge<f64, AtomicU64>>::default(),
            ),
            state: registered(
                r,
                "slo_state",
                "Streaming SLOs: 0 within bounds (or learning), 1 WARN, 2 CRITICAL",
                Family::<Labels, Gauge>::default(),
            ),
        }
    }
}

impl MediaMetrics {
    fn register(r: &mut Registry) -> MediaMetrics {
        MediaMetrics {
            requests: registered(
                r,
                "media_requests",
                "Image, transcription, speech and Realtime requests ended, by kind and outcome",
                Family::<Labels, Counter>::default(),
            ),
            duration: registered(
                r,
                "media_request_duration_seconds",
                "Send (a Realtime session: input done) to last byte of successful media requests, by kind",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            rtfx: registered(
                r,
                "media_rtfx",
                "Seconds of audio per second of request (transcription, speech)",
                Family::new_with_constructor(rtfx_histogram as fn() -> Histogram),
            ),
        }
    }
}

impl McpMetrics {
    fn register(r: &mut Registry) -> McpMetrics {
        McpMetrics {
            calls: registered(
                r,
                "mcp_calls",
                "MCP calls ended, by method, tool or prompt name, and outcome",
                Family::<Labels, Counter>::default(),
            ),
            duration: registered(
                r,
                "mcp_call_duration_seconds",
                "Send to result of successful MCP calls (their handshake apart), by method and name",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            handshake: registered(
                r,
                "mcp_handshake_duration_seconds",
                "MCP sessions opened: initialize and notifications/initialized (over stdio, with the process's start)",
                latency_histogram(),
            ),
            sessions_ended: registered(
                r,
                "mcp_sessions_ended",
                "MCP sessions ended by churn",
                Counter::default(),
            ),
            reinitialized: registered(
                r,
                "mcp_reinitialized",
                "MCP calls that opened a new session after the server dropped theirs (404)",
                Counter::default(),
            ),
        }
    }
}

impl FeedbackMetrics {
    fn register(r: &mut Registry) -> FeedbackMetrics {
        FeedbackMetrics {
            rate: registered(
                r,
                "feedback_rate",
                "The feedback controller's rate for each service, requests per second",
                Family::<Labels, Gauge<f64, AtomicU64>>::default(),
            ),
            reading: registered(
                r,
                "feedback_gpu_memory_ratio",
                "The feedback controller's last reading of GPU memory used over total",
                Gauge::<f64, AtomicU64>::default(),
            ),
            failures: registered(
                r,
                "feedback_gauge_failures",
                "Readings of the feedback controller's gauge that failed",
                Counter::default(),
            ),
        }
    }
}

impl LiveMetrics {
    pub fn new() -> LiveMetrics {
        let mut registry = Registry::with_prefix("redline");
        let r = &mut registry;
        LiveMetrics {
            requests: registered(
                r,
                "requests",
                "Requests ended, by outcome, failure kind, step and phase",
                Family::<Labels, Counter>::default(),
            ),
            ttft: registered(
                r,
                "time_to_first_token_seconds",
                "Send to first content token of successful streamed requests, by step",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            first_answer: registered(
                r,
                "time_to_first_answer_seconds",
                "Send to first answer token (after any reasoning) of successful streamed requests, by step",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            first_reasoning: registered(
                r,
                "time_to_first_reasoning_seconds",
                "Send to first reasoning token of successful streamed requests that reasoned, by step",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            reasoning: registered(
                r,
                "reasoning_seconds",
                "First reasoning token to first answer token of successful streamed requests, by step",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            duration: registered(
                r,
                "request_duration_seconds",
                "Send to last byte of successful requests, by step",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            itl: registered(
                r,
                "inter_token_latency_seconds",
                "Gaps between content events of successful streams",
                latency_histogram(),
            ),
            tokens: registered(
                r,
                "tokens",
                "Tokens of successful requests, by kind: input, output, reasoning (of the output), cached_input (of the input)",
                Family::<Labels, Counter>::default(),
            ),
            sessions: registered(
                r,
                "flow_sessions",
                "Flow sessions ended, by outcome",
                Family::<Labels, Counter>::default(),
            ),
            faults: registered(
                r,
                "faults_injected",
                "Faults the chaos proxy injected, by rule and fault",
                Family::<Labels, Counter>::default(),
            ),
            errors: registered(
                r,
                "errors",
                "Failed requests by the stage they failed in, their kind, and where the failure began (origin: chaos:RULE, a flow step's service, target, client)",
                Family::<Labels, Counter>::default(),
            ),
            graded: registered(
                r,
                "graded_answers",
                "Graded answers of a dataset with a grader, by verdict (correct, wrong, unparsed) and, for tool calls, the bucket of the miss (wrong_tool, missing_param, …; empty otherwise)",
                Family::<Labels, Counter>::default(),
            ),
            send_lag: registered(
                r,
                "send_lag_seconds",
                "Actual send − intended start: how well the schedule was kept",
                latency_histogram(),
            ),
            elapsed: registered(
                r,
                "elapsed_seconds",
                "Run time at the latest record",
                Gauge::<f64, AtomicU64>::default(),
            ),
            windows: WindowMetrics::register(r),
            media: MediaMetrics::register(r),
            mcp: McpMetrics::register(r),
            feedback: FeedbackMetrics::register(r),
            registry,
        }
    }

    /// A reading of the feedback controller and the rates it set (`None`: the reading
    /// failed and the rates were held).
    pub fn set_feedback(&self, services: &[String], rates: &[f64], reading: Option<f64>) {
        match reading {
            Some(u) => {
                self.feedback.reading.set(u);
            }
            None => {
                self.feedback.failures.inc();
            }
        }
        for (service, rate) in services.iter().zip(rates) {
            self.feedback
                .rate
                .get_or_create(&vec![("service", service.clone())])
                .set(*rate);
        }
    }

    fn observe_media(&self, r: &Record, outcome: &str) {
        let Some(media) = &r.media else { return };
        let kind = media.kind.name().to_owned();
        self.media
            .requests
            .get_or_create(&vec![
                ("media", kind.clone()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
        if r.outcome != Outcome::Ok {
            return;
        }
        let labels = vec![("media", kind)];
        if let Some(e2e) = media.latency_us(r) {
            self.media
                .duration
                .get_or_create(&labels)
                .observe(e2e as f64 / 1e6);
        }
        if let Some(rtfx) = media.realtime_factor(r) {
            self.media.rtfx.get_or_create(&labels).observe(rtfx);
        }
    }

    fn observe_mcp(&self, r: &Record, outcome: &str) {
        let Some(mark) = &r.mcp else { return };
        let (method, name) = (mark.method.clone(), mark.name.clone().unwrap_or_default());
        self.mcp
            .calls
            .get_or_create(&vec![
                ("method", method.clone()),
                ("name", name.clone()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
        if let Some(us) = mark.handshake_us {
            self.mcp.handshake.observe(us as f64 / 1e6);
        }
        if mark.ended_session {
            self.mcp.sessions_ended.inc();
        }
        if mark.reinitialized {
            self.mcp.reinitialized.inc();
        }
        if let (Outcome::Ok, Some(e2e)) = (r.outcome, r.e2e_us()) {
            self.mcp
                .duration
                .get_or_create(&vec![("method", method), ("name", name)])
                .observe(e2e as f64 / 1e6);
        }
    }

    /// A streaming SLO's latest window: its value (none: too few samples), threshold
    /// and state (0 within bounds, 1 WARN, 2 CRITICAL).
    pub fn set_window(&self, series: &str, group: &str, unit: &str, window: WindowGauges) {
        let labels = vec![
            ("series", series.to_owned()),
            ("group", group.to_owned()),
            ("unit", unit.to_owned()),
        ];
        if let Some(value) = window.value {
            self.windows.value.get_or_create(&labels).set(value);
        }
        if let Some(threshold) = window.threshold {
            self.windows.threshold.get_or_create(&labels).set(threshold);
        }
        self.windows.state.get_or_create(&labels).set(window.state);
    }

    /// Takes one finished request into the metrics.
    pub fn observe(&self, r: &Record) {
        let step = r
            .step
            .as_ref()
            .map_or("request".to_owned(), |s| s.name.clone());
        let outcome = match r.outcome {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Dropped => "dropped",
        };
        let phase = match r.phase {
            Phase::Warmup => "warmup",
            Phase::Measure => "measure",
            Phase::Cooldown => "cooldown",
        };
        let kind = r.error.as_ref().map_or(String::new(), |e| e.kind.clone());
        self.requests
            .get_or_create(&vec![
                ("outcome", outcome.to_owned()),
                ("kind", kind),
                ("step", step.clone()),
                ("phase", phase.to_owned()),
            ])
            .inc();
        self.observe_media(r, outcome);
        self.observe_mcp(r, outcome);
        if let Some(grade) = &r.grade {
            let verdict = match grade.verdict {
                crate::record::GradeVerdict::Correct => "correct",
                crate::record::GradeVerdict::Wrong => "wrong",
                crate::record::GradeVerdict::Unparsed => "unparsed",
            };
            let bucket = grade.bucket.map_or("", |b| b.name());
            self.graded
                .get_or_create(&vec![
                    ("verdict", verdict.to_owned()),
                    ("bucket", bucket.to_owned()),
                ])
                .inc();
        }
        if let Some(error) = &r.error {
            let stage = serde_json::to_value(error.stage)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            self.errors
                .get_or_create(&vec![
                    ("stage", stage),
                    ("kind", error.kind.clone()),
                    ("origin", error.origin.clone().unwrap_or_default()),
                ])
                .inc();
        }
        self.elapsed.set(r.done_us() as f64 / 1e6);
        if let (Some(sent), intended) = (r.sent_us, r.intended_us) {
            self.send_lag
                .observe(sent.saturating_sub(intended) as f64 / 1e6);
        }
        for fault in &r.faults {
            self.faults
                .get_or_create(&vec![
                    ("rule", fault.rule.clone()),
                    ("fault", fault.fault.clone()),
                ])
                .inc();
        }
        if let Some(end) = &r.session_end {
            let outcome = match end.outcome {
                SessionOutcome::Ok => "ok",
                SessionOutcome::Failed => "failed",
                SessionOutcome::Fallback => "fallback",
                SessionOutcome::Cancelled => "cancelled",
            };
            self.sessions
                .get_or_create(&vec![("outcome", outcome.to_owned())])
                .inc();
        }
        if r.outcome == Outcome::Ok {
            self.observe_answer(r, step);
        }
    }

    /// A successful request's times, by its step, and its tokens.
    fn observe_answer(&self, r: &Record, step: String) {
        let labels = vec![("step", step)];
        for (histogram, us) in [
            (&self.ttft, r.ttft_us()),
            (&self.first_answer, r.time_to_first_answer_us()),
            (&self.first_reasoning, r.time_to_first_reasoning_us()),
            (&self.reasoning, r.reasoning_us()),
            (&self.duration, r.e2e_us()),
        ] {
            if let Some(us) = us {
                histogram.get_or_create(&labels).observe(us as f64 / 1e6);
            }
        }
        for gap in &r.itl_us {
            self.itl.observe(f64::from(*gap) / 1e6);
        }
        for (kind, n) in [
            ("input", r.input_tokens),
            ("output", r.output_tokens),
            ("reasoning", r.reasoning_tokens),
            (
                "cached_input",
                r.prefix_cache_hit().map(|(cached, _)| cached),
            ),
        ] {
            if let Some(n) = n {
                self.tokens
                    .get_or_create(&vec![("kind", kind.to_owned())])
                    .inc_by(u64::from(n));
            }
        }
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

/// Serves `GET /metrics` on `listener` until the metrics are dropped by every owner
/// and `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<LiveMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }
        }),
    );
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{InjectedFault, Record};

    #[test]
    fn media_records_and_the_controller_show_by_kind_and_service() {
        let metrics = LiveMetrics::new();
        let mut clip = Record::unsent(0, 0, Phase::Measure, 0);
        clip.sent_us = Some(0);
        clip.last_byte_us = Some(250_000);
        clip.media = Some(crate::record::MediaMark {
            audio_s: Some(10.0),
            bytes: 120,
            words: Some(25),
            ..crate::record::MediaMark::new(crate::record::MediaKind::Transcription)
        });
        metrics.observe(&clip);
        let services = ["llm".to_owned(), "sdxl".to_owned()];
        metrics.set_feedback(&services, &[60.0, 10.0], Some(0.5));
        metrics.set_feedback(&services, &[60.0, 10.0], None);
        let text = metrics.encode();
        for line in [
            "redline_media_requests_total{media=\"transcription\",outcome=\"ok\"} 1",
            // RTFx 40: in the bucket up to 50, not the one up to 20.
            "redline_media_rtfx_bucket{le=\"20.0\",media=\"transcription\"} 0",
            "redline_media_rtfx_bucket{le=\"50.0\",media=\"transcription\"} 1",
            "redline_feedback_rate{service=\"sdxl\"} 10.0",
            "redline_feedback_gpu_memory_ratio 0.5",
            "redline_feedback_gauge_failures_total 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn mcp_calls_show_by_method_and_name_with_their_sessions() {
        let metrics = LiveMetrics::new();
        let mark = crate::record::McpMark::called;
        let mut call = Record::unsent(0, 0, Phase::Measure, 0);
        call.sent_us = Some(0);
        call.last_byte_us = Some(30_000);
        call.mcp = Some(crate::record::McpMark {
            handshake_us: Some(2_000_000),
            ended_session: true,
            ..mark("tools/call", Some("get_weather"))
        });
        metrics.observe(&call);
        let mut failed = Record::unsent(1, 0, Phase::Measure, 0);
        failed.sent_us = Some(0);
        failed.fail(
            Outcome::Error,
            crate::record::FailStage::Assert,
            "mcp/tool_error",
            "tool failed",
        );
        failed.mcp = Some(crate::record::McpMark {
            reinitialized: true,
            ..mark("tools/call", Some("get_weather"))
        });
        metrics.observe(&failed);
        let mut list = Record::unsent(2, 0, Phase::Measure, 0);
        list.sent_us = Some(0);
        list.last_byte_us = Some(1_000);
        list.mcp = Some(mark("tools/list", None));
        metrics.observe(&list);
        let text = metrics.encode();
        for line in [
            "redline_mcp_calls_total{method=\"tools/call\",name=\"get_weather\",outcome=\"ok\"} 1",
            "redline_mcp_calls_total{method=\"tools/call\",name=\"get_weather\",outcome=\"error\"} 1",
            "redline_mcp_calls_total{method=\"tools/list\",name=\"\",outcome=\"ok\"} 1",
            // 30 ms: above the 25 ms bound, within the 50 ms one; the failure not timed.
            "redline_mcp_call_duration_seconds_bucket{le=\"0.025\",method=\"tools/call\",name=\"get_weather\"} 0",
            "redline_mcp_call_duration_seconds_bucket{le=\"0.05\",method=\"tools/call\",name=\"get_weather\"} 1",
            "redline_mcp_call_duration_seconds_count{method=\"tools/call\",name=\"get_weather\"} 1",
            "redline_mcp_handshake_duration_seconds_bucket{le=\"1.5\"} 0",
            "redline_mcp_handshake_duration_seconds_bucket{le=\"2.5\"} 1",
            "redline_mcp_sessions_ended_total 1",
            "redline_mcp_reinitialized_total 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn records_become_counters_and_histograms() {
        let metrics = LiveMetrics::new();
        let mut ok = Record::unsent(0, 0, Phase::Measure, 0);
        ok.sent_us = Some(500);
        ok.first_token_us = Some(20_500);
        ok.last_byte_us = Some(100_500);
        ok.output_tokens = Some(9);
        ok.itl_us = vec![10_000; 8];
        metrics.observe(&ok);
        let mut failed = Record::unsent(1, 0, Phase::Measure, 0);
        failed.fail(
            Outcome::Timeout,
            crate::record::FailStage::FirstToken,
            "timeout",
            "late",
        );
        failed.faults = vec![InjectedFault {
            rule: "stall".into(),
            fault: "stall_first_token".into(),
            added_ms: Some(3000.0),
        }];
        metrics.observe(&failed);
        let text = metrics.encode();
        for line in [
            "redline_requests_total{outcome=\"ok\",kind=\"\",step=\"request\",phase=\"measure\"} 1",
            "redline_requests_total{outcome=\"timeout\",kind=\"timeout\",step=\"request\",phase=\"measure\"} 1",
            "redline_time_to_first_token_seconds_count{step=\"request\"} 1",
            "redline_time_to_first_token_seconds_sum{step=\"request\"} 0.02",
            "redline_inter_token_latency_seconds_count 8",
            "redline_tokens_total{kind=\"output\"} 9",
            "redline_faults_injected_total{rule=\"stall\",fault=\"stall_first_token\"} 1",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
    }

    #[test]
    fn a_streaming_slo_window_becomes_three_gauges() {
        let metrics = LiveMetrics::new();
        let window = |value, state| WindowGauges {
            value,
            threshold: Some(40.5),
            state,
        };
        metrics.set_window("ttft.p95", "all", "ms", window(Some(612.25), 1));
        // A thin window keeps the last value and says the state.
        metrics.set_window("ttft.p95", "all", "ms", window(None, 2));
        let text = metrics.encode();
        let labels = "{series=\"ttft.p95\",group=\"all\",unit=\"ms\"}";
        for line in [
            format!("redline_slo_window_value{labels} 612.25"),
            format!("redline_slo_window_threshold{labels} 40.5"),
            format!("redline_slo_state{labels} 2"),
        ] {
            assert!(text.contains(&line), "missing `{line}` in\n{text}");
        }
    }
}

#[cfg(test)]
mod dashboard {
    use super::*;
    use crate::record::{InjectedFault, SessionEnd, StepMark};

    /// Every metric the shipped Grafana dashboard queries is one a run exports.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_metrics() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/grafana/redline.json"
        ))
        .unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
        let metrics = LiveMetrics::new();
        let mut r = Record::unsent(0, 0, Phase::Measure, 0);
        r.sent_us = Some(1);
        r.first_token_us = Some(10);
        r.first_reasoning_us = Some(10);
        r.first_answer_us = Some(15);
        r.last_byte_us = Some(20);
        r.output_tokens = Some(2);
        r.reasoning_tokens = Some(1);
        r.itl_us = vec![5];
        r.faults = vec![InjectedFault {
            rule: "r".into(),
            fault: "delay".into(),
            added_ms: None,
        }];
        r.step = Some(StepMark {
            name: "s".into(),
            kind: "chat".into(),
            service: None,
            agent_step_seq: 1,
            tool: None,
            tool_call_hash: None,
            results: None,
            recall: None,
        });
        r.session_end = Some(SessionEnd {
            outcome: SessionOutcome::Ok,
            fallback_reason: None,
            requests: 1,
            e2e_us: 20,
        });
        metrics.observe(&r);
        let mut call = Record::unsent(1, 0, Phase::Measure, 0);
        call.sent_us = Some(1);
        call.last_byte_us = Some(20);
        call.mcp = Some(crate::record::McpMark {
            handshake_us: Some(10),
            ..crate::record::McpMark::called("tools/call", Some("t"))
        });
        metrics.observe(&call);
        let exported = metrics.encode();
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(panels.len() >= 8);
        let names = regex::Regex::new(r"redline_[a-z_]+").unwrap();
        let mut checked = 0;
        for panel in panels {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for name in names.find_iter(expr) {
                    assert!(
                        exported.contains(name.as_str()),
                        "panel `{}` queries `{}`, which a run does not export",
                        panel["title"],
                        name.as_str()
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 10);
    }
}

#[cfg(test)]
mod errors {
    use super::*;
    use crate::record::{FailStage, InjectedFault, StepMark};

    fn failed(step_service: Option<&str>, fault: Option<&str>) -> Record {
        let mut r = Record::unsent(0, 0, Phase::Measure, 0);
        r.fail(Outcome::Error, FailStage::FirstByte, "http_5xx", "HTTP 503");
        r.step = step_service.map(|service| StepMark {
            name: "retrieve".into(),
            kind: "search".into(),
            service: Some(service.into()),
            agent_step_seq: 2,
            tool: None,
            tool_call_hash: None,
            results: None,
            recall: None,
        });
        r.faults = fault
            .map(|rule| InjectedFault {
                rule: rule.into(),
                fault: "abort".into(),
                added_ms: None,
            })
            .into_iter()
            .collect();
        r.settle_origin();
        r
    }

    /// `redline_errors_total{stage, kind, origin}`: a fault the proxy injected is the
    /// rule's, any other failure the service's the step called (or the target's).
    #[test]
    fn failures_are_counted_by_stage_kind_and_where_they_began() {
        let metrics = LiveMetrics::new();
        metrics.observe(&failed(Some("vectors"), Some("outage")));
        metrics.observe(&failed(Some("vectors"), None));
        metrics.observe(&failed(Some("vectors"), None));
        metrics.observe(&failed(None, None));
        let text = metrics.encode();
        for line in [
            r#"redline_errors_total{stage="first_byte",kind="http_5xx",origin="chaos:outage"} 1"#,
            r#"redline_errors_total{stage="first_byte",kind="http_5xx",origin="vectors"} 2"#,
            r#"redline_errors_total{stage="first_byte",kind="http_5xx",origin="target"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }
}
