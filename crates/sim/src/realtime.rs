//! OpenAI's Realtime API over WebSocket (`GET /v1/realtime?model=…`), as its GA events
//! have it: a session of JSON events both ways. The client appends PCM16 audio (24 kHz
//! mono, base64) and commits it, or creates a text item, then asks for a response. A
//! committed buffer is transcribed as the transcription endpoint would
//! (`words_per_second` words a second of audio, the first delta after
//! `transcribe_base_ms`) when the session asked for input transcription; the response
//! runs on the same engine as chat, each token its transcript delta and 1 ÷
//! `words_per_second` seconds of audio (or a text delta), and `response.done` carries
//! the usage and the ground truth under `redline`.
//!
//! The simulator detects no turns: a client commits the buffer and asks for the
//! response itself, as with `turn_detection: null`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use super::answer::{Format, error_response, request_hash, stream_events};
use super::media::{SPEECH_SAMPLE_RATE, speech_audio, transcript, transcript_deltas};
use super::openai::{self, ApiError, ChatRequest, Content, Message, Sampling};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::FinishReason;
use redline_base::seed::{fnv64, mix_seed};

/// The largest client event read: OpenAI's limit on one append (15 MiB of base64).
const MAX_EVENT_BYTES: usize = 15 << 20;
/// The most audio a buffer holds before a commit: 10 minutes at 24 kHz.
const MAX_BUFFER_BYTES: usize = 10 * 60 * 2 * SPEECH_SAMPLE_RATE as usize;
/// The shortest buffer a commit takes, as OpenAI's `input_audio_buffer_commit_empty`.
const MIN_COMMIT: Duration = Duration::from_millis(100);

#[derive(Debug, serde::Deserialize)]
pub struct ConnectQuery {
    model: Option<String>,
}

/// `GET /v1/realtime`: the model checked, then the WebSocket session.
pub(super) async fn connect(
    State(state): State<Arc<SimState>>,
    Query(query): Query<ConnectQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    if let Err(error) = openai::check_model(query.model.as_deref(), state.model()) {
        return error_response(error);
    }
    ws.max_message_size(MAX_EVENT_BYTES)
        .on_upgrade(move |socket| run(state, socket))
}

/// Server events on their way out, each given its `event_id`.
#[derive(Clone)]
struct Out {
    tx: UnboundedSender<String>,
    next: Arc<AtomicU64>,
}

impl Out {
    fn event(&self, kind: &str, data: Value) -> String {
        let mut data = data;
        data["type"] = json!(kind);
        data["event_id"] = json!(format!(
            "event_{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        data.to_string()
    }

    fn send(&self, kind: &str, data: Value) {
        let _ = self.tx.send(self.event(kind, data));
    }

    fn error(&self, code: &str, message: String, client_event: Option<&str>) {
        let error = json!({"type": "invalid_request_error", "code": code,
            "message": message, "param": null, "event_id": client_event});
        self.send("error", json!({"error": error}));
    }
}

/// One session's state.
struct Session {
    id: String,
    state: Arc<SimState>,
    out: Out,
    audio: Vec<u8>,
    transcribe: bool,
    audio_out: bool,
    instructions: Option<String>,
    conversation: Arc<Mutex<Vec<Message>>>,
    items: u64,
    /// The response being made, and whether it still is.
    responding: Option<(String, JoinHandle<()>, Arc<AtomicBool>)>,
}

async fn run(state: Arc<SimState>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(text) = rx.recv().await {
            if sink.send(WsMessage::Text(text.into())).await.is_err() {
                return;
            }
        }
    });
    let n = state.nonce.fetch_add(1, Ordering::Relaxed);
    let mut session = Session {
        id: format!("sess_{n:016x}"),
        state,
        out: Out {
            tx,
            next: Arc::default(),
        },
        audio: Vec::new(),
        transcribe: false,
        audio_out: true,
        instructions: None,
        conversation: Arc::default(),
        items: 0,
        responding: None,
    };
    let created = json!({"session": session.describe()});
    session.out.send("session.created", created);
    while let Some(Ok(message)) = stream.next().await {
        match message {
            WsMessage::Text(text) => session.take(text.as_str()),
            WsMessage::Binary(_) => session.out.error(
                "invalid_value",
                "events are JSON text messages, not binary".into(),
                None,
            ),
            WsMessage::Close(_) => break,
            WsMessage::Ping(_) | WsMessage::Pong(_) => {}
        }
    }
    // The client is gone: its response stops, and the engine frees its sequence.
    if let Some((_, task, _)) = session.responding.take() {
        task.abort();
    }
    drop(session);
    let _ = writer.await;
}

impl Session {
    fn describe(&self) -> Value {
        let transcription = self.transcribe.then(|| json!({"model": "whisper-1"}));
        let modality = if self.audio_out { "audio" } else { "text" };
        json!({
            "type": "realtime", "object": "realtime.session", "id": self.id,
            "model": self.state.model(), "output_modalities": [modality],
            "instructions": self.instructions.clone().unwrap_or_default(),
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": SPEECH_SAMPLE_RATE},
                    "transcription": transcription, "turn_detection": null},
                "output": {"format": {"type": "audio/pcm", "rate": SPEECH_SAMPLE_RATE},
                    "voice": "alloy", "speed": 1.0},
            },
        })
    }

    /// One client event.
    fn take(&mut self, text: &str) {
        let event: Value = match serde_json::from_str(text) {
            Ok(event) => event,
            Err(e) => {
                return self
                    .out
                    .error("invalid_json", format!("not JSON: {e}"), None);
            }
        };
        let id = event.get("event_id").and_then(Value::as_str);
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let done = match kind {
            "session.update" => self.update(&event),
            "input_audio_buffer.append" => self.append(&event),
            "input_audio_buffer.clear" => {
                self.audio.clear();
                self.out.send("input_audio_buffer.cleared", json!({}));
                Ok(())
            }
            "input_audio_buffer.commit" => self.commit(),
            "conversation.item.create" => self.create_item(&event),
            "response.create" => self.respond(&event),
            "response.cancel" => self.cancel(),
            other => Err(("invalid_value", format!("unknown event type `{other}`"))),
        };
        if let Err((code, message)) = done {
            self.out.error(code, message, id);
        }
    }

    fn update(&mut self, event: &Value) -> Result<(), (&'static str, String)> {
        let session = &event["session"];
        if let Some(modalities) = session["output_modalities"].as_array() {
            self.audio_out = modalities.iter().any(|m| m == "audio");
        }
        let transcription = &session["audio"]["input"]["transcription"];
        if !transcription.is_null() || session["audio"]["input"].get("transcription").is_some() {
            self.transcribe = transcription.is_object();
        }
        if let Some(instructions) = session["instructions"].as_str() {
            self.instructions = Some(instructions.to_owned());
        }
        self.out
            .send("session.updated", json!({"session": self.describe()}));
        Ok(())
    }

    fn append(&mut self, event: &Value) -> Result<(), (&'static str, String)> {
        let audio = event["audio"].as_str().unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(audio)
            .map_err(|e| ("invalid_value", format!("audio is not base64: {e}")))?;
        if self.audio.len() + bytes.len() > MAX_BUFFER_BYTES {
            return Err((
                "input_audio_buffer_full",
                "the buffer holds at most 10 minutes of audio: commit it first".into(),
            ));
        }
        self.audio.extend_from_slice(&bytes);
        Ok(())
    }

    fn next_item(&mut self) -> (String, Option<String>) {
        self.items += 1;
        let previous = (self.items > 1).then(|| format!("item_{}_{}", self.id, self.items - 1));
        (format!("item_{}_{}", self.id, self.items), previous)
    }

    /// The buffer becomes a user item: its transcript is what the model hears, and
    /// what the client is sent when it asked for transcription.
    fn commit(&mut self) -> Result<(), (&'static str, String)> {
        let seconds = self.audio.len() as f64 / (2.0 * f64::from(SPEECH_SAMPLE_RATE));
        if seconds < MIN_COMMIT.as_secs_f64() {
            return Err((
                "input_audio_buffer_commit_empty",
                format!(
                    "buffer too small: expected at least 100 ms of audio, got {:.0} ms",
                    seconds * 1e3
                ),
            ));
        }
        let committed = Instant::now();
        let media = self.state.profile().media.clone();
        let words = (seconds * media.words_per_second).round().max(1.0) as u32;
        let text = transcript(mix_seed(&[self.state.seed(), fnv64(&self.audio)]), words);
        self.audio.clear();
        let (item_id, previous) = self.next_item();
        self.out.send(
            "input_audio_buffer.committed",
            json!({"item_id": item_id, "previous_item_id": previous}),
        );
        let item = json!({"id": item_id, "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_audio", "transcript": null}]});
        self.out.send(
            "conversation.item.added",
            json!({"item": item, "previous_item_id": previous}),
        );
        self.said("user", text.clone());
        if self.transcribe {
            let first = committed + Duration::from_secs_f64(media.transcribe_base_ms / 1e3);
            let done = committed + media.transcribe_time(seconds);
            tokio::spawn(transcribe(
                self.out.clone(),
                item_id,
                text,
                seconds,
                first,
                done,
            ));
        }
        Ok(())
    }

    fn said(&self, role: &str, text: String) {
        self.conversation
            .lock()
            .expect("the conversation is pushed whole")
            .push(Message {
                role: role.into(),
                content: Some(Content::Text(text)),
                tool_calls: None,
            });
    }

    fn create_item(&mut self, event: &Value) -> Result<(), (&'static str, String)> {
        let item = &event["item"];
        let role = item["role"].as_str().unwrap_or("user");
        let text: Vec<&str> = item["content"]
            .as_array()
            .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
            .unwrap_or_default();
        if item["type"] != "message" || text.is_empty() {
            return Err((
                "invalid_value",
                "item must be a message with `input_text` content".into(),
            ));
        }
        let (item_id, previous) = self.next_item();
        self.said(role, text.join("\n"));
        let mut added = item.clone();
        added["id"] = json!(item_id);
        added["status"] = json!("completed");
        let data = json!({"item": added, "previous_item_id": previous});
        self.out.send("conversation.item.added", data.clone());
        self.out.send("conversation.item.done", data);
        Ok(())
    }

    fn respond(&mut self, event: &Value) -> Result<(), (&'static str, String)> {
        if let Some((id, _, active)) = &self.responding
            && active.load(Ordering::Acquire)
        {
            return Err((
                "conversation_already_has_active_response",
                format!("Conversation already has an active response in progress: {id}"),
            ));
        }
        let asked = &event["response"];
        let audio_out = match asked["output_modalities"].as_array() {
            Some(modalities) => modalities.iter().any(|m| m == "audio"),
            None => self.audio_out,
        };
        let arrival_ns = self.state.clock.now_ns();
        let plan = openai::plan_chat(self.chat(asked), &self.state.context())
            .map_err(|e: ApiError| ("invalid_value", e.message))?;
        let n = self.state.nonce.fetch_add(1, Ordering::Relaxed);
        let id = format!("resp_{n:016x}");
        let (item_id, _) = self.next_item();
        let active = Arc::new(AtomicBool::new(true));
        let modality = if audio_out { "audio" } else { "text" };
        let created = json!({"id": id, "object": "realtime.response", "status": "in_progress",
            "output": [], "output_modalities": [modality], "usage": null});
        self.out
            .send("response.created", json!({"response": created}));
        let format = Answer {
            out: self.out.clone(),
            response_id: id.clone(),
            item_id,
            audio: audio_out.then(|| token_audio(&self.state)),
            text: String::new(),
            audio_seconds: 0.0,
            opened: false,
            conversation: self.conversation.clone(),
            active: active.clone(),
        };
        let hash = request_hash(event.to_string().as_bytes());
        let events = stream_events(&self.state, plan, format, arrival_ns, hash);
        let out = self.out.clone();
        let task = tokio::spawn(async move {
            futures_util::pin_mut!(events);
            while let Some(Ok(lines)) = events.next().await {
                for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    let _ = out.tx.send(String::from_utf8_lossy(line).into_owned());
                }
            }
        });
        self.responding = Some((id, task, active));
        Ok(())
    }

    /// The conversation as a chat request, with the response's limits.
    fn chat(&self, asked: &Value) -> ChatRequest {
        let mut messages = Vec::new();
        let instructions = asked["instructions"].as_str().map(str::to_owned);
        if let Some(instructions) = instructions.or_else(|| self.instructions.clone()) {
            messages.push(Message {
                role: "system".into(),
                content: Some(Content::Text(instructions)),
                tool_calls: None,
            });
        }
        messages.extend(
            self.conversation
                .lock()
                .expect("the conversation is pushed whole")
                .iter()
                .cloned(),
        );
        ChatRequest {
            messages,
            sampling: Sampling {
                model: None,
                stream: true,
                stream_options: None,
                max_tokens: asked["max_output_tokens"].as_u64().map(|n| n as u32),
                max_completion_tokens: None,
                temperature: None,
                seed: None,
                stop: None,
                n: None,
            },
            tools: None,
            tool_choice: None,
            reasoning_effort: None,
            // The Realtime API streams no reasoning.
            reasoning_tokens: Some(0),
        }
    }

    fn cancel(&mut self) -> Result<(), (&'static str, String)> {
        let Some((id, task, active)) = self.responding.take() else {
            return Err((
                "response_cancel_not_active",
                "there is no active response to cancel".into(),
            ));
        };
        if !active.swap(false, Ordering::AcqRel) {
            return Err((
                "response_cancel_not_active",
                format!("response {id} is already done"),
            ));
        }
        task.abort();
        let response = json!({"id": id, "object": "realtime.response", "status": "cancelled",
            "status_details": {"type": "cancelled", "reason": "client_cancelled"},
            "output": [], "usage": null});
        self.out
            .send("response.done", json!({"response": response}));
        Ok(())
    }
}

/// One token's audio, base64: 1 ÷ `words_per_second` seconds of PCM16.
fn token_audio(state: &SimState) -> (Arc<str>, f64) {
    let seconds = 1.0 / state.profile().media.words_per_second;
    let pcm = speech_audio(seconds, false);
    let encoded = base64::engine::general_purpose::STANDARD.encode(&pcm);
    (encoded.into(), seconds)
}

/// The input transcript's deltas, the first at `first`, the rest spread evenly until
/// `done`, then `…input_audio_transcription.completed`.
async fn transcribe(
    out: Out,
    item_id: String,
    text: String,
    seconds: f64,
    first: Instant,
    done: Instant,
) {
    let deltas = transcript_deltas(&text);
    let every = done.saturating_duration_since(first) / deltas.len().max(1) as u32;
    for (i, delta) in deltas.into_iter().enumerate() {
        tokio::time::sleep_until((first + every * i as u32).into()).await;
        out.send(
            "conversation.item.input_audio_transcription.delta",
            json!({"item_id": item_id, "content_index": 0, "delta": delta}),
        );
    }
    tokio::time::sleep_until(done.into()).await;
    let usage = json!({"type": "duration", "seconds": seconds});
    out.send(
        "conversation.item.input_audio_transcription.completed",
        json!({"item_id": item_id, "content_index": 0, "transcript": text, "usage": usage}),
    );
}

/// Writes one response as the Realtime API's events, a line each.
struct Answer {
    out: Out,
    response_id: String,
    item_id: String,
    /// One token's audio and its seconds, for an audio answer.
    audio: Option<(Arc<str>, f64)>,
    text: String,
    audio_seconds: f64,
    opened: bool,
    conversation: Arc<Mutex<Vec<Message>>>,
    active: Arc<AtomicBool>,
}

impl Answer {
    fn event(&self, kind: &str, mut data: Value, out: &mut String) {
        data["response_id"] = json!(self.response_id);
        out.push_str(&self.out.event(kind, data));
        out.push('\n');
    }

    fn at(&self) -> Value {
        json!({"item_id": self.item_id, "output_index": 0, "content_index": 0})
    }

    fn with(&self, more: Value) -> Value {
        let mut data = self.at();
        for (k, v) in more.as_object().into_iter().flatten() {
            data[k] = v.clone();
        }
        data
    }

    fn part(&self) -> Value {
        match self.audio {
            Some(_) => json!({"type": "audio", "transcript": self.text}),
            None => json!({"type": "text", "text": self.text}),
        }
    }

    fn item(&self, status: &str) -> Value {
        let content = match self.audio {
            Some(_) => json!([{"type": "output_audio", "transcript": self.text}]),
            None => json!([{"type": "output_text", "text": self.text}]),
        };
        json!({"id": self.item_id, "type": "message", "object": "realtime.item",
            "status": status, "role": "assistant", "content": content})
    }

    fn open(&mut self, out: &mut String) {
        self.opened = true;
        let item = json!({"output_index": 0, "item": self.item("in_progress")});
        self.event("response.output_item.added", item, out);
        let part = self.with(json!({"part": self.part()}));
        self.event("response.content_part.added", part, out);
    }
}

impl Format for Answer {
    fn stream_type(&self) -> &'static str {
        "application/json"
    }

    fn token(&mut self, _index: u32, delta: &str) -> Option<axum::body::Bytes> {
        let mut out = String::new();
        if !self.opened {
            self.open(&mut out);
        }
        self.text.push_str(delta);
        match self.audio.clone() {
            Some((pcm, seconds)) => {
                let said = self.with(json!({"delta": delta}));
                self.event("response.output_audio_transcript.delta", said, &mut out);
                self.audio_seconds += seconds;
                let audio = self.with(json!({"delta": &*pcm}));
                self.event("response.output_audio.delta", audio, &mut out);
            }
            None => {
                let data = self.with(json!({"delta": delta}));
                self.event("response.output_text.delta", data, &mut out);
            }
        }
        Some(out.into())
    }

    fn finish(
        &mut self,
        reason: FinishReason,
        t: &Timeline,
        mut truth: Value,
    ) -> axum::body::Bytes {
        let mut out = String::new();
        if !self.opened {
            self.open(&mut out);
        }
        let text = self.text.clone();
        if self.audio.is_some() {
            self.event("response.output_audio.done", self.at(), &mut out);
            let done = self.with(json!({"transcript": text}));
            self.event("response.output_audio_transcript.done", done, &mut out);
        } else {
            let done = self.with(json!({"text": text}));
            self.event("response.output_text.done", done, &mut out);
        }
        let part = self.with(json!({"part": self.part()}));
        self.event("response.content_part.done", part, &mut out);
        let item = json!({"output_index": 0, "item": self.item("completed")});
        self.event("response.output_item.done", item, &mut out);
        let (status, details) = match reason {
            FinishReason::Length => (
                "incomplete",
                json!({"type": "incomplete", "reason": "max_output_tokens"}),
            ),
            _ => ("completed", Value::Null),
        };
        truth["audio_seconds"] = json!(self.audio_seconds);
        let response = json!({"id": self.response_id, "object": "realtime.response",
            "status": status, "status_details": details, "output": [self.item("completed")],
            "usage": self.usage(t)});
        // Cancelled meanwhile: the cancel said so already.
        if self.active.swap(false, Ordering::AcqRel) {
            self.event(
                "response.done",
                json!({"response": response, "redline": truth}),
                &mut out,
            );
        }
        self.conversation
            .lock()
            .expect("the conversation is pushed whole")
            .push(Message {
                role: "assistant".into(),
                content: Some(Content::Text(text)),
                tool_calls: None,
            });
        out.into()
    }

    fn broken(&self) -> axum::body::Bytes {
        self.active.store(false, Ordering::Release);
        let mut out = String::new();
        let error = json!({"type": "server_error", "code": "engine_gone",
            "message": "the engine stopped before the response finished"});
        self.event("error", json!({"error": error}), &mut out);
        out.into()
    }

    fn whole(&self, _: &str, _: &str, _: FinishReason, _: &Timeline) -> Response {
        unreachable!("a realtime response always streams")
    }
}

impl Answer {
    /// The Realtime API's usage: the answer's tokens are audio or text, as it was.
    fn usage(&self, t: &Timeline) -> Value {
        let (audio, text) = match self.audio {
            Some(_) => (t.completion_tokens, 0),
            None => (0, t.completion_tokens),
        };
        json!({
            "total_tokens": t.prompt_tokens + t.completion_tokens,
            "input_tokens": t.prompt_tokens,
            "output_tokens": t.completion_tokens,
            "input_token_details": {"text_tokens": t.prompt_tokens, "audio_tokens": 0,
                "cached_tokens": t.cached_prompt_tokens},
            "output_token_details": {"text_tokens": text, "audio_tokens": audio},
        })
    }
}
