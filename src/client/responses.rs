//! OpenAI's Responses API (`/v1/responses`): the request's input items, and its typed
//! events read into `Piece`s — output text, reasoning text and summaries, function
//! call arguments under the call's output item — with the stream's order checked
//! (the `order` module) and its end (`response.completed`, `response.incomplete`,
//! `response.failed`) required.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::order::EventOrder;
use super::piece::Piece;
use super::piece::{DecodeError, error_text};
use crate::record::ServerTruth;
use crate::workload::payload::{Payload, PromptBody};

/// The request body: the prompt as input items (chat's tool calls and results as
/// `function_call` and `function_call_output` items) and the answer it continues, if
/// any; the caller merges `extra` (a spec's `reasoning`, `tools`, `store`).
pub(super) fn body(model: &str, stream: bool, payload: &Payload) -> Value {
    let (prompt, max_tokens) = (&payload.prompt, payload.max_tokens);
    let input = match prompt {
        PromptBody::Text(text) => json!(text),
        PromptBody::Messages(messages) => {
            Value::Array(messages.iter().flat_map(input_items).collect())
        }
    };
    let mut body = json!({"model": model, "input": input, "stream": stream});
    if let Some(max) = max_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(id) = &payload.previous_response_id {
        body["previous_response_id"] = json!(id);
    }
    body
}

/// One chat message as Responses input items.
fn input_items(message: &Value) -> Vec<Value> {
    let role = message["role"].as_str().unwrap_or("user");
    if role == "tool" {
        return vec![json!({
            "type": "function_call_output",
            "call_id": message["tool_call_id"],
            "output": content_text(&message["content"]),
        })];
    }
    let mut items = Vec::new();
    let text = content_text(&message["content"]);
    if !text.is_empty() || message.get("tool_calls").is_none() {
        items.push(json!({"role": role, "content": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        items.push(json!({
            "type": "function_call",
            "call_id": call["id"],
            "name": call.pointer("/function/name").unwrap_or(&Value::Null),
            "arguments": call.pointer("/function/arguments").unwrap_or(&json!("")),
        }));
    }
    items
}

/// A message's content as text: a string, or its text parts joined.
pub(super) fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[derive(Debug, Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    delta: Option<Cow<'a, str>>,
    output_index: Option<u64>,
    item: Option<Map<String, Value>>,
    response: Option<ResponseView>,
    /// An `error` event's.
    message: Option<String>,
    redline: Option<ServerTruth>,
}

/// A `response` object: whole, or in the stream's first and last events.
#[derive(Debug, Default, Deserialize)]
struct ResponseView {
    id: Option<String>,
    status: Option<String>,
    #[serde(default)]
    output: Vec<Value>,
    usage: Option<Usage>,
    error: Option<Value>,
    incomplete_details: Option<Value>,
    redline: Option<ServerTruth>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Debug, Deserialize)]
struct InputDetails {
    cached_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct OutputDetails {
    reasoning_tokens: Option<u32>,
}

/// One event of a streamed answer.
pub(super) fn event<'a>(data: &'a [u8], order: &mut EventOrder) -> Result<Piece<'a>, DecodeError> {
    let event: Event = serde_json::from_slice(data)?;
    let kind = event.kind.as_ref();
    let mut piece = Piece {
        truth: event.redline,
        ..Piece::default()
    };
    let index = || event.output_index.unwrap_or(0);
    match kind {
        "error" => {
            order.check_live(kind)?;
            piece.error = Some(event.message.unwrap_or_else(|| "error event".into()));
        }
        "response.created" => {
            order.start(kind)?;
            piece.response_id = event.response.and_then(|r| r.id);
        }
        "response.output_item.added" => {
            let item = event.item.unwrap_or_default();
            let tool = item.get("type").and_then(Value::as_str) == Some("function_call");
            if let Some(call) = order.open(index(), tool, kind)? {
                piece.tool_calls.push(json!({
                    "index": call, "id": item.get("call_id"),
                    "function": {"name": item.get("name"), "arguments": ""},
                }));
            }
        }
        "response.output_item.done" => order.close(index(), kind)?,
        "response.output_text.delta" => {
            order.check_open(index(), kind)?;
            piece.answer = event.delta;
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            order.check_open(index(), kind)?;
            piece.reasoning = event.delta;
        }
        "response.function_call_arguments.delta" => {
            let call = order.check_open(index(), kind)?.ok_or_else(|| {
                DecodeError::Order(format!(
                    "`{kind}` for item {}, not a function call",
                    index()
                ))
            })?;
            piece
                .tool_calls
                .push(json!({"index": call, "function": {"arguments": event.delta}}));
        }
        "response.completed" | "response.incomplete" | "response.failed" => {
            order.end(kind, false)?;
            let response = event.response.unwrap_or_default();
            finished(&mut piece, response, order.called());
        }
        // Done events repeat what the deltas said; part and annotation events carry no
        // tokens: each still belongs inside the stream, and under an open item.
        _ => match event.output_index {
            Some(index) => drop(order.check_open(index, kind)?),
            None => order.check_live(kind)?,
        },
    }
    Ok(piece)
}

/// What the last `response` object says: usage, why it ended, or that it failed.
fn finished(piece: &mut Piece<'_>, response: ResponseView, called: bool) {
    if let Some(usage) = response.usage {
        piece.prompt_tokens = usage.input_tokens;
        piece.completion_tokens = usage.output_tokens;
        piece.cached_tokens = usage.input_tokens_details.and_then(|d| d.cached_tokens);
        piece.reasoning_tokens = usage.output_tokens_details.and_then(|d| d.reasoning_tokens);
    }
    if piece.truth.is_none() {
        piece.truth = response.redline;
    }
    if response.id.is_some() {
        piece.response_id = response.id;
    }
    piece.done = true;
    piece.finish_reason = Some(Cow::Borrowed(match response.status.as_deref() {
        Some("incomplete") => match response
            .incomplete_details
            .as_ref()
            .and_then(|d| d["reason"].as_str())
        {
            Some("content_filter") => "content_filter",
            _ => "length",
        },
        Some("failed") => {
            let error = response
                .error
                .as_ref()
                .map_or_else(|| "the response failed".into(), error_text);
            piece.error = Some(error);
            "error"
        }
        _ if called => "tool_calls",
        _ => "stop",
    }));
}

/// A whole (not streamed) answer: its output items read in order.
pub(super) fn whole(data: &[u8]) -> Result<Piece<'_>, DecodeError> {
    let whole: Value = serde_json::from_slice(data)?;
    if let Some(error) = whole.get("error").filter(|e| !e.is_null()) {
        if whole.get("output").is_none() {
            return Ok(Piece {
                error: Some(error_text(error)),
                ..Piece::default()
            });
        }
    }
    let response: ResponseView = serde_json::from_value(whole)?;
    let (mut answer, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    for item in &response.output {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    answer.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("reasoning") => {
                for part in ["content", "summary"]
                    .iter()
                    .flat_map(|k| item[*k].as_array().into_iter().flatten())
                {
                    reasoning.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => calls.push(json!({
                "index": calls.len(), "id": item["call_id"],
                "function": {"name": item["name"], "arguments": item["arguments"]},
            })),
            _ => {}
        }
    }
    let called = !calls.is_empty();
    let mut piece = Piece::whole(answer, reasoning, calls);
    finished(&mut piece, response, called);
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
    fn a_stream_reads_reasoning_text_and_usage() {
        let pieces = read(&[
            r#"{"type":"response.created","response":{"status":"in_progress"}}"#,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning"}}"#,
            r#"{"type":"response.reasoning_text.delta","output_index":0,"delta":"hmm"}"#,
            r#"{"type":"response.output_item.done","output_index":0}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"message"}}"#,
            r#"{"type":"response.output_text.delta","output_index":1,"delta":"Hi"}"#,
            r#"{"type":"response.output_item.done","output_index":1}"#,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":9,"output_tokens":3,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":1}}}}"#,
        ])
        .unwrap();
        assert_eq!(pieces[2].reasoning.as_deref(), Some("hmm"));
        assert_eq!(pieces[5].answer.as_deref(), Some("Hi"));
        let last = pieces.last().unwrap();
        assert!(last.done);
        assert_eq!(last.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            (last.prompt_tokens, last.completion_tokens),
            (Some(9), Some(3))
        );
        assert_eq!(
            (last.cached_tokens, last.reasoning_tokens),
            (Some(4), Some(1))
        );
    }

    #[test]
    fn function_calls_are_numbered_by_their_items() {
        let pieces = read(&[
            r#"{"type":"response.created"}"#,
            r#"{"type":"response.output_item.added","output_index":3,"item":{"type":"function_call","call_id":"c1","name":"get_weather"}}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":3,"delta":"{\"city\""}"#,
            r#"{"type":"response.output_item.done","output_index":3}"#,
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#,
        ])
        .unwrap();
        assert_eq!(pieces[1].tool_calls[0]["function"]["name"], "get_weather");
        assert_eq!(pieces[2].tool_calls[0]["index"], 0);
        assert_eq!(
            pieces[2].tool_calls[0]["function"]["arguments"],
            "{\"city\""
        );
        assert_eq!(
            pieces[4].finish_reason.as_deref(),
            Some("length"),
            "cut at max_output_tokens"
        );
    }

    #[test]
    fn out_of_order_events_are_named() {
        let cases: [&[&str]; 3] = [
            &[r#"{"type":"response.output_text.delta","output_index":0,"delta":"x"}"#],
            &[
                r#"{"type":"response.created"}"#,
                r#"{"type":"response.output_text.delta","output_index":0,"delta":"x"}"#,
            ],
            &[
                r#"{"type":"response.created"}"#,
                r#"{"type":"response.completed","response":{}}"#,
                r#"{"type":"response.created"}"#,
            ],
        ];
        for events in cases {
            let error = read(events).expect_err("out of order");
            assert_eq!(error.kind(), "out_of_order", "{error}");
        }
    }

    #[test]
    fn failed_responses_and_error_events_are_errors() {
        let pieces = read(&[
            r#"{"type":"response.created"}"#,
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#,
        ])
        .unwrap();
        assert_eq!(pieces[1].error.as_deref(), Some("boom"));
        let pieces =
            read(&[r#"{"type":"error","code":"rate_limit","message":"slow down"}"#]).unwrap();
        assert_eq!(pieces[0].error.as_deref(), Some("slow down"));
    }

    #[test]
    fn chat_history_becomes_input_items() {
        let messages = vec![
            json!({"role": "user", "content": "weather?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"}),
        ];
        let payload = Payload {
            prompt: PromptBody::Messages(messages),
            max_tokens: Some(5),
            input_tokens: 1,
            traceparent: None,
            prefix: None,
            previous_response_id: Some("resp_1".into()),
            grade: None,
            fields: None,
        };
        let body = body("m", true, &payload);
        assert_eq!(body["previous_response_id"], "resp_1");
        assert_eq!(body["max_output_tokens"], 5);
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ])
        );
    }
}
