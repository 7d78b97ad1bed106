//! Availability through a run's disruptions, in the terminal: the measured share with
//! its bound, what showing the target would take, and a line per step.

use crate::results::Availability;

/// `99.9871 %`: enough digits to see nines.
fn percent(share: f64) -> String {
    format!("{:.4} %", share * 100.0)
}

pub(super) fn render_availability(a: &Availability, line: &mut impl FnMut(String)) {
    line(format!(
        "  availability: {} ({} of {} sent requests failed); ≥ {} at {:.0} % confidence (Clopper–Pearson)",
        percent(a.availability),
        a.failed,
        a.requests,
        percent(a.lower_bound),
        a.confidence * 100.0
    ));
    let target = percent(a.target);
    line(match a.requests_to_show_target {
        Some(n) if n <= a.requests => format!("    {target} shown by these requests"),
        Some(n) => format!(
            "    to show {target}: {n} requests at this failure rate ({} more)",
            n - a.requests
        ),
        None => format!("    {target} cannot be shown: the observed failure rate is above it"),
    });
    for s in &a.steps {
        let took = match (s.step.ended_s, &s.step.error) {
            (_, Some(error)) => format!("FAILED: {error}"),
            (Some(end), None) => format!("{:.1}–{:.1}s", s.step.started_s, end),
            (None, None) => format!("from {:.1}s", s.step.started_s),
        };
        let failing = if s.failed == 0 {
            "none failed".to_owned()
        } else {
            format!(
                "{} failed, failing for {:.0} ms",
                s.failed, s.failing_for_ms
            )
        };
        let failover = if s.failover_ms > 0.0 {
            format!(", {} resent, failover {:.0} ms", s.retried, s.failover_ms)
        } else {
            String::new()
        };
        line(format!(
            "    step {} {} {}: {took}; {} requests, {failing}{failover}",
            s.step.step, s.step.kind, s.step.target, s.requests
        ));
    }
    if a.unattributed_failures > 0 {
        line(format!(
            "    {} failures outside every step",
            a.unattributed_failures
        ));
    }
}
