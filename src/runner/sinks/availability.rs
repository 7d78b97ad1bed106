//! Availability through the run's disruptions: each sent request's end kept as the
//! records arrive, put down to the disruptions' steps once they are known.

use anyhow::Result;

use super::{Findings, Pending, RecordSink};
use crate::record::{Outcome, Record};
use crate::results::Availability;
use crate::runner::availability::Ended;

#[derive(Default)]
pub(in crate::runner) struct AvailabilityTally {
    ended: Vec<Ended>,
    dropped: u64,
}

impl RecordSink for AvailabilityTally {
    fn observe(&mut self, record: &Record) -> Result<()> {
        match Ended::of(record) {
            Some(ended) => self.ended.push(ended),
            None if record.outcome == Outcome::Dropped => self.dropped += 1,
            None => {}
        }
        Ok(())
    }

    /// Needs the steps: the disruptions stop before the sinks finish.
    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        let mut availability = Availability::new(findings.steps.clone());
        availability.dropped = self.dropped;
        self.ended.iter().for_each(|e| availability.count(e));
        findings.availability = Some(availability.finish());
        Box::pin(async { Ok(()) })
    }
}
