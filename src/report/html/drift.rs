//! The streaming SLOs in the report: each episode as a band on every time axis, and a
//! chart per watched series of its window values against the detector's threshold.

use std::fmt::Write;

use super::parts::{section, window_key};
use super::svg::{self, Marks, Series, escape, num};
use crate::report::Summary;

/// Colour of episode bands, past the fault rules' colours.
const EPISODE_COLOUR: usize = 5;

/// Each episode as a band from its opening to its close (or the run's end).
pub(super) fn add_episodes(summary: &Summary, marks: &mut Marks) {
    let Some(drift) = &summary.drift else {
        return;
    };
    for e in &drift.episodes {
        let to = e.closed_s.unwrap_or(summary.elapsed_s);
        let label = format!(
            "episode: {} {} {}, {}–{} s, peak {} {}",
            e.series,
            e.group,
            super::parts::wire_name(e.severity),
            num(e.opened_s),
            num(to),
            num(e.peak),
            e.unit
        );
        marks.windows.push((e.opened_s, to, label, EPISODE_COLOUR));
    }
}

/// The section: settings, the episodes, and a chart per track.
pub fn drift(summary: &Summary, marks: &Marks) -> Option<String> {
    let d = summary.drift.as_ref()?;
    let mut body = format!(
        r#"<p class="note">{} over {} s windows every {} s; {} windows judged; a point per window's end. Dashed: the threshold, where the detector has one.</p>"#,
        escape(&d.detector),
        num(d.window_s),
        num(d.step_s),
        d.windows_judged
    );
    body.push_str(&window_key(marks));
    if !d.episodes.is_empty() {
        body.push_str(r#"<table><tr><th>series</th><th>group</th><th>severity</th><th class="n">opened (s)</th><th class="n">closed (s)</th><th class="n">peak</th><th class="n">threshold</th></tr>"#);
        for e in &d.episodes {
            let _ = write!(
                body,
                r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{} {}</td><td class="n">{}</td></tr>"#,
                escape(&e.series),
                escape(&e.group),
                super::parts::wire_name(e.severity),
                num(e.opened_s),
                e.closed_s.map_or("open at the end".into(), num),
                num(e.peak),
                escape(e.unit.as_str()),
                e.threshold.map_or(String::new(), num)
            );
        }
        body.push_str("</table>");
    }
    for track in &d.tracks {
        let values = Series {
            name: format!("{} ({})", track.series, track.group),
            points: track
                .points
                .iter()
                .filter_map(|p| Some((p.end_s, p.value?)))
                .collect(),
            dashed: false,
        };
        let threshold = Series {
            name: "threshold".into(),
            points: track
                .points
                .iter()
                .filter_map(|p| Some((p.end_s, p.threshold?)))
                .collect(),
            dashed: true,
        };
        body.push_str(&svg::lines(
            &format!("{} · {}", track.series, track.group),
            "seconds into the run (window end)",
            track.unit.as_str(),
            &[values, threshold],
            marks,
        ));
    }
    Some(section("drift", "Streaming SLOs", &body))
}
