//! A flow as written: the ordered steps of one session through the tiers of a RAG or
//! agent chain. Inputs are minijinja templates over the session's context: `prompt`,
//! `steps.<name>` for every earlier step, and `passages` (the latest search's hits).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::values::Dur;

/// One step: exactly one of the kinds, as a one-key map (`- embed: { … }`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowStepSpec {
    /// `/v1/embeddings` of a text; captures `steps.<name>.dimensions`, and its vector
    /// for a search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed: Option<EmbedStep>,
    /// Vector search (Qdrant or pgvector) with an earlier embed step's vector; captures
    /// `steps.<name>.passages` (id, score, text) and `steps.<name>.ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchStep>,
    /// A streaming chat call, tools offered; captures `steps.<name>.text`,
    /// `.tool_calls` and `.finish_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatStep>,
    /// Runs the tool calls of the chat step before it, one HTTP call each, and sends
    /// the results back to that chat step for a follow-up turn, until the model stops
    /// calling tools or `max_iterations` runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolStep>,
    /// Any other HTTP call answering JSON; captures `steps.<name>.json` and `.status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpStep>,
    /// A direct call to an MCP server (`api: mcp`): a tool, a resource, a prompt, a
    /// list or a ping; captures `steps.<name>.text` (the result's text) and `.json`
    /// (the whole result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpStep>,
}

/// A step's kind and its fields.
#[derive(Debug, Clone, Copy)]
pub enum FlowStep<'a> {
    Embed(&'a EmbedStep),
    Search(&'a SearchStep),
    Chat(&'a ChatStep),
    Tool(&'a ToolStep),
    Http(&'a HttpStep),
    Mcp(&'a McpStep),
}

impl FlowStepSpec {
    /// The kinds set: exactly one in a valid step.
    pub fn kinds(&self) -> Vec<FlowStep<'_>> {
        [
            self.embed.as_ref().map(FlowStep::Embed),
            self.search.as_ref().map(FlowStep::Search),
            self.chat.as_ref().map(FlowStep::Chat),
            self.tool.as_ref().map(FlowStep::Tool),
            self.http.as_ref().map(FlowStep::Http),
            self.mcp.as_ref().map(FlowStep::Mcp),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// What every step has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbedStep {
    /// The step's name in records, reports and templates (default: the kind, numbered
    /// if it repeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub service: String,
    /// The text to embed (default `{{ prompt }}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub service: String,
    /// The embed step whose vector to search with (default: the latest before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<String>,
    /// How many hits to ask for (default 5).
    #[serde(default = "five")]
    pub top_k: u32,
    /// JSONL of `{"prompt": …, "relevant": [ids]}` (relative to the spec): recall@k of
    /// every session whose prompt is listed. A prompt file of the same lines sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ground_truth: Option<String>,
    /// Queries whose recall@k falls below this are counted (default 82 %, the
    /// source's redline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

fn five() -> u32 {
    5
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub service: String,
    /// The system message (template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The user message (template; default: the latest search's passages, then the
    /// prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Tools offered to the model: a list, or `{ from: SERVICE }`, the tools an MCP
    /// service lists (`tools/list`, every page) when the run starts, as functions.
    #[serde(default, skip_serializing_if = "ChatTools::is_empty")]
    pub tools: ChatTools,
    /// `auto` (default), `required` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    /// Fields merged into the request body (e.g. `temperature: 0`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub body: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

/// A chat step's tools: listed, or an MCP service's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ChatTools {
    Listed(Vec<ToolDef>),
    From(ToolsFrom),
}

impl Default for ChatTools {
    fn default() -> Self {
        ChatTools::Listed(Vec::new())
    }
}

impl ChatTools {
    pub fn is_empty(&self) -> bool {
        matches!(self, ChatTools::Listed(tools) if tools.is_empty())
    }
}

/// `{ from: SERVICE }`: the tools of an `api: mcp` service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsFrom {
    pub from: String,
}

/// A function tool offered to the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The arguments' JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub service: String,
    /// Longest a tool call may take (default 10s); past it the call is a timeout,
    /// which counts toward the circuit breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// Path per tool name (default `/tools/<name>`), appended to the service URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub paths: BTreeMap<String, String>,
    /// Most chat → tool rounds (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Checked on each tool's JSON answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub service: String,
    /// Default POST.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    pub path: String,
    /// The body (template), sent as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The status a good answer has (default: any 2xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

/// A direct MCP call: exactly one of `tool`, `read`, `prompt`, `list` and `ping`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An `api: mcp` service.
    pub service: String,
    /// `tools/call` of this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's or prompt's arguments; strings are templates over the session
    /// (`{{ prompt }}`, `{{ steps.NAME.text }}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Map<String, serde_json::Value>>,
    /// `resources/read` of this URI (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<String>,
    /// `prompts/get` of this prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `tools/list`, `resources/list`, `resources/templates/list` or `prompts/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<super::mcp::McpList>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ping: bool,
    /// Longest the call may take (default: the run's `timeouts.total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<AssertSpec>,
}

/// Checks on a step's output; a failed one fails the step with kind `assert`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AssertSpec {
    /// Check this part of a JSON output (a JSON Pointer, e.g. `/answer`) instead of the
    /// whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The answer must mean this: cosine similarity of embeddings at least
    /// `threshold`. Without `embed_service`, a lexical similarity is used instead
    /// (and labelled so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similar_to: Option<String>,
    /// Default 0.85.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The service whose `/v1/embeddings` judges similarity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed_service: Option<String>,
    /// The output must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// The output must match this regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// The output (or each tool call's arguments, for a chat that calls tools) must be
    /// JSON valid against this schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
    /// The output must not be empty (nor an empty result list).
    #[serde(default)]
    pub non_empty: bool,
    /// Numbers in the output must be finite (no NaN, no inf).
    #[serde(default)]
    pub finite: bool,
    /// The answer must not stop at `max_tokens` (`finish_reason: length`).
    #[serde(default)]
    pub not_truncated: bool,
}

/// When to give up on a session's tools.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreakerSpec {
    /// Consecutive tool-call timeouts that open the breaker (default 3).
    #[serde(rename = "consecutiveTimeouts", default = "three")]
    pub consecutive_timeouts: u32,
}

impl Default for CircuitBreakerSpec {
    fn default() -> Self {
        CircuitBreakerSpec {
            consecutive_timeouts: three(),
        }
    }
}

fn three() -> u32 {
    3
}
