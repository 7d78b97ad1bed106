//! Images, audio and the feedback controller in the report: a row per media kind, and
//! the controller's readings and the rates it set on one time axis.

use std::fmt::Write;

use super::parts::section;
use super::svg::{self, Marks, Series, escape, num};
use crate::report::Summary;

/// The section, when the run sent media or had a controller.
pub fn media(summary: &Summary, marks: &Marks) -> Option<String> {
    if summary.media.is_empty() && summary.feedback.is_none() {
        return None;
    }
    let mut body = String::new();
    if !summary.media.is_empty() {
        body.push_str(r#"<table><tr><th>kind</th><th class="n">requests</th><th class="n">failed</th><th class="n">p50 ms</th><th class="n">p99 ms</th><th class="n">first byte p50 ms</th><th class="n">first transcript p50 ms</th><th class="n">RTFx p50</th><th class="n">RTFx p99</th><th class="n">images/s</th><th class="n">audio s</th><th>errors</th></tr>"#);
        for m in &summary.media {
            let errors: Vec<String> = m.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            let opt = |v: Option<f64>| v.map_or("–".to_owned(), num);
            let _ = write!(
                body,
                r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
                m.kind.name(),
                m.requests,
                m.failed,
                num(m.latency_ms.p50),
                num(m.latency_ms.p99),
                num(m.first_byte_ms.p50),
                opt(m.first_transcript_ms.map(|t| t.p50)),
                opt(m.rtfx.map(|r| r.p50)),
                opt(m.rtfx.map(|r| r.p99)),
                opt(m.images_per_s),
                opt(m.audio_seconds),
                escape(&errors.join(", "))
            );
        }
        body.push_str("</table>");
    }
    if let Some(f) = &summary.feedback {
        let _ = write!(
            body,
            r#"<p class="note">The feedback controller read GPU memory every {} ms ({} readings, {} failed{}) and set each service's rate from the smoothed reading; rates in requests per second and memory in % share the axis.</p>"#,
            num(f.interval_ms),
            f.events.len(),
            f.gauge_failures,
            f.last_failure
                .as_ref()
                .map_or(String::new(), |why| format!("; last: {}", escape(why)))
        );
        let at = |ms: f64| ms / 1e3;
        let mut series = vec![Series {
            name: "GPU memory used (%)".into(),
            points: f
                .events
                .iter()
                .filter_map(|e| Some((at(e.at_ms), e.reading? * 100.0)))
                .collect(),
            dashed: true,
        }];
        for (i, service) in f.services.iter().enumerate() {
            series.push(Series {
                name: format!("{service} (req/s)"),
                points: f
                    .events
                    .iter()
                    .filter_map(|e| Some((at(e.at_ms), *e.rates.get(i)?)))
                    .collect(),
                dashed: false,
            });
        }
        body.push_str(&svg::lines(
            "rates and GPU memory",
            "seconds into the run",
            "req/s · %",
            &series,
            marks,
        ));
    }
    Some(section("media", "Images, audio and the controller", &body))
}
