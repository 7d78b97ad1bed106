//! Planted differences: a candidate model whose differences from the profile are known,
//! so a shadow diff can be checked against ground truth. Each is a deterministic
//! change to the OpenAI answers (chat and completions, streamed or whole), made as the
//! answer leaves the server; nothing else about the engine changes.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use redline_base::seed::{fnv64, mix_seed};

/// What a candidate changes, each off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Planted {
    /// Share of requests answered in another style (the content in upper case),
    /// chosen by the request's body: the same request is always restyled or never.
    pub style_share: f64,
    /// Added to `usage.total_tokens` on every answer (an off-by-one in billing).
    pub total_tokens_offset: i64,
    /// The first byte of each answer is held back so its TTFT is this multiple of
    /// the engine's.
    pub ttft_factor: f64,
    /// A top-level field of this name, a fresh random number on every answer (and
    /// every chunk): a difference that is noise in primary and candidate alike.
    pub random_field: Option<String>,
    /// Tool calls get worse under load: a call planned while more than this many
    /// requests are in the engine (running and waiting) has its arguments spoiled,
    /// cut short (no longer JSON) or with a value changed, in turn; counted in
    /// `/redline/truth` (a serving stack whose tool-call parser breaks at high batch
    /// sizes).
    pub tool_calls_spoiled_above: Option<u32>,
}

impl Default for Planted {
    fn default() -> Self {
        Planted {
            style_share: 0.0,
            total_tokens_offset: 0,
            ttft_factor: 1.0,
            random_field: None,
            tool_calls_spoiled_above: None,
        }
    }
}

/// How a spoiled tool call is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spoil {
    /// The arguments cut to two thirds: no longer JSON (graded unparsed).
    Cut,
    /// One value changed (graded wrong): a string gets a suffix, a number one more,
    /// a boolean flips; arguments without a value are cut instead.
    Changed,
}

impl Spoil {
    /// The spoiled arguments, and how they were spoiled in the end.
    pub fn apply(self, arguments: &str) -> (String, Spoil) {
        let changed = match (self, serde_json::from_str::<Value>(arguments)) {
            (Spoil::Changed, Ok(Value::Object(mut args))) if !args.is_empty() => {
                let key = args.keys().min().cloned().expect("not empty");
                let value = &mut args[&key];
                *value = match &*value {
                    Value::String(s) => Value::String(format!("{s}-x")),
                    Value::Bool(b) => Value::Bool(!b),
                    Value::Number(n) if n.is_i64() => Value::from(n.as_i64().unwrap_or(0) + 1),
                    Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
                    _ => Value::String("x".into()),
                };
                Some(Value::Object(args).to_string())
            }
            _ => None,
        };
        match changed {
            Some(text) => (text, Spoil::Changed),
            None => {
                let keep = arguments.len() * 2 / 3;
                let cut = arguments.char_indices().nth(keep).map_or(0, |(i, _)| i);
                (arguments[..cut].to_owned(), Spoil::Cut)
            }
        }
    }
}

/// Largest answer body the rewrite holds whole (a non-streamed answer).
const MAX_WHOLE_BYTES: usize = 64 << 20;

impl Planted {
    /// Parses `--planted style_share=0.15,total_tokens_offset=1,ttft_factor=1.3,random_field=x_sample`.
    pub fn parse(text: &str) -> Result<Planted, String> {
        let mut planted = Planted::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not KEY=VALUE"))?;
            let number = || {
                value
                    .parse::<f64>()
                    .map_err(|_| format!("{key}: `{value}` is not a number"))
            };
            match key {
                "style_share" => planted.style_share = number()?,
                "total_tokens_offset" => {
                    planted.total_tokens_offset = value
                        .parse()
                        .map_err(|_| format!("{key}: `{value}` is not a whole number"))?
                }
                "ttft_factor" => planted.ttft_factor = number()?,
                "random_field" => planted.random_field = Some(value.to_owned()),
                "tool_calls_spoiled_above" => {
                    planted.tool_calls_spoiled_above = Some(
                        value
                            .parse()
                            .map_err(|_| format!("{key}: `{value}` is not a whole number"))?,
                    )
                }
                other => {
                    return Err(format!(
                        "unknown key `{other}`: choose from style_share, total_tokens_offset, ttft_factor, random_field, tool_calls_spoiled_above"
                    ));
                }
            }
        }
        planted.check()?;
        Ok(planted)
    }

    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.style_share) {
            return Err(format!(
                "style_share must be within 0..=1, got {}",
                self.style_share
            ));
        }
        if !(self.ttft_factor.is_finite() && self.ttft_factor >= 1.0) {
            return Err(format!(
                "ttft_factor must be 1 or more (a delay cannot be taken back), got {}",
                self.ttft_factor
            ));
        }
        Ok(())
    }

    /// How a tool call planned with `load` requests in the engine is spoiled, if it
    /// is: `nonce` (distinct per request) takes cut and changed in turn.
    pub fn spoils_tool_call(&self, load: u32, nonce: u64) -> Option<Spoil> {
        let above = self.tool_calls_spoiled_above?;
        // Hashed: a request may take more than one nonce, so raw parity can stick.
        (load > above).then_some(match mix_seed(&[0x0053_504f_494c, nonce]) % 2 {
            0 => Spoil::Cut,
            _ => Spoil::Changed,
        })
    }

    /// Whether the request with this body is answered in the other style.
    pub fn restyles(&self, body: &[u8]) -> bool {
        let draw = mix_seed(&[0x0073_7479_6c65, fnv64(body)]);
        (draw >> 11) as f64 / (1u64 << 53) as f64 <= self.style_share && self.style_share > 0.0
    }

    /// One answer object (a whole answer or one chunk) with the planted changes.
    fn rewrite(&self, answer: &mut Value, restyle: bool) {
        let Some(object) = answer.as_object_mut() else {
            return;
        };
        if let Some(field) = &self.random_field {
            object.insert(field.clone(), Value::from(rand::random::<u32>()));
        }
        if restyle && let Some(Value::Array(choices)) = object.get_mut("choices") {
            for choice in choices {
                for pointer in ["/message/content", "/delta/content", "/text"] {
                    if let Some(Value::String(text)) = choice.pointer_mut(pointer) {
                        *text = text.to_uppercase();
                    }
                }
            }
        }
        if self.total_tokens_offset != 0
            && let Some(total) = answer.pointer_mut("/usage/total_tokens")
            && let Some(n) = total.as_i64()
        {
            *total = Value::from(n + self.total_tokens_offset);
        }
    }

    /// One SSE event's text with the changes made to its JSON data, and whether it
    /// carries content (a token of text or of a tool call).
    fn rewrite_event(&self, event: &str, restyle: bool) -> (String, bool) {
        let Some(data) = event.strip_prefix("data: ") else {
            return (event.to_owned(), false);
        };
        match serde_json::from_str::<Value>(data) {
            Ok(mut value) => {
                let content = carries_content(&value);
                self.rewrite(&mut value, restyle);
                (format!("data: {value}"), content)
            }
            Err(_) => (event.to_owned(), false),
        }
    }
}

/// The middleware: OpenAI answers rewritten, everything else passed through.
pub async fn plant(State(planted): State<Arc<Planted>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if !matches!(path, "/v1/chat/completions" | "/v1/completions") {
        return next.run(request).await;
    }
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_WHOLE_BYTES).await else {
        return next.run(Request::from_parts(parts, Body::empty())).await;
    };
    let restyle = planted.restyles(&body);
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    if !response.status().is_success() {
        return response;
    }
    let streamed = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    if streamed {
        let events = rewrite_stream(planted, body, started, restyle);
        return Response::from_parts(parts, Body::from_stream(events));
    }
    let Ok(whole) = axum::body::to_bytes(body, MAX_WHOLE_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    hold_first_byte(&planted, started).await;
    let bytes = match serde_json::from_slice::<Value>(&whole) {
        Ok(mut value) => {
            planted.rewrite(&mut value, restyle);
            Bytes::from(value.to_string())
        }
        Err(_) => whole,
    };
    Response::from_parts(parts, Body::from(bytes))
}

fn carries_content(chunk: &Value) -> bool {
    let choices = chunk.get("choices").and_then(Value::as_array);
    choices.into_iter().flatten().any(|choice| {
        let text = |p: &str| {
            choice
                .pointer(p)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
        };
        text("/delta/content") || text("/text") || choice.pointer("/delta/tool_calls").is_some()
    })
}

/// Sleeps so the first byte leaves at `ttft_factor` times the time it was ready.
async fn hold_first_byte(planted: &Planted, started: Instant) {
    let ready = started.elapsed();
    redline_base::latency::hold(ready.mul_f64(planted.ttft_factor - 1.0)).await;
}

/// The stream's events rewritten one by one (split on blank lines, so a chunk that
/// carries parts of two events is handled), and shifted: from the first event with
/// content (the first token; a role-only chunk comes before it) on, each leaves
/// `(ttft_factor − 1) × TTFT` after the engine made it. The engine's output is read
/// as it comes (a task of its own) so the shift keeps its spacing: the inter-token
/// latency is the profile's, only the TTFT changes.
fn rewrite_stream(
    planted: Arc<Planted>,
    body: Body,
    started: Instant,
    restyle: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, axum::Error>> {
    let (made, mut taken) = tokio::sync::mpsc::unbounded_channel();
    let factor = planted.ttft_factor;
    tokio::spawn(async move {
        let mut pending = String::new();
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let at = Instant::now();
            let mut content = false;
            let chunk = chunk.map(|data| {
                pending.push_str(&String::from_utf8_lossy(&data));
                let mut out = String::new();
                while let Some(end) = pending.find("\n\n") {
                    let event: String = pending.drain(..end + 2).collect();
                    let (rewritten, carries) = planted.rewrite_event(&event[..end], restyle);
                    content |= carries;
                    out.push_str(&rewritten);
                    out.push_str("\n\n");
                }
                Bytes::from(out)
            });
            if made.send((at, content, chunk)).is_err() {
                break;
            }
        }
    });
    let mut shift: Option<std::time::Duration> = None;
    futures_util::stream::poll_fn(move |cx| taken.poll_recv(cx)).then(
        move |(at, content, chunk)| {
            if content && shift.is_none() {
                shift = Some(at.duration_since(started).mul_f64(factor - 1.0));
            }
            let leave = at + shift.unwrap_or_default();
            async move {
                tokio::time::sleep_until(leave.into()).await;
                chunk
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key_and_refuses_a_bad_one() {
        let p = Planted::parse(
            "style_share=0.15, total_tokens_offset=1,ttft_factor=1.3,random_field=x_sample",
        )
        .unwrap();
        assert_eq!(p.style_share, 0.15);
        assert_eq!(p.total_tokens_offset, 1);
        assert_eq!(p.ttft_factor, 1.3);
        assert_eq!(p.random_field.as_deref(), Some("x_sample"));
        assert!(
            Planted::parse("ttft_factor=0.5")
                .unwrap_err()
                .contains("1 or more")
        );
        assert!(
            Planted::parse("style=1")
                .unwrap_err()
                .contains("choose from")
        );
    }

    #[test]
    fn tool_calls_are_spoiled_only_above_the_load_cut_or_changed() {
        let p = Planted::parse("tool_calls_spoiled_above=4").unwrap();
        assert_eq!(p.spoils_tool_call(4, 1), None);
        let kinds: Vec<Spoil> = (0..64).filter_map(|n| p.spoils_tool_call(5, n)).collect();
        assert_eq!(kinds.len(), 64);
        let cut = kinds.iter().filter(|k| **k == Spoil::Cut).count();
        assert!((16..=48).contains(&cut), "{cut} of 64 cut: about half");
        let args = r#"{"days":3,"city":"Oslo"}"#;
        let (text, how) = Spoil::Changed.apply(args);
        assert_eq!(
            (text.as_str(), how),
            (r#"{"city":"Oslo-x","days":3}"#, Spoil::Changed)
        );
        let (text, how) = Spoil::Cut.apply(args);
        assert_eq!(how, Spoil::Cut);
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
        assert_eq!(
            Spoil::Changed.apply("{}").1,
            Spoil::Cut,
            "nothing to change"
        );
    }

    #[test]
    fn restyles_about_the_share_and_the_same_body_always() {
        let p = Planted {
            style_share: 0.15,
            ..Planted::default()
        };
        let n = 20_000;
        let hits = (0..n)
            .filter(|i| p.restyles(format!("body {i}").as_bytes()))
            .count();
        // Binomial sd at n = 20,000 is 0.0025: 4 sd either side.
        assert!((hits as f64 / n as f64 - 0.15).abs() < 0.01, "{hits}");
        assert_eq!(p.restyles(b"x"), p.restyles(b"x"));
    }

    #[test]
    fn rewrites_content_usage_and_the_random_field() {
        let p = Planted {
            total_tokens_offset: 1,
            random_field: Some("x_sample".into()),
            ..Planted::default()
        };
        let mut answer = serde_json::json!({
            "choices": [{"message": {"content": "hello there"}}],
            "usage": {"total_tokens": 10}
        });
        p.rewrite(&mut answer, true);
        assert_eq!(answer["choices"][0]["message"]["content"], "HELLO THERE");
        assert_eq!(answer["usage"]["total_tokens"], 11);
        assert!(answer["x_sample"].is_u64());
        assert_eq!(
            p.rewrite_event("data: [DONE]", true),
            ("data: [DONE]".into(), false)
        );
        let role = r#"data: {"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        assert!(!p.rewrite_event(role, true).1);
        let token = r#"data: {"choices":[{"delta":{"content":"hi"}}]}"#;
        let (rewritten, content) = p.rewrite_event(token, true);
        assert!(content && rewritten.contains("\"HI\""), "{rewritten}");
    }
}
