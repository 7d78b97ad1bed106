//! The run's disruptions in the report: each step as a band on every time axis (so
//! the throughput and error charts show what each restart cost), and a table of the
//! steps with the availability they left.

use std::fmt::Write;

use super::parts::{section, window_key};
use super::svg::{Marks, escape, num};
use crate::report::Summary;

/// Colour of disruption bands, past the fault rules' and the episodes' colours.
const STEP_COLOUR: usize = 4;

/// Each step as a band from its start to its end (or the run's end).
pub(super) fn add_steps(summary: &Summary, marks: &mut Marks) {
    let Some(a) = &summary.disruptions else {
        return;
    };
    for s in &a.steps {
        let to = s.step.ended_s.unwrap_or(summary.elapsed_s);
        let label = format!(
            "step {} {} {}: {}–{} s, {} of {} requests failed",
            s.step.step,
            s.step.kind,
            s.step.target,
            num(s.step.started_s),
            num(to),
            s.failed,
            s.requests
        );
        marks
            .windows
            .push((s.step.started_s, to, label, STEP_COLOUR));
    }
}

/// The section: availability with its bound, and a row per step.
pub fn disruptions(summary: &Summary, marks: &Marks) -> Option<String> {
    let a = summary.disruptions.as_ref()?;
    let shown = match a.requests_to_show_target {
        Some(n) if n <= a.requests => "shown by these requests".to_owned(),
        Some(n) => format!("would take {n} requests at this failure rate"),
        None => "cannot be shown: the observed failure rate is above it".to_owned(),
    };
    let mut body = format!(
        r#"<p>Availability {:.4} % ({} of {} sent requests failed); at least {:.4} % at {:.0} % confidence (Clopper–Pearson). {:.3} % {}.</p>"#,
        a.availability * 100.0,
        a.failed,
        a.requests,
        a.lower_bound * 100.0,
        a.confidence * 100.0,
        a.target * 100.0,
        escape(&shown)
    );
    body.push_str(&window_key(marks));
    body.push_str(r#"<table><tr><th>step</th><th>what</th><th class="n">start (s)</th><th class="n">down (s)</th><th class="n">serving again (s)</th><th class="n">requests</th><th class="n">failed</th><th class="n">failing for (ms)</th><th class="n">resent</th><th class="n">failover (ms)</th><th>error</th></tr>"#);
    for s in &a.steps {
        let _ = write!(
            body,
            r#"<tr><td>{} {}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            s.step.step,
            escape(&s.step.kind),
            escape(&s.step.target),
            num(s.step.started_s),
            s.step.down_s.map_or(String::new(), num),
            s.step.ended_s.map_or(String::new(), num),
            s.requests,
            s.failed,
            num(s.failing_for_ms),
            s.retried,
            num(s.failover_ms),
            escape(s.step.error.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</table>");
    if a.unattributed_failures > 0 {
        let _ = write!(
            body,
            r#"<p class="note">{} failures fell outside every step.</p>"#,
            a.unattributed_failures
        );
    }
    Some(section(
        "disruptions",
        "Availability through disruptions",
        &body,
    ))
}
