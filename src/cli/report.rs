//! `redline report`: a run folder's pictures built again from what it holds.

use super::*;

/// `redline report DIR [-o FILE]`: report.html (and timeline.json beside the records).
pub(super) fn report(dir: &Path, out: Option<&Path>) -> Result<i32> {
    let summary = crate::report::read_summary(dir)?;
    let html = crate::report::outputs::write_pictures(&summary, dir, out)?;
    outln!("{}", html.display());
    outln!("{}", dir.join("timeline.json").display());
    Ok(exit::OK)
}
