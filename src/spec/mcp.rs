//! What MCP calls send when they are the load (`payloadTemplate.mcp`, for an
//! `api: mcp` service): a weighted mix of operations, and how sessions churn.

use serde::{Deserialize, Serialize};

/// MCP calls as the load: each arrival (or closed-loop turn) draws one operation by
/// weight and sends it on a session of its own (docs/mcp.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// The operations, each drawn by its `weight`.
    pub ops: Vec<McpOpSpec>,
    /// The share of calls after which their session is ended (`DELETE`), so that the
    /// next call on that slot opens a new one with `initialize`: session churn, from 0
    /// (sessions live the whole run; the default) to 1 (a session per call).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub churn: f64,
    /// Ask for progress notifications on tool calls (a `progressToken`): a server
    /// that sends them answers as an SSE stream, and the records count them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub progress: bool,
    /// Open the standalone GET stream on each session, as the SDKs' clients do, and
    /// count what the server sends on it (Streamable HTTP only; a server that offers
    /// none answers 405, and nothing is heard).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listen: bool,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One operation of the mix: exactly one of `tool`, `read`, `list`, `prompt`, `ping`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpOpSpec {
    /// `tools/call` of this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The arguments of a `tool` call or a `prompt`. A string may be a template:
    /// `{{ seq }}` is the call's number, `{{ n }}` a number from 0 to 999 drawn from
    /// the run's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Map<String, serde_json::Value>>,
    /// `resources/read` of this URI (a template, as `args`' strings are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<String>,
    /// `tools/list`, `resources/list`, `resources/templates/list` or `prompts/list`,
    /// every page (one record, its pages counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<McpList>,
    /// `prompts/get` of this prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `ping`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ping: bool,
    /// Its share of the calls, relative to the others' (default 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// No operation yet, of weight 1 (as a spec that leaves `weight` out).
impl Default for McpOpSpec {
    fn default() -> Self {
        McpOpSpec {
            tool: None,
            args: None,
            read: None,
            list: None,
            prompt: None,
            ping: false,
            weight: one(),
        }
    }
}

/// What a `list` operation lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpList {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl McpList {
    /// The JSON-RPC method.
    pub fn method(self) -> &'static str {
        match self {
            McpList::Tools => "tools/list",
            McpList::Resources => "resources/list",
            McpList::ResourceTemplates => "resources/templates/list",
            McpList::Prompts => "prompts/list",
        }
    }
}
