//! What one event of an answer carried, in any API: the common shape every dialect
//! decodes into (`dialect`, `kserve_grpc`, `responses`, `anthropic`) and the LLM
//! client reads (`openai`), and how decoding one fails.

use std::borrow::Cow;

use serde_json::Value;

use crate::record::{ServerReported, ServerTruth};

/// What one event (or a whole answer) of any API carried, borrowed where possible.
#[derive(Debug, Default)]
pub(super) struct Piece<'a> {
    /// Answer text.
    pub answer: Option<Cow<'a, str>>,
    /// Reasoning text (not part of the answer; counted as output).
    pub reasoning: Option<Cow<'a, str>>,
    /// Tool-call parts in OpenAI's shape (`index`, `id`, `function.name`,
    /// `function.arguments` as text).
    pub tool_calls: Vec<Value>,
    /// In OpenAI's words: `stop`, `length`, `tool_calls`… (TGI's `eos_token` and
    /// `stop_sequence` are `stop`).
    pub finish_reason: Option<Cow<'a, str>>,
    /// The whole prompt, cached part included (Anthropic's three counts summed).
    pub prompt_tokens: Option<u32>,
    /// Every generated token, reasoning included.
    pub completion_tokens: Option<u32>,
    /// Of the completion tokens, the reasoning ones, where the server says.
    pub reasoning_tokens: Option<u32>,
    /// Of the prompt tokens, those the server's prefix cache served (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`).
    pub cached_tokens: Option<u32>,
    /// Of the prompt tokens, those written to the cache (Anthropic's
    /// `cache_creation_input_tokens`).
    pub cache_write_tokens: Option<u32>,
    /// The server said the request failed.
    pub error: Option<String>,
    /// The simulator's ground truth.
    pub truth: Option<ServerTruth>,
    /// The answer is complete (TGI's last event, Ollama's `done`).
    pub done: bool,
    /// The server's own account of its time.
    pub reported: Option<ServerReported>,
    /// The Responses API's id of the answer.
    pub response_id: Option<String>,
}

impl Piece<'_> {
    /// A whole answer assembled from its parts (the typed APIs' items and blocks):
    /// empty texts are none.
    pub(super) fn whole(
        answer: String,
        reasoning: String,
        tool_calls: Vec<Value>,
    ) -> Piece<'static> {
        let text = |s: String| (!s.is_empty()).then_some(Cow::Owned(s));
        Piece {
            answer: text(answer),
            reasoning: text(reasoning),
            tool_calls,
            done: true,
            ..Piece::default()
        }
    }
}

/// Why an answer's bytes are not what the API sends.
#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not the API's protobuf message: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("out of order: {0}")]
    Order(String),
}

impl DecodeError {
    /// The record's failure kind.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            DecodeError::Json(_) => "invalid_json",
            DecodeError::Protobuf(_) => "invalid_protobuf",
            DecodeError::Order(_) => "out_of_order",
        }
    }
}

/// The message of an error object (`{"message": …}`), or the object as JSON.
pub(super) fn error_text(error: &Value) -> String {
    match error {
        Value::String(text) => text.clone(),
        _ => error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    }
}
