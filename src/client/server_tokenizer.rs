//! The server's own tokenizer, for servers that stream no `usage` (llama.cpp): found
//! by probing the endpoints the common servers have, then used to count answers after
//! the run, when counting costs the server under test nothing.
//!
//! | server | endpoint | body | answer |
//! |---|---|---|---|
//! | llama-cpp-python | `POST /extras/tokenize` | `{"input"}` | `{"tokens": [...]}` |
//! | llama.cpp | `POST /tokenize` | `{"content"}` | `{"tokens": [...]}` |
//! | vLLM | `POST /tokenize` | `{"model", "prompt"}` | `{"count", "tokens"}` |
//! | TGI | `POST /tokenize` | `{"inputs"}` | `[{"id", "text"}, ...]` |

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use serde_json::{Value, json};

use super::HttpClient;

/// How long one tokenize call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A tokenizer endpoint that answered the probe.
#[derive(Debug, Clone)]
pub struct ServerTokenizer {
    uri: Uri,
    body: BodyShape,
    model: String,
    /// Tokens the endpoint adds to any text (a BOS, say): its count of "".
    added: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyShape {
    Input,
    Content,
    Prompt,
    Inputs,
}

impl ServerTokenizer {
    /// The first endpoint of `base_url` that tokenizes; `None` when there is none.
    pub async fn probe(http: &HttpClient, base_url: &str, model: &str) -> Option<ServerTokenizer> {
        let candidates = [
            ("/extras/tokenize", BodyShape::Input),
            ("/tokenize", BodyShape::Content),
            ("/tokenize", BodyShape::Prompt),
            ("/tokenize", BodyShape::Inputs),
        ];
        for (path, body) in candidates {
            let Ok(uri) = format!("{base_url}{path}").parse() else {
                continue;
            };
            let mut found = ServerTokenizer {
                uri,
                body,
                model: model.to_owned(),
                added: 0,
            };
            let (Some(empty), Some(words)) = (
                found.raw_count(http, "").await,
                found.raw_count(http, "redline counts tokens").await,
            ) else {
                continue;
            };
            if words > empty {
                found.added = empty;
                return Some(found);
            }
        }
        None
    }

    /// Where it is, for the report.
    pub fn endpoint(&self) -> String {
        self.uri.to_string()
    }

    /// Tokens of `text`, without what the endpoint adds to every text.
    pub async fn count(&self, http: &HttpClient, text: &str) -> Option<usize> {
        Some(self.raw_count(http, text).await?.saturating_sub(self.added))
    }

    async fn raw_count(&self, http: &HttpClient, text: &str) -> Option<usize> {
        let body = match self.body {
            BodyShape::Input => json!({"input": text, "model": self.model}),
            BodyShape::Content => json!({"content": text, "add_special": false}),
            BodyShape::Prompt => {
                json!({"model": self.model, "prompt": text, "add_special_tokens": false})
            }
            BodyShape::Inputs => json!({"inputs": text, "add_special_tokens": false}),
        };
        let request = Request::post(self.uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .ok()?;
        let answer = async {
            let response = super::send(http, request).await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            let limited = http_body_util::Limited::new(response.into_body(), 16 << 20);
            limited.collect().await.ok().map(|b| b.to_bytes())
        };
        let bytes = tokio::time::timeout(CALL_TIMEOUT, answer).await.ok()??;
        token_count(&serde_json::from_slice(&bytes).ok()?)
    }
}

/// The number of tokens in an answer of any of the shapes above.
fn token_count(answer: &Value) -> Option<usize> {
    match answer {
        Value::Array(tokens) => Some(tokens.len()),
        Value::Object(o) => match (o.get("count"), o.get("tokens")) {
            (Some(count), _) => count.as_u64().map(|n| n as usize),
            (None, Some(Value::Array(tokens))) => Some(tokens.len()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_shape_counts() {
        assert_eq!(token_count(&json!({"tokens": [1, 2, 3]})), Some(3));
        assert_eq!(
            token_count(&json!({"count": 4, "tokens": [1, 2, 3, 4], "max_model_len": 8})),
            Some(4)
        );
        assert_eq!(
            token_count(&json!([{"id": 1, "text": "a"}, {"id": 2, "text": "b"}])),
            Some(2)
        );
        assert_eq!(token_count(&json!({"error": "no"})), None);
    }
}
