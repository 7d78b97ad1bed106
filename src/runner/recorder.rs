//! The recorder: writes `records.jsonl` as requests complete, keeps the
//! statistics, joins the chaos proxies' fault logs, feeds the live metrics and the OTLP
//! exporter, and stops a run whose SLOs are certain to fail.

use super::*;

/// Where the recorder sends spans for the OTLP exporter.
pub(super) struct SpanSink {
    pub(super) sender: mpsc::UnboundedSender<crate::trace::export::Export>,
    pub(super) model: String,
    pub(super) scenario: String,
    /// The run's start in Unix nanoseconds.
    pub(super) origin_ns: u64,
    pub(super) metrics: crate::trace::genai::ClientMetrics,
}

impl SpanSink {
    /// Hands the exporter a snapshot of the cumulative client metrics.
    fn send_metrics(&self) {
        if self.metrics.is_empty() {
            return;
        }
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let snapshot = self.metrics.export(&self.scenario, self.origin_ns, now_ns);
        let _ = self
            .sender
            .send(crate::trace::export::Export::Metrics(snapshot));
    }
}

/// What the recorder needs to stop a run whose SLOs are already certain to fail.
pub(super) struct Gate {
    pub(super) slos: SloSet,
    pub(super) stop: CancellationToken,
    pub(super) clock: RunClock,
}

/// What the recorder's inbox carries.
pub(super) enum Inbox {
    Record(Box<Record>),
    /// Every request has ended: write what is left and stop.
    Close,
}

/// What the recorder leaves when the run ends.
pub(super) struct Recorded {
    pub(super) aggregator: Aggregator,
    pub(super) aborted: Option<Aborted>,
    pub(super) evidence: tokens::TokenEvidence,
    /// The exchanges the first requests kept, in the order they completed.
    pub(super) samples: Vec<crate::record::Sample>,
    /// The streaming SLOs, still to be finished at the run's end.
    pub(super) drift: Option<super::drift::Drift>,
    /// Pushes to the coordinator that failed, as a warning of the run.
    pub(super) coordinator_trouble: Option<String>,
}

/// Who else hears of each record, besides `records.jsonl` and the statistics.
pub(super) struct Listeners {
    /// Stops the run once a breach is certain (`abort_on_fail`).
    pub(super) gate: Option<Gate>,
    /// Pushes deltas to the coordinator of a segmented run, which may stop it.
    pub(super) pusher: Option<crate::coordinator::worker::Pusher>,
    /// The chaos proxies' logs of what they injected, joined into the records.
    pub(super) faults: Vec<Arc<FaultLog>>,
    pub(super) live: Option<Arc<LiveMetrics>>,
    pub(super) spans: Option<SpanSink>,
    /// The streaming SLOs.
    pub(super) drift: Option<super::drift::Drift>,
}

/// The most records taken from the inbox at once.
const BATCH: usize = 256;
/// How long records gather in the inbox after a batch that did not fill it. Waiting
/// on an empty inbox, the recorder is woken by each record sent: at tens of thousands
/// a second that was a futex call for every one or two records and a context switch
/// on each side (~40k a second on each runtime worker, a quarter of a core). Records
/// wait at most this long before they are counted; files are flushed every 200 ms.
const GATHER: Duration = Duration::from_millis(2);

/// Receives records, writes them as JSON lines (flushed at least every 200 ms, so an
/// interrupted run keeps its data) and keeps the statistics.
///
/// With an `abort_on_fail` gate it also judges the SLOs once a second after their
/// `delay`, and stops the run (as Ctrl-C would) once a breach is certain; with
/// streaming SLOs it closes their windows as time passes.
pub(super) async fn record(
    mut inbox: mpsc::UnboundedReceiver<Inbox>,
    mut out: std::io::BufWriter<std::fs::File>,
    mut aggregator: Aggregator,
    listeners: Listeners,
) -> Result<Recorded> {
    let Listeners {
        gate,
        mut pusher,
        faults,
        live,
        mut spans,
        mut drift,
    } = listeners;
    let mut evidence = tokens::TokenEvidence::default();
    let mut samples = Vec::new();
    let mut flush = tokio::time::interval(Duration::from_millis(200));
    let mut judge = tokio::time::interval(Duration::from_secs(1));
    // Client metrics go out as cumulative snapshots every 10 s, and once at the end.
    let mut metrics_tick = tokio::time::interval(Duration::from_secs(10));
    metrics_tick.tick().await;
    let mut push = crate::coordinator::worker::Pusher::interval();
    let mut aborted = None;
    let mut batch = Vec::with_capacity(BATCH);
    let mut line = Vec::with_capacity(1024);
    loop {
        tokio::select! {
            // Records are taken in batches: at tens of thousands a second, one trip
            // through this select (and its timers) per record cost more than the writing.
            received = inbox.recv_many(&mut batch, BATCH) => {
                let mut closed = received == 0;
                let full = received == BATCH;
                for item in batch.drain(..) {
                    let Inbox::Record(mut record) = item else {
                        closed = true;
                        break;
                    };
                    // The proxy's log is ground truth of what it injected: it replaces
                    // what the client read from the response header.
                    if let Some(traceparent) = &record.traceparent {
                        let injected: Vec<_> = faults
                            .iter()
                            .filter_map(|log| log.take(traceparent))
                            .flatten()
                            .collect();
                        if !injected.is_empty() {
                            record.faults = injected;
                        }
                    }
                    record.settle_origin();
                    evidence.observe(&mut record);
                    samples.extend(crate::record::Sample::of(&record));
                    line.clear();
                    record.write_json(&mut line)?;
                    line.push(b'\n');
                    out.write_all(&line)?;
                    if let Some(live) = &live {
                        live.observe(&record);
                    }
                    if let Some(sink) = &mut spans {
                        for span in crate::trace::export::spans_of(&record, &sink.model, sink.origin_ns) {
                            // The exporter outlives the recorder; a send error would mean
                            // it panicked, and the run's records are still whole.
                            let _ = sink.sender.send(crate::trace::export::Export::Span(Box::new(span)));
                        }
                        sink.metrics.observe(&record, &sink.model);
                    }
                    aggregator.add(&record);
                    if let Some(pusher) = &mut pusher {
                        pusher.observe(&record);
                    }
                    if let Some(drift) = &mut drift {
                        drift.observe(&record);
                    }
                }
                if closed {
                    break;
                }
                if !full {
                    tokio::time::sleep(GATHER).await;
                }
            }
            _ = flush.tick() => {
                out.flush()?;
                if let Some(drift) = &mut drift {
                    drift.tick()?;
                }
            }
            _ = metrics_tick.tick(), if spans.is_some() => {
                if let Some(sink) = &spans {
                    sink.send_metrics();
                }
            }
            _ = push.tick(), if pusher.is_some() => {
                let pusher = pusher.as_mut().expect("checked by the guard");
                if let Some(stopped) = pusher.tick().await {
                    aborted.get_or_insert(stopped);
                }
            }
            _ = judge.tick(), if gate.is_some() && aborted.is_none() => {
                let gate = gate.as_ref().expect("checked by the guard");
                let at = gate.clock.start().elapsed();
                if at < gate.slos.delay {
                    continue;
                }
                let breaches = gate.slos.certain_breaches(&aggregator);
                if !breaches.is_empty() {
                    aborted = Some(Aborted { at_s: at.as_secs_f64(), breaches, episode: None });
                    gate.stop.cancel();
                }
            }
        }
    }
    out.flush()?;
    if let Some(sink) = &spans {
        sink.send_metrics();
    }
    let mut coordinator_trouble = None;
    if let Some(pusher) = pusher {
        let (stopped, failed) = pusher.finish().await;
        if aborted.is_none() {
            aborted = stopped;
        }
        coordinator_trouble = failed;
    }
    samples.sort_by_key(|s| s.seq);
    Ok(Recorded {
        aggregator,
        aborted,
        evidence,
        samples,
        drift,
        coordinator_trouble,
    })
}
