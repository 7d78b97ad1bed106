//! Answers on the wire, whatever the API: a planned request run on the engine and
//! written event by event as it streams (or whole), with the ground truth in its last
//! event and headers; JSON and error responses.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use super::engine::{Clock, Event};
use super::openai::{ApiError, Plan};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::FinishReason;

pub(super) fn error_response(error: ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, &error.body())
}

pub(super) fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        serde_json::to_string(body).expect("response bodies serialize"),
    )
        .into_response()
}

/// Now, in Unix seconds (the `created` of answers).
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// FNV-1a of a request body: ground truth of exactly what arrived, so two runs can be
/// shown to have sent the same bytes.
pub(super) fn request_hash(body: &[u8]) -> u64 {
    redline_base::seed::fnv64(body)
}

/// How an API writes an answer: event by event as it streams, or whole.
pub(super) trait Format: Send + 'static {
    /// The `Content-Type` of a streamed answer.
    fn stream_type(&self) -> &'static str;
    /// The event carrying one token; `None` when the API holds tokens back (Ollama's
    /// tool calls come whole).
    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes>;
    /// The last events: finish reason, counts, and the ground truth `truth`.
    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes;
    /// An in-band error for an engine that stopped mid-stream.
    fn broken(&self) -> Bytes;
    /// A whole (non-streamed) answer: its text, and the reasoning before it.
    fn whole(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response;
    /// The prompt is computed, `cached` of its tokens from the prefix cache: told
    /// before the first token's event.
    fn prefilled(&mut self, _cached: u32) {}
    /// Trailers after a streamed answer (gRPC's status).
    fn trailers(&self) -> Option<HeaderMap> {
        None
    }
}

/// Runs a planned request on the engine and answers it in `format`, streamed when the
/// plan says so.
pub(super) async fn answer(
    state: &SimState,
    plan: Plan,
    format: impl Format,
    arrival_ns: u64,
    request_hash: u64,
) -> Response {
    if plan.stream {
        let (content_type, trailers) = (format.stream_type(), format.trailers());
        let events = stream_events(state, plan, format, arrival_ns, request_hash);
        let body = match trailers {
            None => Body::from_stream(events),
            Some(trailers) => {
                let data = events.map(|bytes| bytes.map(Frame::data));
                let end = futures_util::stream::once(async { Ok(Frame::trailers(trailers)) });
                Body::new(http_body_util::StreamBody::new(data.chain(end)))
            }
        };
        return Response::builder()
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CACHE_CONTROL, "no-cache")
            .body(body)
            .expect("static headers are valid");
    }
    let reasoning = plan.generator.reasoning_length();
    state.metrics.planned(plan.tool_call.as_ref());
    let events = state.engine.submit(plan.prompt, plan.generator, arrival_ns);
    collect_answer(events, format, request_hash, reasoning).await
}

/// A planned, streamed request's events on the engine, in `format`.
pub(super) fn stream_events<F: Format>(
    state: &SimState,
    plan: Plan,
    format: F,
    arrival_ns: u64,
    request_hash: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + use<F> {
    state.metrics.planned(plan.tool_call.as_ref());
    let events = state.engine.submit(plan.prompt, plan.generator, arrival_ns);
    stream_answer(events, format, request_hash, state.clock)
}

/// What the final answer of a non-streaming request needs.
async fn collect_answer(
    mut events: UnboundedReceiver<Event>,
    format: impl Format,
    request_hash: u64,
    reasoning_tokens: u32,
) -> Response {
    let (mut text, mut reasoning) = (String::new(), String::new());
    while let Some(event) = events.recv().await {
        match event {
            Event::Token { index, delta, .. } if index < reasoning_tokens => {
                reasoning.push_str(&delta)
            }
            Event::Token { delta, .. } => text.push_str(&delta),
            Event::Finished { reason, timeline } => {
                let mut response = format.whole(&text, &reasoning, reason, &timeline);
                truth_headers(response.headers_mut(), &timeline);
                response
                    .headers_mut()
                    .insert("x-redline-request-hash", HeaderValue::from(request_hash));
                return response;
            }
        }
    }
    error_response(engine_gone())
}

pub(super) fn engine_gone() -> ApiError {
    ApiError {
        status: 500,
        kind: "InternalServerError",
        message: "the engine stopped before the request finished".into(),
    }
}

fn truth_headers(headers: &mut HeaderMap, t: &Timeline) {
    let us = |ns: u64| HeaderValue::from(ns / 1_000);
    headers.insert("x-redline-arrival-us", us(t.arrival_ns));
    headers.insert("x-redline-scheduled-us", us(t.scheduled_ns));
    headers.insert("x-redline-first-token-us", us(t.first_token_ns));
    headers.insert("x-redline-finish-us", us(t.finish_ns));
    headers.insert("x-redline-preemptions", HeaderValue::from(t.preemptions));
    headers.insert(
        "x-redline-cached-tokens",
        HeaderValue::from(t.cached_prompt_tokens),
    );
    headers.insert(
        "x-redline-prompt-tokens",
        HeaderValue::from(t.prompt_tokens),
    );
    headers.insert(
        "x-redline-completion-tokens",
        HeaderValue::from(t.completion_tokens),
    );
}

/// The ground truth object carried by the final event, with when the first token's
/// event was handed to the connection (engine ns) when there was one.
fn truth_json(t: &Timeline, request_hash: u64, first_token_sent_ns: Option<u64>) -> Value {
    let mut truth = json!({
        "request_hash": request_hash,
        "arrival_us": t.arrival_ns / 1_000,
        "scheduled_us": t.scheduled_ns / 1_000,
        "first_token_us": t.first_token_ns / 1_000,
        "finish_us": t.finish_ns / 1_000,
        "preempted": t.preemptions > 0,
        "preemptions": t.preemptions,
        "cached_prompt_tokens": t.cached_prompt_tokens,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
    });
    if t.reasoning_tokens > 0 {
        truth["reasoning_tokens"] = json!(t.reasoning_tokens);
        if t.first_answer_ns > 0 {
            truth["first_answer_us"] = json!(t.first_answer_ns / 1_000);
        }
    }
    if let Some(ns) = first_token_sent_ns {
        truth["first_token_sent_us"] = json!(ns / 1_000);
    }
    truth
}

pub(super) fn usage_json(t: &Timeline) -> Value {
    let mut usage = json!({
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "total_tokens": t.prompt_tokens + t.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": t.cached_prompt_tokens},
    });
    if t.reasoning_tokens > 0 {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": t.reasoning_tokens});
    }
    usage
}

fn stream_answer<F: Format>(
    events: UnboundedReceiver<Event>,
    format: F,
    request_hash: u64,
    clock: Clock,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let start: Option<(UnboundedReceiver<Event>, F, Option<u64>)> = Some((events, format, None));
    futures_util::stream::unfold(start, move |state| async move {
        let (mut events, mut format, mut first_token_sent_ns) = state?;
        loop {
            match events.recv().await {
                Some(Event::Token {
                    index,
                    delta,
                    cached,
                }) => {
                    if index == 0 {
                        format.prefilled(cached);
                    }
                    let Some(bytes) = format.token(index, &delta) else {
                        continue;
                    };
                    // The connection writes what this stream yields when it polls it:
                    // the first token's event leaves the server about now.
                    first_token_sent_ns.get_or_insert_with(|| clock.now_ns());
                    return Some((Ok(bytes), Some((events, format, first_token_sent_ns))));
                }
                Some(Event::Finished { reason, timeline }) => {
                    let truth = truth_json(&timeline, request_hash, first_token_sent_ns);
                    return Some((Ok(format.finish(reason, &timeline, truth)), None));
                }
                None => return Some((Ok(format.broken()), None)),
            }
        }
    })
}

/// `text` as a JSON string literal, escaped, without building a `Value`.
pub(super) fn json_string(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    serde_json::to_writer(&mut out, text).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}
