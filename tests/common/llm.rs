//! One chat request from redline's own client to a base URL, with short timeouts: the
//! misbehaving test servers (`client_faults.rs`, `hostile.rs`) script the answer.

use std::time::Duration;

use redline::client::dialect::LlmApi;
use redline::client::openai::{LlmTarget, call};
use redline::client::{RunClock, Timeouts, http_client};
use redline::record::{FailStage, Outcome, Phase, Record};
use redline::workload::payload::{Payload, PromptBody};

/// First token within 300 ms, 300 ms between tokens, 5 s in all.
pub const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    first_token: Duration::from_millis(300),
    between_tokens: Duration::from_millis(300),
    total: Duration::from_secs(5),
};

/// A chat target at `base` with a 1 MiB answer limit and a fake API key.
pub fn target(base: &str, stream: bool) -> LlmTarget {
    LlmTarget {
        uri: format!("{base}/v1/chat/completions").parse().unwrap(),
        api: LlmApi::Chat,
        model: "m".into(),
        stream,
        include_usage: true,
        api_key: Some(hyper::header::HeaderValue::from_static("Bearer sk-secret")),
        headers: Vec::new(),
        extra_body: serde_json::Map::new(),
        timeouts: TIMEOUTS,
        max_response_bytes: 1 << 20,
        counting: redline::tokenizer::TokenCounting {
            tokenizer: redline::tokenizer::LocalTokenizer::by_name("cl100k_base").unwrap(),
            named: false,
            always: false,
            max_bytes: 64 << 10,
        },
    }
}

/// Sends one request with `prompt` (HTTP/2 by prior knowledge when asked) and returns
/// its record.
pub async fn call_once(target: &LlmTarget, prompt: &str, http2: bool) -> Record {
    let payload = Payload {
        prompt: PromptBody::Text(prompt.into()),
        max_tokens: Some(8),
        input_tokens: 1,
        traceparent: None,
        prefix: None,
        previous_response_id: None,
        grade: None,
        fields: None,
    };
    let http = http_client(&target.timeouts, http2);
    let mut record = Record::unsent(0, 0, Phase::Measure, 0);
    let clock = RunClock::new(std::time::Instant::now());
    call(&http, target, &payload, clock, &mut record).await;
    record
}

/// The record's outcome, failure stage and kind.
pub fn failure(r: &Record) -> (Outcome, FailStage, String) {
    let f = r.error.as_ref().expect("a failure is recorded");
    (r.outcome, f.stage, f.kind.clone())
}
