//! `records.jsonl`: one line per record as it completes, flushed every 200 ms so an
//! interrupted run keeps its data.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;

use super::{Every, Findings, Pending, RecordSink, SoFar};
use crate::record::Record;

const FLUSH_EVERY: Duration = Duration::from_millis(200);

pub(in crate::runner) struct JsonLines {
    out: std::io::BufWriter<std::fs::File>,
    /// One record's line, its buffer kept between records.
    line: Vec<u8>,
    flush: Every,
}

impl JsonLines {
    pub(in crate::runner) fn new(file: std::fs::File) -> JsonLines {
        JsonLines {
            out: std::io::BufWriter::new(file),
            line: Vec::with_capacity(1024),
            flush: Every::new(FLUSH_EVERY),
        }
    }
}

impl RecordSink for JsonLines {
    fn observe(&mut self, record: &Record) -> Result<()> {
        self.line.clear();
        record.write_json(&mut self.line)?;
        self.line.push(b'\n');
        self.out.write_all(&self.line)?;
        Ok(())
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        Some(self.flush.due())
    }

    fn tick<'a>(&'a mut self, _so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        self.flush.taken();
        let flushed = self.out.flush().map_err(Into::into);
        Box::pin(async { flushed })
    }

    fn finish<'a>(mut self: Box<Self>, _findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        let flushed = self.out.flush().map_err(Into::into);
        Box::pin(async { flushed })
    }
}
