//! The run's statistics. The recorder keeps the aggregator apart from the other sinks
//! (the abort gate reads it at each tick), but it hears and finishes as they do.

use anyhow::Result;

use super::{Findings, Pending, RecordSink};
use crate::metrics::Aggregator;
use crate::record::Record;

impl RecordSink for Aggregator {
    fn observe(&mut self, record: &Record) -> Result<()> {
        self.add(record);
        Ok(())
    }

    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        findings.aggregator = Some(*self);
        Box::pin(async { Ok(()) })
    }
}
