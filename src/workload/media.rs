//! Audio clips for transcription requests: read from a directory of WAV files, or
//! generated (seeded tones of drawn lengths). Each clip's length is known before it is
//! sent: it is what the RTFx of its request is measured against.

use std::io::Cursor;
use std::path::Path;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::seed::mix_seed;
pub use redline_base::wav::wav_seconds;

/// One WAV file to transcribe.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    /// The file's name, sent as the multipart part's filename.
    pub name: String,
    pub wav: Bytes,
    /// Seconds of audio in it.
    pub seconds: f64,
}

/// Why clips could not be had.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClipError {
    #[error("cannot read the audio directory {dir}: {reason}")]
    Directory { dir: String, reason: String },
    #[error("the audio directory {0} holds no .wav files")]
    Empty(String),
    #[error("{file} is not a WAV file redline can read: {reason}")]
    NotWav { file: String, reason: String },
}

/// The clips of a directory: every `.wav` file, by name. A file with that suffix that
/// is not a readable WAV is an error naming it, rather than a request that fails later.
pub fn clips_from_dir(dir: &Path) -> Result<Vec<Clip>, ClipError> {
    let unreadable = |reason: std::io::Error| ClipError::Directory {
        dir: dir.display().to_string(),
        reason: reason.to_string(),
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("wav"))
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(ClipError::Empty(dir.display().to_string()));
    }
    paths
        .iter()
        .map(|path| {
            let not_wav = |reason: String| ClipError::NotWav {
                file: path.display().to_string(),
                reason,
            };
            let wav = std::fs::read(path).map_err(|e| not_wav(e.to_string()))?;
            let seconds = wav_seconds(&wav).map_err(|e| not_wav(e.to_string()))?;
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into());
            Ok(Clip {
                name,
                wav: wav.into(),
                seconds,
            })
        })
        .collect()
}

/// Sample rate of generated clips (Whisper's own: 16 kHz mono).
pub const GENERATED_SAMPLE_RATE: u32 = 16_000;

/// `count` clips of lengths drawn uniformly from `min_s`–`max_s` seconds, seeded:
/// tones whose pitch varies by clip.
pub fn generated_clips(count: u32, min_s: f64, max_s: f64, seed: u64) -> Vec<Clip> {
    (0..count)
        .map(|i| {
            let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x4155_4449, i.into()]));
            let seconds = if max_s > min_s {
                rng.random_range(min_s..=max_s)
            } else {
                min_s
            };
            let samples = (seconds * f64::from(GENERATED_SAMPLE_RATE)).round() as u32;
            let pitch = rng.random_range(120.0..400.0);
            Clip {
                name: format!("clip-{i:04}.wav"),
                wav: tone(samples, pitch).into(),
                seconds: f64::from(samples) / f64::from(GENERATED_SAMPLE_RATE),
            }
        })
        .collect()
}

/// A WAV file of `samples` of a `pitch` Hz tone, 16-bit mono.
fn tone(samples: u32, pitch: f64) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: GENERATED_SAMPLE_RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::with_capacity(44 + 2 * samples as usize));
    let mut writer = hound::WavWriter::new(&mut out, spec).expect("writing to memory");
    for i in 0..samples {
        let t = f64::from(i) / f64::from(GENERATED_SAMPLE_RATE);
        let value = (t * pitch * std::f64::consts::TAU).sin() * 6_000.0;
        writer
            .write_sample(value as i16)
            .expect("writing to memory");
    }
    writer.finalize().expect("writing to memory");
    out.into_inner()
}

/// A clip as a Realtime session speaks it: PCM16, 24 kHz, mono, little-endian.
#[derive(Debug, Clone, PartialEq)]
pub struct PcmClip {
    pub name: String,
    pub pcm: Bytes,
    pub seconds: f64,
}

/// The Realtime API's input rate.
pub const PCM_RATE: u32 = 24_000;

impl PcmClip {
    /// `clip` at 24 kHz mono: its channels averaged, resampled linearly when its rate
    /// differs. Read once per run, before the first session.
    pub fn of(clip: &Clip) -> Result<PcmClip, ClipError> {
        let not_wav = |reason: String| ClipError::NotWav {
            file: clip.name.clone(),
            reason,
        };
        let reader = hound::WavReader::new(Cursor::new(&clip.wav[..]))
            .map_err(|e| not_wav(e.to_string()))?;
        let spec = reader.spec();
        if spec.sample_format != hound::SampleFormat::Int || spec.bits_per_sample != 16 {
            return Err(not_wav(
                "a Realtime session sends 16-bit PCM: convert it first".into(),
            ));
        }
        let channels = usize::from(spec.channels.max(1));
        let samples: Vec<i16> = reader
            .into_samples::<i16>()
            .collect::<Result<_, _>>()
            .map_err(|e| not_wav(e.to_string()))?;
        let mono: Vec<f64> = samples
            .chunks(channels)
            .map(|frame| frame.iter().map(|s| f64::from(*s)).sum::<f64>() / frame.len() as f64)
            .collect();
        let resampled = resample(&mono, spec.sample_rate, PCM_RATE);
        let pcm: Vec<u8> = resampled
            .iter()
            .flat_map(|s| (s.round().clamp(-32768.0, 32767.0) as i16).to_le_bytes())
            .collect();
        Ok(PcmClip {
            name: clip.name.clone(),
            seconds: resampled.len() as f64 / f64::from(PCM_RATE),
            pcm: pcm.into(),
        })
    }
}

/// `samples` at rate `from` as samples at rate `to`, by linear interpolation.
fn resample(samples: &[f64], from: u32, to: u32) -> Vec<f64> {
    if from == to || samples.is_empty() {
        return samples.to_vec();
    }
    let n = (samples.len() as u64 * u64::from(to) / u64::from(from)) as usize;
    let step = f64::from(from) / f64::from(to);
    (0..n)
        .map(|i| {
            let at = i as f64 * step;
            let k = at.floor() as usize;
            let (a, b) = (
                samples[k.min(samples.len() - 1)],
                samples[(k + 1).min(samples.len() - 1)],
            );
            a + (b - a) * (at - k as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_16_khz_clip_is_spoken_at_24_khz_with_its_length_kept() {
        let clip = &generated_clips(1, 2.0, 2.0, 7)[0];
        let pcm = PcmClip::of(clip).unwrap();
        assert_eq!(pcm.pcm.len(), 2 * 48_000, "two seconds at 24 kHz, 16-bit");
        assert!((pcm.seconds - clip.seconds).abs() < 1e-9);
        // The tone survives: the samples are not all silence, nor clipped.
        let peak = pcm
            .pcm
            .chunks(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]).unsigned_abs())
            .max()
            .unwrap();
        assert!((5_000..=6_001).contains(&peak), "{peak}");
    }

    #[test]
    fn generated_clips_have_their_stated_lengths_and_are_reproducible() {
        let clips = generated_clips(20, 1.0, 9.0, 42);
        for clip in &clips {
            assert!((1.0..=9.0).contains(&clip.seconds));
            assert!((wav_seconds(&clip.wav).unwrap() - clip.seconds).abs() < 1e-9);
        }
        assert_eq!(clips, generated_clips(20, 1.0, 9.0, 42));
        assert_ne!(clips[0].seconds, clips[1].seconds);
    }

    #[test]
    fn a_directory_gives_its_wavs_or_names_what_is_wrong() {
        let dir = std::env::temp_dir().join(format!("redline-clips-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(
            clips_from_dir(&dir),
            Err(ClipError::Empty(dir.display().to_string()))
        );
        std::fs::write(dir.join("b.wav"), &generated_clips(1, 2.0, 2.0, 1)[0].wav).unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let clips = clips_from_dir(&dir).unwrap();
        assert_eq!((clips.len(), clips[0].name.as_str()), (1, "b.wav"));
        assert!((clips[0].seconds - 2.0).abs() < 1e-9);
        std::fs::write(dir.join("a.wav"), "text, not audio").unwrap();
        let error = clips_from_dir(&dir).unwrap_err().to_string();
        assert!(error.contains("a.wav is not a WAV file"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = clips_from_dir(&dir).unwrap_err().to_string();
        assert!(
            missing.starts_with("cannot read the audio directory"),
            "{missing}"
        );
    }
}
