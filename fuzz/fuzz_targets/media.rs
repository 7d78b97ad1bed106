//! What a hostile server or gauge controls in media runs: a speech answer's WAV
//! header (read for the clip's length) and a gauge's text (read for the GPU's memory
//! use). Each is a value or a named error, never a panic; a usage is a share in [0, 1].
#![no_main]

use libfuzzer_sys::fuzz_target;
use redline::runner::feedback::parse_usage;
use redline::spec::feedback::GpuReduce;
use redline::workload::media::wav_seconds;

fuzz_target!(|input: &[u8]| {
    if let Ok(seconds) = wav_seconds(input) {
        assert!(seconds.is_finite() && seconds >= 0.0, "{seconds}");
    }
    let text = String::from_utf8_lossy(input);
    for reduce in [GpuReduce::Sum, GpuReduce::Max] {
        if let Ok(u) = parse_usage(&text, reduce) {
            assert!((0.0..=1.0).contains(&u), "{u} from {text:?}");
        }
    }
});
