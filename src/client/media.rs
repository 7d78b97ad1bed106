//! The image, transcription and speech clients, on the one send path: OpenAI's
//! `/v1/images/generations`, `/v1/audio/transcriptions` (multipart) and
//! `/v1/audio/speech`. Each checks what came back is what was asked for — images of
//! the asked size, a transcript, audio whose length its header states — and records
//! it in the record's [`MediaMark`].

use std::io::Cursor;
use std::time::Instant;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use serde_json::{Value, json};

use super::sse::SseDecoder;
use super::{HttpClient, RunClock, Timeouts};
use crate::record::{FailStage, MediaKind, MediaMark, Outcome, Record};
use crate::workload::media::{Clip, wav_seconds};

/// What a media request asks for, the same for every request of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum MediaRequest {
    Image {
        /// `1024x1024`.
        size: String,
        width: u32,
        height: u32,
        n: u32,
        /// Ask for `b64_json` (the images are decoded and their size checked) rather
        /// than `url` (the URLs are counted, not fetched).
        b64: bool,
    },
    Transcription {
        language: Option<String>,
        /// `json`, `verbose_json` or `text`.
        response_format: String,
        /// Ask for the transcript as server-sent events (`stream=true`).
        stream: bool,
    },
    Speech {
        voice: String,
        /// `wav` (its length is read from its header) or `pcm` (16-bit mono at
        /// `pcm_rate`).
        response_format: String,
        speed: Option<f64>,
    },
    /// A Realtime session over WebSocket ([`super::realtime`]).
    Realtime(RealtimeRequest),
}

/// What every Realtime session of a run asks for (sent by [`super::realtime`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RealtimeRequest {
    /// Ask for spoken answers (`output_modalities: ["audio"]`), else text.
    pub audio_out: bool,
    /// Ask for the input audio's transcript.
    pub transcribe: bool,
    /// Audio sent per `input_audio_buffer.append`, one every this long.
    pub chunk: std::time::Duration,
    pub max_output_tokens: Option<u32>,
}

/// Sample rate of OpenAI's raw `pcm` speech: 24 kHz, 16-bit, mono.
pub const PCM_RATE: f64 = 24_000.0;

impl MediaRequest {
    pub fn kind(&self) -> MediaKind {
        match self {
            MediaRequest::Image { .. } => MediaKind::Image,
            MediaRequest::Transcription { .. } => MediaKind::Transcription,
            MediaRequest::Speech { .. } => MediaKind::Speech,
            MediaRequest::Realtime(_) => MediaKind::Realtime,
        }
    }

    /// The endpoint's path.
    pub fn path(&self) -> &'static str {
        match self {
            MediaRequest::Image { .. } => "/v1/images/generations",
            MediaRequest::Transcription { .. } => "/v1/audio/transcriptions",
            MediaRequest::Speech { .. } => "/v1/audio/speech",
            MediaRequest::Realtime(_) => "/v1/realtime",
        }
    }
}

/// Everything one media request needs but its input.
#[derive(Debug, Clone)]
pub struct MediaTarget {
    pub uri: Uri,
    pub request: MediaRequest,
    pub model: String,
    pub api_key: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub timeouts: Timeouts,
    pub max_response_bytes: usize,
}

/// What one request sends: a prompt (images, speech) or a clip (transcription).
pub enum MediaInput<'a> {
    Text(&'a str),
    Clip(&'a Clip),
}

/// The multipart boundary: fixed, and not a byte sequence a WAV header or a form
/// value of ours contains.
const BOUNDARY: &str = "redline-7f3a91c2e5d84b06a1f0";

impl MediaTarget {
    fn request(&self, input: &MediaInput<'_>, traceparent: &str) -> Request<Full<Bytes>> {
        let (content_type, body) = self.body(input);
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, content_type);
        if let Ok(value) = HeaderValue::from_str(traceparent) {
            headers.insert(HeaderName::from_static("traceparent"), value);
        }
        if let Some(key) = &self.api_key {
            headers.insert(AUTHORIZATION, key.clone());
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        request
    }

    fn body(&self, input: &MediaInput<'_>) -> (HeaderValue, Bytes) {
        let json_body = |value: Value| {
            let bytes = serde_json::to_vec(&value).expect("a JSON value serializes");
            (HeaderValue::from_static("application/json"), bytes.into())
        };
        let text = match input {
            MediaInput::Text(text) => *text,
            MediaInput::Clip(_) => "",
        };
        match (&self.request, input) {
            (MediaRequest::Image { size, n, b64, .. }, _) => json_body(json!({
                "model": self.model, "prompt": text, "n": n, "size": size,
                "response_format": if *b64 { "b64_json" } else { "url" },
            })),
            (
                MediaRequest::Speech {
                    voice,
                    response_format,
                    speed,
                },
                _,
            ) => {
                let mut body = json!({
                    "model": self.model, "input": text, "voice": voice,
                    "response_format": response_format,
                });
                if let Some(speed) = speed {
                    body["speed"] = json!(speed);
                }
                json_body(body)
            }
            (
                MediaRequest::Transcription {
                    language,
                    response_format,
                    stream,
                },
                MediaInput::Clip(clip),
            ) => {
                let mut fields = vec![("model", self.model.as_str())];
                fields.push(("response_format", response_format));
                if *stream {
                    fields.push(("stream", "true"));
                }
                if let Some(language) = language {
                    fields.push(("language", language));
                }
                let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
                let value = HeaderValue::from_str(&content_type).expect("an ASCII header");
                (value, multipart(&fields, clip))
            }
            (MediaRequest::Transcription { .. }, MediaInput::Text(_)) => {
                unreachable!("a transcription's input is a clip")
            }
            (MediaRequest::Realtime(_), _) => {
                unreachable!("a Realtime session is no HTTP request: client::realtime sends it")
            }
        }
    }
}

/// A `multipart/form-data` body (RFC 7578): the text fields, then the clip as `file`.
fn multipart(fields: &[(&str, &str)], clip: &Clip) -> Bytes {
    let mut body = Vec::with_capacity(clip.wav.len() + 512);
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    let filename = clip.name.replace(['"', '\r', '\n'], "_");
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: audio/wav\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(&clip.wav);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body.into()
}

/// Sends one media request and fills `record` with what happened.
pub async fn call(
    http: &HttpClient,
    target: &MediaTarget,
    input: MediaInput<'_>,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) {
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let deadline = sent + target.timeouts.total;
    let first_deadline = deadline.min(sent + target.timeouts.first_token);
    let request = target.request(&input, traceparent);
    let mut mark = MediaMark::new(target.request.kind());
    if let MediaInput::Clip(clip) = input {
        mark.audio_s = Some(clip.seconds);
    }
    let timeout = "no response headers before the deadline";
    let Some(response) =
        super::send_until(http, request, first_deadline, timeout, clock, record).await
    else {
        record.media = Some(mark);
        return;
    };
    let status = response.status().as_u16();
    let limit = target.max_response_bytes;
    let streamed = is_event_stream(&response);
    if streamed && (200..300).contains(&status) {
        let text = read_transcript_stream(response.into_body(), deadline, limit, clock, record);
        if let Some(text) = text.await {
            mark.words = Some(text.split_whitespace().count() as u32);
            mark.bytes = text.len() as u64;
        }
        record.media = Some(mark);
        return;
    }
    let body = super::read_body(response.into_body(), deadline, limit, true, clock, record).await;
    if let Some(body) = body {
        if (200..300).contains(&status) {
            if let Err((kind, message)) = check_answer(&target.request, &body, &mut mark) {
                record.fail(Outcome::Error, FailStage::Decode, kind, message);
            }
        } else {
            let message = format!("HTTP {status}: {}", super::openai::error_message(&body));
            record.fail(
                Outcome::Error,
                FailStage::FirstByte,
                super::status_kind(status),
                message,
            );
        }
    }
    record.media = Some(mark);
}

fn is_event_stream(response: &hyper::Response<hyper::body::Incoming>) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// Reads a streamed transcript: OpenAI's `transcript.text.delta` events up to
/// `transcript.text.done`, or vLLM's chunks (`choices[0].delta.content`) up to
/// `[DONE]`. The first text is the record's first token, each delta a content event;
/// a stream that ends before it says it is done is `truncated`.
async fn read_transcript_stream(
    mut body: hyper::body::Incoming,
    deadline: Instant,
    limit: usize,
    clock: RunClock,
    record: &mut Record,
) -> Option<String> {
    use http_body_util::BodyExt;
    let mut decoder = SseDecoder::new(limit);
    let mut text = String::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Err(_) => {
                let why = "transcript not complete before the total timeout";
                record.fail(Outcome::Timeout, FailStage::Stream, "timeout", why);
                return None;
            }
            Ok(None) => {
                let why = "the stream ended before `transcript.text.done` or `[DONE]`";
                record.fail(Outcome::Error, FailStage::Stream, "truncated", why);
                return None;
            }
            Ok(Some(Err(e))) => {
                let why = format!("stream broken: {e}");
                record.fail(Outcome::Error, FailStage::Stream, "reset", why);
                return None;
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(bytes) = frame.into_data() else {
            continue;
        };
        let now = clock.now_us();
        record.first_byte_us.get_or_insert(now);
        decoder.feed(&bytes);
        while let Some(event) = decoder.next_event() {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    record.fail(
                        Outcome::Error,
                        FailStage::Stream,
                        "invalid_sse",
                        e.to_string(),
                    );
                    return None;
                }
            };
            match transcript_event(&event.data) {
                Ok(TranscriptEvent::Delta(delta)) => {
                    record.first_token_us.get_or_insert(now);
                    record.content_events += 1;
                    text.push_str(&delta);
                }
                Ok(TranscriptEvent::Done(whole)) => {
                    record.last_byte_us = Some(now);
                    return Some(whole.unwrap_or(text));
                }
                Ok(TranscriptEvent::Other) => {}
                Err(why) => {
                    record.fail(Outcome::Error, FailStage::Decode, "invalid_json", why);
                    return None;
                }
            }
        }
    }
}

/// What one event of a transcript stream says.
#[derive(Debug, PartialEq)]
enum TranscriptEvent {
    Delta(String),
    /// The end, with the whole text when the event carries it.
    Done(Option<String>),
    Other,
}

fn transcript_event(data: &str) -> Result<TranscriptEvent, String> {
    if data.trim() == "[DONE]" {
        return Ok(TranscriptEvent::Done(None));
    }
    let event: Value =
        serde_json::from_str(data).map_err(|e| format!("a stream event is not JSON: {e}"))?;
    Ok(match event["type"].as_str() {
        Some("transcript.text.delta") => {
            TranscriptEvent::Delta(event["delta"].as_str().unwrap_or_default().to_owned())
        }
        Some("transcript.text.done") => {
            TranscriptEvent::Done(event["text"].as_str().map(str::to_owned))
        }
        _ => match event["choices"][0]["delta"]["content"].as_str() {
            Some(content) => TranscriptEvent::Delta(content.to_owned()),
            None => TranscriptEvent::Other,
        },
    })
}

/// Checks a successful answer is what was asked for, filling in what it carried; the
/// failure's kind and message when it is not.
fn check_answer(
    request: &MediaRequest,
    body: &[u8],
    mark: &mut MediaMark,
) -> Result<(), (&'static str, String)> {
    match request {
        MediaRequest::Image {
            width,
            height,
            n,
            b64,
            ..
        } => check_images(body, (*width, *height), *n, *b64, mark),
        MediaRequest::Transcription {
            response_format, ..
        } => {
            let text = transcript(body, response_format)?;
            mark.words = Some(text.split_whitespace().count() as u32);
            mark.bytes = body.len() as u64;
            Ok(())
        }
        MediaRequest::Speech {
            response_format, ..
        } => {
            mark.bytes = body.len() as u64;
            mark.audio_s = Some(match response_format.as_str() {
                "pcm" => body.len() as f64 / 2.0 / PCM_RATE,
                _ => wav_seconds(body).map_err(|e| {
                    (
                        "invalid_audio",
                        format!("the answer is not a WAV file: {e}"),
                    )
                })?,
            });
            Ok(())
        }
        MediaRequest::Realtime(_) => {
            unreachable!("a Realtime session is no HTTP request: client::realtime reads it")
        }
    }
}

/// The images of an answer: `n` of them, each a PNG of the asked size when base64.
fn check_images(
    body: &[u8],
    (width, height): (u32, u32),
    n: u32,
    b64: bool,
    mark: &mut MediaMark,
) -> Result<(), (&'static str, String)> {
    let answer: Value = serde_json::from_slice(body)
        .map_err(|e| ("invalid_json", format!("the answer is not JSON: {e}")))?;
    let data = answer["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let key = if b64 { "b64_json" } else { "url" };
    let images: Vec<&str> = data.iter().filter_map(|d| d[key].as_str()).collect();
    if images.is_empty() {
        return Err((
            "no_image",
            format!("the answer holds no image (no `data[].{key}`)"),
        ));
    }
    mark.images = Some(images.len() as u32);
    if images.len() as u32 != n {
        return Err((
            "image_count",
            format!("asked for {n} images, got {}", images.len()),
        ));
    }
    if !b64 {
        return Ok(());
    }
    for image in images {
        let png = base64::engine::general_purpose::STANDARD
            .decode(image)
            .map_err(|e| ("invalid_image", format!("an image is not base64: {e}")))?;
        mark.bytes += png.len() as u64;
        let size =
            png_size(&png).map_err(|e| ("invalid_image", format!("an image is not a PNG: {e}")))?;
        if size != (width, height) {
            return Err((
                "image_size",
                format!("asked for {width}x{height}, got {}x{}", size.0, size.1),
            ));
        }
    }
    Ok(())
}

/// A PNG's width and height, from its header: the pixels are not decoded (a server's
/// huge image must not cost the client its decoding).
fn png_size(png: &[u8]) -> Result<(u32, u32), png::DecodingError> {
    let reader = png::Decoder::new(Cursor::new(png)).read_info()?;
    Ok((reader.info().width, reader.info().height))
}

/// A transcription answer's text.
fn transcript(body: &[u8], response_format: &str) -> Result<String, (&'static str, String)> {
    if response_format == "text" {
        return String::from_utf8(body.to_vec())
            .map_err(|_| ("invalid_text", "the transcript is not UTF-8".to_owned()));
    }
    let answer: Value = serde_json::from_slice(body)
        .map_err(|e| ("invalid_json", format!("the answer is not JSON: {e}")))?;
    answer["text"]
        .as_str()
        .map(str::to_owned)
        .ok_or(("no_text", "the answer has no `text`".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::media::generated_clips;

    fn image_request(b64: bool) -> MediaRequest {
        MediaRequest::Image {
            size: "64x32".into(),
            width: 64,
            height: 32,
            n: 1,
            b64,
        }
    }

    #[test]
    fn an_image_answer_is_checked_for_its_images_and_their_size() {
        let mut png = Vec::new();
        let mut encoder = png::Encoder::new(&mut png, 64, 32);
        encoder.set_color(png::ColorType::Grayscale);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&[7; 64 * 32]).unwrap();
        writer.finish().unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
        let good = json!({"data": [{"b64_json": encoded}]}).to_string();
        let mut m = MediaMark::new(MediaKind::Image);
        assert_eq!(
            check_answer(&image_request(true), good.as_bytes(), &mut m),
            Ok(())
        );
        assert_eq!((m.images, m.bytes), (Some(1), png.len() as u64));
        let wrong = MediaRequest::Image {
            size: "64x64".into(),
            width: 64,
            height: 64,
            n: 1,
            b64: true,
        };
        let error = check_answer(
            &wrong,
            good.as_bytes(),
            &mut MediaMark::new(MediaKind::Image),
        );
        assert_eq!(error.unwrap_err().0, "image_size");
        let empty = br#"{"created": 1, "data": []}"#;
        let error = check_answer(
            &image_request(true),
            empty,
            &mut MediaMark::new(MediaKind::Image),
        );
        assert_eq!(error.unwrap_err().0, "no_image");
        let error = check_answer(
            &image_request(false),
            b"<html>",
            &mut MediaMark::new(MediaKind::Image),
        );
        assert_eq!(error.unwrap_err().0, "invalid_json");
    }

    #[test]
    fn transcript_streams_in_openais_and_vllms_shapes() {
        let delta = r#"{"type":"transcript.text.delta","delta":" the model"}"#;
        assert_eq!(
            transcript_event(delta),
            Ok(TranscriptEvent::Delta(" the model".into()))
        );
        let done = r#"{"type":"transcript.text.done","text":"the model"}"#;
        assert_eq!(
            transcript_event(done),
            Ok(TranscriptEvent::Done(Some("the model".into())))
        );
        let vllm = r#"{"object":"transcription.chunk","choices":[{"delta":{"content":"hi"}}]}"#;
        assert_eq!(
            transcript_event(vllm),
            Ok(TranscriptEvent::Delta("hi".into()))
        );
        assert_eq!(transcript_event("[DONE]"), Ok(TranscriptEvent::Done(None)));
        assert!(transcript_event("{not json").is_err());
    }

    #[test]
    fn speech_length_comes_from_the_wav_header() {
        let clip = &generated_clips(1, 1.25, 1.25, 3)[0];
        let speech = MediaRequest::Speech {
            voice: "alloy".into(),
            response_format: "wav".into(),
            speed: None,
        };
        let mut m = MediaMark::new(MediaKind::Speech);
        assert_eq!(check_answer(&speech, &clip.wav, &mut m), Ok(()));
        assert!((m.audio_s.unwrap() - 1.25).abs() < 1e-9);
        let error = check_answer(&speech, b"{}", &mut MediaMark::new(MediaKind::Speech));
        assert_eq!(error.unwrap_err().0, "invalid_audio");
    }

    #[test]
    fn a_multipart_body_carries_the_fields_and_the_clip() {
        let clip = &generated_clips(1, 0.1, 0.1, 3)[0];
        let body = multipart(&[("model", "whisper"), ("language", "en")], clip);
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{BOUNDARY}\r\n")));
        assert!(text.contains("name=\"language\"\r\n\r\nen\r\n"));
        assert!(text.contains("filename=\"clip-0000.wav\"\r\nContent-Type: audio/wav"));
        assert!(text.ends_with(&format!("--{BOUNDARY}--\r\n")));
        assert!(body.windows(clip.wav.len()).any(|w| w == clip.wav));
    }
}
