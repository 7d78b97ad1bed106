//! OpenAI's Responses API (`POST /v1/responses`), as vLLM serves it: input items and
//! tools read into a chat request (the same template, tool choice and limits), the
//! answer written as typed events — a reasoning item, then a message or a function
//! call — and `response.completed` (or `response.incomplete` when cut at
//! `max_output_tokens`) with the usage and the ground truth. With `store` (the
//! default) the conversation is kept, so `previous_response_id` continues it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{
    Format, answer, engine_gone, error_response, json_response, request_hash, unix_now,
};
use super::openai::{self, ApiError, ChatRequest, Content, Function, Message, Sampling, Tool};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::{FinishReason, ToolCall};

/// A `POST /v1/responses` body; fields the simulator has no use for are ignored.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    model: Option<String>,
    input: Input,
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    max_output_tokens: Option<u32>,
    temperature: Option<f64>,
    seed: Option<i64>,
    previous_response_id: Option<String>,
    store: Option<bool>,
    tools: Option<Vec<ResponseTool>>,
    tool_choice: Option<Value>,
    reasoning: Option<ReasoningOptions>,
    /// The simulator's own field: how many tokens to reason.
    reasoning_tokens: Option<u32>,
}

/// `input`: a text, or a list of items.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// A tool as the Responses API writes it: flat (`name`, `parameters` beside `type`).
#[derive(Debug, Deserialize)]
struct ResponseTool {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ReasoningOptions {
    effort: Option<String>,
}

pub(super) async fn create(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let arrival_ns = state.clock.now_ns();
    let hash = request_hash(&body);
    let request: ResponsesRequest = match openai::parse(&body) {
        Ok(request) => request,
        Err(error) => return error_response(error),
    };
    let (previous, store) = (
        request.previous_response_id.clone(),
        request.store.unwrap_or(true),
    );
    let planned = chat_request(request, &state).and_then(|(chat, conversation)| {
        Ok((openai::plan_chat(chat, &state.context())?, conversation))
    });
    let (plan, conversation) = match planned {
        Ok(planned) => planned,
        Err(error) => return error_response(error),
    };
    let n = state.nonce.fetch_add(1, Ordering::Relaxed);
    let format = Events {
        id: format!("resp_{n:016x}"),
        n,
        created_at: unix_now(),
        model: state.model.clone(),
        previous,
        reasoning: plan.generator.reasoning_length(),
        tool_call: plan.tool_call.clone(),
        sequence: 0,
        thought: String::new(),
        text: String::new(),
        kept: store.then(|| (state.clone(), conversation)),
    };
    answer(&state, plan, format, arrival_ns, hash).await
}

/// The request as a chat request, and the conversation so far (history and input,
/// without the instructions, which a continuation does not inherit).
fn chat_request(
    request: ResponsesRequest,
    state: &SimState,
) -> Result<(ChatRequest, Vec<Message>), ApiError> {
    let mut conversation = match &request.previous_response_id {
        Some(id) => state.conversations.get(id).ok_or_else(|| {
            ApiError::not_found(format!("Previous response with id '{id}' not found."))
        })?,
        None => Vec::new(),
    };
    match request.input {
        Input::Text(text) => conversation.push(said("user", text)),
        Input::Items(items) => {
            for item in &items {
                if let Some(message) = input_item(item)? {
                    conversation.push(message);
                }
            }
        }
    }
    let mut messages = Vec::with_capacity(conversation.len() + 1);
    if let Some(instructions) = request.instructions {
        messages.push(said("system", instructions));
    }
    messages.extend(conversation.iter().cloned());
    let tools = request
        .tools
        .map(|tools| tools.into_iter().map(chat_tool).collect());
    let chat = ChatRequest {
        messages,
        sampling: Sampling {
            model: request.model,
            stream: request.stream,
            stream_options: None,
            max_tokens: request.max_output_tokens,
            max_completion_tokens: None,
            temperature: request.temperature,
            seed: request.seed,
            stop: None,
            n: None,
        },
        tools,
        tool_choice: request.tool_choice.map(chat_tool_choice),
        reasoning_effort: request.reasoning.and_then(|r| r.effort),
        reasoning_tokens: request.reasoning_tokens,
    };
    Ok((chat, conversation))
}

fn said(role: &str, text: String) -> Message {
    Message {
        role: role.to_owned(),
        content: Some(Content::Text(text)),
        tool_calls: None,
    }
}

/// One input item as a chat message: a message (its text parts joined), a function
/// call the model made, or a function's output. Reasoning items are passed over, as
/// a server that does not replay reasoning does.
fn input_item(item: &Value) -> Result<Option<Message>, ApiError> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    let text = |v: &Value| -> String {
        match v {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    };
    let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or_default();
    Ok(Some(match kind {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request("input[].role is required for a message item")
            })?;
            said(role, text(item.get("content").unwrap_or(&Value::Null)))
        }
        "function_call" => Message {
            role: "assistant".into(),
            content: None,
            tool_calls: Some(json!([{"id": field("call_id"), "type": "function",
                "function": {"name": field("name"), "arguments": field("arguments")}}])),
        },
        "function_call_output" => said("tool", text(item.get("output").unwrap_or(&Value::Null))),
        "reasoning" => return Ok(None),
        other => {
            return Err(ApiError::bad_request(format!(
                "unsupported input item type `{other}`: use message, function_call, function_call_output or reasoning"
            )));
        }
    }))
}

fn chat_tool(tool: ResponseTool) -> Tool {
    Tool {
        function: Function {
            name: tool.name.unwrap_or_else(|| tool.kind.clone()),
            parameters: tool.parameters,
        },
        kind: Some(tool.kind),
    }
}

/// `{"type": "function", "name": …}` in chat's shape; the strings are the same.
fn chat_tool_choice(choice: Value) -> Value {
    match choice.get("name") {
        Some(name) => json!({"type": "function", "function": {"name": name}}),
        None => choice,
    }
}

/// Writes one answer as the Responses API's events, keeping what the final
/// `response` object lists.
struct Events {
    id: String,
    n: u64,
    created_at: u64,
    model: String,
    previous: Option<String>,
    /// Tokens of reasoning before the answer.
    reasoning: u32,
    tool_call: Option<ToolCall>,
    sequence: u64,
    thought: String,
    text: String,
    /// Where to keep the conversation when the answer is done, and the conversation.
    kept: Option<(Arc<SimState>, Vec<Message>)>,
}

impl Events {
    /// One SSE event: `type` and `sequence_number` set on `data`.
    fn event(&mut self, kind: &str, mut data: Value, out: &mut String) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    }

    fn reasoning_id(&self) -> String {
        format!("rs_{:016x}", self.n)
    }

    fn answer_id(&self) -> String {
        match self.tool_call {
            Some(_) => format!("fc_{:016x}", self.n),
            None => format!("msg_{:016x}", self.n),
        }
    }

    /// Where the answer's item is in `output`: after the reasoning item, if any.
    fn answer_index(&self) -> u32 {
        u32::from(self.reasoning > 0)
    }

    fn reasoning_item(&self, done: bool) -> Value {
        let content = match done {
            true => json!([{"type": "reasoning_text", "text": self.thought}]),
            false => json!([]),
        };
        json!({"id": self.reasoning_id(), "type": "reasoning", "summary": [], "content": content})
    }

    fn answer_item(&self, done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match &self.tool_call {
            Some(call) => json!({
                "id": self.answer_id(), "type": "function_call", "status": status,
                "call_id": call.id, "name": call.name,
                "arguments": if done { self.text.as_str() } else { "" },
            }),
            None => {
                let content = match done {
                    true => json!([output_text(&self.text)]),
                    false => json!([]),
                };
                json!({"id": self.answer_id(), "type": "message", "status": status,
                    "role": "assistant", "content": content})
            }
        }
    }

    /// The `response` object: its status, items and usage.
    fn response(&self, status: &str, reason: Option<FinishReason>, t: Option<&Timeline>) -> Value {
        let mut output = Vec::new();
        if let Some(t) = t.filter(|_| reason.is_some()) {
            if t.reasoning_tokens > 0 {
                output.push(self.reasoning_item(true));
            }
            if t.completion_tokens > t.reasoning_tokens {
                output.push(self.answer_item(true));
            }
        }
        let incomplete =
            (reason == Some(FinishReason::Length)).then(|| json!({"reason": "max_output_tokens"}));
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.model, "output": output,
            "usage": t.map(usage), "error": null, "incomplete_details": incomplete,
            "previous_response_id": self.previous, "store": self.kept.is_some(),
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "temperature": 1.0, "top_p": 1.0, "truncation": "disabled",
            "text": {"format": {"type": "text"}}, "metadata": {},
        })
    }

    /// Opens the answer's item, closing the reasoning item before it.
    fn open_answer(&mut self, out: &mut String) {
        if self.reasoning > 0 {
            self.close_reasoning(out);
        }
        let (item, index) = (self.answer_item(false), self.answer_index());
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
            out,
        );
        if self.tool_call.is_none() {
            let id = self.answer_id();
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text("")}),
                out,
            );
        }
    }

    fn close_reasoning(&mut self, out: &mut String) {
        let id = self.reasoning_id();
        let text = self.thought.clone();
        self.event(
            "response.reasoning_text.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text}),
            out,
        );
        let item = self.reasoning_item(true);
        self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
            out,
        );
    }

    fn close_answer(&mut self, out: &mut String) {
        let (id, index, text) = (self.answer_id(), self.answer_index(), self.text.clone());
        match &self.tool_call {
            Some(call) => {
                let name = call.name.clone();
                self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": name, "arguments": text}),
                    out,
                );
            }
            None => {
                self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                    out,
                );
                self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text(&text)}),
                    out,
                );
            }
        }
        let item = self.answer_item(true);
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
            out,
        );
    }

    /// Keeps the conversation with this answer at its end.
    fn keep(&self, text: &str) {
        let Some((state, conversation)) = &self.kept else {
            return;
        };
        let mut conversation = conversation.clone();
        conversation.push(match &self.tool_call {
            Some(call) => Message {
                role: "assistant".into(),
                content: None,
                tool_calls: Some(json!([{"id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": text}}])),
            },
            None => said("assistant", text.to_owned()),
        });
        state.conversations.keep(self.id.clone(), conversation);
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The Responses API's usage: input (with the cached part), output (with reasoning).
fn usage(t: &Timeline) -> Value {
    json!({
        "input_tokens": t.prompt_tokens,
        "input_tokens_details": {"cached_tokens": t.cached_prompt_tokens},
        "output_tokens": t.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": t.reasoning_tokens},
        "total_tokens": t.prompt_tokens + t.completion_tokens,
    })
}

impl Format for Events {
    fn stream_type(&self) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        let mut out = String::new();
        if index == 0 {
            let created = self.response("in_progress", None, None);
            self.event("response.created", json!({"response": created}), &mut out);
            let created = self.response("in_progress", None, None);
            self.event(
                "response.in_progress",
                json!({"response": created}),
                &mut out,
            );
            if self.reasoning > 0 {
                let item = self.reasoning_item(false);
                self.event(
                    "response.output_item.added",
                    json!({"output_index": 0, "item": item}),
                    &mut out,
                );
            }
        }
        if index < self.reasoning {
            self.thought.push_str(delta);
            let id = self.reasoning_id();
            self.event(
                "response.reasoning_text.delta",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": delta}),
                &mut out,
            );
            return Some(Bytes::from(out));
        }
        if index == self.reasoning {
            self.open_answer(&mut out);
        }
        self.text.push_str(delta);
        let (id, output_index) = (self.answer_id(), self.answer_index());
        match self.tool_call {
            Some(_) => self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": output_index, "delta": delta}),
                &mut out,
            ),
            None => self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": output_index, "content_index": 0, "delta": delta, "logprobs": []}),
                &mut out,
            ),
        }
        Some(Bytes::from(out))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let mut out = String::new();
        if timeline.completion_tokens > self.reasoning {
            self.close_answer(&mut out);
        } else if self.reasoning > 0 {
            self.close_reasoning(&mut out);
        }
        let (status, kind) = match reason {
            FinishReason::Length => ("incomplete", "response.incomplete"),
            _ => ("completed", "response.completed"),
        };
        let response = self.response(status, Some(reason), Some(timeline));
        self.event(
            kind,
            json!({"response": response, "redline": truth}),
            &mut out,
        );
        self.keep(&self.text);
        Bytes::from(out)
    }

    fn broken(&self) -> Bytes {
        let error = engine_gone();
        let data = json!({"type": "error", "code": "server_error", "message": error.message, "param": null, "sequence_number": self.sequence});
        Bytes::from(format!("event: error\ndata: {data}\n\n"))
    }

    fn whole(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response {
        let whole = Events {
            thought: reasoning.to_owned(),
            text: text.to_owned(),
            kept: None,
            previous: self.previous.clone(),
            id: self.id.clone(),
            model: self.model.clone(),
            tool_call: self.tool_call.clone(),
            ..*self
        };
        let status = match reason {
            FinishReason::Length => "incomplete",
            _ => "completed",
        };
        let mut body = whole.response(status, Some(reason), Some(timeline));
        body["store"] = json!(self.kept.is_some());
        self.keep(text);
        json_response(StatusCode::OK, &body)
    }
}
