//! The exchanges the first requests kept (prompt and answer, cut short), for the
//! report to show.

use anyhow::Result;

use super::{Findings, Pending, RecordSink};
use crate::record::{Record, Sample};

#[derive(Default)]
pub(in crate::runner) struct Samples(Vec<Sample>);

impl RecordSink for Samples {
    fn observe(&mut self, record: &Record) -> Result<()> {
        self.0.extend(Sample::of(record));
        Ok(())
    }

    /// In the order they were scheduled, not as they completed.
    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        let mut samples = self.0;
        samples.sort_by_key(|s| s.seq);
        findings.samples = samples;
        Box::pin(async { Ok(()) })
    }
}
