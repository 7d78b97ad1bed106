//! Image, transcription and speech workloads: `payloadTemplate.image`, `.audio` and
//! `.speech`, checked against the service's API.

use std::path::Path;
use std::sync::Arc;

use crate::client::media::{MediaRequest, RealtimeRequest};
use crate::spec::media::{AudioSpec, ImageSpec, RealtimeSpec, SpeechSpec};
use crate::spec::{ApiKind, PayloadTemplate, Problems};
use crate::workload::PromptSource;
use crate::workload::media::{Clip, PcmClip, clips_from_dir, generated_clips};

/// What each media request sends.
#[derive(Debug, Clone)]
pub struct MediaWorkload {
    pub request: MediaRequest,
    pub input: MediaSource,
}

/// Where each request's input comes from.
#[derive(Debug, Clone)]
pub enum MediaSource {
    /// The prompt (images) or the text to read (speech).
    Prompts(PromptSource),
    /// Clips to transcribe, request `i` sending clip `i mod len`.
    Clips(Arc<Vec<Clip>>),
    /// Clips a Realtime session speaks, likewise.
    Pcm(Arc<Vec<PcmClip>>),
}

/// Whether a service of this API takes media requests.
pub fn is_media(api: ApiKind) -> bool {
    matches!(
        api,
        ApiKind::Images | ApiKind::Transcriptions | ApiKind::Speech | ApiKind::Realtime
    )
}

/// The media sections a template gives that none of its APIs uses, each reported.
pub fn check_unused_sections(
    template: &PayloadTemplate,
    apis: &[ApiKind],
    problems: &mut Problems,
) {
    let sections = [
        ("image", template.image.is_some(), ApiKind::Images),
        ("audio", template.audio.is_some(), ApiKind::Transcriptions),
        ("speech", template.speech.is_some(), ApiKind::Speech),
        ("realtime", template.realtime.is_some(), ApiKind::Realtime),
        ("mcp", template.mcp.is_some(), ApiKind::Mcp),
    ];
    for (name, given, owner) in sections {
        // A Realtime session speaks the clips of `audio` too.
        let also = (name == "audio").then_some(ApiKind::Realtime);
        if given && !apis.contains(&owner) && !also.is_some_and(|a| apis.contains(&a)) {
            let owner = crate::scenario::flow::api_name(owner);
            problems.add(
                &format!("spec.payloadTemplate.{name}"),
                format!("applies only to `api: {owner}` services"),
                Some(format!(
                    "set `api: {owner}` on the service, or remove `{name}`"
                )),
            );
        }
    }
}

/// The request a media API sends, or `None` after reporting why not. `prompts` is
/// the validated prompt source, which images and speech need and transcription
/// refuses.
pub fn media_workload(
    api: ApiKind,
    template: &PayloadTemplate,
    prompts: Option<PromptSource>,
    spec_dir: &Path,
    seed: u64,
    problems: &mut Problems,
) -> Option<MediaWorkload> {
    if api == ApiKind::Realtime {
        return realtime_workload(template, prompts, spec_dir, seed, problems);
    }
    let needs_prompts = api != ApiKind::Transcriptions;
    match (needs_prompts, template.prompts.is_some()) {
        (true, false) => {
            problems.add(
                "spec.payloadTemplate.prompts",
                format!(
                    "an `api: {}` service needs prompts: the text of each request",
                    crate::scenario::flow::api_name(api)
                ),
                Some(
                    "add e.g. `prompts: { synthetic: { input_tokens: 24, output_tokens: 1 } }`"
                        .into(),
                ),
            );
            return None;
        }
        // In a mix the prompts are the other services'.
        (false, true) if template.mix.is_empty() => {
            problems.add(
                "spec.payloadTemplate.prompts",
                "does not apply to `api: transcriptions`: each request sends a clip".into(),
                Some("remove `prompts`; `audio` gives the clips".into()),
            );
            return None;
        }
        _ => {}
    }
    let request = match api {
        ApiKind::Images => image_request(template.image.clone().unwrap_or_default(), problems),
        ApiKind::Speech => speech_request(template.speech.clone().unwrap_or_default(), problems),
        _ => {
            let Some(audio) = &template.audio else {
                problems.add(
                    "spec.payloadTemplate.audio",
                    "an `api: transcriptions` service needs clips to send".into(),
                    Some("add `audio: { dir: clips/ }` or `audio: { clips: { count: 16, seconds: { min: 2, max: 30 } } }`".into()),
                );
                return None;
            };
            let request = transcription_request(audio, problems);
            let clips = clips(audio, spec_dir, seed, problems)?;
            return request.map(|request| MediaWorkload {
                request,
                input: MediaSource::Clips(Arc::new(clips)),
            });
        }
    }?;
    Some(MediaWorkload {
        request,
        input: MediaSource::Prompts(prompts?),
    })
}

/// A Realtime session's request, and what it says: the clips of `audio`, spoken,
/// else the prompts, typed.
fn realtime_workload(
    template: &PayloadTemplate,
    prompts: Option<PromptSource>,
    spec_dir: &Path,
    seed: u64,
    problems: &mut Problems,
) -> Option<MediaWorkload> {
    let spec = template.realtime.clone().unwrap_or_default();
    let request = realtime_request(&spec, template.audio.is_some(), problems);
    let input = match (&template.audio, prompts) {
        (Some(_), Some(_)) if template.mix.is_empty() => {
            problems.add(
                "spec.payloadTemplate",
                "an `api: realtime` session speaks `audio` or types `prompts`, not both".into(),
                Some("remove one of `audio` and `prompts`".into()),
            );
            return None;
        }
        (Some(audio), _) => {
            let clips = clips(audio, spec_dir, seed, problems)?;
            let spoken: Result<Vec<PcmClip>, _> = clips.iter().map(PcmClip::of).collect();
            let spoken = spoken
                .map_err(|e| problems.add("spec.payloadTemplate.audio", e.to_string(), None))
                .ok()?;
            MediaSource::Pcm(Arc::new(spoken))
        }
        (None, Some(prompts)) => MediaSource::Prompts(prompts),
        (None, None) => {
            problems.add(
                "spec.payloadTemplate",
                "an `api: realtime` session needs something to say".into(),
                Some("add `audio: { clips: { count: 8, seconds: { min: 2, max: 6 } } }` to speak, or `prompts` to type".into()),
            );
            return None;
        }
    };
    Some(MediaWorkload {
        request: request?,
        input,
    })
}

fn realtime_request(
    spec: &RealtimeSpec,
    spoken: bool,
    problems: &mut Problems,
) -> Option<MediaRequest> {
    let output = one_of(
        &spec.output,
        &["audio", "text"],
        "realtime.output",
        problems,
    )?;
    if !(10..=5_000).contains(&spec.chunk_ms) {
        problems.add(
            "spec.payloadTemplate.realtime.chunk_ms",
            format!("must be 10 to 5000 ms, got {}", spec.chunk_ms),
            None,
        );
        return None;
    }
    Some(MediaRequest::Realtime(RealtimeRequest {
        audio_out: output == "audio",
        transcribe: spec.transcribe && spoken,
        chunk: std::time::Duration::from_millis(u64::from(spec.chunk_ms)),
        max_output_tokens: spec.max_output_tokens,
    }))
}

fn image_request(spec: ImageSpec, problems: &mut Problems) -> Option<MediaRequest> {
    let size = spec.size.split_once('x').and_then(|(w, h)| {
        let (w, h): (u32, u32) = (w.parse().ok()?, h.parse().ok()?);
        (w > 0 && h > 0).then_some((w, h))
    });
    let Some((width, height)) = size else {
        problems.add(
            "spec.payloadTemplate.image.size",
            format!("`{}` is not WIDTHxHEIGHT", spec.size),
            Some("e.g. `size: 1024x1024`".into()),
        );
        return None;
    };
    if !(1..=10).contains(&spec.n) {
        problems.add(
            "spec.payloadTemplate.image.n",
            format!("must be 1 to 10 images, got {}", spec.n),
            None,
        );
        return None;
    }
    let b64 = one_of(
        &spec.response_format,
        &["b64_json", "url"],
        "image.response_format",
        problems,
    )? == "b64_json";
    Some(MediaRequest::Image {
        size: spec.size,
        width,
        height,
        n: spec.n,
        b64,
    })
}

fn speech_request(spec: SpeechSpec, problems: &mut Problems) -> Option<MediaRequest> {
    one_of(
        &spec.response_format,
        &["wav", "pcm"],
        "speech.response_format",
        problems,
    )?;
    if let Some(speed) = spec.speed
        && !(0.25..=4.0).contains(&speed)
    {
        problems.add(
            "spec.payloadTemplate.speech.speed",
            format!("must be 0.25 to 4.0, got {speed}"),
            None,
        );
        return None;
    }
    Some(MediaRequest::Speech {
        voice: spec.voice,
        response_format: spec.response_format,
        speed: spec.speed,
    })
}

fn transcription_request(spec: &AudioSpec, problems: &mut Problems) -> Option<MediaRequest> {
    let formats = ["json", "verbose_json", "text"];
    one_of(
        &spec.response_format,
        &formats,
        "audio.response_format",
        problems,
    )?;
    if spec.stream && spec.response_format == "verbose_json" {
        problems.add(
            "spec.payloadTemplate.audio.stream",
            "a streamed transcript comes as text: `verbose_json` cannot be streamed".into(),
            Some("use `response_format: json` with `stream: true`".into()),
        );
        return None;
    }
    Some(MediaRequest::Transcription {
        language: spec.language.clone(),
        response_format: spec.response_format.clone(),
        stream: spec.stream,
    })
}

/// `value` when it is one of `allowed`; else reported at `payloadTemplate.<field>`.
fn one_of<'a>(
    value: &'a str,
    allowed: &[&str],
    field: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    if allowed.contains(&value) {
        return Some(value);
    }
    problems.add(
        &format!("spec.payloadTemplate.{field}"),
        format!("`{value}` is not one of {}", allowed.join(", ")),
        None,
    );
    None
}

/// The clips of `audio`: its directory's, or generated.
fn clips(
    audio: &AudioSpec,
    spec_dir: &Path,
    seed: u64,
    problems: &mut Problems,
) -> Option<Vec<Clip>> {
    match (&audio.dir, &audio.clips) {
        (Some(dir), None) => clips_from_dir(&spec_dir.join(dir))
            .map_err(|e| problems.add("spec.payloadTemplate.audio.dir", e.to_string(), None))
            .ok(),
        (None, Some(clips)) => {
            let (min, max) = (clips.seconds.min, clips.seconds.max);
            if clips.count == 0 || !(min > 0.0 && min <= max && max <= 3600.0) {
                problems.add(
                    "spec.payloadTemplate.audio.clips",
                    format!("needs count >= 1 and 0 < min <= max <= 3600 seconds, got count {}, min {min}, max {max}", clips.count),
                    None,
                );
                return None;
            }
            Some(generated_clips(clips.count, min, max, seed))
        }
        _ => {
            problems.add(
                "spec.payloadTemplate.audio",
                "needs exactly one of `dir` and `clips`".into(),
                Some("`dir: clips/` sends your WAV files; `clips: { count: 16, seconds: { min: 2, max: 30 } }` generates some".into()),
            );
            None
        }
    }
}
