//! The scripted model: a simulator that answers chat requests from a script, one
//! answer per request in order, so a test drives an agent through an exact path (a
//! tool call, a JSON answer, an unknown action, a server error, a body that is not
//! JSON). It keeps every request it was sent, for the test to read back what the
//! agent asked (`GET /redline/script`).

use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// A tool call: `{tool_call: {name: …, arguments: {…}}}`, with `content` beside it.
    ToolCall {
        name: String,
        arguments: Value,
        #[serde(default)]
        content: Option<String>,
    },
    /// A message whose content is this text (a JSON answer is text too).
    Content(String),
    /// A message whose content is this value serialized: a JSON answer.
    Json(Value),
    /// An HTTP error status with this body, as is.
    Error { status: u16, body: String },
}

/// A script and how far it has been read.
#[derive(Debug, Default)]
pub struct Script {
    answers: Vec<Answer>,
    state: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    next: usize,
    requests: Vec<Value>,
}

impl Script {
    pub fn new(answers: Vec<Answer>) -> Script {
        Script {
            answers,
            state: Mutex::default(),
        }
    }

    /// A script from a YAML or JSON list of answers.
    pub fn parse(text: &str) -> Result<Script, String> {
        // Through JSON: YAML would want `!tool_call` tags for the enum's variants.
        let value: Value = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
        let answers: Vec<Answer> = serde_json::from_value(value).map_err(|e| e.to_string())?;
        Ok(Script::new(answers))
    }

    /// The answer to `request` (a chat request body): the script's next, or a 409
    /// once it is used up, so a test sees an agent that asked once too often.
    pub fn answer(&self, request: Value, model: &str) -> (u16, String) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.requests.push(request);
        let turn = state.next;
        state.next += 1;
        let Some(answer) = self.answers.get(turn) else {
            let body = json!({"error": {
                "message": format!("the script has {} answers and this is request {}", self.answers.len(), turn + 1),
                "type": "script_exhausted",
            }});
            return (409, body.to_string());
        };
        let message = match answer {
            Answer::Error { status, body } => return (*status, body.clone()),
            Answer::Content(text) => json!({"role": "assistant", "content": text}),
            Answer::Json(value) => json!({"role": "assistant", "content": value.to_string()}),
            Answer::ToolCall {
                name,
                arguments,
                content,
            } => json!({
                "role": "assistant",
                "content": content,
                "tool_calls": [{
                    "id": format!("call-script-{turn}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()},
                }],
            }),
        };
        let finish = if message.get("tool_calls").is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        let body = json!({
            "id": format!("chatcmpl-script-{turn}"),
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        });
        (200, body.to_string())
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.requests.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_order_then_says_the_script_is_used_up() {
        let script = Script::parse(
            "- tool_call: { name: restart, arguments: { pod: a } }\n\
             - json: { action: finish }\n\
             - error: { status: 500, body: 'not json' }\n",
        )
        .unwrap();
        let (status, body) = script.answer(json!({"n": 1}), "m");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, 200);
        let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "restart");
        assert_eq!(call["arguments"], r#"{"pod":"a"}"#);
        let (_, body) = script.answer(json!({"n": 2}), "m");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body["choices"][0]["message"]["content"],
            r#"{"action":"finish"}"#
        );
        assert_eq!(script.answer(json!({}), "m"), (500, "not json".into()));
        assert_eq!(script.answer(json!({}), "m").0, 409);
        assert_eq!(script.requests().len(), 4);
        assert_eq!(script.requests()[1]["n"], 2);
    }
}
