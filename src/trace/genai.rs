//! OpenTelemetry's GenAI client metrics over OTLP: `gen_ai.client.operation.duration`,
//! `gen_ai.client.time_to_first_token` (seconds) and `gen_ai.client.token.usage`
//! (tokens), as cumulative explicit-bucket histograms by operation, model and error
//! type, built from the records as they are written.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics,
    metric,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::export::{attr, string};
use crate::record::{Outcome, Record};

/// The semantic conventions' advised bucket bounds for durations, seconds.
const SECONDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// …and for token counts.
const TOKENS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
];

/// One histogram series.
#[derive(Debug, Clone)]
struct Series {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Series {
    fn new(bounds: &'static [f64]) -> Series {
        Series {
            bounds,
            counts: vec![0; bounds.len() + 1],
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn observe(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|b| *b < value);
        self.counts[bucket] += 1;
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }
}

/// (metric name, operation, model, error type or token type) → series.
type Key = (&'static str, String, String, String);

/// Cumulative GenAI client histograms since the run started.
#[derive(Debug, Default)]
pub struct ClientMetrics {
    series: BTreeMap<Key, Series>,
}

pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
pub const TIME_TO_FIRST_TOKEN: &str = "gen_ai.client.time_to_first_token";
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";

impl ClientMetrics {
    /// Takes one finished request (sent ones: a request never sent has no duration).
    pub fn observe(&mut self, record: &Record, model: &str) {
        let Some(e2e) = record.e2e_us() else {
            return;
        };
        let operation = super::export::operation_of(record).to_owned();
        let error = match record.outcome {
            Outcome::Ok => String::new(),
            _ => record
                .error
                .as_ref()
                .map_or("error".into(), |e| e.kind.clone()),
        };
        let mut observe = |name: &'static str, label: String, bounds, value| {
            self.series
                .entry((name, operation.clone(), model.to_owned(), label))
                .or_insert_with(|| Series::new(bounds))
                .observe(value);
        };
        observe(OPERATION_DURATION, error, SECONDS, e2e as f64 / 1e6);
        if record.outcome != Outcome::Ok {
            return;
        }
        if let Some(ttft) = record.ttft_us() {
            observe(
                TIME_TO_FIRST_TOKEN,
                String::new(),
                SECONDS,
                ttft as f64 / 1e6,
            );
        }
        for (kind, tokens) in [
            ("input", record.input_tokens),
            ("output", record.output_tokens),
        ] {
            if let Some(tokens) = tokens {
                observe(TOKEN_USAGE, kind.to_owned(), TOKENS, f64::from(tokens));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The export of every series, cumulative from `start_ns` to `now_ns`.
    pub fn export(
        &self,
        scenario: &str,
        start_ns: u64,
        now_ns: u64,
    ) -> ExportMetricsServiceRequest {
        let mut metrics: BTreeMap<&'static str, Vec<HistogramDataPoint>> = BTreeMap::new();
        for ((name, operation, model, label), series) in &self.series {
            let mut attributes = vec![string(attr::GEN_AI_OPERATION_NAME, operation.clone())];
            if !model.is_empty() {
                attributes.push(string(attr::GEN_AI_REQUEST_MODEL, model.clone()));
            }
            if !label.is_empty() {
                let key = if *name == TOKEN_USAGE {
                    attr::GEN_AI_TOKEN_TYPE
                } else {
                    attr::ERROR_TYPE
                };
                attributes.push(string(key, label.clone()));
            }
            metrics.entry(name).or_default().push(HistogramDataPoint {
                attributes,
                start_time_unix_nano: start_ns,
                time_unix_nano: now_ns,
                count: series.count,
                sum: Some(series.sum),
                bucket_counts: series.counts.clone(),
                explicit_bounds: series.bounds.to_vec(),
                min: Some(series.min),
                max: Some(series.max),
                ..HistogramDataPoint::default()
            });
        }
        let metrics = metrics
            .into_iter()
            .map(|(name, data_points)| Metric {
                name: name.into(),
                unit: if name == TOKEN_USAGE { "{token}" } else { "s" }.into(),
                description: match name {
                    OPERATION_DURATION => "GenAI operation duration, send to last byte",
                    TIME_TO_FIRST_TOKEN => "Send to the first content token of a stream",
                    _ => "Tokens used per request, by type",
                }
                .into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Metric::default()
            })
            .collect();
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        string("service.name", "redline"),
                        string("redline.scenario", scenario),
                    ],
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "redline".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Phase;

    #[test]
    fn records_become_cumulative_genai_histograms() {
        let mut metrics = ClientMetrics::default();
        let mut r = Record::unsent(0, 0, Phase::Measure, 0);
        r.sent_us = Some(0);
        r.first_token_us = Some(30_000);
        r.last_byte_us = Some(500_000);
        r.input_tokens = Some(100);
        r.output_tokens = Some(20);
        metrics.observe(&r, "m");
        let mut failed = Record::unsent(1, 0, Phase::Measure, 0);
        failed.sent_us = Some(0);
        failed.last_byte_us = Some(50_000);
        failed.fail(
            Outcome::Error,
            crate::record::FailStage::FirstByte,
            "http_5xx",
            "503",
        );
        metrics.observe(&failed, "m");
        let export = metrics.export("t", 1, 2);
        let all = &export.resource_metrics[0].scope_metrics[0].metrics;
        let names: Vec<&str> = all.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [OPERATION_DURATION, TIME_TO_FIRST_TOKEN, TOKEN_USAGE]
        );
        let Some(metric::Data::Histogram(duration)) = &all[0].data else {
            panic!()
        };
        assert_eq!(duration.data_points.len(), 2, "ok and http_5xx series");
        let ok = &duration.data_points[0];
        assert_eq!((ok.count, ok.sum), (1, Some(0.5)));
        // 0.5 s falls in the (0.32, 0.64] bucket.
        assert_eq!(ok.bucket_counts[6], 1);
        let Some(metric::Data::Histogram(tokens)) = &all[2].data else {
            panic!()
        };
        assert_eq!(tokens.data_points.len(), 2, "input and output");
    }
}
