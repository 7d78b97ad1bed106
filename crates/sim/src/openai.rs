//! The OpenAI-compatible request bodies the simulator accepts, and how a request
//! becomes a prompt and an answer plan. Unknown fields are ignored (clients send many
//! sampling options a simulator has no use for); wrong types and impossible values are
//! rejected with vLLM's error shape.

use serde::Deserialize;
use serde_json::Value;

use super::profile::Profile;
use super::text::{AnswerGenerator, AnswerLimits, ToolCall, prompt_seed, tool_arguments};
use redline_base::seed::mix_seed;
use redline_base::sim_tokenizer;

/// An error as vLLM returns it: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            kind: "BadRequestError",
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            kind: "NotFoundError",
            message: message.into(),
        }
    }

    pub fn body(&self) -> Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": null,
                "code": self.status,
            }
        })
    }
}

/// `stop` may be one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Fields shared by chat and text completions.
#[derive(Debug, Clone, Deserialize)]
pub struct Sampling {
    pub model: Option<String>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<u32>,
}

/// Message content: a string, or a list of typed parts whose text parts are joined.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
    pub tool_calls: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: Function,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Function {
    pub name: String,
    pub parameters: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<Value>,
    /// `none` turns reasoning off; other efforts reason as the profile does.
    pub reasoning_effort: Option<String>,
    /// The simulator's own field: how many tokens to reason (the profile's otherwise).
    pub reasoning_tokens: Option<u32>,
}

/// A completion prompt: text, one text in a list, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// Embedding input: text, texts, token ids, or lists of token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

impl EmbeddingInput {
    pub fn into_texts(self) -> Vec<String> {
        let ids = |ids: Vec<u32>| {
            ids.iter()
                .map(|id| format!("t{id}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match self {
            EmbeddingInput::Text(s) => vec![s],
            EmbeddingInput::Texts(v) => v,
            EmbeddingInput::Tokens(t) => vec![ids(t)],
            EmbeddingInput::TokenLists(l) => l.into_iter().map(ids).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    pub input: EmbeddingInput,
    pub model: Option<String>,
    pub encoding_format: Option<String>,
    pub dimensions: Option<u32>,
}

/// What the engine should compute for a request.
#[derive(Debug)]
pub struct Plan {
    pub prompt: Vec<u32>,
    pub generator: AnswerGenerator,
    pub stream: bool,
    pub include_usage: bool,
    pub tool_call: Option<ToolCall>,
}

/// Parses a JSON body, turning serde's message into a 400.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// Checks the requested model is the one served (absent means the served one).
pub fn check_model(requested: Option<&str>, served: &str) -> Result<(), ApiError> {
    match requested {
        Some(model) if model != served => Err(ApiError::not_found(format!(
            "The model `{model}` does not exist."
        ))),
        _ => Ok(()),
    }
}

/// The prompt a chat request renders to (a ChatML-style template).
pub fn render_chat(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str("<|im_start|>");
        out.push_str(&message.role);
        out.push('\n');
        if let Some(content) = &message.content {
            out.push_str(&content.text());
        }
        if let Some(calls) = &message.tool_calls {
            out.push_str(&calls.to_string());
        }
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// Server-wide inputs to planning.
pub struct Context<'a> {
    pub profile: &'a Profile,
    pub served_model: &'a str,
    pub server_seed: u64,
    /// Distinct per request: varies answers at temperature > 0 without a seed.
    pub request_nonce: u64,
    /// Requests in the engine (running and waiting) as this one arrives.
    pub load: u32,
}

pub fn plan_chat(request: ChatRequest, cx: &Context) -> Result<Plan, ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages must contain at least one message",
        ));
    }
    let prompt = sim_tokenizer::encode(&render_chat(&request.messages));
    let tool_call = choose_tool(&request, cx)?;
    let max_tokens = request
        .sampling
        .max_completion_tokens
        .or(request.sampling.max_tokens);
    let effort = request.reasoning_effort.as_deref();
    let reasoning = reasoning_wanted(cx.profile, effort, request.reasoning_tokens);
    let plan = plan(prompt, max_tokens, request.sampling, tool_call, cx)?;
    Ok(plan.reasoning_first(reasoning, max_tokens, cx.profile))
}

/// How many tokens a request reasons: none when its effort is `none`, else what it
/// asks (the simulator's `reasoning_tokens`) or the profile's.
pub fn reasoning_wanted(profile: &Profile, effort: Option<&str>, asked: Option<u32>) -> u32 {
    match effort {
        Some("none") => 0,
        _ => asked.unwrap_or(profile.reasoning_tokens),
    }
}

impl Plan {
    /// This plan's answer after `reasoning` tokens of thought, within `max_tokens` and
    /// the context's room.
    pub fn reasoning_first(
        mut self,
        reasoning: u32,
        max_tokens: Option<u32>,
        profile: &Profile,
    ) -> Plan {
        if reasoning == 0 {
            return self;
        }
        let room = profile.max_model_len - self.prompt.len() as u32;
        let cap = max_tokens.unwrap_or(u32::MAX).min(room);
        self.generator = self.generator.with_reasoning(reasoning, cap);
        self
    }
}

pub fn plan_completion(request: CompletionRequest, cx: &Context) -> Result<Plan, ApiError> {
    let prompt = match request.prompt {
        Prompt::Text(text) => sim_tokenizer::encode(&text),
        Prompt::Texts(texts) if texts.len() == 1 => sim_tokenizer::encode(&texts[0]),
        Prompt::Texts(texts) => {
            return Err(ApiError::bad_request(format!(
                "only one prompt per request is supported, got {}",
                texts.len()
            )));
        }
        Prompt::Tokens(ids) => ids,
    };
    // The completions API's default, as OpenAI and vLLM have it.
    let max_tokens = request.sampling.max_tokens.or(Some(16));
    plan(prompt, max_tokens, request.sampling, None, cx)
}

/// Checks a request's sampling against the model and plans its answer.
pub fn plan(
    prompt: Vec<u32>,
    max_tokens: Option<u32>,
    sampling: Sampling,
    tool_call: Option<ToolCall>,
    cx: &Context,
) -> Result<Plan, ApiError> {
    check_model(sampling.model.as_deref(), cx.served_model)?;
    if prompt.is_empty() {
        return Err(ApiError::bad_request("prompt must not be empty"));
    }
    if let Some(n) = sampling.n
        && n != 1
    {
        return Err(ApiError::bad_request(format!("n must be 1, got {n}")));
    }
    if max_tokens == Some(0) {
        return Err(ApiError::bad_request(
            "max_tokens must be at least 1, got 0",
        ));
    }
    let temperature = sampling.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(format!(
            "temperature must be between 0 and 2, got {temperature}"
        )));
    }
    let max_len = cx.profile.max_model_len;
    let prompt_len = prompt.len() as u32;
    if prompt_len + max_tokens.unwrap_or(1) > max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({prompt_len} in the messages, {} in the completion). Please reduce the length of the messages or completion.",
            prompt_len + max_tokens.unwrap_or(1),
            max_tokens.unwrap_or(1)
        )));
    }
    let seed = if temperature == 0.0 {
        cx.server_seed
    } else {
        match sampling.seed {
            Some(seed) => mix_seed(&[cx.server_seed, seed as u64, temperature.to_bits()]),
            None => mix_seed(&[cx.server_seed, cx.request_nonce, temperature.to_bits()]),
        }
    };
    let limits = AnswerLimits {
        max_tokens,
        room: max_len - prompt_len,
        natural_length: cx.profile.natural_length,
        stop: sampling.stop.map(Stop::into_vec).unwrap_or_default(),
    };
    let generator = match &tool_call {
        Some(call) => AnswerGenerator::tool_call(call, &limits),
        None => AnswerGenerator::text(prompt_seed(&prompt, seed), &limits),
    };
    Ok(Plan {
        prompt,
        generator,
        stream: sampling.stream,
        // llama.cpp sends no usage in streams, whatever the request asks.
        include_usage: sampling.stream_options.is_some_and(|o| o.include_usage)
            && cx.profile.server != crate::profile::ServerKind::Llamacpp,
        tool_call,
    })
}

/// Whether the model calls a tool, and which: a named `tool_choice` or `required`
/// always calls; `auto` calls the tool the last user message names; after a tool
/// result the model answers in text, so agent loops end.
fn choose_tool(request: &ChatRequest, cx: &Context) -> Result<Option<ToolCall>, ApiError> {
    let tools = request.tools.as_deref().unwrap_or_default();
    if tools.is_empty() {
        return Ok(None);
    }
    if let Some(tool) = tools
        .iter()
        .find(|t| t.kind.as_deref().is_some_and(|k| k != "function"))
    {
        return Err(ApiError::bad_request(format!(
            "unsupported tool type `{}` for `{}`: only `function` tools are supported",
            tool.kind.as_deref().unwrap_or_default(),
            tool.function.name
        )));
    }
    let last_user = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .and_then(|m| m.content.as_ref())
        .map(Content::text)
        .unwrap_or_default();
    let mentioned = || {
        let lower = last_user.to_lowercase();
        tools
            .iter()
            .find(|t| lower.contains(&t.function.name.to_lowercase()))
    };
    let after_tool_result = request.messages.last().is_some_and(|m| m.role == "tool");
    let chosen = match &request.tool_choice {
        None => (!after_tool_result).then(mentioned).flatten(),
        Some(Value::String(choice)) => match choice.as_str() {
            "none" => None,
            "auto" => (!after_tool_result).then(mentioned).flatten(),
            "required" => Some(mentioned().unwrap_or(&tools[0])),
            other => {
                return Err(ApiError::bad_request(format!(
                    "invalid tool_choice `{other}`: choose from none, auto, required, or {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"
                )));
            }
        },
        Some(named) => {
            let name = named
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request("tool_choice object needs function.name"))?;
            Some(
                tools
                    .iter()
                    .find(|t| t.function.name == name)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "tool_choice names `{name}`, which is not among the tools"
                        ))
                    })?,
            )
        }
    };
    Ok(chosen.map(|tool| {
        let seed = mix_seed(&[cx.server_seed, sim_tokenizer::piece_id(&last_user).into()]);
        let arguments = tool_arguments(tool.function.parameters.as_ref(), &last_user, seed);
        let spoil = cx
            .profile
            .planted
            .as_ref()
            .and_then(|p| p.spoils_tool_call(cx.load, cx.request_nonce));
        let (arguments, spoiled) = match spoil {
            Some(spoil) => {
                let (spoiled, how) = spoil.apply(&arguments);
                (spoiled, Some(how))
            }
            None => (arguments, None),
        };
        ToolCall {
            id: format!("chatcmpl-tool-{seed:016x}"),
            name: tool.function.name.clone(),
            arguments,
            spoiled,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(profile: &Profile) -> Context<'_> {
        Context {
            profile,
            served_model: "sim-tiny",
            server_seed: 0,
            request_nonce: 1,
            load: 0,
        }
    }

    fn chat(body: serde_json::Value) -> Result<Plan, ApiError> {
        let profile = Profile::tiny();
        plan_chat(serde_json::from_value(body).unwrap(), &cx(&profile))
    }

    #[test]
    fn parts_content_is_joined_and_rendered() {
        let plan = chat(serde_json::json!({
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
            "max_tokens": 3
        }))
        .unwrap();
        let text = render_chat(&[Message {
            role: "user".into(),
            content: Some(Content::Text("hello".into())),
            tool_calls: None,
        }]);
        assert_eq!(plan.prompt, sim_tokenizer::encode(&text));
        assert_eq!(plan.generator.planned_length(), 3);
    }

    #[test]
    fn rejects_what_vllm_rejects() {
        let cases = [
            (
                serde_json::json!({"messages": []}),
                "messages must contain at least one message",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "x"}], "n": 2}),
                "n must be 1, got 2",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "max_tokens must be at least 1, got 0",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "x"}], "temperature": 3.0}),
                "temperature must be between 0 and 2, got 3",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9000}),
                "This model's maximum context length is 8192 tokens.",
            ),
        ];
        for (body, message) in cases {
            let err = chat(body).unwrap_err();
            assert_eq!(err.status, 400);
            assert!(err.message.starts_with(message), "{}", err.message);
        }
        let err = chat(
            serde_json::json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}),
        )
        .unwrap_err();
        assert_eq!(
            (err.status, err.message.as_str()),
            (404, "The model `gpt-9` does not exist.")
        );
    }

    #[test]
    fn tool_choice_decides_the_call() {
        let tools = serde_json::json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "search_docs", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
        ]);
        let ask = |content: &str, choice: serde_json::Value, last_tool: bool| {
            let mut messages = vec![serde_json::json!({"role": "user", "content": content})];
            if last_tool {
                messages.push(
                    serde_json::json!({"role": "tool", "content": "{}", "tool_call_id": "x"}),
                );
            }
            let mut body = serde_json::json!({"messages": messages, "tools": tools});
            if !choice.is_null() {
                body["tool_choice"] = choice;
            }
            chat(body).unwrap().tool_call.map(|c| (c.name, c.arguments))
        };
        let null = serde_json::Value::Null;
        assert_eq!(
            ask("use search_docs for cache policy", null.clone(), false),
            Some((
                "search_docs".into(),
                r#"{"query":"use search_docs for cache policy"}"#.into()
            ))
        );
        assert_eq!(ask("just chat", null.clone(), false), None);
        assert_eq!(
            ask("use search_docs", null.clone(), true),
            None,
            "answers after a tool result"
        );
        assert_eq!(
            ask("just chat", "required".into(), false).unwrap().0,
            "get_weather"
        );
        assert_eq!(ask("use search_docs", "none".into(), false), None);
        let named = serde_json::json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(ask("anything", named, true).unwrap().0, "get_weather");
    }

    #[test]
    fn temperature_zero_is_deterministic_and_positive_varies() {
        let profile = Profile::tiny();
        let body = |t: f64| serde_json::json!({"prompt": "the same prompt", "max_tokens": 20, "temperature": t});
        let answer = |t: f64, nonce: u64| {
            let mut cx = cx(&profile);
            cx.request_nonce = nonce;
            let mut plan = plan_completion(serde_json::from_value(body(t)).unwrap(), &cx).unwrap();
            (0..20)
                .map(|_| plan.generator.next_token().delta)
                .collect::<String>()
        };
        assert_eq!(answer(0.0, 1), answer(0.0, 2));
        assert_ne!(answer(0.8, 1), answer(0.8, 2));
    }
}
