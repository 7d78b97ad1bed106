//! Engine profiles: the capacity limits and the step-time model of a simulated server.
//!
//! A step of a continuous-batching engine runs one forward pass over every scheduled
//! token. Its duration is modelled as a sum of terms, each with a physical reason:
//!
//! ```text
//! step = base                                   weights streamed once per step
//!      + per_prefill_token  × prefill tokens    linear layers over new prompt tokens
//!      + per_prefill_seq    × sequences starting prefill (input processing, admission)
//!      + prefill_attention  × Σ chunk × context (attention of prompt tokens, quadratic)
//!      + per_decode_seq     × decoding sequences (sampling, per-sequence work)
//!      + per_decode_kctx    × context held by decoding sequences / 1000  (KV reads)
//! ```
//!
//! The `7b` profile's coefficients are fitted to the source document's table (chapter
//! 2.2); `docs/simulator.md` shows the fit and how the table's figures relate.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A simulated server: capacity limits plus step-time coefficients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Name reported in logs and `/v1/models`.
    pub name: String,
    /// Model name served when none is given on the command line.
    pub model: String,
    /// Tokens per KV-cache block (vLLM's `--block-size`).
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// KV-cache blocks available (vLLM's `num_gpu_blocks`).
    pub num_blocks: u32,
    /// Most sequences running at once (vLLM's `--max-num-seqs`).
    pub max_num_seqs: u32,
    /// Most tokens computed in one step (vLLM's `--max-num-batched-tokens`); longer
    /// prompts are prefilled in chunks.
    pub max_num_batched_tokens: u32,
    /// Longest prompt plus output, in tokens (vLLM's `--max-model-len`).
    pub max_model_len: u32,
    /// Step-time coefficients.
    pub step: StepCost,
    /// Length of an answer when the request sets no `max_tokens`: drawn uniformly from
    /// this range (inclusive) per prompt, ending with `finish_reason: stop`.
    #[serde(default = "default_natural_length")]
    pub natural_length: [u32; 2],
    /// Reasoning tokens the model thinks before every answer of the APIs that stream
    /// reasoning (chat, Responses, Messages with thinking); a request may ask for
    /// fewer or none. 0: a model that does not reason.
    #[serde(default)]
    pub reasoning_tokens: u32,
    /// Embedding endpoint: dimension when the request asks for none.
    #[serde(default = "default_embedding_dim")]
    pub embedding_dim: u32,
    /// Embedding endpoint latency: fixed part, milliseconds.
    #[serde(default)]
    pub embedding_base_ms: f64,
    /// Embedding endpoint latency: per input token, microseconds.
    #[serde(default)]
    pub embedding_per_token_us: f64,
    /// Which real server's API quirks to reproduce.
    #[serde(default)]
    pub server: ServerKind,
    /// The image, transcription and speech endpoints' timing.
    #[serde(default)]
    pub media: MediaCost,
    /// One GPU's memory, shared by every modality, when set (`7b-multimodal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<super::gpu::GpuSpec>,
    /// Known differences from this profile's answers (a candidate for a shadow diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planted: Option<super::planted::Planted>,
}

/// How long the image, transcription and speech endpoints take: plain functions of
/// what is asked, so a test can compute what redline should measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaCost {
    /// Image generation: fixed part, milliseconds.
    pub image_base_ms: f64,
    /// Image generation: per megapixel of each image, milliseconds.
    pub image_per_megapixel_ms: f64,
    /// Transcription: fixed part, milliseconds.
    pub transcribe_base_ms: f64,
    /// Transcription: per second of audio, milliseconds (for long clips the RTFx tends
    /// to 1000 / this).
    pub transcribe_per_audio_second_ms: f64,
    /// Speech: send to the first audio byte, milliseconds.
    pub speech_first_byte_ms: f64,
    /// Speech: seconds of audio made per second once it flows.
    pub speech_realtime_factor: f64,
    /// Words per second of speech, both ways: a transcript's length and a synthesised
    /// clip's duration.
    pub words_per_second: f64,
}

impl Default for MediaCost {
    /// Scaled-down figures of SDXL, Whisper large-v3 and a TTS model on one GPU, so a
    /// demo runs in seconds: 0.4 s for a 1024×1024 image, RTFx ~50, speech at 10×.
    fn default() -> Self {
        MediaCost {
            image_base_ms: 60.0,
            image_per_megapixel_ms: 320.0,
            transcribe_base_ms: 40.0,
            transcribe_per_audio_second_ms: 20.0,
            speech_first_byte_ms: 80.0,
            speech_realtime_factor: 10.0,
            words_per_second: 2.5,
        }
    }
}

impl MediaCost {
    /// Generating `n` images of `width` × `height`.
    pub fn image_time(&self, width: u32, height: u32, n: u32) -> Duration {
        let megapixels = f64::from(width) * f64::from(height) / 1e6;
        millis(self.image_base_ms + self.image_per_megapixel_ms * megapixels * f64::from(n))
    }

    /// Transcribing a clip of `audio_seconds`.
    pub fn transcribe_time(&self, audio_seconds: f64) -> Duration {
        millis(self.transcribe_base_ms + self.transcribe_per_audio_second_ms * audio_seconds)
    }

    fn check(&self) -> Result<(), String> {
        let all = [
            self.image_base_ms,
            self.image_per_megapixel_ms,
            self.transcribe_base_ms,
            self.transcribe_per_audio_second_ms,
            self.speech_first_byte_ms,
        ];
        if all.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err("media costs must be finite and non-negative".into());
        }
        let rates = [self.speech_realtime_factor, self.words_per_second];
        if rates.iter().any(|r| !r.is_finite() || *r <= 0.0) {
            return Err("speech_realtime_factor and words_per_second must be positive".into());
        }
        Ok(())
    }
}

fn millis(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1e3)
}

/// The API behaviour of a simulated server, beside its engine model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// vLLM's: `usage` in streams when asked (`stream_options.include_usage`).
    #[default]
    Vllm,
    /// llama.cpp's (and llama-cpp-python's): no `usage` in streams whatever is asked,
    /// and the server's tokenizer at `POST /tokenize` (`{"content"}`) and
    /// `POST /extras/tokenize` (`{"input"}`), answering `{"tokens": [...]}`.
    Llamacpp,
}

/// Coefficients of the step-time model; every term is documented on [`Profile`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCost {
    /// Fixed time of any step, milliseconds.
    pub base_ms: f64,
    /// Per prompt token computed in the step, microseconds.
    pub per_prefill_token_us: f64,
    /// Per sequence whose prefill starts in the step, milliseconds.
    pub per_prefill_seq_ms: f64,
    /// Per (prompt token × context token) / 10⁶ computed in the step, milliseconds.
    #[serde(default)]
    pub prefill_attention_ms: f64,
    /// Per decoding sequence, microseconds.
    pub per_decode_seq_us: f64,
    /// Per 1,000 context tokens read by decoding sequences, microseconds.
    pub per_decode_kctx_us: f64,
}

/// What one step computes, as the step-time model needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    pub prefill_tokens: u64,
    pub prefill_seqs_started: u64,
    /// Σ over prefill chunks of chunk length × mean context position of the chunk.
    pub prefill_attention: f64,
    pub decode_seqs: u64,
    pub decode_context_tokens: u64,
}

impl StepShape {
    pub fn is_empty(&self) -> bool {
        self.prefill_tokens == 0 && self.decode_seqs == 0
    }
}

/// Errors loading a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("unknown profile `{0}`: choose from {choices}, or give a path to a YAML/JSON profile file", choices = BUILTIN_NAMES.join(", "))]
    Unknown(String),
    #[error("cannot read profile file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid profile file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("invalid profile {name}: {reason}")]
    Invalid { name: String, reason: String },
}

/// Names of the built-in profiles.
pub const BUILTIN_NAMES: &[&str] = &["7b", "7b-multimodal", "tiny", "llamacpp"];

fn default_block_size() -> u32 {
    16
}
fn default_natural_length() -> [u32; 2] {
    [16, 256]
}
fn default_embedding_dim() -> u32 {
    384
}

impl Profile {
    /// A 7B model on one data-centre GPU, fitted to the source document's table.
    pub fn seven_b() -> Profile {
        Profile {
            name: "7b".into(),
            model: "sim-7b".into(),
            block_size: 16,
            // 7B fp16 on an 80 GB GPU leaves ~58 GB for KV at 0.5 MB per token.
            num_blocks: 7_000,
            max_num_seqs: 256,
            max_num_batched_tokens: 8_192,
            max_model_len: 8_192,
            step: StepCost {
                base_ms: 12.2,
                per_prefill_token_us: 11.6,
                per_prefill_seq_ms: 3.1,
                prefill_attention_ms: 0.0,
                per_decode_seq_us: 50.0,
                per_decode_kctx_us: 55.0,
            },
            natural_length: default_natural_length(),
            reasoning_tokens: 0,
            embedding_dim: default_embedding_dim(),
            embedding_base_ms: 4.0,
            embedding_per_token_us: 20.0,
            server: ServerKind::Vllm,
            media: MediaCost::default(),
            gpu: None,
            planted: None,
        }
    }

    /// `7b` sharing one 80 GB GPU with image and audio models, with the source
    /// document's footprints: 12 GB a text request, 8 GB an image, 6 GB a
    /// transcription, +37 % when all three run together.
    pub fn seven_b_multimodal() -> Profile {
        Profile {
            name: "7b-multimodal".into(),
            gpu: Some(super::gpu::GpuSpec::default()),
            ..Profile::seven_b()
        }
    }

    /// llama.cpp's server with a small model on a CPU (PEERS.md: Gemma 3 270M on two
    /// cores): one request at a time, ~60 output tokens/s, ~250 ms to prefill a
    /// 64-token prompt, no usage in streams, a `/tokenize` endpoint.
    pub fn llamacpp() -> Profile {
        Profile {
            name: "llamacpp".into(),
            model: "sim-llamacpp".into(),
            block_size: 16,
            num_blocks: 256,
            max_num_seqs: 1,
            max_num_batched_tokens: 4_096,
            max_model_len: 4_096,
            step: StepCost {
                base_ms: 16.0,
                per_prefill_token_us: 3_700.0,
                per_prefill_seq_ms: 0.0,
                prefill_attention_ms: 0.0,
                per_decode_seq_us: 0.0,
                per_decode_kctx_us: 10.0,
            },
            natural_length: default_natural_length(),
            reasoning_tokens: 0,
            embedding_dim: default_embedding_dim(),
            embedding_base_ms: 4.0,
            embedding_per_token_us: 20.0,
            server: ServerKind::Llamacpp,
            media: MediaCost::default(),
            gpu: None,
            planted: None,
        }
    }

    /// A fast profile for tests and demos: steps of about a millisecond.
    pub fn tiny() -> Profile {
        Profile {
            name: "tiny".into(),
            model: "sim-tiny".into(),
            block_size: 16,
            num_blocks: 8_192,
            max_num_seqs: 256,
            max_num_batched_tokens: 4_096,
            max_model_len: 8_192,
            step: StepCost {
                base_ms: 1.0,
                per_prefill_token_us: 0.5,
                per_prefill_seq_ms: 0.05,
                prefill_attention_ms: 0.0,
                per_decode_seq_us: 2.0,
                per_decode_kctx_us: 1.0,
            },
            natural_length: [8, 64],
            reasoning_tokens: 0,
            embedding_dim: default_embedding_dim(),
            embedding_base_ms: 0.5,
            embedding_per_token_us: 1.0,
            server: ServerKind::Vllm,
            media: MediaCost::default(),
            gpu: None,
            planted: None,
        }
    }

    /// A built-in profile by name, or a YAML/JSON file by path.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        let profile = match name_or_path {
            "7b" => Profile::seven_b(),
            "7b-multimodal" => Profile::seven_b_multimodal(),
            "tiny" => Profile::tiny(),
            "llamacpp" => Profile::llamacpp(),
            path if Path::new(path).is_file() => {
                let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
                    path: path.into(),
                    source,
                })?;
                yaml_serde::from_str(&text).map_err(|source| ProfileError::Parse {
                    path: path.into(),
                    source,
                })?
            }
            other => return Err(ProfileError::Unknown(other.into())),
        };
        profile.validate()?;
        Ok(profile)
    }

    /// Checks the limits are usable: a profile that cannot hold one full-length
    /// sequence would make requests wait forever.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let invalid = |reason: String| ProfileError::Invalid {
            name: self.name.clone(),
            reason,
        };
        if self.block_size == 0 || self.max_num_seqs == 0 || self.max_num_batched_tokens == 0 {
            return Err(invalid(
                "block_size, max_num_seqs and max_num_batched_tokens must be positive".into(),
            ));
        }
        let blocks_for_longest = self.max_model_len.div_ceil(self.block_size);
        if self.num_blocks < blocks_for_longest {
            return Err(invalid(format!(
                "num_blocks {} cannot hold one sequence of max_model_len {} ({blocks_for_longest} blocks of {}); raise num_blocks or lower max_model_len",
                self.num_blocks, self.max_model_len, self.block_size
            )));
        }
        let [low, high] = self.natural_length;
        if low == 0 || low > high {
            return Err(invalid(format!(
                "natural_length must be [min, max] with 1 <= min <= max, got [{low}, {high}]"
            )));
        }
        let costs = [
            self.step.base_ms,
            self.step.per_prefill_token_us,
            self.step.per_prefill_seq_ms,
            self.step.prefill_attention_ms,
            self.step.per_decode_seq_us,
            self.step.per_decode_kctx_us,
            self.embedding_base_ms,
            self.embedding_per_token_us,
        ];
        if costs.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err(invalid("step costs must be finite and non-negative".into()));
        }
        self.media.check().map_err(&invalid)?;
        if let Some(planted) = &self.planted {
            planted.check().map_err(&invalid)?;
        }
        self.gpu
            .as_ref()
            .map_or(Ok(()), |g| g.check().map_err(invalid))
    }

    /// Duration of a step of the given shape, in nanoseconds.
    pub fn step_nanos(&self, shape: &StepShape) -> u64 {
        let c = &self.step;
        let ms = c.base_ms
            + c.per_prefill_token_us * shape.prefill_tokens as f64 / 1e3
            + c.per_prefill_seq_ms * shape.prefill_seqs_started as f64
            + c.prefill_attention_ms * shape.prefill_attention / 1e6
            + c.per_decode_seq_us * shape.decode_seqs as f64 / 1e3
            + c.per_decode_kctx_us * shape.decode_context_tokens as f64 / 1e6;
        (ms * 1e6).round() as u64
    }

    /// Embedding latency for a request of `tokens` input tokens, in nanoseconds.
    pub fn embedding_nanos(&self, tokens: usize) -> u64 {
        let ms = self.embedding_base_ms + self.embedding_per_token_us * tokens as f64 / 1e3;
        (ms * 1e6).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid() {
        for name in BUILTIN_NAMES {
            Profile::load(name).unwrap();
        }
    }

    #[test]
    fn unknown_name_lists_the_choices() {
        let err = Profile::load("13b").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown profile `13b`: choose from 7b, 7b-multimodal, tiny, llamacpp, or give a path to a YAML/JSON profile file"
        );
    }

    #[test]
    fn a_profile_file_round_trips_and_is_validated() {
        let dir = std::env::temp_dir().join(format!("redline-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.yaml");
        let mut profile = Profile::tiny();
        profile.name = "custom".into();
        std::fs::write(&path, yaml_serde::to_string(&profile).unwrap()).unwrap();
        assert_eq!(Profile::load(path.to_str().unwrap()).unwrap(), profile);

        profile.num_blocks = 3;
        std::fs::write(&path, yaml_serde::to_string(&profile).unwrap()).unwrap();
        let err = Profile::load(path.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("num_blocks 3 cannot hold one sequence"),
            "{err}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn decode_step_of_the_7b_profile_matches_the_table_scale() {
        let p = Profile::seven_b();
        let shape = StepShape {
            decode_seqs: 8,
            decode_context_tokens: 8 * 256,
            ..StepShape::default()
        };
        let ms = p.step_nanos(&shape) as f64 / 1e6;
        assert!((ms - 12.7).abs() < 0.5, "{ms}");
    }
}
