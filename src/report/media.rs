//! The summary's media section: per kind (image, transcription, speech), latency,
//! RTFx, time to the first audio byte, images/s, and what came back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::Dist;
use crate::metrics::media::{MediaTally, RTFX_SCALE};
use crate::record::MediaKind;
use crate::results::FeedbackReport;

/// One kind's figures (measured phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaSummary {
    pub kind: MediaKind,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    /// Send to last byte of successful requests (a Realtime session: from the input
    /// done, the commit and `response.create`, to `response.done`).
    pub latency_ms: Dist,
    /// Send to the first byte of the answer (speech: time to first audio; a Realtime
    /// session: input done to the first audio delta).
    pub first_byte_ms: Dist,
    /// A Realtime session: input done to the input transcript's first delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_transcript_ms: Option<Dist>,
    /// Seconds of audio per second of request (transcription: the clip sent; speech:
    /// the clip received), per request: higher is faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtfx: Option<Dist>,
    /// Images received, and per second of the measured window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_per_s: Option<f64>,
    /// Seconds of audio sent (transcription) or received (speech).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_seconds: Option<f64>,
    /// Transcript words received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<u64>,
    /// Media bytes received (decoded images, audio, transcripts).
    pub bytes: u64,
    /// Failures by `stage/kind`.
    pub errors: BTreeMap<String, u64>,
}

/// The media section, one entry per kind that ran; empty when none did.
pub(super) fn media_summary(tally: &MediaTally, window_s: f64) -> Vec<MediaSummary> {
    tally
        .kinds
        .iter()
        .map(|(kind, t)| {
            let image = *kind == MediaKind::Image;
            let audio = !image;
            MediaSummary {
                kind: *kind,
                requests: t.counts.scheduled,
                ok: t.counts.ok,
                failed: t.counts.failed(),
                latency_ms: Dist::of(&t.latency, 1e3),
                first_byte_ms: Dist::of(&t.first_byte, 1e3),
                first_transcript_ms: (!t.first_transcript.is_empty())
                    .then(|| Dist::of(&t.first_transcript, 1e3)),
                rtfx: (!t.rtfx.is_empty()).then(|| Dist::of(&t.rtfx, RTFX_SCALE)),
                images: image.then_some(t.images),
                images_per_s: (image && window_s > 0.0).then(|| t.images as f64 / window_s),
                audio_seconds: audio.then_some(t.audio_seconds),
                words: matches!(kind, MediaKind::Transcription | MediaKind::Realtime)
                    .then_some(t.words),
                bytes: t.bytes,
                errors: t.failures.clone(),
            }
        })
        .collect()
}

/// The terminal's media table.
pub(super) fn render_media(media: &[MediaSummary], line: &mut impl FnMut(String)) {
    line(format!(
        "  {:<15}{:>9}{:>8}{:>11}{:>10}{:>10}{:>12}{:>10}{:>10}",
        "media",
        "requests",
        "failed",
        "mean ms",
        "p50",
        "p99",
        "first byte",
        "RTFx p50",
        "RTFx p99"
    ));
    for m in media {
        let d = &m.latency_ms;
        let rtfx = |q: fn(&Dist) -> f64| {
            m.rtfx
                .as_ref()
                .map_or("-".to_owned(), |r| format!("{:.1}", q(r)))
        };
        line(format!(
            "  {:<15}{:>9}{:>8}{:>11.2}{:>10.2}{:>10.2}{:>12.2}{:>10}{:>10}",
            m.kind.name(),
            m.requests,
            m.failed,
            d.mean,
            d.p50,
            d.p99,
            m.first_byte_ms.p50,
            rtfx(|r| r.p50),
            rtfx(|r| r.p99),
        ));
        let mut what = Vec::new();
        if let (Some(n), Some(per_s)) = (m.images, m.images_per_s) {
            what.push(format!("{n} images · {per_s:.2} images/s"));
        }
        if let Some(s) = m.audio_seconds {
            what.push(format!("{s:.1} s of audio"));
        }
        if let Some(w) = m.words {
            what.push(format!("{w} words"));
        }
        if let Some(t) = &m.first_transcript_ms {
            what.push(format!("first transcript p50 {:.2} ms", t.p50));
        }
        what.push(format!("{:.1} MB", m.bytes as f64 / 1e6));
        line(format!("      {}", what.join(" · ")));
        for (kind, n) in &m.errors {
            line(format!("      {n} × {kind}"));
        }
    }
}

/// The terminal's line on the feedback controller: how often it read, what u did,
/// where the rates ended, and failed readings.
pub(super) fn render_feedback(f: &FeedbackReport, line: &mut impl FnMut(String)) {
    let readings: Vec<f64> = f.events.iter().filter_map(|e| e.reading).collect();
    let peak = readings.iter().copied().fold(0.0, f64::max);
    line(format!(
        "  feedback: {} readings every {:.0} ms · GPU memory peak {:.1}% · {} failed readings",
        f.events.len(),
        f.interval_ms,
        peak * 100.0,
        f.gauge_failures
    ));
    if let Some(last) = f.events.last() {
        let rates: Vec<String> = f
            .services
            .iter()
            .zip(&last.rates)
            .map(|(service, rate)| format!("{service} {rate:.0}/s"))
            .collect();
        line(format!("    rates at the end: {}", rates.join(" · ")));
    }
    if let Some(why) = &f.last_failure {
        line(format!("    last failed reading: {why}"));
    }
}
