//! WAV headers: how long a clip is, without decoding its samples.

use std::io::Cursor;

/// Seconds of audio in a WAV file, from its header (the samples are not decoded).
pub fn wav_seconds(bytes: &[u8]) -> Result<f64, hound::Error> {
    let reader = hound::WavReader::new(Cursor::new(bytes))?;
    let rate = reader.spec().sample_rate;
    if rate == 0 {
        return Err(hound::Error::FormatError("a sample rate of 0"));
    }
    Ok(f64::from(reader.duration()) / f64::from(rate))
}
