//! redline's own spans and client metrics, handed to the OTLP exporter: the spans of
//! each record as it completes, the cumulative metrics every 10 s and once at the end.

use std::time::Duration;

use anyhow::Result;
use tokio::sync::mpsc;

use super::{Every, Findings, Pending, RecordSink, SoFar};
use crate::record::Record;
use crate::trace::export::{Export, spans_of};
use crate::trace::genai::ClientMetrics;

const METRICS_EVERY: Duration = Duration::from_secs(10);

/// Where the recorder sends spans for the OTLP exporter.
pub(in crate::runner) struct SpanSink {
    sender: mpsc::UnboundedSender<Export>,
    model: String,
    scenario: String,
    /// The run's start in Unix nanoseconds.
    origin_ns: u64,
    metrics: ClientMetrics,
    every: Every,
}

impl SpanSink {
    pub(in crate::runner) fn new(
        sender: mpsc::UnboundedSender<Export>,
        model: String,
        scenario: String,
        origin_ns: u64,
    ) -> SpanSink {
        SpanSink {
            sender,
            model,
            scenario,
            origin_ns,
            metrics: ClientMetrics::default(),
            every: Every::new(METRICS_EVERY),
        }
    }

    /// Hands the exporter a snapshot of the cumulative client metrics.
    fn send_metrics(&self) {
        if self.metrics.is_empty() {
            return;
        }
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let snapshot = self.metrics.export(&self.scenario, self.origin_ns, now_ns);
        // The exporter outlives the recorder; a send error would mean it panicked,
        // and the run's records are still whole.
        let _ = self.sender.send(Export::Metrics(snapshot));
    }
}

impl RecordSink for SpanSink {
    fn observe(&mut self, record: &Record) -> Result<()> {
        for span in spans_of(record, &self.model, self.origin_ns) {
            let _ = self.sender.send(Export::Span(Box::new(span)));
        }
        self.metrics.observe(record, &self.model);
        Ok(())
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        Some(self.every.due())
    }

    fn tick<'a>(&'a mut self, _so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        self.every.taken();
        self.send_metrics();
        Box::pin(async { Ok(()) })
    }

    fn finish<'a>(self: Box<Self>, _findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        self.send_metrics();
        Box::pin(async { Ok(()) })
    }
}
