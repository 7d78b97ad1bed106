//! OpenAI's Realtime API over WebSocket (`api: realtime`): one request is one session.
//! The client opens the connection with its own connector (its TLS settings, its
//! connect and handshake times), upgrades it at `/v1/realtime?model=…`, configures
//! the session, then sends its input — a clip as PCM16 chunks paced at real time and
//! committed, or a text item — and asks for one response. It reads the server's
//! events to `response.done` (and the input's transcript, when asked for) and marks
//! when the input was done, the first transcript delta and the first audio
//! (docs/metrics.md, "Realtime").
//!
//! What the server controls costs the client nothing: an event is read only up to
//! the response limit (a larger one is `too_large`), audio is counted from its base64
//! length and never decoded, and a socket that closes before `response.done` is a
//! typed failure.

use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use hyper::Uri;
use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::media::{MediaTarget, PCM_RATE, RealtimeRequest};
use super::{HttpClient, RunClock};
use crate::record::{FailStage, MediaMark, Outcome, Record, ServerTruth, TokenSource};
use crate::workload::media::PcmClip;

/// What one session says: a text, or a clip spoken into the input buffer.
pub enum RealtimeInput<'a> {
    Text(&'a str),
    Pcm(&'a PcmClip),
}

type Socket = tokio_tungstenite::WebSocketStream<TokioIo<super::tls::Conn>>;

/// Why a session ended early: the outcome, stage, kind and message of its record.
type Failed = (Outcome, FailStage, &'static str, String);

fn failed(stage: FailStage, kind: &'static str, message: impl Into<String>) -> Failed {
    (Outcome::Error, stage, kind, message.into())
}

/// Runs one session and fills `record` with what happened.
pub async fn session(
    http: &HttpClient,
    target: &MediaTarget,
    request: &RealtimeRequest,
    input: RealtimeInput<'_>,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) {
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let mut mark = MediaMark::new(target.request.kind());
    if let RealtimeInput::Pcm(clip) = &input {
        mark.audio_in_s = Some(clip.seconds);
    }
    let mut run = Session {
        target,
        request,
        clock,
        deadline: sent + target.timeouts.total,
        mark: &mut mark,
        transcript_done: !request.transcribe || matches!(input, RealtimeInput::Text(_)),
        response_done: false,
    };
    let ended = match run.open(http, traceparent, record).await {
        Ok(mut socket) => {
            let talked = run.talk(&mut socket, input, record).await;
            // A polite close, not awaited: the figures are taken.
            let _ = tokio::time::timeout(Duration::from_millis(50), socket.close(None)).await;
            talked
        }
        Err(failure) => Err(failure),
    };
    if let Err((outcome, stage, kind, message)) = ended {
        record.fail(outcome, stage, kind, message);
    }
    record.media = Some(mark);
}

struct Session<'a> {
    target: &'a MediaTarget,
    request: &'a RealtimeRequest,
    clock: RunClock,
    deadline: Instant,
    mark: &'a mut MediaMark,
    transcript_done: bool,
    response_done: bool,
}

impl Session<'_> {
    /// The connection, and the WebSocket upgrade over it.
    async fn open(
        &self,
        http: &HttpClient,
        traceparent: &str,
        record: &mut Record,
    ) -> Result<Socket, Failed> {
        let uri = &self.target.uri;
        let connect_by = Instant::now() + self.target.timeouts.connect;
        let conn = match tokio::time::timeout_at(connect_by.into(), http.connect(uri.clone())).await
        {
            Err(_) => return Err(failed(FailStage::Connect, "timeout", "connect timed out")),
            Ok(Err(e)) => return Err(failed(FailStage::Connect, e.kind(), e.to_string())),
            Ok(Ok(conn)) => conn,
        };
        let times = conn.times();
        record.connect_us = Some(times.connect_us);
        record.tls_us = times.tls_us;
        let upgrade = self.upgrade_request(traceparent)?;
        let limit = self.target.max_response_bytes;
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit));
        let by = self
            .deadline
            .min(Instant::now() + self.target.timeouts.first_token);
        let handshake =
            tokio_tungstenite::client_async_with_config(upgrade, TokioIo::new(conn), Some(config));
        match tokio::time::timeout_at(by.into(), handshake).await {
            Err(_) => Err((
                Outcome::Timeout,
                FailStage::FirstByte,
                "timeout",
                "no WebSocket upgrade before the first-token timeout".into(),
            )),
            Ok(Err(e)) => Err(upgrade_failure(e, record)),
            Ok(Ok((socket, response))) => {
                record.headers_us = Some(self.clock.now_us());
                record.status = Some(response.status().as_u16());
                Ok(socket)
            }
        }
    }

    /// `GET ws(s)://host/v1/realtime?model=…` with the service's key and headers.
    fn upgrade_request(&self, traceparent: &str) -> Result<hyper::Request<()>, Failed> {
        let uri = ws_uri(&self.target.uri, &self.target.model)
            .map_err(|e| failed(FailStage::Client, "invalid_request", e))?;
        let mut request = uri
            .into_client_request()
            .map_err(|e| failed(FailStage::Client, "invalid_request", e.to_string()))?;
        let headers = request.headers_mut();
        if let Some(key) = &self.target.api_key {
            headers.insert(AUTHORIZATION, key.clone());
        }
        if let Ok(value) = HeaderValue::from_str(traceparent) {
            headers.insert(HeaderName::from_static("traceparent"), value);
        }
        for (name, value) in &self.target.headers {
            headers.append(name.clone(), value.clone());
        }
        Ok(request)
    }

    /// Configures the session, sends the input, asks for the response and reads the
    /// events to its end.
    async fn talk(
        &mut self,
        socket: &mut Socket,
        input: RealtimeInput<'_>,
        record: &mut Record,
    ) -> Result<(), Failed> {
        let first = self.next_event(socket, self.deadline).await?;
        record.first_byte_us = Some(self.clock.now_us());
        if first["type"] != "session.created" {
            return Err(failed(
                FailStage::Decode,
                "out_of_order",
                format!(
                    "the first event is `{}`, not `session.created`",
                    kind(&first)
                ),
            ));
        }
        self.send(socket, self.session_update()).await?;
        match input {
            RealtimeInput::Pcm(clip) => self.speak(socket, &clip.pcm, record).await?,
            RealtimeInput::Text(text) => {
                let item = json!({"type": "conversation.item.create", "item": {"type": "message",
                    "role": "user", "content": [{"type": "input_text", "text": text}]}});
                self.send(socket, item).await?;
            }
        }
        let mut response = json!({"type": "response.create", "response": {}});
        if let Some(n) = self.request.max_output_tokens {
            response["response"]["max_output_tokens"] = json!(n);
        }
        // Typed input is done when the response is asked for (spoken input: at its
        // commit). Stamped before the send, as `sent_us` is: a send that returns late
        // on a busy machine must not shorten the times measured from it.
        self.mark.input_done_us.get_or_insert(self.clock.now_us());
        self.send(socket, response).await?;
        // The first token's timeout until the answer starts, then the gap's.
        let first_by = self
            .deadline
            .min(Instant::now() + self.target.timeouts.first_token);
        while !(self.response_done && self.transcript_done) {
            let started = record.content_events > 0 || self.mark.first_audio_us.is_some();
            let by = match started {
                false => first_by,
                true => self
                    .deadline
                    .min(Instant::now() + self.target.timeouts.between_tokens),
            };
            let event = self.next_event(socket, by).await?;
            self.take(&event, record)?;
        }
        Ok(())
    }

    fn session_update(&self) -> Value {
        let modality = if self.request.audio_out {
            "audio"
        } else {
            "text"
        };
        let transcription = self
            .request
            .transcribe
            .then(|| json!({"model": "whisper-1"}));
        json!({"type": "session.update", "session": {"type": "realtime",
            "output_modalities": [modality],
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": PCM_RATE as u32},
                "transcription": transcription, "turn_detection": null}}}})
    }

    /// The clip in chunks, each sent when a speaker would have finished saying it
    /// (not before), then committed. Events that come meanwhile are read.
    async fn speak(
        &mut self,
        socket: &mut Socket,
        pcm: &[u8],
        record: &mut Record,
    ) -> Result<(), Failed> {
        let per_chunk = (PCM_RATE * self.request.chunk.as_secs_f64()).round() as usize * 2;
        let started = tokio::time::Instant::now();
        for (i, chunk) in pcm.chunks(per_chunk.max(2)).enumerate() {
            let due = started + self.request.chunk * i as u32;
            loop {
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(due) => break,
                    event = self.next_event(socket, self.deadline) => self.take(&event?, record)?,
                }
            }
            let audio = base64::engine::general_purpose::STANDARD.encode(chunk);
            let append = json!({"type": "input_audio_buffer.append", "audio": audio});
            self.send(socket, append).await?;
        }
        let spoken = started + self.request.chunk * pcm.len().div_ceil(per_chunk.max(2)) as u32;
        tokio::time::sleep_until(spoken).await;
        self.mark.input_done_us = Some(self.clock.now_us());
        self.send(socket, json!({"type": "input_audio_buffer.commit"}))
            .await
    }

    async fn send(&self, socket: &mut Socket, event: Value) -> Result<(), Failed> {
        let sent = socket.send(Message::Text(event.to_string().into()));
        match tokio::time::timeout_at(self.deadline.into(), sent).await {
            Err(_) => Err((
                Outcome::Timeout,
                FailStage::Send,
                "timeout",
                "the server took no more input before the total timeout".into(),
            )),
            Ok(Err(e)) => Err(socket_failure(FailStage::Send, e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// The next JSON event, before `by`.
    async fn next_event(&self, socket: &mut Socket, by: Instant) -> Result<Value, Failed> {
        loop {
            let message = match tokio::time::timeout_at(by.into(), socket.next()).await {
                Err(_) => {
                    let what = "no event from the session before its timeout";
                    return Err((Outcome::Timeout, FailStage::Stream, "timeout", what.into()));
                }
                Ok(None) | Ok(Some(Ok(Message::Close(_)))) => {
                    return Err(failed(
                        FailStage::Stream,
                        "truncated",
                        "the WebSocket closed before `response.done`",
                    ));
                }
                Ok(Some(Err(e))) => return Err(socket_failure(FailStage::Stream, e)),
                Ok(Some(Ok(message))) => message,
            };
            let text = match &message {
                Message::Text(text) => text.as_str(),
                Message::Binary(_) => {
                    let why = "a binary message: Realtime events are JSON text";
                    return Err(failed(FailStage::Decode, "invalid_json", why));
                }
                _ => continue,
            };
            return serde_json::from_str(text).map_err(|e| {
                failed(
                    FailStage::Decode,
                    "invalid_json",
                    format!("an event is not JSON: {e}"),
                )
            });
        }
    }

    /// One server event of the session.
    fn take(&mut self, event: &Value, record: &mut Record) -> Result<(), Failed> {
        let now = self.clock.now_us();
        let delta = || event["delta"].as_str().unwrap_or_default();
        match kind(event) {
            "error" => {
                let message = event["error"]["message"].as_str().unwrap_or("no message");
                let code = event["error"]["code"].as_str().unwrap_or("error");
                return Err(failed(
                    FailStage::Stream,
                    "stream_error",
                    format!("{code}: {message}"),
                ));
            }
            "conversation.item.input_audio_transcription.delta" => {
                self.mark.first_transcript_us.get_or_insert(now);
            }
            "conversation.item.input_audio_transcription.completed" => {
                let transcript = event["transcript"].as_str().unwrap_or_default();
                self.mark.words = Some(transcript.split_whitespace().count() as u32);
                self.mark.first_transcript_us.get_or_insert(now);
                self.transcript_done = true;
            }
            "conversation.item.input_audio_transcription.failed" => {
                let message = event["error"]["message"].as_str().unwrap_or("no message");
                return Err(failed(
                    FailStage::Stream,
                    "stream_error",
                    format!("transcription failed: {message}"),
                ));
            }
            "response.output_audio.delta" => {
                self.mark.first_audio_us.get_or_insert(now);
                self.mark.bytes += decoded_len(delta()) as u64;
            }
            "response.output_audio_transcript.delta" | "response.output_text.delta" => {
                record.content_events += 1;
            }
            "response.done" => self.done(event, now, record)?,
            _ => {}
        }
        Ok(())
    }

    /// `response.done`: its status, usage and the simulator's truth.
    fn done(&mut self, event: &Value, now: u64, record: &mut Record) -> Result<(), Failed> {
        self.response_done = true;
        record.last_byte_us = Some(now);
        let response = &event["response"];
        let usage = &response["usage"];
        record.input_tokens = usage["input_tokens"].as_u64().map(|n| n as u32);
        record.output_tokens = usage["output_tokens"].as_u64().map(|n| n as u32);
        if record.output_tokens.is_some() {
            record.token_source = Some(TokenSource::Usage);
        }
        record.cached_tokens = usage["input_token_details"]["cached_tokens"]
            .as_u64()
            .map(|n| n as u32);
        record.server = serde_json::from_value::<ServerTruth>(event["redline"].clone()).ok();
        self.mark.audio_s = (self.mark.bytes > 0).then(|| self.mark.bytes as f64 / 2.0 / PCM_RATE);
        let status = response["status"].as_str().unwrap_or_default();
        record.finish_reason = match status {
            "completed" => Some("stop".into()),
            "incomplete" => Some("length".into()),
            other => {
                let why = response["status_details"]["error"]["message"]
                    .as_str()
                    .unwrap_or_default();
                return Err(failed(
                    FailStage::Stream,
                    "stream_error",
                    format!("the response ended `{other}` {why}")
                        .trim_end()
                        .to_owned(),
                ));
            }
        };
        Ok(())
    }
}

fn kind(event: &Value) -> &str {
    event["type"].as_str().unwrap_or_default()
}

/// Bytes a base64 text decodes to, without decoding it.
fn decoded_len(text: &str) -> usize {
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3).saturating_sub(padding)
}

/// What a query value escapes: all but RFC 3986's unreserved characters.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The endpoint as a WebSocket URI: `ws` for `http`, `wss` for `https`, with the model.
fn ws_uri(endpoint: &Uri, model: &str) -> Result<Uri, String> {
    let scheme = match endpoint.scheme_str() {
        Some("https") => "wss",
        _ => "ws",
    };
    let authority = endpoint.authority().ok_or("the URL names no host")?;
    let model: String = percent_encoding::utf8_percent_encode(model, QUERY_VALUE).collect();
    format!("{scheme}://{authority}{}?model={model}", endpoint.path())
        .parse()
        .map_err(|e| format!("building the WebSocket URL: {e}"))
}

/// A refused upgrade: the server's status when it answered one, else how it broke.
fn upgrade_failure(error: WsError, record: &mut Record) -> Failed {
    if let WsError::Http(response) = &error {
        let status = response.status().as_u16();
        record.status = Some(status);
        let body = response
            .body()
            .as_deref()
            .map(super::openai::error_message)
            .unwrap_or_default();
        return failed(
            FailStage::FirstByte,
            super::status_kind(status),
            format!("HTTP {status} instead of the WebSocket upgrade: {body}"),
        );
    }
    socket_failure(FailStage::FirstByte, error)
}

/// A WebSocket error as a typed failure.
fn socket_failure(stage: FailStage, error: WsError) -> Failed {
    let kind = match &error {
        WsError::Capacity(_) => "too_large",
        WsError::Io(_)
        | WsError::ConnectionClosed
        | WsError::AlreadyClosed
        | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => "reset",
        WsError::Protocol(_) => "invalid_websocket",
        WsError::Utf8(_) => "invalid_json",
        _ => "invalid_websocket",
    };
    failed(stage, kind, format!("WebSocket: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_lengths_count_the_decoded_bytes() {
        for n in 0..20 {
            let text = base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
            assert_eq!(decoded_len(&text), n, "{text}");
        }
    }

    #[test]
    fn the_endpoint_becomes_a_websocket_url_with_the_model() {
        let http: Uri = "http://127.0.0.1:8000/v1/realtime".parse().unwrap();
        let https: Uri = "https://api.example/v1/realtime".parse().unwrap();
        assert_eq!(
            ws_uri(&http, "gpt-realtime").unwrap().to_string(),
            "ws://127.0.0.1:8000/v1/realtime?model=gpt-realtime"
        );
        assert_eq!(
            ws_uri(&https, "a b/c").unwrap().to_string(),
            "wss://api.example/v1/realtime?model=a%20b%2Fc"
        );
    }
}
