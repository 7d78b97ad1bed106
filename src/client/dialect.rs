//! What differs between the LLM APIs redline speaks: the path and body of a request,
//! and how an answer reads. OpenAI-compatible chat and completions, Hugging Face TGI's
//! native `/generate`, Ollama's `/api/chat` and `/api/generate`, and the KServe v2
//! generate extension (NVIDIA Triton with TensorRT-LLM or vLLM). Every answer, streamed
//! or whole, is read into the same `Piece`s, so timing, token counting and failures
//! stay one code path (the reader in [`super::openai`]).

use std::borrow::Cow;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::order::EventOrder;
use super::piece::{DecodeError, Piece, error_text};
use crate::record::{ServerReported, ServerTruth};
use crate::workload::payload::{Payload, PromptBody};

/// Which LLM API to call (or, in the simulator, was called); also `--api` of the
/// command line's shorthand run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum LlmApi {
    /// OpenAI `/v1/chat/completions`.
    Chat,
    /// OpenAI `/v1/completions`.
    Completions,
    /// Hugging Face TGI's native `/generate` and `/generate_stream`.
    Tgi,
    /// Ollama's `/api/chat` (newline-delimited JSON when streamed).
    Ollama,
    /// Ollama's `/api/generate`.
    OllamaGenerate,
    /// KServe v2's generate extension (Triton): `/v2/models/{model}/generate` and
    /// `generate_stream`.
    Kserve,
    /// KServe v2 over gRPC (Triton): `ModelStreamInfer`, or `ModelInfer` when not
    /// streamed ([`super::kserve_grpc`]).
    KserveGrpc,
    /// OpenAI's Responses API, `/v1/responses` ([`super::responses`]).
    Responses,
    /// Anthropic's Messages API, `/v1/messages` ([`super::anthropic`]).
    Anthropic,
}

impl LlmApi {
    /// The request path (TGI and KServe stream from paths of their own; KServe names
    /// the model in the path).
    pub fn path(self, model: &str, stream: bool) -> String {
        let fixed = match self {
            LlmApi::Chat => "/v1/chat/completions",
            LlmApi::Completions => "/v1/completions",
            LlmApi::Responses => "/v1/responses",
            LlmApi::Anthropic => "/v1/messages",
            LlmApi::Tgi if stream => "/generate_stream",
            LlmApi::Tgi => "/generate",
            LlmApi::Ollama => "/api/chat",
            LlmApi::OllamaGenerate => "/api/generate",
            LlmApi::Kserve => {
                let model = utf8_percent_encode(model, NON_ALPHANUMERIC);
                let verb = if stream {
                    "generate_stream"
                } else {
                    "generate"
                };
                return format!("/v2/models/{model}/{verb}");
            }
            LlmApi::KserveGrpc if stream => crate::grpc::kserve::MODEL_STREAM_INFER,
            LlmApi::KserveGrpc => crate::grpc::kserve::MODEL_INFER,
        };
        fixed.to_owned()
    }

    /// Whether a stream that simply ends is complete: KServe's has no end marker.
    pub fn ends_with_body(self) -> bool {
        self == LlmApi::Kserve
    }

    /// Whether requests and answers are gRPC messages rather than JSON.
    pub fn is_grpc(self) -> bool {
        self == LlmApi::KserveGrpc
    }

    /// Whether an event of an answer read as a stream is a stream's event: gRPC frames
    /// a whole answer too (one `ModelInferResponse`), so there it is as asked.
    pub fn event_is_streamed(self, asked_stream: bool) -> bool {
        !self.is_grpc() || asked_stream
    }

    /// The request body: JSON ([`Self::body`]), or for gRPC the framed message.
    pub fn body_bytes(
        self,
        model: &str,
        stream: bool,
        include_usage: bool,
        payload: &Payload,
        extra: &Map<String, Value>,
    ) -> bytes::Bytes {
        if self.is_grpc() {
            let text = prompt_text(&payload.prompt);
            return super::kserve_grpc::request(model, &text, payload.max_tokens, stream, extra);
        }
        let body = self.body(model, stream, include_usage, payload, extra);
        bytes::Bytes::from(body.to_string())
    }

    /// The server's own timings where the API puts them in response headers: TGI's
    /// whole answers (`x-total-time`, `x-queue-time`, `x-inference-time`,
    /// `x-time-per-token` in milliseconds, and the token counts).
    pub fn reported_in_headers(self, headers: &hyper::HeaderMap) -> Option<ServerReported> {
        if self != LlmApi::Tgi {
            return None;
        }
        let get = |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.parse().ok() };
        let ms = |name: &str| get(name).map(|ms| ms * 1_000);
        let reported = ServerReported {
            total_us: ms("x-total-time"),
            queue_us: ms("x-queue-time"),
            decode_us: ms("x-inference-time"),
            time_per_token_us: ms("x-time-per-token"),
            prompt_tokens: get("x-prompt-tokens").map(|n| n as u32),
            output_tokens: get("x-generated-tokens").map(|n| n as u32),
            ..ServerReported::default()
        };
        (reported != ServerReported::default()).then_some(reported)
    }

    /// Whether a streamed answer is newline-delimited JSON rather than SSE.
    pub fn streams_lines(self) -> bool {
        matches!(self, LlmApi::Ollama | LlmApi::OllamaGenerate)
    }

    /// The JSON body of a request. `extra` is merged in (one level deep, so a spec's
    /// `options: {temperature: 0}` keeps Ollama's `num_predict`); for TGI it goes
    /// under `parameters`, where TGI keeps every generation option.
    pub fn body(
        self,
        model: &str,
        stream: bool,
        include_usage: bool,
        payload: &Payload,
        extra: &Map<String, Value>,
    ) -> Value {
        let max = payload.max_tokens;
        if matches!(self, LlmApi::Responses | LlmApi::Anthropic) {
            let mut body = match self {
                LlmApi::Responses => super::responses::body(model, stream, payload),
                _ => super::anthropic::body(model, stream, &payload.prompt, max),
            };
            merge(&mut body, extra);
            self.merge_line_fields(&mut body, payload);
            self.reshape_tools(&mut body);
            return body;
        }
        if self == LlmApi::Tgi {
            // `details` brings the finish reason and token counts.
            let mut parameters = json!({"details": true});
            if let Some(max) = max {
                parameters["max_new_tokens"] = json!(max);
            }
            merge(&mut parameters, extra);
            return json!({"inputs": prompt_text(&payload.prompt), "parameters": parameters, "stream": stream});
        }
        if self == LlmApi::Kserve {
            // Extra top-level fields reach the model as its inputs (TensorRT-LLM's
            // `max_tokens` and `stream` tensors) or as parameters (the vLLM backend's
            // sampling parameters): both read these. Without `exclude_input_in_output`
            // the vLLM backend's whole answers begin with the prompt; the finish reason
            // lets the run see whether each token came as one response.
            let mut body = json!({
                "text_input": prompt_text(&payload.prompt),
                "stream": stream,
                "exclude_input_in_output": true,
                "return_finish_reason": true,
            });
            if let Some(max) = max {
                body["max_tokens"] = json!(max);
            }
            merge(&mut body, extra);
            return body;
        }
        let mut body = json!({"model": model, "stream": stream});
        if matches!(self, LlmApi::Chat | LlmApi::Ollama) {
            body["messages"] = messages(&payload.prompt);
        } else {
            body["prompt"] = json!(prompt_text(&payload.prompt));
        }
        let ollama = matches!(self, LlmApi::Ollama | LlmApi::OllamaGenerate);
        match max {
            Some(max) if ollama => body["options"] = json!({"num_predict": max}),
            Some(max) => body["max_tokens"] = json!(max),
            None => {}
        }
        if stream && include_usage && !ollama {
            body["stream_options"] = json!({"include_usage": true});
        }
        merge(&mut body, extra);
        self.merge_line_fields(&mut body, payload);
        body
    }

    /// A dataset line's own fields over the spec's; the Responses API takes a
    /// `response_format` as `text.format`, the schema's fields flattened into it.
    fn merge_line_fields(self, body: &mut Value, payload: &Payload) {
        let Some(fields) = &payload.fields else {
            return;
        };
        merge(body, fields);
        if self != LlmApi::Responses {
            return;
        }
        let Some(mut format) = body
            .as_object_mut()
            .and_then(|b| b.remove("response_format"))
        else {
            return;
        };
        if let Some(Value::Object(schema)) =
            format.as_object_mut().and_then(|f| f.remove("json_schema"))
        {
            merge(&mut format, &schema);
        }
        body["text"] = json!({"format": format});
    }

    /// Tools and tool choice written in chat's shape (a flow's, a spec's `body`) in
    /// this API's: Responses' flat functions, Anthropic's `input_schema`. Those
    /// already in the API's shape are left as they are.
    fn reshape_tools(self, body: &mut Value) {
        let anthropic = self == LlmApi::Anthropic;
        if let Some(tools) = body.get_mut("tools").and_then(Value::as_array_mut) {
            for tool in tools.iter_mut() {
                let Some(function) = tool.get("function").cloned() else {
                    continue;
                };
                let mut flat = json!({"name": function["name"]});
                if let Some(description) = function.get("description") {
                    flat["description"] = description.clone();
                }
                let parameters = function
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                match anthropic {
                    true => flat["input_schema"] = parameters,
                    false => {
                        flat["type"] = json!("function");
                        flat["parameters"] = parameters;
                    }
                }
                *tool = flat;
            }
        }
        let Some(choice) = body.get_mut("tool_choice") else {
            return;
        };
        let name = choice.pointer("/function/name").cloned();
        *choice = match (anthropic, choice.as_str(), name) {
            (false, _, Some(name)) => json!({"type": "function", "name": name}),
            (true, _, Some(name)) => json!({"type": "tool", "name": name}),
            (true, Some("required"), _) => json!({"type": "any"}),
            (true, Some(other), _) => json!({"type": other}),
            _ => return,
        };
    }

    /// One event of a streamed answer, or a whole answer, as a [`Piece`]; `order` is
    /// the stream's so far, for the APIs whose events must come in order.
    pub(super) fn decode<'a>(
        self,
        data: &'a [u8],
        streamed: bool,
        order: &mut EventOrder,
    ) -> Result<Piece<'a>, DecodeError> {
        Ok(match self {
            LlmApi::KserveGrpc => super::kserve_grpc::piece(data, streamed)?,
            LlmApi::Responses if streamed => super::responses::event(data, order)?,
            LlmApi::Responses => super::responses::whole(data)?,
            LlmApi::Anthropic if streamed => super::anthropic::event(data, order)?,
            LlmApi::Anthropic => super::anthropic::whole(data)?,
            json => json.decode_json(data, streamed)?,
        })
    }

    fn decode_json(self, data: &[u8], streamed: bool) -> serde_json::Result<Piece<'_>> {
        match self {
            LlmApi::KserveGrpc | LlmApi::Responses | LlmApi::Anthropic => Err(
                serde::de::Error::custom("read by their own modules, not as chat's JSON"),
            ),
            LlmApi::Chat | LlmApi::Completions => Ok(openai_piece(serde_json::from_slice(data)?)),
            LlmApi::Tgi if streamed => Ok(serde_json::from_slice::<TgiEvent>(data)?.into()),
            LlmApi::Tgi => tgi_whole(data),
            LlmApi::Ollama | LlmApi::OllamaGenerate => {
                Ok(serde_json::from_slice::<OllamaLine>(data)?.into())
            }
            LlmApi::Kserve => Ok(serde_json::from_slice::<KserveAnswer>(data)?.into()),
        }
    }
}

/// A chat's messages: the payload's, or its text as one user message.
fn messages(prompt: &PromptBody) -> Value {
    match prompt {
        PromptBody::Text(text) => json!([{"role": "user", "content": text}]),
        PromptBody::Messages(messages) => json!(messages),
    }
}

/// A prompt as text: APIs that take text get the messages' contents joined.
fn prompt_text(prompt: &PromptBody) -> Cow<'_, str> {
    match prompt {
        PromptBody::Text(text) => Cow::Borrowed(text),
        PromptBody::Messages(messages) => {
            let text: Vec<&str> = messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect();
            Cow::Owned(text.join("\n"))
        }
    }
}

/// Merges `extra` into `body`, one level deep: an object meets an object key by key.
fn merge(body: &mut Value, extra: &Map<String, Value>) {
    let Value::Object(map) = body else {
        return;
    };
    for (key, value) in extra {
        match (map.get_mut(key), value) {
            (Some(Value::Object(inner)), Value::Object(more)) => {
                inner.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                map.insert(key.clone(), value.clone());
            }
        }
    }
}

#[derive(Debug, Deserialize)]
struct OpenAiChunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<ChoiceView<'a>>,
    usage: Option<UsageView>,
    error: Option<Value>,
    redline: Option<ServerTruth>,
}

#[derive(Debug, Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow)]
    delta: Option<MessageView<'a>>,
    #[serde(borrow)]
    message: Option<MessageView<'a>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct MessageView<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reasoning: Option<Cow<'a, str>>,
    tool_calls: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
struct UsageView {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u32>,
}

fn non_empty(text: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    text.filter(|t| !t.is_empty())
}

fn openai_piece(chunk: OpenAiChunk<'_>) -> Piece<'_> {
    let usage = chunk.usage.as_ref();
    let mut piece = Piece {
        prompt_tokens: usage.and_then(|u| u.prompt_tokens),
        completion_tokens: usage.and_then(|u| u.completion_tokens),
        cached_tokens: usage.and_then(|u| u.prompt_tokens_details.as_ref()?.cached_tokens),
        reasoning_tokens: usage
            .and_then(|u| u.completion_tokens_details.as_ref()?.reasoning_tokens),
        error: chunk.error.as_ref().map(error_text),
        truth: chunk.redline,
        ..Piece::default()
    };
    let Some(choice) = chunk.choices.into_iter().next() else {
        return piece;
    };
    piece.finish_reason = choice.finish_reason;
    piece.answer = non_empty(choice.text);
    if let Some(message) = choice.delta.or(choice.message) {
        if piece.answer.is_none() {
            piece.answer = non_empty(message.content);
        }
        piece.reasoning = non_empty(message.reasoning_content).or(non_empty(message.reasoning));
        piece.tool_calls = message.tool_calls.unwrap_or_default();
    }
    piece
}

/// A TGI stream event: a token, and on the last one the details.
#[derive(Debug, Deserialize)]
struct TgiEvent<'a> {
    #[serde(borrow)]
    token: Option<TgiToken<'a>>,
    #[serde(borrow)]
    generated_text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    details: Option<TgiDetails<'a>>,
    error: Option<Value>,
    redline: Option<ServerTruth>,
}

#[derive(Debug, Deserialize)]
struct TgiToken<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
    /// End-of-sequence and other control tokens: not text of the answer.
    #[serde(default)]
    special: bool,
}

#[derive(Debug, Deserialize)]
struct TgiDetails<'a> {
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
    generated_tokens: Option<u32>,
    /// The prompt's length (streamed details, TGI 2.0 and later).
    input_length: Option<u32>,
    /// The prompt's tokens (whole answers, when `decoder_input_details` was asked).
    #[serde(default)]
    prefill: Vec<Value>,
}

/// A whole TGI answer: an object, or (older versions) an array of one.
#[derive(Debug, Deserialize)]
struct TgiWhole<'a> {
    #[serde(borrow)]
    generated_text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    details: Option<TgiDetails<'a>>,
    error: Option<Value>,
    redline: Option<ServerTruth>,
}

impl<'a> From<TgiEvent<'a>> for Piece<'a> {
    fn from(event: TgiEvent<'a>) -> Piece<'a> {
        let done = event.details.is_some() || event.generated_text.is_some();
        let mut piece = tgi_details(event.details);
        piece.answer = event
            .token
            .filter(|token| !token.special)
            .and_then(|token| non_empty(Some(token.text)));
        piece.done = done;
        piece.error = event.error.as_ref().map(error_text);
        piece.truth = event.redline;
        piece
    }
}

fn tgi_whole(data: &[u8]) -> serde_json::Result<Piece<'_>> {
    let first = data.iter().find(|b| !b.is_ascii_whitespace());
    let whole: TgiWhole = if first == Some(&b'[') {
        let mut all: Vec<TgiWhole> = serde_json::from_slice(data)?;
        if all.is_empty() {
            return Ok(Piece::default());
        }
        all.swap_remove(0)
    } else {
        serde_json::from_slice(data)?
    };
    let mut piece = tgi_details(whole.details);
    piece.answer = non_empty(whole.generated_text);
    piece.error = whole.error.as_ref().map(error_text);
    piece.truth = whole.redline;
    piece.done = true;
    Ok(piece)
}

fn tgi_details(details: Option<TgiDetails<'_>>) -> Piece<'_> {
    let Some(details) = details else {
        return Piece::default();
    };
    let finish_reason = details.finish_reason.map(|reason| match reason.as_ref() {
        "eos_token" | "stop_sequence" => Cow::Borrowed("stop"),
        _ => reason,
    });
    let prefill = (!details.prefill.is_empty()).then_some(details.prefill.len() as u32);
    Piece {
        finish_reason,
        completion_tokens: details.generated_tokens,
        prompt_tokens: details.input_length.or(prefill),
        ..Piece::default()
    }
}

/// A line of Ollama's answer (`/api/chat` or `/api/generate`); the last has `done`,
/// the counts and the server's durations (nanoseconds).
#[derive(Debug, Deserialize)]
struct OllamaLine<'a> {
    #[serde(borrow)]
    message: Option<OllamaMessage<'a>>,
    /// `/api/generate`'s text.
    #[serde(borrow)]
    response: Option<Cow<'a, str>>,
    /// `/api/generate`'s reasoning (thinking models).
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default)]
    done: bool,
    #[serde(borrow)]
    done_reason: Option<Cow<'a, str>>,
    error: Option<Value>,
    prompt_eval_count: Option<u32>,
    eval_count: Option<u32>,
    total_duration: Option<u64>,
    load_duration: Option<u64>,
    prompt_eval_duration: Option<u64>,
    eval_duration: Option<u64>,
    redline: Option<ServerTruth>,
}

#[derive(Debug, Deserialize)]
struct OllamaMessage<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    /// `[{"function": {"name", "arguments": {…}}}]`: arguments as an object.
    tool_calls: Option<Vec<Value>>,
}

impl<'a> From<OllamaLine<'a>> for Piece<'a> {
    fn from(line: OllamaLine<'a>) -> Piece<'a> {
        let us = |ns: Option<u64>| ns.map(|ns| ns / 1_000);
        let reported = line.done.then(|| ServerReported {
            total_us: us(line.total_duration),
            queue_us: None,
            load_us: us(line.load_duration),
            prefill_us: us(line.prompt_eval_duration),
            decode_us: us(line.eval_duration),
            time_per_token_us: line
                .eval_duration
                .zip(line.eval_count.filter(|n| *n > 0))
                .map(|(ns, n)| ns / 1_000 / u64::from(n)),
            prompt_tokens: line.prompt_eval_count,
            output_tokens: line.eval_count,
        });
        let (mut answer, mut reasoning, mut tool_calls) = (line.response, line.thinking, vec![]);
        if let Some(message) = line.message {
            answer = answer.or(message.content);
            reasoning = reasoning.or(message.thinking);
            tool_calls = message
                .tool_calls
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(ollama_tool_call)
                .collect();
        }
        let finish_reason = match line.done_reason {
            Some(reason) => Some(reason),
            None if line.done => Some(Cow::Borrowed("stop")),
            None => None,
        };
        Piece {
            answer: non_empty(answer),
            reasoning: non_empty(reasoning),
            tool_calls,
            finish_reason,
            prompt_tokens: line.prompt_eval_count.filter(|_| line.done),
            completion_tokens: line.eval_count.filter(|_| line.done),
            error: line.error.as_ref().map(error_text),
            truth: line.redline,
            done: line.done,
            reported,
            ..Piece::default()
        }
    }
}

/// An Ollama tool call in OpenAI's shape: Ollama sends each call whole, with its
/// arguments as an object.
fn ollama_tool_call((index, call): (usize, &Value)) -> Value {
    let arguments = match call.pointer("/function/arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => String::new(),
    };
    json!({
        "index": index,
        "id": call.get("id").and_then(Value::as_str).unwrap_or(""),
        "function": {
            "name": call.pointer("/function/name").and_then(Value::as_str).unwrap_or(""),
            "arguments": arguments,
        },
    })
}

/// A KServe v2 generate answer, or one response of its stream: `text_output` is the
/// new text (TensorRT-LLM and the vLLM backend stream deltas). Counts and the finish
/// reason come only from backends asked for them (the vLLM backend's
/// `return_num_output_tokens`, `return_finish_reason`).
#[derive(Debug, Deserialize)]
struct KserveAnswer<'a> {
    #[serde(borrow)]
    text_output: Option<Cow<'a, str>>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
    num_input_tokens: Option<u32>,
    num_output_tokens: Option<u32>,
    error: Option<Value>,
    redline: Option<ServerTruth>,
}

impl<'a> From<KserveAnswer<'a>> for Piece<'a> {
    fn from(answer: KserveAnswer<'a>) -> Piece<'a> {
        Piece {
            answer: non_empty(answer.text_output),
            finish_reason: answer.finish_reason,
            prompt_tokens: answer.num_input_tokens,
            completion_tokens: answer.num_output_tokens,
            error: answer.error.as_ref().map(error_text),
            truth: answer.redline,
            ..Piece::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(text: &str, max_tokens: Option<u32>) -> Payload {
        Payload {
            prompt: PromptBody::Text(text.into()),
            max_tokens,
            input_tokens: 1,
            traceparent: None,
            prefix: None,
            previous_response_id: None,
            grade: None,
            fields: None,
        }
    }

    #[test]
    fn bodies_put_max_tokens_where_each_api_reads_it() {
        let p = payload("hi", Some(7));
        let none = Map::new();
        let chat = LlmApi::Chat.body("m", true, true, &p, &none);
        assert_eq!(chat["max_tokens"], 7);
        assert_eq!(chat["messages"][0]["content"], "hi");
        assert_eq!(chat["stream_options"]["include_usage"], true);
        let tgi = LlmApi::Tgi.body("m", true, true, &p, &none);
        assert_eq!(tgi["parameters"]["max_new_tokens"], 7);
        assert_eq!(tgi["parameters"]["details"], true);
        assert_eq!(tgi["inputs"], "hi");
        assert!(tgi.get("model").is_none(), "TGI names no model");
        let ollama = LlmApi::Ollama.body("m", false, true, &p, &none);
        assert_eq!(ollama["options"]["num_predict"], 7);
        assert_eq!(ollama["stream"], false);
        assert_eq!(ollama["messages"][0]["role"], "user");
        let generate = LlmApi::OllamaGenerate.body("m", true, true, &p, &none);
        assert_eq!(generate["prompt"], "hi");
        let kserve = LlmApi::Kserve.body("m", true, true, &p, &none);
        assert_eq!(
            kserve,
            json!({"text_input": "hi", "stream": true, "exclude_input_in_output": true, "return_finish_reason": true, "max_tokens": 7})
        );
    }

    #[test]
    fn a_lines_tools_and_response_format_reach_each_api_in_its_shape() {
        let tool = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
        let format = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {"type": "object"}}});
        let mut p = payload("hi", None);
        let fields = json!({"tools": [tool], "response_format": format});
        p.fields = Some(std::sync::Arc::new(fields.as_object().unwrap().clone()));
        let spec = json!({"tools": [], "temperature": 0})
            .as_object()
            .unwrap()
            .clone();
        let chat = LlmApi::Chat.body("m", true, true, &p, &spec);
        assert_eq!(chat["tools"][0], tool, "the line's tools over the spec's");
        assert_eq!(
            (&chat["response_format"], &chat["temperature"]),
            (&format, &json!(0))
        );
        let responses = LlmApi::Responses.body("m", true, true, &p, &spec);
        assert_eq!(responses["tools"][0]["name"], "f");
        assert_eq!(
            responses["text"]["format"],
            json!({"type": "json_schema", "name": "x", "strict": true, "schema": {"type": "object"}})
        );
        assert!(responses.get("response_format").is_none());
    }

    #[test]
    fn paths_name_the_model_only_where_the_api_does() {
        assert_eq!(LlmApi::Tgi.path("m", true), "/generate_stream");
        assert_eq!(
            LlmApi::Kserve.path("llama 3/x", false),
            "/v2/models/llama%203%2Fx/generate"
        );
        assert_eq!(
            LlmApi::Kserve.path("m", true),
            "/v2/models/m/generate_stream"
        );
    }

    #[test]
    fn extra_fields_merge_one_level_deep() {
        let p = payload("hi", Some(7));
        let extra: Map<String, Value> =
            serde_json::from_value(json!({"options": {"temperature": 0}, "keep_alive": "5m"}))
                .unwrap();
        let ollama = LlmApi::Ollama.body("m", true, false, &p, &extra);
        assert_eq!(
            ollama["options"],
            json!({"num_predict": 7, "temperature": 0})
        );
        assert_eq!(ollama["keep_alive"], "5m");
        let extra: Map<String, Value> =
            serde_json::from_value(json!({"temperature": 0.5})).unwrap();
        let tgi = LlmApi::Tgi.body("m", true, false, &p, &extra);
        assert_eq!(tgi["parameters"]["temperature"], 0.5);
    }

    #[test]
    fn tgi_events_skip_special_tokens_and_finish_on_details() {
        let token = br#"{"index":1,"token":{"id":5,"text":" hello","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#;
        let piece = LlmApi::Tgi
            .decode(token, true, &mut EventOrder::default())
            .unwrap();
        assert_eq!(piece.answer.as_deref(), Some(" hello"));
        assert!(!piece.done);
        let last = br#"{"index":2,"token":{"id":2,"text":"</s>","logprob":0.0,"special":true},"generated_text":" hello","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null,"input_length":9}}"#;
        let piece = LlmApi::Tgi
            .decode(last, true, &mut EventOrder::default())
            .unwrap();
        assert_eq!(
            piece.answer, None,
            "the special token and the repeated text are not answer"
        );
        assert!(piece.done);
        assert_eq!(piece.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            (piece.prompt_tokens, piece.completion_tokens),
            (Some(9), Some(2))
        );
    }

    #[test]
    fn whole_tgi_answers_are_objects_or_arrays() {
        let object = br#"{"generated_text":"abc","details":{"finish_reason":"length","generated_tokens":3,"prefill":[{"id":1},{"id":2}]}}"#;
        let piece = LlmApi::Tgi
            .decode(object, false, &mut EventOrder::default())
            .unwrap();
        assert_eq!(piece.answer.as_deref(), Some("abc"));
        assert_eq!(piece.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            (piece.prompt_tokens, piece.completion_tokens),
            (Some(2), Some(3))
        );
        let array = br#"[{"generated_text":"abc"}]"#;
        assert_eq!(
            LlmApi::Tgi
                .decode(array, false, &mut EventOrder::default())
                .unwrap()
                .answer
                .as_deref(),
            Some("abc")
        );
        let error = br#"{"error":"Input validation error","error_type":"validation"}"#;
        assert_eq!(
            LlmApi::Tgi
                .decode(error, true, &mut EventOrder::default())
                .unwrap()
                .error
                .as_deref(),
            Some("Input validation error")
        );
    }

    #[test]
    fn ollama_lines_carry_text_and_the_last_one_the_durations() {
        let line = br#"{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"Hi"},"done":false}"#;
        let piece = LlmApi::Ollama
            .decode(line, true, &mut EventOrder::default())
            .unwrap();
        assert_eq!(piece.answer.as_deref(), Some("Hi"));
        assert!(!piece.done && piece.reported.is_none());
        let last = br#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"length","total_duration":5000000,"load_duration":1000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":4,"eval_duration":2400000}"#;
        let piece = LlmApi::Ollama
            .decode(last, true, &mut EventOrder::default())
            .unwrap();
        assert!(piece.done);
        assert_eq!(piece.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            (piece.prompt_tokens, piece.completion_tokens),
            (Some(12), Some(4))
        );
        let reported = piece.reported.unwrap();
        assert_eq!(reported.total_us, Some(5_000));
        assert_eq!(reported.prefill_us, Some(2_000));
        assert_eq!(reported.time_per_token_us, Some(600));
        let generate = br#"{"response":"yo","done":false}"#;
        let piece = LlmApi::OllamaGenerate
            .decode(generate, true, &mut EventOrder::default())
            .unwrap();
        assert_eq!(piece.answer.as_deref(), Some("yo"));
    }

    #[test]
    fn ollama_tool_calls_take_openais_shape() {
        let line = br#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#;
        let piece = LlmApi::Ollama
            .decode(line, true, &mut EventOrder::default())
            .unwrap();
        assert_eq!(piece.tool_calls[0]["function"]["name"], "get_weather");
        assert_eq!(
            piece.tool_calls[0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
        let error = br#"{"error":"model 'x' not found"}"#;
        assert_eq!(
            LlmApi::Ollama
                .decode(error, true, &mut EventOrder::default())
                .unwrap()
                .error
                .as_deref(),
            Some("model 'x' not found")
        );
    }
}
