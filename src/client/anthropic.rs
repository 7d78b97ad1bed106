//! Anthropic's Messages API (`/v1/messages`): the request's system prompt and
//! blocks, and its typed events read into `Piece`s — text, thinking and tool-input
//! deltas under the content block they belong to — with the stream's order checked
//! (the `order` module) and `message_stop` required. Usage is Anthropic's: the prompt is
//! `input_tokens` plus the cache's read and written tokens; `output_tokens` counts
//! only in `message_delta` (`message_start`'s is a placeholder).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Value, json};

use super::order::EventOrder;
use super::piece::Piece;
use super::piece::{DecodeError, error_text};
use super::responses::content_text;
use crate::record::ServerTruth;
use crate::workload::payload::PromptBody;

/// The version of the API redline speaks, sent as `anthropic-version`.
pub const VERSION: &str = "2023-06-01";

/// The request body: system messages lifted to `system`, chat's tool calls and
/// results as `tool_use` and `tool_result` blocks. `max_tokens` is required by the
/// API: without one, the spec's error says so before the run.
pub(super) fn body(
    model: &str,
    stream: bool,
    prompt: &PromptBody,
    max_tokens: Option<u32>,
) -> Value {
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    match prompt {
        PromptBody::Text(text) => messages.push(json!({"role": "user", "content": text})),
        PromptBody::Messages(chat) => {
            for message in chat {
                match message["role"].as_str() {
                    Some("system") => system.push(content_text(&message["content"])),
                    _ => push_message(&mut messages, message),
                }
            }
        }
    }
    let mut body = json!({"model": model, "messages": messages, "stream": stream});
    if let Some(max) = max_tokens {
        body["max_tokens"] = json!(max);
    }
    if !system.is_empty() {
        body["system"] = json!(system.join("\n"));
    }
    body
}

/// Appends one chat message as an Anthropic message: a tool result joins the user's
/// turn (Anthropic alternates user and assistant).
fn push_message(messages: &mut Vec<Value>, message: &Value) {
    let (role, block) = match message["role"].as_str() {
        Some("tool") => (
            "user",
            vec![
                json!({"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": content_text(&message["content"])}),
            ],
        ),
        Some("assistant") => {
            let mut blocks = Vec::new();
            let text = content_text(&message["content"]);
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let arguments = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
                blocks.push(json!({"type": "tool_use", "id": call["id"], "name": call.pointer("/function/name"), "input": input}));
            }
            ("assistant", blocks)
        }
        _ => (
            "user",
            vec![json!({"type": "text", "text": content_text(&message["content"])})],
        ),
    };
    match messages.last_mut() {
        Some(last) if last["role"] == role => {
            if let Some(content) = last["content"].as_array_mut() {
                content.extend(block);
            } else {
                let text = last["content"].take();
                let mut content = vec![json!({"type": "text", "text": text})];
                content.extend(block);
                last["content"] = Value::Array(content);
            }
        }
        _ => messages.push(json!({"role": role, "content": block})),
    }
}

#[derive(Debug, Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: Option<u64>,
    message: Option<MessageView>,
    content_block: Option<Value>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    usage: Option<Usage>,
    error: Option<Value>,
    redline: Option<ServerTruth>,
}

#[derive(Debug, Deserialize)]
struct MessageView {
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow)]
    partial_json: Option<Cow<'a, str>>,
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Usage {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    cache_read_input_tokens: Option<u32>,
    cache_creation_input_tokens: Option<u32>,
}

impl Usage {
    /// The prompt's counts into `piece`; the output's too when `output` (it is a
    /// placeholder in `message_start`).
    fn into_piece(self, piece: &mut Piece<'_>, output: bool) {
        if let Some(input) = self.input_tokens {
            let read = self.cache_read_input_tokens.unwrap_or(0);
            let written = self.cache_creation_input_tokens.unwrap_or(0);
            piece.prompt_tokens = Some(input + read + written);
            piece.cached_tokens = self.cache_read_input_tokens;
            piece.cache_write_tokens = self.cache_creation_input_tokens;
        }
        if output {
            piece.completion_tokens = self.output_tokens;
        }
    }
}

/// Anthropic's stop reason in OpenAI's words: `max_tokens` is a cut answer.
fn finish_reason(stop: &str) -> &'static str {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// One event of a streamed answer.
pub(super) fn event<'a>(data: &'a [u8], order: &mut EventOrder) -> Result<Piece<'a>, DecodeError> {
    let event: Event = serde_json::from_slice(data)?;
    let kind = event.kind.as_ref();
    let mut piece = Piece {
        truth: event.redline,
        ..Piece::default()
    };
    let index = event.index.unwrap_or(0);
    match kind {
        "ping" => order.check_live(kind)?,
        "error" => {
            order.check_live(kind)?;
            let error = event
                .error
                .as_ref()
                .map_or_else(|| "error event".into(), error_text);
            piece.error = Some(error);
        }
        "message_start" => {
            order.start(kind)?;
            if let Some(usage) = event.message.and_then(|m| m.usage) {
                usage.into_piece(&mut piece, false);
            }
        }
        "content_block_start" => {
            let block = event.content_block.unwrap_or_default();
            let tool = block["type"] == "tool_use";
            if let Some(call) = order.open(index, tool, kind)? {
                piece.tool_calls.push(json!({
                    "index": call, "id": block["id"],
                    "function": {"name": block["name"], "arguments": ""},
                }));
            }
        }
        "content_block_delta" => {
            let call = order.check_open(index, kind)?;
            let Some(delta) = event.delta else {
                return Ok(piece);
            };
            match delta.kind.as_deref() {
                Some("text_delta") => piece.answer = delta.text,
                Some("thinking_delta") => piece.reasoning = delta.thinking,
                Some("input_json_delta") => {
                    let call = call.ok_or_else(|| {
                        DecodeError::Order(format!(
                            "`input_json_delta` for block {index}, not a tool_use block"
                        ))
                    })?;
                    piece.tool_calls.push(
                        json!({"index": call, "function": {"arguments": delta.partial_json}}),
                    );
                }
                // The thinking block's signature and citations carry no tokens.
                _ => {}
            }
        }
        "content_block_stop" => order.close(index, kind)?,
        "message_delta" => {
            order.check_started(kind)?;
            if let Some(stop) = event.delta.and_then(|d| d.stop_reason) {
                piece.finish_reason = Some(Cow::Borrowed(finish_reason(&stop)));
            }
            if let Some(usage) = event.usage {
                usage.into_piece(&mut piece, true);
            }
        }
        "message_stop" => {
            order.end(kind, true)?;
            piece.done = true;
        }
        _ => order.check_live(kind)?,
    }
    Ok(piece)
}

/// A whole (not streamed) answer: its content blocks read in order.
pub(super) fn whole(data: &[u8]) -> Result<Piece<'_>, DecodeError> {
    let whole: Value = serde_json::from_slice(data)?;
    if whole["type"] == "error" {
        let error = whole
            .get("error")
            .map_or_else(|| "error".into(), error_text);
        return Ok(Piece {
            error: Some(error),
            ..Piece::default()
        });
    }
    let (mut answer, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    for block in whole["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => answer.push_str(block["text"].as_str().unwrap_or_default()),
            Some("thinking") => reasoning.push_str(block["thinking"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(json!({
                "index": calls.len(), "id": block["id"],
                "function": {"name": block["name"], "arguments": block["input"].to_string()},
            })),
            _ => {}
        }
    }
    let mut piece = Piece::whole(answer, reasoning, calls);
    if let Some(stop) = whole["stop_reason"].as_str() {
        piece.finish_reason = Some(Cow::Borrowed(finish_reason(stop)));
    }
    let usage: Usage = serde_json::from_value(whole["usage"].clone()).unwrap_or_default();
    usage.into_piece(&mut piece, true);
    Ok(piece)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(events: &[&str]) -> Result<Vec<Piece<'static>>, DecodeError> {
        let mut order = EventOrder::default();
        events
            .iter()
            .map(|e| {
                let data: &'static [u8] = Box::leak(e.as_bytes().to_vec().into_boxed_slice());
                event(data, &mut order)
            })
            .collect()
    }

    #[test]
    fn a_stream_reads_thinking_text_and_cache_usage() {
        let pieces = read(&[
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":16,"cache_creation_input_tokens":3,"output_tokens":1}}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"so"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":7}}"#,
            r#"{"type":"message_stop"}"#,
        ])
        .unwrap();
        assert_eq!(
            pieces[0].prompt_tokens,
            Some(29),
            "input + cache read + cache written"
        );
        assert_eq!(
            (pieces[0].cached_tokens, pieces[0].cache_write_tokens),
            (Some(16), Some(3))
        );
        assert_eq!(
            pieces[0].completion_tokens, None,
            "message_start's output count is a placeholder"
        );
        assert_eq!(pieces[3].reasoning.as_deref(), Some("so"));
        assert!(
            pieces[4].reasoning.is_none() && pieces[4].answer.is_none(),
            "a signature is no token"
        );
        assert_eq!(pieces[7].answer.as_deref(), Some("Hi"));
        assert_eq!(
            pieces[9].finish_reason.as_deref(),
            Some("length"),
            "max_tokens is a cut answer"
        );
        assert_eq!(pieces[9].completion_tokens, Some(7));
        assert!(pieces[10].done);
    }

    #[test]
    fn tool_use_blocks_become_tool_calls() {
        let pieces = read(&[
            r#"{"type":"message_start","message":{}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}"#,
        ])
        .unwrap();
        assert_eq!(pieces[1].tool_calls[0]["id"], "toolu_1");
        assert_eq!(
            pieces[2].tool_calls[0]["function"]["arguments"],
            "{\"city\":"
        );
    }

    #[test]
    fn out_of_order_events_are_named() {
        let cases: [&[&str]; 4] = [
            &[r#"{"type":"content_block_start","index":0,"content_block":{"type":"text"}}"#],
            &[
                r#"{"type":"message_start","message":{}}"#,
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"x"}}"#,
            ],
            &[
                r#"{"type":"message_start","message":{}}"#,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text"}}"#,
                r#"{"type":"message_stop"}"#,
            ],
            &[
                r#"{"type":"message_start","message":{}}"#,
                r#"{"type":"message_stop"}"#,
                r#"{"type":"message_start","message":{}}"#,
            ],
        ];
        for events in cases {
            let error = read(events).expect_err("out of order");
            assert_eq!(error.kind(), "out_of_order", "{error}");
        }
    }

    #[test]
    fn chat_history_becomes_blocks_and_system() {
        let messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "weather?"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "t1", "content": "sunny"}),
        ];
        let body = body("m", false, &PromptBody::Messages(messages), Some(64));
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["messages"][1]["content"][0]["input"]["city"], "Oslo");
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["role"], "user");
    }
}
