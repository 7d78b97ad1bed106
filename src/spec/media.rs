//! What image, transcription and speech requests send (`payloadTemplate.image`,
//! `.audio`, `.speech`), for `api: images`, `transcriptions` and `speech` services.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One share of a mix: a service (whose `api` says what it is sent) and its weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixEntrySpec {
    /// A service under `spec.services`.
    pub service: String,
    /// Its share of the arrivals, relative to the others' (default 1).
    #[serde(default = "one")]
    pub weight: u32,
}

/// Image generation (`POST /v1/images/generations`); the prompts come from
/// `payloadTemplate.prompts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// `WIDTHxHEIGHT` (default `1024x1024`).
    #[serde(default = "default_size")]
    pub size: String,
    /// Images per request (default 1).
    #[serde(default = "one")]
    pub n: u32,
    /// `b64_json` (default: each image is decoded and its size checked) or `url`
    /// (the URLs are counted, not fetched).
    #[serde(default = "b64_json")]
    pub response_format: String,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            size: default_size(),
            n: 1,
            response_format: b64_json(),
        }
    }
}

/// Audio transcription (`POST /v1/audio/transcriptions`, multipart): the clips to send,
/// one per request in turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AudioSpec {
    /// A directory of `.wav` files (relative to the spec), sent in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Or clips redline generates: `count` tones of lengths drawn from `seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clips: Option<ClipsSpec>,
    /// The clips' language (ISO-639-1), sent as `language` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// `json` (default), `verbose_json` or `text`.
    #[serde(default = "json_format")]
    pub response_format: String,
    /// Ask for the transcript as it is made (`stream=true`, server-sent events): the
    /// first text's time is the record's first token.
    #[serde(default)]
    pub stream: bool,
}

/// Generated clips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClipsSpec {
    /// How many distinct clips (default 16).
    #[serde(default = "sixteen")]
    pub count: u32,
    /// Their lengths in seconds, drawn uniformly: `{ min: 2, max: 30 }`.
    pub seconds: SecondsRange,
}

/// A range of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecondsRange {
    pub min: f64,
    pub max: f64,
}

/// Speech synthesis (`POST /v1/audio/speech`); the text comes from
/// `payloadTemplate.prompts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeechSpec {
    /// The voice (default `alloy`).
    #[serde(default = "alloy")]
    pub voice: String,
    /// `wav` (default) or `pcm` (24 kHz 16-bit mono): formats whose length redline
    /// reads without decoding.
    #[serde(default = "wav")]
    pub response_format: String,
    /// 0.25 to 4.0, sent when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<f64>,
}

impl Default for SpeechSpec {
    fn default() -> Self {
        SpeechSpec {
            voice: alloy(),
            response_format: wav(),
            speed: None,
        }
    }
}

/// A Realtime session (`api: realtime`): it speaks a clip of `payloadTemplate.audio`
/// into the input buffer at real time, or types a prompt of `payloadTemplate.prompts`,
/// and asks for one response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RealtimeSpec {
    /// The answer's modality: `audio` (default: speech and its transcript) or `text`.
    #[serde(default = "audio")]
    pub output: String,
    /// Ask for the spoken input's transcript (default true; audio input only).
    #[serde(default = "yes")]
    pub transcribe: bool,
    /// Milliseconds of audio per `input_audio_buffer.append`, one sent every this long
    /// (default 100).
    #[serde(default = "hundred")]
    pub chunk_ms: u32,
    /// The answer's limit, sent as `max_output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

impl Default for RealtimeSpec {
    fn default() -> Self {
        RealtimeSpec {
            output: audio(),
            transcribe: true,
            chunk_ms: hundred(),
            max_output_tokens: None,
        }
    }
}

fn audio() -> String {
    "audio".into()
}
fn yes() -> bool {
    true
}
fn hundred() -> u32 {
    100
}
fn default_size() -> String {
    "1024x1024".into()
}
fn one() -> u32 {
    1
}
fn sixteen() -> u32 {
    16
}
fn b64_json() -> String {
    "b64_json".into()
}
fn json_format() -> String {
    "json".into()
}
fn alloy() -> String {
    "alloy".into()
}
fn wav() -> String {
    "wav".into()
}
