//! Anthropic's Messages API (`POST /v1/messages`): blocks, tools and `thinking` read
//! into a chat request (the same template, tool choice and limits), the answer
//! written as Anthropic's events — `message_start`, a `thinking` block (with its
//! signature), a `text` or `tool_use` block, `message_delta` with the stop reason and
//! cumulative usage, `message_stop` with the ground truth — or whole.
//!
//! Prompt caching as Anthropic accounts it: only the prompt up to the last
//! `cache_control` breakpoint is cacheable. Of it, what the engine's prefix cache held
//! is `cache_read_input_tokens`, the rest `cache_creation_input_tokens`, and
//! `input_tokens` is what is left after the breakpoint. (Anthropic caches nothing
//! below 1,024 tokens; the simulator has no minimum, so short prompts show caching.)

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{Format, answer, engine_gone, json_response, request_hash};
use super::openai::{
    self, ApiError, ChatRequest, Content, Function, Message, Sampling, Stop, Tool,
};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::{FinishReason, ToolCall};
use redline_base::sim_tokenizer;

/// The smallest thinking budget Anthropic accepts.
const MIN_THINKING_BUDGET: u32 = 1024;

/// A `POST /v1/messages` body; fields the simulator has no use for are ignored.
#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: Option<String>,
    max_tokens: Option<u32>,
    messages: Vec<AnthropicMessage>,
    system: Option<Blocks>,
    #[serde(default)]
    stream: bool,
    temperature: Option<f64>,
    stop_sequences: Option<Vec<String>>,
    tools: Option<Vec<AnthropicTool>>,
    tool_choice: Option<Value>,
    thinking: Option<Thinking>,
    /// The simulator's own field: how many tokens to reason (within the budget).
    reasoning_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct AnthropicMessage {
    role: String,
    content: Blocks,
}

/// Content: a text, or a list of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Blocks {
    Text(String),
    List(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct AnthropicTool {
    name: String,
    input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: String,
    budget_tokens: Option<u32>,
}

/// An error as Anthropic writes it: `{"type": "error", "error": {"type", "message"}}`.
fn anthropic_error(error: ApiError) -> Response {
    let kind = match error.status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": error.message}});
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, &body).into_response()
}

pub(super) async fn create(
    State(state): State<Arc<SimState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrival_ns = state.clock.now_ns();
    if !headers.contains_key("anthropic-version") {
        return anthropic_error(ApiError::bad_request(
            "anthropic-version: header is required",
        ));
    }
    let planned = openai::parse(&body)
        .and_then(|request| chat_request(request, state.profile()))
        .and_then(|(chat, cacheable)| Ok((openai::plan_chat(chat, &state.context())?, cacheable)));
    let (plan, cacheable) = match planned {
        Ok(planned) => planned,
        Err(error) => return anthropic_error(error),
    };
    let n = state.nonce.fetch_add(1, Ordering::Relaxed);
    let format = Events {
        id: format!("msg_{n:016x}"),
        model: state.model.clone(),
        prompt_tokens: plan.prompt.len() as u32,
        cacheable: cacheable.min(plan.prompt.len() as u32),
        cached: 0,
        reasoning: plan.generator.reasoning_length(),
        tool_call: plan.tool_call.clone(),
    };
    answer(&state, plan, format, arrival_ns, request_hash(&body)).await
}

/// The request as a chat request, and how many of its prompt's tokens lie before its
/// last `cache_control` breakpoint.
fn chat_request(
    request: MessagesRequest,
    profile: &super::profile::Profile,
) -> Result<(ChatRequest, u32), ApiError> {
    let max_tokens = request
        .max_tokens
        .ok_or_else(|| ApiError::bad_request("max_tokens: Field required"))?;
    let reasoning = thinking_tokens(
        request.thinking.as_ref(),
        max_tokens,
        request.reasoning_tokens,
        profile,
    )?;
    let mut messages = Vec::new();
    // The messages up to the last breakpoint, its own message cut after the block.
    let mut cached_prefix: Option<Vec<Message>> = None;
    if let Some(system) = request.system {
        let (message, breakpoint) = block_message("system", system);
        if breakpoint {
            cached_prefix = Some(vec![message.clone()]);
        }
        messages.push(message);
    }
    for message in request.messages {
        for (converted, breakpoint) in chat_messages(message) {
            messages.push(converted);
            if breakpoint {
                cached_prefix = Some(messages.clone());
            }
        }
    }
    let cacheable = cached_prefix.map_or(0, |prefix| {
        let reply_head = sim_tokenizer::encode(&openai::render_chat(&[])).len();
        sim_tokenizer::encode(&openai::render_chat(&prefix))
            .len()
            .saturating_sub(reply_head) as u32
    });
    let tools = request.tools.map(|tools| {
        tools
            .into_iter()
            .map(|t| Tool {
                kind: Some("function".into()),
                function: Function {
                    name: t.name,
                    parameters: t.input_schema,
                },
            })
            .collect()
    });
    let chat = ChatRequest {
        messages,
        sampling: Sampling {
            model: request.model,
            stream: request.stream,
            stream_options: None,
            max_tokens: Some(max_tokens),
            max_completion_tokens: None,
            temperature: request.temperature,
            seed: None,
            stop: request.stop_sequences.map(Stop::Many),
            n: None,
        },
        tools,
        tool_choice: request.tool_choice.map(chat_tool_choice),
        reasoning_effort: (reasoning == 0).then(|| "none".to_owned()),
        reasoning_tokens: Some(reasoning),
    };
    Ok((chat, cacheable))
}

/// How many tokens a request thinks: none unless `thinking` is enabled, then the
/// profile's (or the request's own) within its budget, which Anthropic bounds.
fn thinking_tokens(
    thinking: Option<&Thinking>,
    max_tokens: u32,
    asked: Option<u32>,
    profile: &super::profile::Profile,
) -> Result<u32, ApiError> {
    let Some(thinking) = thinking.filter(|t| t.kind == "enabled") else {
        return Ok(0);
    };
    let budget = thinking
        .budget_tokens
        .ok_or_else(|| ApiError::bad_request("thinking.enabled.budget_tokens: Field required"))?;
    if budget < MIN_THINKING_BUDGET {
        return Err(ApiError::bad_request(format!(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_THINKING_BUDGET}"
        )));
    }
    if budget >= max_tokens {
        return Err(ApiError::bad_request(format!(
            "`max_tokens` must be greater than `thinking.budget_tokens` ({max_tokens} <= {budget})"
        )));
    }
    Ok(openai::reasoning_wanted(profile, None, asked).min(budget))
}

/// A system prompt or a message's blocks as one chat message, and whether a block
/// of it is a cache breakpoint.
fn block_message(role: &str, blocks: Blocks) -> (Message, bool) {
    let (text, breakpoint) = match blocks {
        Blocks::Text(text) => (text, false),
        Blocks::List(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            (
                texts.join("\n"),
                blocks.iter().any(|b| b.get("cache_control").is_some()),
            )
        }
    };
    let message = Message {
        role: role.to_owned(),
        content: Some(Content::Text(text)),
        tool_calls: None,
    };
    (message, breakpoint)
}

/// One Anthropic message as chat messages: its text (and tool calls, for the
/// assistant), then one `tool` message per `tool_result` block. Each with whether it
/// holds a cache breakpoint.
fn chat_messages(message: AnthropicMessage) -> Vec<(Message, bool)> {
    let blocks = match message.content {
        Blocks::Text(text) => return vec![block_message(&message.role, Blocks::Text(text))],
        Blocks::List(blocks) => blocks,
    };
    let kind = |b: &Value| {
        b.get("type")
            .and_then(Value::as_str)
            .unwrap_or("text")
            .to_owned()
    };
    let (results, own): (Vec<Value>, Vec<Value>) =
        blocks.into_iter().partition(|b| kind(b) == "tool_result");
    let mut out = Vec::new();
    for result in results {
        let content = match result.get("content") {
            Some(Value::String(text)) => Blocks::Text(text.clone()),
            Some(Value::Array(blocks)) => Blocks::List(blocks.clone()),
            _ => Blocks::Text(String::new()),
        };
        let (converted, inner) = block_message("tool", content);
        out.push((converted, inner || result.get("cache_control").is_some()));
    }
    let calls: Vec<Value> = own
        .iter()
        .filter(|b| kind(b) == "tool_use")
        .map(|b| {
            let arguments = b.get("input").map(Value::to_string).unwrap_or_default();
            json!({"id": b.get("id"), "type": "function", "function": {"name": b.get("name"), "arguments": arguments}})
        })
        .collect();
    let texts: Vec<Value> = own
        .into_iter()
        .filter(|b| kind(b) == "text" || b.get("cache_control").is_some())
        .collect();
    if !texts.is_empty() || !calls.is_empty() {
        let (mut converted, breakpoint) = block_message(&message.role, Blocks::List(texts));
        converted.tool_calls = (!calls.is_empty()).then_some(Value::Array(calls));
        out.push((converted, breakpoint));
    }
    out
}

/// Anthropic's `tool_choice` in chat's words.
fn chat_tool_choice(choice: Value) -> Value {
    match choice.get("type").and_then(Value::as_str) {
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => json!({"type": "function", "function": {"name": choice.get("name")}}),
        _ => json!("auto"),
    }
}

/// Writes one answer as Anthropic's events.
struct Events {
    id: String,
    model: String,
    prompt_tokens: u32,
    /// Prompt tokens before the last breakpoint, and of those, what the cache held.
    cacheable: u32,
    cached: u32,
    /// Tokens of thinking before the answer.
    reasoning: u32,
    tool_call: Option<ToolCall>,
}

impl Events {
    /// The cumulative usage: input split as Anthropic splits it.
    fn usage(&self, output_tokens: u32) -> Value {
        let read = self.cached.min(self.cacheable);
        let created = self.cacheable - read;
        json!({
            "input_tokens": self.prompt_tokens - self.cacheable,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
            "output_tokens": output_tokens,
        })
    }

    /// The answer's block: after the thinking block, if any.
    fn answer_index(&self) -> u32 {
        u32::from(self.reasoning > 0)
    }

    /// The thinking block's signature: opaque, as Anthropic's is.
    fn signature(&self) -> String {
        format!("sim-signature-{}", self.id)
    }

    fn answer_block(&self, text: &str) -> Value {
        match &self.tool_call {
            Some(call) => {
                let input: Value = serde_json::from_str(text).unwrap_or_else(|_| json!({}));
                json!({"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": input})
            }
            None => json!({"type": "text", "text": text}),
        }
    }

    fn open_answer(&self, out: &mut String) {
        let block = match &self.tool_call {
            Some(call) => {
                json!({"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": {}})
            }
            None => json!({"type": "text", "text": ""}),
        };
        event(
            out,
            "content_block_start",
            json!({"index": self.answer_index(), "content_block": block}),
        );
    }

    fn close_thinking(&self, out: &mut String) {
        let delta = json!({"type": "signature_delta", "signature": self.signature()});
        event(
            out,
            "content_block_delta",
            json!({"index": 0, "delta": delta}),
        );
        event(out, "content_block_stop", json!({"index": 0}));
    }
}

/// `toolu_…`: the simulator's call id in Anthropic's form.
fn tool_use_id(call: &ToolCall) -> String {
    format!("toolu_{}", call.id.trim_start_matches("chatcmpl-tool-"))
}

fn stop_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
    }
}

fn event(out: &mut String, kind: &str, mut data: Value) {
    data["type"] = json!(kind);
    out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
}

impl Format for Events {
    fn stream_type(&self) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn prefilled(&mut self, cached: u32) {
        self.cached = cached;
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        let mut out = String::new();
        if index == 0 {
            let message = json!({
                "id": self.id, "type": "message", "role": "assistant", "content": [],
                "model": self.model, "stop_reason": null, "stop_sequence": null,
                "usage": self.usage(1),
            });
            event(&mut out, "message_start", json!({"message": message}));
            event(&mut out, "ping", json!({}));
            if self.reasoning > 0 {
                let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                event(
                    &mut out,
                    "content_block_start",
                    json!({"index": 0, "content_block": block}),
                );
            }
        }
        if index < self.reasoning {
            let delta = json!({"type": "thinking_delta", "thinking": delta});
            event(
                &mut out,
                "content_block_delta",
                json!({"index": 0, "delta": delta}),
            );
            return Some(Bytes::from(out));
        }
        if index == self.reasoning {
            if self.reasoning > 0 {
                self.close_thinking(&mut out);
            }
            self.open_answer(&mut out);
        }
        let delta = match self.tool_call {
            Some(_) => json!({"type": "input_json_delta", "partial_json": delta}),
            None => json!({"type": "text_delta", "text": delta}),
        };
        event(
            &mut out,
            "content_block_delta",
            json!({"index": self.answer_index(), "delta": delta}),
        );
        Some(Bytes::from(out))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let mut out = String::new();
        if timeline.completion_tokens > self.reasoning {
            event(
                &mut out,
                "content_block_stop",
                json!({"index": self.answer_index()}),
            );
        } else if self.reasoning > 0 {
            self.close_thinking(&mut out);
        }
        let delta = json!({"stop_reason": stop_reason(reason), "stop_sequence": null});
        let usage = self.usage(timeline.completion_tokens);
        event(
            &mut out,
            "message_delta",
            json!({"delta": delta, "usage": usage}),
        );
        event(&mut out, "message_stop", json!({"redline": truth}));
        Bytes::from(out)
    }

    fn broken(&self) -> Bytes {
        let error = json!({"type": "api_error", "message": engine_gone().message});
        let mut out = String::new();
        event(&mut out, "error", json!({"error": error}));
        Bytes::from(out)
    }

    fn whole(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response {
        let mut content = Vec::new();
        if timeline.reasoning_tokens > 0 {
            content.push(
                json!({"type": "thinking", "thinking": reasoning, "signature": self.signature()}),
            );
        }
        if timeline.completion_tokens > timeline.reasoning_tokens {
            content.push(self.answer_block(text));
        }
        let whole = Events {
            cached: timeline.cached_prompt_tokens,
            id: self.id.clone(),
            model: self.model.clone(),
            tool_call: self.tool_call.clone(),
            ..*self
        };
        let body = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": stop_reason(reason), "stop_sequence": null,
            "usage": whole.usage(timeline.completion_tokens),
        });
        json_response(StatusCode::OK, &body)
    }
}
