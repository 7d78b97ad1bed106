//! `redline report`: a run folder's pictures built again from what it holds.

use super::*;

/// `redline report DIR [-o FILE]`: report.html (and timeline.json beside the records).
pub(super) fn report(dir: &Path, out: Option<&Path>) -> Result<i32> {
    let html = crate::report::html::write_for_run(dir, out)?;
    let timeline = dir.join("timeline.json");
    crate::report::timeline::write(&dir.join("records.jsonl"), &timeline)?;
    outln!("{}", html.display());
    outln!("{}", timeline.display());
    Ok(exit::OK)
}
