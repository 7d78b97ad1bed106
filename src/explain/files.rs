//! A run folder as explain reads it: its records, and the spans `--collect` stored
//! beside them (`collect/spans.jsonl`), when the run collected any.

use std::path::Path;

use super::spans::under_records;
use super::table::Table;
use crate::trace::graph::{Span, parse_spans};

/// The run's flow sessions, deepened by its spans.
pub fn read_run(dir: &Path) -> Result<Table, String> {
    let mut records = Vec::new();
    let folder = crate::folder::RunFolder::new(dir);
    crate::record::read_records(&folder.records(), None, |r| records.push(r))
        .map_err(|e| e.to_string())?;
    let spans = read_spans(&folder.collected_spans())?;
    under_records(&records, &spans)
}

fn read_spans(path: &Path) -> Result<Vec<Span>, String> {
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_spans(&text).map_err(|e| format!("{}: {e}", path.display()))
}
