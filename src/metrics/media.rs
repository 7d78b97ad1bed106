//! Image, transcription and speech figures over the records, by kind: latency, the
//! audio real-time factor (RTFx: seconds of audio per second of request), time to the
//! first audio byte, images, bytes and words (docs/metrics.md, "Media").

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{Counts, histogram};
use crate::record::{MediaKind, Outcome, Phase, Record};

/// RTFx is kept in thousandths, so the histogram's integers hold three decimals.
pub const RTFX_SCALE: f64 = 1e3;

/// One kind's measured requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindTally {
    pub counts: Counts,
    /// Send (a Realtime session: input done) to last byte of successful requests,
    /// microseconds.
    #[serde(with = "super::file::hdr")]
    pub latency: Histogram<u64>,
    /// Send to the first byte of the answer's body, microseconds (speech: the first
    /// audio; a Realtime session: input done to the first audio).
    #[serde(with = "super::file::hdr")]
    pub first_byte: Histogram<u64>,
    /// A Realtime session: input done to the input transcript's first delta.
    #[serde(with = "super::file::hdr")]
    pub first_transcript: Histogram<u64>,
    /// Audio seconds per request second × [`RTFX_SCALE`], of successful requests that
    /// carried or returned audio.
    #[serde(with = "super::file::hdr")]
    pub rtfx: Histogram<u64>,
    pub images: u64,
    pub bytes: u64,
    pub audio_seconds: f64,
    pub words: u64,
    /// Failures by `stage/kind`.
    pub failures: BTreeMap<String, u64>,
}

impl Default for KindTally {
    fn default() -> Self {
        KindTally {
            counts: Counts::default(),
            latency: histogram(),
            first_byte: histogram(),
            first_transcript: histogram(),
            rtfx: histogram(),
            images: 0,
            bytes: 0,
            audio_seconds: 0.0,
            words: 0,
            failures: BTreeMap::new(),
        }
    }
}

/// Media figures of the measured phase, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MediaTally {
    pub kinds: BTreeMap<MediaKind, KindTally>,
}

impl MediaTally {
    pub fn add(&mut self, r: &Record) {
        let (Phase::Measure, Some(media)) = (r.phase, &r.media) else {
            return;
        };
        let tally = self.kinds.entry(media.kind).or_default();
        tally.counts.bump(r.outcome);
        if let Some(f) = &r.error {
            let stage = serde_json::to_value(f.stage).unwrap_or_default();
            let key = format!("{}/{}", stage.as_str().unwrap_or_default(), f.kind);
            *tally.failures.entry(key).or_default() += 1;
        }
        if r.outcome != Outcome::Ok {
            return;
        }
        for (histogram, us) in [
            (&mut tally.latency, media.latency_us(r)),
            (&mut tally.first_byte, media.time_to_first_audio_us(r)),
            (
                &mut tally.first_transcript,
                media.time_to_first_transcript_us(),
            ),
        ] {
            if let Some(us) = us {
                let _ = histogram.record(us.max(1));
            }
        }
        if let Some(rtfx) = media.realtime_factor(r) {
            let _ = tally
                .rtfx
                .record(((rtfx * RTFX_SCALE).round() as u64).max(1));
        }
        tally.images += u64::from(media.images.unwrap_or(0));
        tally.bytes += media.bytes;
        tally.audio_seconds += media.audio_s.unwrap_or(0.0);
        tally.words += u64::from(media.words.unwrap_or(0));
    }

    pub fn merge(&mut self, other: &MediaTally) {
        for (kind, theirs) in &other.kinds {
            let ours = self.kinds.entry(*kind).or_default();
            ours.counts.merge(&theirs.counts);
            for (mine, their) in [
                (&mut ours.latency, &theirs.latency),
                (&mut ours.first_byte, &theirs.first_byte),
                (&mut ours.first_transcript, &theirs.first_transcript),
                (&mut ours.rtfx, &theirs.rtfx),
            ] {
                mine.add(their).expect("the histograms share their bounds");
            }
            ours.images += theirs.images;
            ours.bytes += theirs.bytes;
            ours.audio_seconds += theirs.audio_seconds;
            ours.words += theirs.words;
            for (failure, n) in &theirs.failures {
                *ours.failures.entry(failure.clone()).or_default() += n;
            }
        }
    }
}
