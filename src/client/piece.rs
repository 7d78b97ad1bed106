//! What one event of an answer carried, in any API: the common shape every dialect
//! decodes into (`dialect`, `kserve_grpc`) and the LLM client reads (`openai`).

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
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    /// The server said the request failed.
    pub error: Option<String>,
    /// The simulator's ground truth.
    pub truth: Option<ServerTruth>,
    /// The answer is complete (TGI's last event, Ollama's `done`).
    pub done: bool,
    /// The server's own account of its time.
    pub reported: Option<ServerReported>,
}
