//! The streaming SLOs in the terminal: a line per episode change while the run goes,
//! and the episodes after it.

use crate::slo::Aborted;
use crate::slo::streaming::{Change, DriftSummary, Episode, Severity};

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Warn => "WARN",
        Severity::Critical => "CRITICAL",
    }
}

/// Which series of which group, and what it reached.
fn describe(e: &Episode) -> String {
    let group = if e.group == "all" {
        String::new()
    } else {
        format!(" [{}]", e.group)
    };
    let threshold = e
        .threshold
        .map_or(String::new(), |t| format!(" over {}", e.unit.show(t)));
    format!(
        "{}{group} peak {} at {:.0}s{threshold} ({})",
        e.series,
        e.unit.show(e.peak),
        e.peak_at_s,
        e.detector
    )
}

/// One line for an episode that opened, escalated or closed.
pub fn render_drift_change(change: &Change) -> String {
    match change {
        Change::Opened(e) => format!(
            "  {:>6.0}s  {} opened: {}",
            e.opened_s,
            severity(e.severity),
            describe(e)
        ),
        Change::Escalated(e) => {
            let at = e.escalated_s.unwrap_or(e.opened_s);
            format!(
                "  {at:>6.0}s  CRITICAL after {:.0}s: {}",
                at - e.opened_s,
                describe(e)
            )
        }
        Change::Closed(e) => format!(
            "  {:>6.0}s  closed after {:.0}s: {}",
            e.closed_s.unwrap_or(e.opened_s),
            e.closed_s.unwrap_or(e.opened_s) - e.opened_s,
            describe(e)
        ),
    }
}

/// The streaming SLOs' table, alone (`redline watch`).
pub fn render_drift_summary(d: &DriftSummary) -> String {
    let mut out = String::new();
    render_drift(d, None, &mut |l| {
        out.push_str(&l);
        out.push('\n');
    });
    out
}

/// The streaming SLOs' table after a run.
pub(super) fn render_drift(
    d: &DriftSummary,
    aborted: Option<&Aborted>,
    line: &mut impl FnMut(String),
) {
    line(String::new());
    line(format!(
        "  streaming SLOs ({}, {}s windows every {}s): {} windows judged, {} episodes{}",
        d.detector,
        d.window_s,
        d.step_s,
        d.windows_judged,
        d.episodes.len(),
        if d.webhook_calls > 0 {
            format!(
                ", {} webhook calls ({} failed)",
                d.webhook_calls, d.webhook_failures
            )
        } else {
            String::new()
        }
    ));
    for e in &d.episodes {
        let until = e
            .closed_s
            .map_or("the end".to_owned(), |c| format!("{c:.0}s"));
        line(format!(
            "    {:<9}{:>6.0}s → {until:<8} {}",
            severity(e.severity),
            e.opened_s,
            describe(e)
        ));
    }
    if let Some(Aborted {
        at_s,
        episode: Some(e),
        ..
    }) = aborted
    {
        line(format!(
            "  aborted at {at_s:.1}s (on_violation: abort): {}",
            describe(e)
        ));
    }
}
