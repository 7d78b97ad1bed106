//! The LLM client: OpenAI-compatible chat and text completions, TGI's, Ollama's and
//! KServe v2's native APIs ([`super::dialect`] says how each differs), streamed (SSE or
//! newline-delimited JSON) or not, over a keep-alive hyper pool. Fills a [`Record`]
//! with timing marks and a typed outcome; never panics on what a server sends.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Request, Response, Uri};
use serde_json::Value;

use super::dialect::LlmApi;
use super::grpc::MessageFramer;
use super::ndjson::LineDecoder;
use super::order::EventOrder;
use super::piece::{Piece, error_text};
use super::sse::{SseDecoder, SseError};
use super::{HttpClient, RunClock, Timeouts};

use crate::record::{Exchange, FailStage, Outcome, Record, ServerTruth, TokenSource};
use crate::tokenizer::TokenCounting;
use crate::workload::payload::Payload;

/// Everything about the endpoint that does not change between requests.
#[derive(Debug, Clone)]
pub struct LlmTarget {
    /// The API's path on the server (`LlmApi::path`).
    pub uri: Uri,
    pub api: LlmApi,
    pub model: String,
    pub stream: bool,
    /// Ask for `usage` in the stream (`stream_options.include_usage`).
    pub include_usage: bool,
    /// `Authorization: Bearer …` (sensitive); never recorded.
    pub api_key: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Merged into every request body (e.g. `temperature`, `ignore_eos`).
    pub extra_body: serde_json::Map<String, Value>,
    pub timeouts: Timeouts,
    /// Largest response body read, in bytes.
    pub max_response_bytes: usize,
    /// Counts the output when the server sends no usage (or always, when asked).
    pub counting: TokenCounting,
}

impl LlmTarget {
    /// The JSON body of a request.
    pub fn body(&self, payload: &Payload) -> Value {
        self.api.body(
            &self.model,
            self.stream,
            self.include_usage,
            payload,
            &self.extra_body,
        )
    }

    fn request(&self, payload: &Payload) -> Request<Full<Bytes>> {
        let mut builder = Request::post(self.uri.clone());
        builder = match self.api.is_grpc() {
            true => builder
                .header(CONTENT_TYPE, "application/grpc")
                .header(hyper::header::TE, "trailers"),
            false => builder.header(CONTENT_TYPE, "application/json"),
        };
        if self.api == LlmApi::Anthropic {
            builder = anthropic_headers(builder, self.api_key.as_ref(), &self.headers);
        } else if let Some(key) = &self.api_key {
            builder = builder.header(AUTHORIZATION, key);
        }
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if let Some(traceparent) = &payload.traceparent {
            builder = builder.header("traceparent", traceparent);
        }
        let body = self.api.body_bytes(
            &self.model,
            self.stream,
            self.include_usage,
            payload,
            &self.extra_body,
        );
        builder
            .body(Full::new(body))
            .expect("URI and headers were validated when the target was built")
    }
}

/// Anthropic's headers: the key as `x-api-key` (not a bearer token), and the API's
/// version unless the spec's headers name one.
fn anthropic_headers(
    mut builder: hyper::http::request::Builder,
    key: Option<&HeaderValue>,
    headers: &[(HeaderName, HeaderValue)],
) -> hyper::http::request::Builder {
    if let Some(key) = key {
        let raw = key.as_bytes();
        let raw = raw.strip_prefix(b"Bearer ").unwrap_or(raw);
        if let Ok(mut value) = HeaderValue::from_bytes(raw) {
            value.set_sensitive(true);
            builder = builder.header("x-api-key", value);
        }
    }
    if !headers.iter().any(|(name, _)| name == "anthropic-version") {
        builder = builder.header("anthropic-version", super::anthropic::VERSION);
    }
    builder
}

/// Sends one request and fills `record` with what happened.
///
/// Returns the answer's text when the request succeeded (a session sends it back as
/// history with its next turn).
pub async fn call(
    http: &HttpClient,
    target: &LlmTarget,
    payload: &Payload,
    clock: RunClock,
    record: &mut Record,
) -> Option<Answer> {
    let request = target.request(payload);
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let total_deadline = sent + target.timeouts.total;
    let first_deadline = total_deadline.min(sent + target.timeouts.first_token);
    let timeout = "no response headers before the deadline";
    let response = super::send_until(http, request, first_deadline, timeout, clock, record).await?;
    read_truth_headers(&response, record);
    if let Some(reported) = target.api.reported_in_headers(response.headers()) {
        record.server_reported = Some(reported);
    }
    let mut reader = Reader {
        target,
        clock,
        record,
        first_deadline,
        total_deadline,
        other: String::new(),
        thought: String::new(),
        answer: String::new(),
        tool_calls: Vec::new(),
        last_content: None,
        itl_sum_us: 0,
        order: EventOrder::default(),
        response_id: None,
    };
    reader.read(response, payload).await;
    if reader.record.seq < Exchange::FIRST_SEQS {
        let exchange = Exchange::new(payload.prompt.user_text(), &reader.answer);
        reader.record.exchange = Some(Box::new(exchange));
    }
    (reader.record.outcome == Outcome::Ok).then_some(Answer {
        text: reader.answer,
        tool_calls: reader.tool_calls,
        response_id: reader.response_id,
    })
}

/// What a successful answer said: its text and the tools it called.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The answer's content (not reasoning, not tool arguments).
    pub text: String,
    /// Tool calls, assembled from streamed deltas by their index.
    pub tool_calls: Vec<ToolCallParts>,
    /// The Responses API's id of this answer, for `previous_response_id`.
    pub response_id: Option<String>,
}

/// One tool call of an answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallParts {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text, unchecked).
    pub arguments: String,
}

/// A request failed while reading; the record already says how.
struct Failed;

struct Reader<'a> {
    target: &'a LlmTarget,
    clock: RunClock,
    record: &'a mut Record,
    first_deadline: Instant,
    total_deadline: Instant,
    /// What was generated besides the answer and reasoning, for counting tokens: tool
    /// arguments. (Kept apart so a long answer is copied once, not twice.)
    other: String,
    /// The reasoning text, counted on its own when the server does not say.
    thought: String,
    /// The answer's content alone.
    answer: String,
    tool_calls: Vec<ToolCallParts>,
    last_content: Option<Instant>,
    itl_sum_us: u64,
    /// The typed event stream's order so far (Responses, Messages).
    order: EventOrder,
    /// The Responses API's id of the answer.
    response_id: Option<String>,
}

/// What one chunk carried.
#[derive(Debug, Default, PartialEq)]
struct Content {
    answer: bool,
    reasoning: bool,
}

impl Reader<'_> {
    async fn read(&mut self, response: Response<Incoming>, payload: &Payload) {
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let limit = self.target.max_response_bytes;
        let grpc = crate::grpc::is_grpc(content_type.as_bytes());
        let mut ended_in_head = false;
        if grpc {
            if let Some(status) = tonic::Status::from_header_map(response.headers()) {
                ended_in_head = true;
                if status.code() != tonic::Code::Ok {
                    // A trailers-only answer: the call was refused before any message.
                    let kind = super::grpc::status_kind(status.code());
                    let message = status.message().to_owned();
                    return self
                        .record
                        .fail(Outcome::Error, FailStage::FirstByte, &kind, message);
                }
            }
        }
        let frames = if grpc {
            Some(Frames::Grpc(MessageFramer::new(limit)))
        } else if content_type.starts_with("text/event-stream") {
            Some(Frames::Sse(SseDecoder::new(limit)))
        } else if content_type.starts_with("application/x-ndjson")
            || (self.target.stream && self.target.api.streams_lines())
        {
            Some(Frames::Lines(LineDecoder::new(limit)))
        } else {
            None
        };
        let mut body = response.into_body();
        if !status.is_success() {
            let bytes = self.collect(&mut body, 64 << 10).await.unwrap_or_default();
            let kind = super::status_kind(status.as_u16());
            self.record.last_byte_us = Some(self.clock.now_us());
            self.record.fail(
                Outcome::Error,
                FailStage::FirstByte,
                kind,
                format!("HTTP {status}: {}", error_message(&bytes)),
            );
            return;
        }
        match frames {
            Some(frames) => self.read_stream(&mut body, frames, ended_in_head).await,
            None => self.read_whole(&mut body).await,
        }
        self.finish(payload).await;
    }

    /// Reads a whole body within the total deadline; `None` after recording why not.
    async fn collect(&mut self, body: &mut Incoming, limit: usize) -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        loop {
            let frame =
                match tokio::time::timeout_at(self.total_deadline.into(), body.frame()).await {
                    Err(_) => {
                        self.record.fail(
                            Outcome::Timeout,
                            FailStage::Stream,
                            "timeout",
                            "body not complete before the total timeout",
                        );
                        return None;
                    }
                    Ok(None) => return Some(bytes),
                    Ok(Some(Err(error))) => {
                        self.record.fail(
                            Outcome::Error,
                            FailStage::Stream,
                            "reset",
                            format!("body broken: {error}"),
                        );
                        return None;
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
            if self.record.first_byte_us.is_none() {
                self.record.first_byte_us = Some(self.clock.now_us());
            }
            if let Some(data) = frame.data_ref() {
                if bytes.len() + data.len() > limit {
                    self.record.fail(
                        Outcome::Error,
                        FailStage::Stream,
                        "too_large",
                        format!("response larger than {limit} bytes"),
                    );
                    return None;
                }
                bytes.extend_from_slice(data);
            }
        }
    }

    async fn read_whole(&mut self, body: &mut Incoming) {
        let Some(bytes) = self.collect(body, self.target.max_response_bytes).await else {
            return;
        };
        self.record.last_byte_us = Some(self.clock.now_us());
        let piece = match self.target.api.decode(&bytes, false, &mut self.order) {
            Ok(piece) => piece,
            Err(error) => {
                self.record.fail(
                    Outcome::Error,
                    FailStage::Decode,
                    error.kind(),
                    format!("the response is {error}: {}", preview(&bytes)),
                );
                return;
            }
        };
        if let Some(error) = &piece.error {
            let what = format!("server error: {error}");
            return self
                .record
                .fail(Outcome::Error, FailStage::Decode, "server_error", what);
        }
        self.absorb(piece, None);
    }

    /// Reads a streamed answer; `grpc_ok` when a gRPC answer's OK status came in its
    /// head (trailers-only), else it comes in the trailers.
    async fn read_stream(&mut self, body: &mut Incoming, mut decoder: Frames, mut grpc_ok: bool) {
        let mut done = false;
        // One timer for the whole stream, re-armed lazily: when it fires, the real
        // deadline (which moves with every frame) is checked, and the timer is set to
        // it if it has not passed. A timer per frame would cost a timer-wheel insert
        // and removal for every token.
        let mut last_frame = Instant::now();
        let (first_deadline, total_deadline) = (self.first_deadline, self.total_deadline);
        let between = self.target.timeouts.between_tokens;
        let deadline = move |last_content: Option<Instant>, last_frame: Instant| match last_content
        {
            None => first_deadline,
            Some(_) => total_deadline.min(last_frame + between),
        };
        let timer = tokio::time::sleep_until(self.first_deadline.into());
        tokio::pin!(timer);
        loop {
            let frame = tokio::select! {
                biased;
                frame = body.frame() => frame,
                _ = &mut timer => {
                    let due = deadline(self.last_content, last_frame);
                    if Instant::now() < due {
                        timer.as_mut().reset(due.into());
                        continue;
                    }
                    return self.timed_out();
                }
            };
            let frame = match frame {
                None => break,
                Some(Err(error)) => {
                    self.record.last_byte_us = Some(self.clock.now_us());
                    let what = format!("stream broken: {error}");
                    return self
                        .record
                        .fail(Outcome::Error, FailStage::Stream, "reset", what);
                }
                Some(Ok(frame)) => frame,
            };
            let at = Instant::now();
            last_frame = at;
            if self.record.first_byte_us.is_none() {
                self.record.first_byte_us = Some(self.clock.us(at));
            }
            if let Some(trailers) = frame.trailers_ref() {
                if self.grpc_status(trailers).is_err() {
                    return;
                }
                grpc_ok = true;
                continue;
            }
            let Some(data) = frame.data_ref() else {
                continue;
            };
            self.record.last_byte_us = Some(self.clock.us(at));
            decoder.feed(data);
            if self.take_events(&mut decoder, at, &mut done).is_err() {
                return;
            }
        }
        // KServe's HTTP stream has no end marker. A gRPC call ends with its OK status
        // whatever its messages said (Triton's final response too), as gRPC's own
        // clients hold: without it the call failed.
        let whole = !decoder.has_partial();
        let ended = match decoder {
            Frames::Grpc(_) => grpc_ok && whole,
            _ => done || (self.target.api.ends_with_body() && whole),
        };
        if !ended {
            self.ended_early(&decoder);
        }
    }

    /// A gRPC call's status from its trailers: OK, or `Err` with the record failed
    /// (`grpc_<code>`, or `truncated` when the trailers hold no status).
    fn grpc_status(&mut self, trailers: &hyper::HeaderMap) -> Result<(), Failed> {
        let (kind, message) = match tonic::Status::from_header_map(trailers) {
            Some(status) if status.code() == tonic::Code::Ok => return Ok(()),
            Some(status) => (
                super::grpc::status_kind(status.code()),
                status.message().to_owned(),
            ),
            None => (
                "truncated".to_owned(),
                "the trailers hold no grpc-status".to_owned(),
            ),
        };
        self.record
            .fail(Outcome::Error, FailStage::Stream, &kind, message);
        Err(Failed)
    }

    /// Records which timeout ended the stream.
    fn timed_out(&mut self) {
        let (stage, what) = if self.last_content.is_none() {
            (
                FailStage::FirstToken,
                "no content token before the first-token timeout",
            )
        } else if Instant::now() >= self.total_deadline {
            (
                FailStage::Stream,
                "stream not finished before the total timeout",
            )
        } else {
            (
                FailStage::Stream,
                "no event within the between-tokens timeout",
            )
        };
        self.record.fail(Outcome::Timeout, stage, "timeout", what);
    }

    /// Takes every whole event the decoder holds; `Err` when one failed the request
    /// (the record says how).
    fn take_events(
        &mut self,
        decoder: &mut Frames,
        at: Instant,
        done: &mut bool,
    ) -> Result<(), Failed> {
        while let Some(data) = decoder.next() {
            let data = match data {
                Ok(data) => data,
                Err(broken) => {
                    let (stage, class, message) = match broken {
                        Broken::Sse(error @ SseError::TooLarge { .. }) => {
                            (FailStage::Stream, "too_large", error.to_string())
                        }
                        Broken::Sse(error @ SseError::NotUtf8) => {
                            (FailStage::Decode, "invalid_utf8", error.to_string())
                        }
                        Broken::Grpc(kind, message) => (FailStage::Decode, kind, message),
                    };
                    self.record.fail(Outcome::Error, stage, class, message);
                    return Err(Failed);
                }
            };
            if data == b"[DONE]" {
                *done = true;
                continue;
            }
            let streamed = self.target.api.event_is_streamed(self.target.stream);
            match self.target.api.decode(&data, streamed, &mut self.order) {
                Ok(piece) => {
                    if let Some(error) = &piece.error {
                        let what = format!("server error in stream: {error}");
                        self.record
                            .fail(Outcome::Error, FailStage::Stream, "stream_error", what);
                        return Err(Failed);
                    }
                    *done |= piece.done;
                    // A whole answer framed as a message (gRPC) has no token timing.
                    self.absorb(piece, streamed.then_some(at));
                }
                Err(error) => {
                    let what = format!("an event is {error}: {}", preview(&data));
                    self.record
                        .fail(Outcome::Error, FailStage::Decode, error.kind(), what);
                    return Err(Failed);
                }
            }
        }
        Ok(())
    }

    /// The body ended without `[DONE]` (or the API's last event): a cut answer, or
    /// only the marker missing.
    fn ended_early(&mut self, decoder: &Frames) {
        let (class, what) = if decoder.has_partial() || self.record.finish_reason.is_none() {
            (
                "truncated",
                "stream ended before the answer was complete (no finish reason, no end marker)",
            )
        } else if let Frames::Grpc(_) = decoder {
            (
                "missing_done",
                "stream ended without its gRPC status (no trailers)",
            )
        } else {
            ("missing_done", "stream ended without [DONE]")
        };
        self.record
            .fail(Outcome::Error, FailStage::Stream, class, what);
    }

    /// Takes what an event (or a whole response) carries into the record.
    fn absorb(&mut self, piece: Piece, at: Option<Instant>) {
        if let Some(n) = piece.completion_tokens {
            self.record.output_tokens = Some(n);
            self.record.token_source = Some(TokenSource::Usage);
        }
        if let Some(n) = piece.prompt_tokens {
            self.record.input_tokens = Some(n);
        }
        if let Some(n) = piece.reasoning_tokens {
            self.record.reasoning_tokens = Some(n);
        }
        if let Some(id) = piece.response_id {
            self.response_id = Some(id);
        }
        if let Some(n) = piece.cached_tokens {
            self.record.cached_tokens = Some(n);
        }
        if let Some(n) = piece.cache_write_tokens {
            self.record.cache_write_tokens = Some(n);
        }
        if let Some(truth) = piece.truth {
            self.record.server = Some(truth);
        }
        if let Some(reported) = piece.reported {
            self.record.server_reported = Some(reported);
        }
        if let Some(reason) = piece.finish_reason {
            self.record.finish_reason = Some(reason.into_owned());
        }
        let mut content = Content::default();
        if let Some(text) = &piece.answer {
            self.answer.push_str(text);
            content.answer = true;
        }
        if let Some(reasoning) = &piece.reasoning {
            self.thought.push_str(reasoning);
            content.reasoning = true;
        }
        for (position, call) in piece.tool_calls.iter().enumerate() {
            // Streamed calls arrive in pieces under their `index`; a whole message
            // lists them in order.
            let index = call["index"].as_u64().map_or(position, |i| i as usize);
            if self.tool_calls.len() <= index {
                self.tool_calls
                    .resize_with(index + 1, ToolCallParts::default);
            }
            let assembled = &mut self.tool_calls[index];
            if let Some(id) = call["id"].as_str() {
                assembled.id.push_str(id);
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                assembled.name.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                self.other.push_str(arguments);
                assembled.arguments.push_str(arguments);
            }
            content.answer = true;
        }
        let Some(at) = at else {
            return; // a whole response: no per-token timing to take
        };
        if !(content.answer || content.reasoning) {
            return;
        }
        let at_us = self.clock.us(at);
        self.record.content_events += 1;
        match self.record.content_events {
            1 => self.record.first_token_us = Some(at_us),
            2 => self.record.second_token_us = Some(at_us),
            _ => {}
        }
        if content.reasoning && self.record.first_reasoning_us.is_none() {
            self.record.first_reasoning_us = Some(at_us);
        }
        if content.answer && self.record.first_answer_us.is_none() {
            self.record.first_answer_us = Some(at_us);
        }
        if let Some(previous) = self.last_content {
            let gap = at.saturating_duration_since(previous).as_micros() as u64;
            self.itl_sum_us += gap;
            self.record.itl_us.push(gap.min(u64::from(u32::MAX)) as u32);
        }
        self.last_content = Some(at);
    }

    async fn finish(&mut self, payload: &Payload) {
        self.record.max_tokens = payload.max_tokens;
        let had_text =
            !(self.answer.is_empty() && self.other.is_empty() && self.thought.is_empty());
        let counting = &self.target.counting;
        let wanted = self.record.output_tokens.is_none() || counting.always;
        if self.record.reasoning_tokens.is_none() && !self.thought.is_empty() {
            // Anthropic's usage, and chat servers without `completion_tokens_details`,
            // count thinking only within the output.
            let (counted, thought) = counting.count(std::mem::take(&mut self.thought)).await;
            self.thought = thought;
            self.record.reasoning_tokens = counted.map(|n| n as u32);
        }
        if self.record.outcome == Outcome::Ok && wanted {
            let text = [
                self.answer.as_str(),
                self.thought.as_str(),
                self.other.as_str(),
            ]
            .concat();
            let bytes = text.len();
            let (counted, text) = counting.count(text).await;
            if self.record.output_tokens.is_none() && counted.is_some() {
                // Kept for the end of the run, when a better count may be had (the
                // server's own tokenizer).
                self.record.answer = Some(text);
            }
            match counted {
                Some(local) => {
                    let local = local as u32;
                    self.record.output_tokens_local = Some(local);
                    if self.record.output_tokens.is_none() {
                        self.record.output_tokens = Some(local);
                        self.record.token_source = Some(if counting.named {
                            TokenSource::Tokenizer
                        } else {
                            TokenSource::Estimated
                        });
                    }
                }
                None if self.record.output_tokens.is_none() => {
                    self.record.token_source = Some(TokenSource::Skipped);
                    self.record.token_note = Some(format!(
                        "an answer of {bytes} bytes is over limits.max_local_count_bytes ({}): not counted",
                        counting.max_bytes
                    ));
                }
                None => {}
            }
        }
        if self.record.input_tokens.is_none() {
            self.record.input_tokens = Some(payload.input_tokens);
        }
        if self.record.content_events > 1 {
            self.record.itl_mean_us =
                Some(self.itl_sum_us / u64::from(self.record.content_events - 1));
        }
        if self.record.outcome == Outcome::Ok
            && !had_text
            && self.record.output_tokens.unwrap_or(0) == 0
        {
            self.record.fail(
                Outcome::Error,
                FailStage::Stream,
                "empty_output",
                "the answer has no content",
            );
        }
    }
}

/// How a streamed answer is cut into events.
enum Frames {
    Sse(SseDecoder),
    /// Newline-delimited JSON (Ollama).
    Lines(LineDecoder),
    /// gRPC messages (KServe's `ModelStreamInfer`).
    Grpc(MessageFramer),
}

/// Why the stream's framing failed.
enum Broken {
    Sse(SseError),
    /// A failure kind and its message.
    Grpc(&'static str, String),
}

impl Frames {
    fn feed(&mut self, data: &[u8]) {
        match self {
            Frames::Sse(decoder) => decoder.feed(data),
            Frames::Lines(decoder) => decoder.feed(data),
            Frames::Grpc(framer) => framer.feed(data),
        }
    }

    /// The data of the next whole event.
    fn next(&mut self) -> Option<Result<Vec<u8>, Broken>> {
        match self {
            Frames::Sse(decoder) => decoder
                .next_event()
                .map(|e| e.map(|e| e.data.into_bytes()).map_err(Broken::Sse)),
            Frames::Lines(decoder) => decoder
                .next_line()
                .map(|l| l.map(String::into_bytes).map_err(Broken::Sse)),
            Frames::Grpc(framer) => framer.next_message().map(|m| {
                m.map(|m| m.to_vec())
                    .map_err(|(kind, why)| Broken::Grpc(kind, why))
            }),
        }
    }

    fn has_partial(&self) -> bool {
        match self {
            Frames::Sse(decoder) => decoder.has_partial(),
            Frames::Lines(decoder) => decoder.has_partial(),
            Frames::Grpc(framer) => framer.has_partial(),
        }
    }
}

fn read_truth_headers(response: &Response<Incoming>, record: &mut Record) {
    let get =
        |name: &str| -> Option<u64> { response.headers().get(name)?.to_str().ok()?.parse().ok() };
    if let (Some(arrival_us), Some(first_token_us), Some(finish_us)) = (
        get("x-redline-arrival-us"),
        get("x-redline-first-token-us"),
        get("x-redline-finish-us"),
    ) {
        record.server = Some(ServerTruth {
            arrival_us,
            scheduled_us: get("x-redline-scheduled-us").unwrap_or(arrival_us),
            first_token_us,
            finish_us,
            preemptions: get("x-redline-preemptions").unwrap_or(0) as u32,
            cached_prompt_tokens: get("x-redline-cached-tokens").unwrap_or(0) as u32,
            prompt_tokens: get("x-redline-prompt-tokens").unwrap_or(0) as u32,
            completion_tokens: get("x-redline-completion-tokens").unwrap_or(0) as u32,
            request_hash: get("x-redline-request-hash").unwrap_or(0),
            first_token_sent_us: None,
            first_answer_us: None,
            reasoning_tokens: None,
        });
    }
}

/// The `error.message` of an error body, or its first bytes.
pub(super) fn error_message(bytes: &[u8]) -> String {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .map(|v| error_text(v.get("error").unwrap_or(&v)))
        .unwrap_or_else(|| preview(bytes))
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    if bytes.len() > 200 {
        format!("{text}…")
    } else {
        text.into_owned()
    }
}
