//! A run as a set of sinks. Each [`RecordSink`] hears of every record as the recorder
//! takes it, is ticked when its own time comes, and at the end finishes into its part
//! of the run's [`Findings`]. What acts beside the load rather than on its records
//! (disruptions, the feedback controller, the scraper) is an [`Attachment`]: started
//! when the load starts, stopped when it ends. A new listener is a new file here and
//! one line where the run lists its sinks.

mod availability;
mod drift;
mod gate;
mod jsonl;
mod live;
mod pusher;
mod samples;
mod spans;
mod statistics;

pub(super) use availability::AvailabilityTally;
pub(super) use drift::Drift;
pub use drift::OnDrift;
pub(super) use gate::AbortGate;
pub(super) use jsonl::JsonLines;
pub(super) use pusher::CoordinatorPush;
pub(super) use samples::Samples;
pub(super) use spans::SpanSink;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;

use crate::metrics::Aggregator;
use crate::prometheus::scrape::ServerMetrics;
use crate::record::{Record, Sample};
use crate::results::DisruptionStep;
use crate::results::FeedbackReport;
use crate::slo::Aborted;
use crate::slo::streaming::DriftSummary;

/// A sink's or attachment's work that waits (a push, a drain).
pub(super) type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Hears of every record of a run, in the order they complete.
pub(super) trait RecordSink: Send + 'static {
    /// One record, after the proxies' faults are joined into it.
    fn observe(&mut self, record: &Record) -> Result<()>;

    /// When it next wants [`tick`](Self::tick); never, when none.
    fn next_tick(&self) -> Option<Instant> {
        None
    }

    /// Its time has come: flush, judge, push. It may stop the run, saying why in
    /// `so_far.aborted` (the first to stop it is the one that did).
    fn tick<'a>(&'a mut self, _so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Every record is in: what it leaves goes into `findings`.
    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>>;
}

/// What a tick may read and set: the statistics so far, and why the run stopped.
pub(super) struct SoFar<'a> {
    pub(super) aggregator: &'a Aggregator,
    pub(super) aborted: &'a mut Option<Aborted>,
}

/// Acts beside the load: started as the first request is due, stopped once the
/// schedule has ended (before the records are closed).
pub(super) trait Attachment: Send {
    fn start(&mut self) -> Result<()>;

    fn stop<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>>;
}

/// What the sinks and attachments leave as they finish: the run's result, before the
/// runner adds what it knows itself.
#[derive(Default)]
pub(super) struct Findings {
    /// From the start to the schedule's end; set before the sinks finish.
    pub(super) elapsed: Duration,
    /// The disruptions' steps, set as they stop (before the sinks finish).
    pub(super) steps: Vec<DisruptionStep>,
    pub(super) aggregator: Option<Aggregator>,
    pub(super) aborted: Option<Aborted>,
    pub(super) samples: Vec<Sample>,
    pub(super) drift: Option<DriftSummary>,
    pub(super) availability: Option<crate::results::Availability>,
    pub(super) feedback: Option<FeedbackReport>,
    pub(super) server_metrics: Option<ServerMetrics>,
    /// What a reader must know before trusting the figures.
    pub(super) warnings: Vec<String>,
}

/// A period, kept as the next time it is due. It keeps its beat; a tick taken so late
/// that the next beat has passed too is followed a whole period after it was taken,
/// so a slow tick never brings a burst of the missed ones.
#[derive(Debug, Clone, Copy)]
pub(super) struct Every {
    period: Duration,
    next: Instant,
}

impl Every {
    /// First due one period from now.
    pub(super) fn new(period: Duration) -> Every {
        Every {
            period,
            next: Instant::now() + period,
        }
    }

    pub(super) fn due(&self) -> Instant {
        self.next
    }

    /// Marks this tick taken.
    pub(super) fn taken(&mut self) {
        let now = Instant::now();
        self.next += self.period;
        if self.next <= now {
            self.next = now + self.period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_period_keeps_its_beat_and_a_late_tick_does_not_bunch_the_next() {
        let start = Instant::now();
        let mut every = Every::new(Duration::from_millis(200));
        assert_eq!(every.due() - start, Duration::from_millis(200));
        tokio::time::sleep_until(every.due()).await;
        every.taken();
        assert_eq!(every.due() - start, Duration::from_millis(400));
        // Taken 50 ms late: the beat holds.
        tokio::time::sleep(Duration::from_millis(250)).await;
        every.taken();
        assert_eq!(every.due() - start, Duration::from_millis(600));
        // Taken 700 ms late: the missed beats are skipped, not caught up.
        tokio::time::sleep(Duration::from_millis(700)).await;
        every.taken();
        assert_eq!(every.due() - start, Duration::from_millis(1350));
    }
}
