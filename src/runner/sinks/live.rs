//! The run's live `/metrics`: each record counted as it completes.

use std::sync::Arc;

use anyhow::Result;

use super::{Findings, Pending, RecordSink};
use crate::prometheus::live::LiveMetrics;
use crate::record::Record;

impl RecordSink for Arc<LiveMetrics> {
    fn observe(&mut self, record: &Record) -> Result<()> {
        LiveMetrics::observe(self, record);
        Ok(())
    }

    fn finish<'a>(self: Box<Self>, _findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}
