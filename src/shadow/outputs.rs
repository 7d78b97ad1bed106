//! What `redline replay` leaves in its folder: `diff.json`, `diff.txt`, `diff.html`,
//! and each side's records in a run's format.

use std::path::Path;

use anyhow::{Context, Result};

use super::diff::DiffReport;
use super::replay::{Replayed, Side};

/// diff.json, diff.txt, and each side's records (the same format as a run's).
pub fn write(dir: &Path, report: &DiffReport, replayed: &[Replayed]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let json = serde_json::to_string_pretty(report)? + "\n";
    std::fs::write(dir.join("diff.json"), json)?;
    std::fs::write(dir.join("diff.txt"), super::render::terminal(report))?;
    std::fs::write(dir.join("diff.html"), super::html::page(report, replayed))?;
    for side in Side::ALL {
        let mut lines = Vec::new();
        for r in replayed {
            r.answers[&side].record.write_json(&mut lines)?;
            lines.push(b'\n');
        }
        let path = dir.join(format!("{}.records.jsonl", side.name()));
        std::fs::write(&path, lines).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
