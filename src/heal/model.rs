//! The agent's model: any OpenAI-compatible chat endpoint. It is offered the runbook's
//! actions as tools (each with its schema as parameters, plus `finish`), or, where a
//! server does not take tools, asked for an answer constrained by a JSON Schema whose
//! branches are the actions (`response_format: json_schema`, which llama.cpp turns into
//! a grammar). Either way the answer becomes one [`Decision`]; checking it against the
//! whitelist is the agent's job, not this one's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde::Serialize;
use serde_json::{Value, json};

use super::runbook::{FINISH, Runbook};
use crate::client::HttpClient;

/// How decisions are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Tool calling first; a server that refuses tools, or answers without calling
    /// one, is asked for JSON by schema, then in the `json_object` form.
    Auto,
    /// Tool calling (`tools`, `tool_choice: required`).
    Tools,
    /// An answer constrained by a JSON Schema (`response_format: {type: json_schema}`:
    /// OpenAI, vLLM, llama.cpp's server).
    JsonSchema,
    /// The same schema as `response_format: {type: json_object, schema}`
    /// (llama-cpp-python, older llama.cpp servers).
    JsonObject,
}

/// The order `auto` tries the protocols in.
const AUTO: [Protocol; 3] = [Protocol::Tools, Protocol::JsonSchema, Protocol::JsonObject];

/// What the model chose: an action (or `finish`) and its arguments, unchecked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub thought: String,
    pub action: String,
    pub arguments: Value,
    /// The assistant message to keep in the conversation.
    #[serde(skip)]
    pub message: Value,
    /// The tool call's id, to answer it with a `tool` message.
    #[serde(skip)]
    pub call_id: Option<String>,
}

/// Why there is no decision.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("the model endpoint did not answer: {0}")]
    Unreachable(String),
    #[error("the model endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the model's answer is not JSON: {0}")]
    NotJson(String),
    #[error("the model's answer has no message: {0}")]
    NoMessage(String),
}

/// One exchange with the model, for the audit log.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub protocol: Protocol,
    pub request: Value,
    /// The body as it came (cut short), when one came.
    pub answer: Option<String>,
    pub elapsed_ms: f64,
}

/// An OpenAI-compatible chat endpoint and how to ask it.
pub struct Model {
    /// `…/v1/chat/completions`.
    pub url: String,
    pub name: String,
    /// Sent as a Bearer token, never logged.
    pub key: Option<String>,
    pub protocol: Protocol,
    pub timeout: Duration,
    pub http: HttpClient,
}

impl Model {
    /// The endpoint for a base URL (`http://host:port` or `…/v1`).
    pub fn chat_url(base: &str) -> String {
        let base = base.trim_end_matches('/');
        let base = base.strip_suffix("/chat/completions").unwrap_or(base);
        if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        }
    }

    /// Asks for the next decision. In `auto`, a server that refuses a protocol (an
    /// HTTP error), ignores the tools (no tool call although one is required) or
    /// ignores the schema (an answer that is not JSON) is asked the next way, and is
    /// asked the way that worked from then on.
    pub async fn decide(
        &mut self,
        messages: &[Value],
        runbook: &Runbook,
        exchanges: &mut Vec<Exchange>,
    ) -> Result<Decision, ModelError> {
        if self.protocol != Protocol::Auto {
            return self.ask(self.protocol, messages, runbook, exchanges).await;
        }
        let mut last = None;
        for protocol in AUTO {
            let answer = self.ask(protocol, messages, runbook, exchanges).await;
            let refused = match &answer {
                Ok(decision) => protocol == Protocol::Tools && decision.call_id.is_none(),
                Err(ModelError::Status { .. } | ModelError::NotJson(_)) => true,
                Err(_) => false,
            };
            if !refused {
                if answer.is_ok() {
                    self.protocol = protocol;
                }
                return answer;
            }
            last = Some(answer);
        }
        last.expect("auto tries at least one protocol")
    }

    async fn ask(
        &self,
        protocol: Protocol,
        messages: &[Value],
        runbook: &Runbook,
        exchanges: &mut Vec<Exchange>,
    ) -> Result<Decision, ModelError> {
        let request = request_body(&self.name, protocol, messages, runbook);
        let started = Instant::now();
        let answer = self.post(&request).await;
        exchanges.push(Exchange {
            protocol,
            request,
            answer: answer
                .as_ref()
                .ok()
                .map(|(_, body)| crate::record::cut_to(body, 16 << 10)),
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        });
        let (status, body) = answer.map_err(ModelError::Unreachable)?;
        if !(200..300).contains(&status) {
            return Err(ModelError::Status {
                status,
                body: crate::record::cut_to(&body, 300),
            });
        }
        let value: Value = serde_json::from_str(&body).map_err(|e| {
            ModelError::NotJson(format!("{e}: {}", crate::record::cut_to(&body, 200)))
        })?;
        let message = value
            .pointer("/choices/0/message")
            .cloned()
            .ok_or_else(|| ModelError::NoMessage(crate::record::cut_to(&body, 200)))?;
        match protocol {
            Protocol::Auto | Protocol::Tools => from_tool_call(message),
            Protocol::JsonSchema | Protocol::JsonObject => from_json_answer(message),
        }
    }

    async fn post(&self, body: &Value) -> Result<(u16, String), String> {
        let mut request = hyper::Request::builder()
            .method(hyper::Method::POST)
            .uri(&self.url)
            .header("content-type", "application/json");
        if let Some(key) = &self.key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        crate::client::exchange(&self.http, request, Instant::now() + self.timeout).await
    }
}

/// The chat request: deterministic (temperature 0), with the actions as tools or as
/// the branches of the answer's schema.
pub fn request_body(
    model: &str,
    protocol: Protocol,
    messages: &[Value],
    runbook: &Runbook,
) -> Value {
    let mut messages = messages.to_vec();
    if matches!(protocol, Protocol::JsonSchema | Protocol::JsonObject) {
        // No tools in the request: the model learns the actions from the prompt.
        if let Some(system) = messages.first_mut() {
            let text = system["content"].as_str().unwrap_or_default();
            system["content"] = Value::String(format!("{text}\n\n{}", catalogue(runbook)));
        }
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": 512,
        "stream": false,
    });
    if protocol == Protocol::JsonSchema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "decision", "strict": true, "schema": decision_schema(runbook)},
        });
    } else if protocol == Protocol::JsonObject {
        body["response_format"] =
            json!({"type": "json_object", "schema": decision_schema(runbook)});
    } else {
        let mut tools: Vec<Value> = runbook
            .actions
            .values()
            .map(|a| tool(&a.name, &a.description, &a.schema))
            .collect();
        tools.push(tool(
            FINISH,
            "End: the problem is fixed, or no action here fits it.",
            &finish_schema(),
        ));
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = json!("required");
    }
    body
}

/// The actions in words, for a model asked for JSON rather than offered tools.
fn catalogue(runbook: &Runbook) -> String {
    let mut text = String::from(
        "Answer with one JSON object {\"thought\", \"action\", \"arguments\"}. The actions:",
    );
    for action in runbook.actions.values() {
        text.push_str(&format!(
            "\n- {}: {} Arguments: {}",
            action.name, action.description, action.schema
        ));
    }
    text.push_str(&format!(
        "\n- {FINISH}: End: the problem is fixed, or no action here fits it. Arguments: {}",
        finish_schema()
    ));
    text
}

fn tool(name: &str, description: &str, parameters: &Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

fn finish_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"summary": {"type": "string", "maxLength": 300}},
        "required": ["summary"],
        "additionalProperties": false,
    })
}

/// One branch per action (its name as a constant, its arguments by its schema), and
/// one for `finish`: a constrained decoder can then only produce whitelisted names.
pub fn decision_schema(runbook: &Runbook) -> Value {
    let branch = |name: &str, arguments: &Value| {
        json!({
            "type": "object",
            "properties": {
                "thought": {"type": "string", "maxLength": 300},
                "action": {"const": name},
                "arguments": arguments,
            },
            "required": ["thought", "action", "arguments"],
            "additionalProperties": false,
        })
    };
    let mut branches: Vec<Value> = runbook
        .actions
        .values()
        .map(|a| branch(&a.name, &a.schema))
        .collect();
    branches.push(branch(FINISH, &finish_schema()));
    json!({"anyOf": branches})
}

/// A tool-calling answer: the first tool call, or, with none, the message as `finish`.
fn from_tool_call(message: Value) -> Result<Decision, ModelError> {
    let thought = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(call) = message.pointer("/tool_calls/0") else {
        return Ok(Decision {
            arguments: json!({"summary": thought}),
            thought: String::new(),
            action: FINISH.into(),
            call_id: None,
            message,
        });
    };
    let action = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // Arguments come as a JSON string; what is not JSON stays a string, and the
    // action's schema refuses it.
    let arguments = match call.pointer("/function/arguments") {
        Some(Value::String(text)) => {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
        }
        Some(other) => other.clone(),
        None => json!({}),
    };
    Ok(Decision {
        thought,
        action,
        arguments,
        call_id: call.get("id").and_then(Value::as_str).map(str::to_owned),
        message,
    })
}

/// A JSON answer: `{thought, action, arguments}` in the message's content.
fn from_json_answer(message: Value) -> Result<Decision, ModelError> {
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let value: Value = serde_json::from_str(content.trim()).map_err(|e| {
        ModelError::NotJson(format!("{e}: {}", crate::record::cut_to(content, 200)))
    })?;
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(Decision {
        thought: text("thought"),
        action: text("action"),
        arguments: value.get("arguments").cloned().unwrap_or(Value::Null),
        call_id: None,
        message: json!({"role": "assistant", "content": content}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_urls_take_a_base_or_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/chat/completions",
        ] {
            assert_eq!(Model::chat_url(base), "http://h:1/v1/chat/completions");
        }
    }

    #[test]
    fn a_tool_call_with_arguments_that_are_not_json_keeps_them_for_the_schema_to_refuse() {
        let message = json!({"content": null, "tool_calls": [{"id": "c1", "function": {"name": "scale", "arguments": "n=4"}}]});
        let decision = from_tool_call(message).unwrap();
        assert_eq!(decision.action, "scale");
        assert_eq!(decision.arguments, json!("n=4"));
        assert_eq!(decision.call_id.as_deref(), Some("c1"));
        let plain = from_tool_call(json!({"content": "all good"})).unwrap();
        assert_eq!(
            (plain.action.as_str(), plain.arguments),
            (FINISH, json!({"summary": "all good"}))
        );
    }

    #[test]
    fn a_json_answer_that_is_not_json_is_an_error() {
        let error = from_json_answer(json!({"content": "I think we should"})).unwrap_err();
        assert!(matches!(error, ModelError::NotJson(_)), "{error}");
    }
}
