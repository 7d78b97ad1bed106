//! The recorder: takes each record as its request completes, joins the chaos
//! proxies' fault logs into it, and hands it to every sink of the run
//! ([`super::sinks`]), ticking each when its time comes.

use super::sinks::{RecordSink, SoFar};
use super::*;

/// What the recorder's inbox carries.
pub(super) enum Inbox {
    Record(Box<Record>),
    /// Every request has ended: write what is left and stop.
    Close,
}

/// The recorder, before it starts.
pub(super) struct Recorder {
    /// The chaos proxies' logs of what they injected, joined into the records.
    pub(super) faults: Vec<Arc<FaultLog>>,
    /// The statistics: a sink, kept apart because ticks read it.
    pub(super) aggregator: Aggregator,
    pub(super) sinks: Vec<Box<dyn RecordSink>>,
}

/// What the recorder leaves when its inbox closes: the sinks, still to finish.
pub(super) struct Recorded {
    pub(super) aggregator: Aggregator,
    pub(super) sinks: Vec<Box<dyn RecordSink>>,
    /// Why the run stopped, when a sink stopped it.
    pub(super) aborted: Option<Aborted>,
    pub(super) evidence: tokens::TokenEvidence,
}

/// The most records taken from the inbox at once.
const BATCH: usize = 256;
/// How long records gather in the inbox after a batch that did not fill it. Waiting
/// on an empty inbox, the recorder is woken by each record sent: at tens of thousands
/// a second that was a futex call for every one or two records and a context switch
/// on each side (~40k a second on each runtime worker, a quarter of a core). Records
/// wait at most this long before they are counted; files are flushed every 200 ms.
const GATHER: Duration = Duration::from_millis(2);

/// Receives records until the inbox closes, and ticks each sink at its time.
pub(super) async fn record(
    mut inbox: mpsc::UnboundedReceiver<Inbox>,
    recorder: Recorder,
) -> Result<Recorded> {
    let Recorder {
        faults,
        aggregator,
        sinks,
    } = recorder;
    let mut recorded = Recorded {
        aggregator,
        sinks,
        aborted: None,
        evidence: tokens::TokenEvidence::default(),
    };
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let due = recorded.sinks.iter().filter_map(|s| s.next_tick()).min();
        let wake = due.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            // A tick that is due goes first: a flood of records never holds back a
            // flush or a judgement.
            biased;
            () = tokio::time::sleep_until(wake), if due.is_some() => recorded.tick().await?,
            // Records are taken in batches: at tens of thousands a second, one trip
            // through this select (and its timers) per record cost more than the writing.
            received = inbox.recv_many(&mut batch, BATCH) => {
                let mut closed = received == 0;
                for item in batch.drain(..) {
                    let Inbox::Record(mut record) = item else {
                        closed = true;
                        break;
                    };
                    join_faults(&faults, &mut record);
                    recorded.take(&mut record)?;
                }
                if closed {
                    break;
                }
                if received < BATCH {
                    tokio::time::sleep(GATHER).await;
                }
            }
        }
    }
    Ok(recorded)
}

impl Recorded {
    fn take(&mut self, record: &mut Record) -> Result<()> {
        record.settle_origin();
        self.evidence.observe(record);
        self.aggregator.observe(record)?;
        for sink in &mut self.sinks {
            sink.observe(record)?;
        }
        Ok(())
    }

    /// Ticks the sinks whose time has come, in their order.
    async fn tick(&mut self) -> Result<()> {
        let now = tokio::time::Instant::now();
        for sink in &mut self.sinks {
            if sink.next_tick().is_some_and(|due| due <= now) {
                let so_far = SoFar {
                    aggregator: &self.aggregator,
                    aborted: &mut self.aborted,
                };
                sink.tick(so_far).await?;
            }
        }
        Ok(())
    }
}

/// The proxy's log is ground truth of what it injected: it replaces what the client
/// read from the response header.
fn join_faults(faults: &[Arc<FaultLog>], record: &mut Record) {
    let Some(traceparent) = &record.traceparent else {
        return;
    };
    let injected: Vec<_> = faults
        .iter()
        .filter_map(|log| log.take(traceparent))
        .flatten()
        .collect();
    if !injected.is_empty() {
        record.faults = injected;
    }
}

#[cfg(test)]
mod tests {
    use super::super::sinks::{Every, Findings, Pending};
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Heard {
        Record(u64),
        /// A tick, at this many ms.
        Tick(u64),
    }

    /// Notes what it hears and when it is ticked.
    struct Probe {
        every: Every,
        seen: Arc<std::sync::Mutex<Vec<Heard>>>,
        start: tokio::time::Instant,
    }

    impl RecordSink for Probe {
        fn observe(&mut self, record: &Record) -> Result<()> {
            self.seen.lock().unwrap().push(Heard::Record(record.seq));
            Ok(())
        }

        fn next_tick(&self) -> Option<tokio::time::Instant> {
            Some(self.every.due())
        }

        fn tick<'a>(&'a mut self, _so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
            self.every.taken();
            let at = self.start.elapsed().as_millis() as u64;
            self.seen.lock().unwrap().push(Heard::Tick(at));
            Box::pin(async { Ok(()) })
        }

        fn finish<'a>(self: Box<Self>, _findings: &'a mut Findings) -> Pending<'a, Result<()>> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sinks_hear_every_record_in_order_and_are_ticked_on_their_beat() {
        let start = tokio::time::Instant::now();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let probe = Probe {
            every: Every::new(Duration::from_millis(300)),
            seen: seen.clone(),
            start,
        };
        let (records, inbox) = mpsc::unbounded_channel();
        let recorder = Recorder {
            faults: Vec::new(),
            aggregator: crate::metrics::Aggregator::new(None),
            sinks: vec![Box::new(probe)],
        };
        let task = tokio::spawn(record(inbox, recorder));
        for seq in 0..5 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let record = Record::unsent(seq, 0, Phase::Measure, 0);
            records.send(Inbox::Record(Box::new(record))).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        records.send(Inbox::Close).unwrap();
        let recorded = task.await.unwrap().unwrap();
        assert_eq!(recorded.aggregator.counts.scheduled, 5);
        use Heard::{Record as R, Tick as T};
        let heard = [R(0), T(300), R(1), T(600), R(2), R(3), T(900), R(4)];
        assert_eq!(*seen.lock().unwrap(), heard);
    }
}
