//! The simulator's image, transcription and speech endpoints, in OpenAI's shapes:
//! `POST /v1/images/generations`, `POST /v1/audio/transcriptions` (multipart) and
//! `POST /v1/audio/speech`. Each takes the time [`MediaCost`] says, so a test knows
//! what redline should measure; the answers are real files (PNG, WAV) that any
//! decoder reads.

use std::io::Cursor;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::StreamExt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::answer::{error_response, json_response};
use super::openai::{self, ApiError};
use super::profile::MediaCost;
use super::state::SimState;
use redline_base::seed::{fnv64, mix_seed};
use redline_base::sim_tokenizer::WORDS;
use redline_base::wav::wav_seconds;

/// Sample rate of synthesised speech (OpenAI's `pcm` is 24 kHz, 16-bit, mono).
pub const SPEECH_SAMPLE_RATE: u32 = 24_000;
/// Audio sent in each piece of a speech answer.
const SPEECH_CHUNK: Duration = Duration::from_millis(100);
/// The largest image side served, as OpenAI's largest sizes.
const MAX_SIDE: u32 = 2048;
/// Longest speech input, in characters (OpenAI's limit).
const MAX_SPEECH_CHARS: usize = 4096;

#[derive(serde::Deserialize)]
struct ImageRequest {
    prompt: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    response_format: Option<String>,
    // Accepted and ignored, as a server that does not use them would.
    #[serde(default, rename = "quality")]
    _quality: Option<Value>,
    #[serde(default, rename = "style")]
    _style: Option<Value>,
    #[serde(default, rename = "user")]
    _user: Option<Value>,
}

/// `POST /v1/images/generations`: `n` PNG images of `size`, as base64 or as URLs of
/// this server's `/redline/images/…` (generated again on request, so nothing is kept).
pub async fn images(
    State(state): State<std::sync::Arc<SimState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let request: ImageRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    let checked = check_image_request(&request, state.model());
    let (width, height, n, as_url) = match checked {
        Ok(shape) => shape,
        Err(e) => return error_response(e),
    };
    let seed = mix_seed(&[state.seed(), fnv64(request.prompt.as_bytes())]);
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    let data = tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|i| {
                let image_seed = mix_seed(&[seed, u64::from(i)]);
                if as_url {
                    let url =
                        format!("http://{host}/redline/images/{width}x{height}/{image_seed}.png");
                    json!({ "url": url })
                } else {
                    let png = png_image(width, height, image_seed);
                    json!({ "b64_json": base64::engine::general_purpose::STANDARD.encode(png) })
                }
            })
            .collect::<Vec<Value>>()
    })
    .await
    .expect("making an image does not panic");
    tokio::time::sleep_until((started + state.profile().media.image_time(width, height, n)).into())
        .await;
    json_response(
        StatusCode::OK,
        &json!({ "created": unix_seconds(), "data": data }),
    )
}

/// (width, height, n, answer with URLs) of a valid request.
fn check_image_request(
    request: &ImageRequest,
    served: &str,
) -> Result<(u32, u32, u32, bool), ApiError> {
    openai::check_model(request.model.as_deref(), served)?;
    if request.prompt.trim().is_empty() {
        return Err(ApiError::bad_request("prompt must not be empty"));
    }
    let n = request.n.unwrap_or(1);
    if !(1..=10).contains(&n) {
        return Err(ApiError::bad_request(format!(
            "n must be between 1 and 10, got {n}"
        )));
    }
    let size = request.size.as_deref().unwrap_or("1024x1024");
    let (width, height) = parse_size(size).ok_or_else(|| {
        ApiError::bad_request(format!(
            "invalid size `{size}`: give WIDTHxHEIGHT, each 64 to {MAX_SIDE}"
        ))
    })?;
    let as_url = match request.response_format.as_deref() {
        None | Some("url") => true,
        Some("b64_json") => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid response_format `{other}`: choose from url, b64_json"
            )));
        }
    };
    Ok((width, height, n, as_url))
}

/// `1024x768` → (1024, 768), each side 64 to 2048.
pub fn parse_size(size: &str) -> Option<(u32, u32)> {
    let (w, h) = size.split_once('x')?;
    let (w, h) = (w.parse().ok()?, h.parse().ok()?);
    let fits = |side: u32| (64..=MAX_SIDE).contains(&side);
    (fits(w) && fits(h)).then_some((w, h))
}

/// `GET /redline/images/{W}x{H}/{seed}.png`: the image an URL answer named.
pub async fn image_file(Path((size, file)): Path<(String, String)>) -> Response {
    let seed = file
        .strip_suffix(".png")
        .and_then(|s| s.parse::<u64>().ok());
    let (Some((width, height)), Some(seed)) = (parse_size(&size), seed) else {
        return error_response(ApiError::not_found("no such image"));
    };
    let png = tokio::task::spawn_blocking(move || png_image(width, height, seed))
        .await
        .expect("making an image does not panic");
    ([(header::CONTENT_TYPE, "image/png")], png).into_response()
}

/// A grey PNG of `width` × `height` with a seeded pattern: a real image any decoder
/// reads, cheap to compress.
pub fn png_image(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let shade = (seed % 97) as u32;
    let pixels: Vec<u8> = (0..height)
        .flat_map(|y| (0..width).map(move |x| ((x / 16 + y / 16 + shade) % 256) as u8))
        .collect();
    let mut writer = encoder.write_header().expect("writing to memory");
    writer
        .write_image_data(&pixels)
        .expect("the pixels fit the header");
    writer.finish().expect("writing to memory");
    out
}

/// What a transcription request sent.
#[derive(Default)]
struct TranscriptionForm {
    file: Option<Bytes>,
    model: Option<String>,
    response_format: Option<String>,
    language: Option<String>,
    /// `stream=true`: the transcript as server-sent events.
    stream: bool,
}

/// `POST /v1/audio/transcriptions`: reads the WAV clip, waits the time its length
/// takes, and answers with a seeded transcript of `words_per_second` words a second.
pub async fn transcriptions(
    State(state): State<std::sync::Arc<SimState>>,
    multipart: Multipart,
) -> Response {
    let started = Instant::now();
    let form = match read_form(multipart).await {
        Ok(form) => form,
        Err(e) => return error_response(e),
    };
    match transcribe(&state, &form) {
        Ok((seconds, Transcript::Whole(answer))) => {
            let done = started + state.profile().media.transcribe_time(seconds);
            tokio::time::sleep_until(done.into()).await;
            answer
        }
        Ok((seconds, Transcript::Streamed(text))) => {
            let media = &state.profile().media;
            let first = started + Duration::from_secs_f64(media.transcribe_base_ms / 1e3);
            let done = started + media.transcribe_time(seconds);
            let events = transcript_events(text, seconds, first, done);
            let mut response = Body::from_stream(events).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Err(e) => error_response(e),
    }
}

/// A transcription's answer: whole, or its text to stream.
enum Transcript {
    Whole(Response),
    Streamed(String),
}

/// Words per `transcript.text.delta` event.
const WORDS_PER_DELTA: usize = 4;

/// A transcript in the pieces it streams in, [`WORDS_PER_DELTA`] words each, every
/// piece after the first led by its space.
pub(super) fn transcript_deltas(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
    words
        .chunks(WORDS_PER_DELTA)
        .enumerate()
        .map(|(i, chunk)| {
            let lead = if i == 0 { "" } else { " " };
            format!("{lead}{}", chunk.join(" "))
        })
        .collect()
}

/// The transcript as OpenAI streams it: `transcript.text.delta` events, the first at
/// `first`, the rest spread evenly until `done`, then `transcript.text.done` with the
/// whole text, at `done`.
fn transcript_events(
    text: String,
    seconds: f64,
    first: Instant,
    done: Instant,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let deltas = transcript_deltas(&text);
    let every = done.saturating_duration_since(first) / deltas.len().max(1) as u32;
    let mut events: Vec<(Instant, Value)> = deltas
        .into_iter()
        .enumerate()
        .map(|(i, delta)| {
            let event = json!({"type": "transcript.text.delta", "delta": delta});
            (first + every * i as u32, event)
        })
        .collect();
    let usage = json!({"type": "duration", "seconds": seconds.ceil()});
    events.push((
        done,
        json!({"type": "transcript.text.done", "text": text, "usage": usage}),
    ));
    futures_util::stream::iter(events).then(|(at, event)| async move {
        tokio::time::sleep_until(at.into()).await;
        Ok(Bytes::from(format!("data: {event}\n\n")))
    })
}

async fn read_form(mut multipart: Multipart) -> Result<TranscriptionForm, ApiError> {
    let mut form = TranscriptionForm::default();
    let broken = |e: axum::extract::multipart::MultipartError| {
        ApiError::bad_request(format!("invalid multipart body: {e}"))
    };
    while let Some(field) = multipart.next_field().await.map_err(broken)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "file" => form.file = Some(field.bytes().await.map_err(broken)?),
            "model" => form.model = Some(field.text().await.map_err(broken)?),
            "response_format" => form.response_format = Some(field.text().await.map_err(broken)?),
            "language" => form.language = Some(field.text().await.map_err(broken)?),
            "stream" => form.stream = field.text().await.map_err(broken)? == "true",
            // prompt, temperature, timestamp_granularities[]: read and not used.
            _ => drop(field.bytes().await.map_err(broken)?),
        }
    }
    Ok(form)
}

/// The clip's length in seconds and the answer to send once it is "transcribed".
fn transcribe(state: &SimState, form: &TranscriptionForm) -> Result<(f64, Transcript), ApiError> {
    openai::check_model(form.model.as_deref(), state.model())?;
    let file = form
        .file
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("a `file` field is required"))?;
    let seconds = wav_seconds(file).map_err(|e| {
        ApiError::bad_request(format!(
            "Invalid file format: the simulator reads WAV files only ({e})"
        ))
    })?;
    let media = &state.profile().media;
    let words = (seconds * media.words_per_second).round() as u32;
    let text = transcript(mix_seed(&[state.seed(), fnv64(file)]), words);
    let language = form.language.clone().unwrap_or_else(|| "english".into());
    if form.stream {
        return match form.response_format.as_deref() {
            None | Some("json" | "text") => Ok((seconds, Transcript::Streamed(text))),
            Some(other) => Err(ApiError::bad_request(format!(
                "response_format `{other}` cannot be streamed: use json or text"
            ))),
        };
    }
    let answer = match form.response_format.as_deref() {
        None | Some("json") => json_response(
            StatusCode::OK,
            &json!({ "text": text, "usage": { "type": "duration", "seconds": seconds.ceil() } }),
        ),
        Some("verbose_json") => json_response(
            StatusCode::OK,
            &json!({
                "task": "transcribe", "language": language, "duration": seconds, "text": text,
                "segments": [{ "id": 0, "start": 0.0, "end": seconds, "text": text }],
            }),
        ),
        Some("text") => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "response_format `{other}` is not served by the simulator: choose from json, verbose_json, text"
            )));
        }
    };
    Ok((seconds, Transcript::Whole(answer)))
}

/// `words` of the simulator's vocabulary, seeded.
pub(super) fn transcript(seed: u64, words: u32) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let picked: Vec<&str> = (0..words)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    picked.join(" ")
}

#[derive(serde::Deserialize)]
struct SpeechRequest {
    input: String,
    voice: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    response_format: Option<String>,
    #[serde(default)]
    speed: Option<f64>,
    #[serde(default, rename = "instructions")]
    _instructions: Option<String>,
}

/// `POST /v1/audio/speech`: a WAV (or raw `pcm`) clip of the input read at
/// `words_per_second` × `speed`, its first bytes after `speech_first_byte_ms`, the rest
/// as fast as `speech_realtime_factor` makes it.
pub async fn speech(State(state): State<std::sync::Arc<SimState>>, body: Bytes) -> Response {
    let started = Instant::now();
    let request: SpeechRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    let (wav, content_type) = match speech_format(&request, state.model()) {
        Ok(format) => format,
        Err(e) => return error_response(e),
    };
    let media = state.profile().media.clone();
    let words = request.input.split_whitespace().count().max(1) as f64;
    let seconds = words / media.words_per_second / request.speed.unwrap_or(1.0);
    let audio = speech_audio(seconds, wav);
    let header_len = audio.len() - 2 * samples_in(seconds);
    let first = started + Duration::from_secs_f64(media.speech_first_byte_ms / 1e3);
    let body = Body::from_stream(paced_chunks(audio, header_len, first, media));
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Whether to send a WAV (else raw PCM), and its content type.
fn speech_format(request: &SpeechRequest, served: &str) -> Result<(bool, &'static str), ApiError> {
    openai::check_model(request.model.as_deref(), served)?;
    if request.input.trim().is_empty() || request.input.chars().count() > MAX_SPEECH_CHARS {
        return Err(ApiError::bad_request(format!(
            "input must hold 1 to {MAX_SPEECH_CHARS} characters"
        )));
    }
    if request.voice.is_empty() {
        return Err(ApiError::bad_request("voice must not be empty"));
    }
    if let Some(speed) = request.speed
        && !(0.25..=4.0).contains(&speed)
    {
        return Err(ApiError::bad_request(format!(
            "speed must be between 0.25 and 4.0, got {speed}"
        )));
    }
    // OpenAI's default is mp3, which the simulator does not encode: it answers WAV.
    match request.response_format.as_deref() {
        None | Some("wav") => Ok((true, "audio/wav")),
        Some("pcm") => Ok((false, "audio/pcm")),
        Some(other) => Err(ApiError::bad_request(format!(
            "response_format `{other}` is not produced by the simulator: choose from wav, pcm"
        ))),
    }
}

fn samples_in(seconds: f64) -> usize {
    (seconds * f64::from(SPEECH_SAMPLE_RATE)).round() as usize
}

/// `seconds` of a 220 Hz tone, 16-bit mono: as a WAV file, or the bare samples.
pub fn speech_audio(seconds: f64, wav: bool) -> Vec<u8> {
    let samples = (0..samples_in(seconds)).map(|i| {
        let t = i as f64 / f64::from(SPEECH_SAMPLE_RATE);
        ((t * 220.0 * std::f64::consts::TAU).sin() * 8_000.0) as i16
    });
    if !wav {
        return samples.flat_map(i16::to_le_bytes).collect();
    }
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SPEECH_SAMPLE_RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::new());
    let mut writer = hound::WavWriter::new(&mut out, spec).expect("writing to memory");
    for sample in samples {
        writer.write_sample(sample).expect("writing to memory");
    }
    writer.finalize().expect("writing to memory");
    out.into_inner()
}

/// The audio in pieces of [`SPEECH_CHUNK`], each sent when it would have been made:
/// the header and first piece at `first`, then one piece every chunk ÷ real-time
/// factor.
fn paced_chunks(
    audio: Vec<u8>,
    header_len: usize,
    first: Instant,
    media: MediaCost,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let audio = Bytes::from(audio);
    let piece = 2 * samples_in(SPEECH_CHUNK.as_secs_f64());
    let every = SPEECH_CHUNK.div_f64(media.speech_realtime_factor);
    futures_util::stream::unfold((0usize, 0u32), move |(at, n)| {
        let audio = audio.clone();
        async move {
            if at >= audio.len() {
                return None;
            }
            let end = (if n == 0 {
                header_len + piece
            } else {
                at + piece
            })
            .min(audio.len());
            tokio::time::sleep_until((first + every * n).into()).await;
            Some((Ok(audio.slice(at..end)), (end, n + 1)))
        }
    })
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_pngs_of_the_asked_size() {
        let png = png_image(320, 200, 7);
        let decoder = png::Decoder::new(Cursor::new(png));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (320, 200));
        assert_eq!(parse_size("1024x768"), Some((1024, 768)));
        assert_eq!(parse_size("4096x4096"), None);
        assert_eq!(parse_size("big"), None);
    }

    #[test]
    fn speech_is_a_wav_of_the_stated_length() {
        let wav = speech_audio(1.5, true);
        assert!((wav_seconds(&wav).unwrap() - 1.5).abs() < 1e-4);
        assert_eq!(speech_audio(1.5, false).len(), 2 * 36_000);
        assert!(wav_seconds(b"not a wav at all").is_err());
    }
}
