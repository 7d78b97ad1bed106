//! OpenAI's chat and completions endpoints: their answers as `chat.completion.chunk`
//! and `text_completion` events, or whole.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::answer::{
    Format, answer, engine_gone, error_response, json_response, json_string, request_hash,
    unix_now, usage_json,
};
use super::openai::{self, ApiError, Plan};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::FinishReason;

pub(super) async fn chat_completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    if let Some(script) = &state.script {
        let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, body) = script.answer(request, &state.model);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, body).into_response();
    }
    let arrival_ns = state.clock.now_ns();
    let plan =
        openai::parse(&body).and_then(|request| openai::plan_chat(request, &state.context()));
    openai_answer(
        state,
        plan,
        OpenAiApi::Chat,
        arrival_ns,
        request_hash(&body),
    )
    .await
}

pub(super) async fn completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let arrival_ns = state.clock.now_ns();
    let plan =
        openai::parse(&body).and_then(|request| openai::plan_completion(request, &state.context()));
    openai_answer(
        state,
        plan,
        OpenAiApi::Completions,
        arrival_ns,
        request_hash(&body),
    )
    .await
}

/// The OpenAI APIs the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenAiApi {
    Chat,
    Completions,
}

async fn openai_answer(
    state: Arc<SimState>,
    plan: Result<Plan, ApiError>,
    api: OpenAiApi,
    arrival_ns: u64,
    request_hash: u64,
) -> Response {
    let plan = match plan {
        Ok(plan) => plan,
        Err(error) => return error_response(error),
    };
    let id = state.nonce.fetch_add(1, Ordering::Relaxed);
    let chunks = Chunks::new(api, &state.model, id, &plan);
    answer(&state, plan, chunks, arrival_ns, request_hash).await
}

/// Formats the chunks of one answer. The constant head of every chunk is rendered
/// once, so a token costs one escape of its text.
struct Chunks {
    api: OpenAiApi,
    id: String,
    created: u64,
    model: String,
    head: String,
    tool_call: Option<super::text::ToolCall>,
    include_usage: bool,
    /// Tokens of reasoning before the answer, sent as `reasoning_content` (vLLM's
    /// reasoning parsers' field).
    reasoning: u32,
}

impl Chunks {
    fn new(api: OpenAiApi, model: &str, n: u64, plan: &Plan) -> Chunks {
        let (id, object) = match api {
            OpenAiApi::Chat => (format!("chatcmpl-{n:016x}"), "chat.completion.chunk"),
            OpenAiApi::Completions => (format!("cmpl-{n:016x}"), "text_completion"),
        };
        let created = unix_now();
        let head = format!(
            "data: {{\"id\":{},\"object\":\"{object}\",\"created\":{created},\"model\":{},\"choices\":[{{\"index\":0,",
            Value::from(id.as_str()),
            Value::from(model)
        );
        Chunks {
            api,
            id,
            created,
            model: model.to_owned(),
            head,
            tool_call: plan.tool_call.clone(),
            include_usage: plan.include_usage,
            reasoning: plan.generator.reasoning_length(),
        }
    }

    fn envelope(&self, choices: Vec<Value>) -> Value {
        let object = match self.api {
            OpenAiApi::Chat => "chat.completion.chunk",
            OpenAiApi::Completions => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }

    /// A non-streaming response body.
    fn full_body(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Value {
        let mut choice = match (self.api, &self.tool_call) {
            (OpenAiApi::Chat, Some(call)) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": text}}
                ]},
                "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null
            }),
            (OpenAiApi::Chat, None) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null
            }),
            (OpenAiApi::Completions, _) => json!({
                "index": 0, "text": text, "logprobs": null,
                "finish_reason": reason.as_str(), "stop_reason": null
            }),
        };
        if !reasoning.is_empty() {
            choice["message"]["reasoning_content"] = json!(reasoning);
        }
        let object = match self.api {
            OpenAiApi::Chat => "chat.completion",
            OpenAiApi::Completions => "text_completion",
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice], "usage": usage_json(timeline),
        })
    }
}

impl Format for Chunks {
    fn stream_type(&self) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        let escaped = json_string(delta);
        let mut out = String::with_capacity(self.head.len() + escaped.len() + 160);
        if index == 0 && self.api == OpenAiApi::Chat {
            // vLLM sends the role with the first output, not before it.
            out.push_str(&self.head);
            out.push_str("\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
        }
        out.push_str(&self.head);
        match (self.api, &self.tool_call) {
            (OpenAiApi::Chat, _) if index < self.reasoning => {
                out.push_str("\"delta\":{\"reasoning_content\":");
                out.push_str(&escaped);
                out.push_str("},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            (OpenAiApi::Chat, Some(call)) if index == self.reasoning => {
                out.push_str(&format!(
                    "\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{escaped}}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    Value::from(call.id.as_str()),
                    Value::from(call.name.as_str())
                ));
            }
            (OpenAiApi::Chat, Some(_)) => {
                out.push_str(
                    "\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":",
                );
                out.push_str(&escaped);
                out.push_str("}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            (OpenAiApi::Chat, None) => {
                out.push_str("\"delta\":{\"content\":");
                out.push_str(&escaped);
                out.push_str("},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            (OpenAiApi::Completions, _) => {
                out.push_str("\"text\":");
                out.push_str(&escaped);
                out.push_str(
                    ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n",
                );
            }
        }
        Some(Bytes::from(out))
    }

    /// The finishing chunk, the usage chunk when asked for, ground truth on the last
    /// of them, then `[DONE]`.
    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let choice = match self.api {
            OpenAiApi::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason.as_str()})
            }
            OpenAiApi::Completions => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null})
            }
        };
        let mut finishing = self.envelope(vec![choice]);
        let mut out = String::new();
        if self.include_usage {
            let mut usage = self.envelope(Vec::new());
            usage["usage"] = usage_json(timeline);
            usage["redline"] = truth;
            out.push_str(&format!("data: {finishing}\n\ndata: {usage}\n\n"));
        } else {
            finishing["redline"] = truth;
            out.push_str(&format!("data: {finishing}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        Bytes::from(out)
    }

    fn broken(&self) -> Bytes {
        // The engine stopped mid-stream: say so in-band, as vLLM does.
        Bytes::from(format!("data: {}\n\n", engine_gone().body()))
    }

    fn whole(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response {
        json_response(
            StatusCode::OK,
            &self.full_body(text, reasoning, reason, timeline),
        )
    }
}
