//! What one request sends: the prompt (text or chat messages), its length limits and
//! the marks that travel with it. Made by the prompt sources, datasets and replays;
//! turned into a request body by the protocol clients.

use serde_json::Value;

use crate::record::PrefixMark;

/// What one request sends.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptBody {
    Text(String),
    Messages(Vec<Value>),
}

impl PromptBody {
    /// The text a user typed: the whole text, or the last message's content (what a
    /// multi-turn session or a flow takes as the user's turn).
    pub fn user_text(&self) -> &str {
        match self {
            PromptBody::Text(text) => text,
            PromptBody::Messages(messages) => messages
                .iter()
                .rev()
                .find_map(|m| m["content"].as_str())
                .unwrap_or_default(),
        }
    }
}

/// One request's prompt and the marks that go with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub prompt: PromptBody,
    pub max_tokens: Option<u32>,
    /// Prompt tokens by the local tokenizer, for when the server reports none.
    pub input_tokens: u32,
    /// W3C `traceparent` of the request, for requests that belong to a session.
    pub traceparent: Option<String>,
    /// The shared prefix the prompt begins with (synthetic prefix workloads).
    pub prefix: Option<PrefixMark>,
    /// OpenAI's Responses API: the stored answer this turn continues (sessions whose
    /// history the server keeps).
    pub previous_response_id: Option<String>,
    /// A graded dataset's line: how to grade the answer.
    pub grade: Option<crate::workload::grade::GradeTask>,
    /// A dataset line's own request fields (`tools`, `tool_choice`,
    /// `response_format`), merged over the spec's `body`.
    pub fields: Option<std::sync::Arc<serde_json::Map<String, serde_json::Value>>>,
}
