//! A segmented run's worker pushes its statistics' delta to the coordinator, which
//! judges the SLOs on the whole run and may stop it.

use anyhow::Result;

use super::{Every, Findings, Pending, RecordSink, SoFar};
use crate::coordinator::PUSH_EVERY;
use crate::coordinator::worker::Pusher;
use crate::record::Record;

pub(in crate::runner) struct CoordinatorPush {
    pusher: Pusher,
    every: Every,
}

impl CoordinatorPush {
    pub(in crate::runner) fn new(pusher: Pusher) -> CoordinatorPush {
        CoordinatorPush {
            pusher,
            every: Every::new(PUSH_EVERY),
        }
    }
}

impl RecordSink for CoordinatorPush {
    fn observe(&mut self, record: &Record) -> Result<()> {
        self.pusher.observe(record);
        Ok(())
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        Some(self.every.due())
    }

    fn tick<'a>(&'a mut self, so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        self.every.taken();
        Box::pin(async move {
            if let Some(stopped) = self.pusher.tick().await {
                so_far.aborted.get_or_insert(stopped);
            }
            Ok(())
        })
    }

    /// The last delta, marked done; pushes that failed become a warning.
    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async move {
            let (stopped, failed) = self.pusher.finish().await;
            if findings.aborted.is_none() {
                findings.aborted = stopped;
            }
            findings.warnings.extend(failed);
            Ok(())
        })
    }
}
