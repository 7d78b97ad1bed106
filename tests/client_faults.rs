//! The streaming client against servers that misbehave on purpose: each failure must
//! become the right typed outcome (stage and kind), never a panic or a lost request.
//! The server is a raw TCP script, so every byte and every pause is chosen.

use std::time::Duration;

use crate::common::llm::{self, failure};
use redline::client::dialect::LlmApi;
use redline::client::openai::LlmTarget;
use redline::record::{FailStage, Outcome, Record, TokenSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the scripted server does after reading a request.
enum Act {
    Send(String),
    /// One chunk of a chunked body.
    Chunk(String),
    Pause(u64),
    /// End the chunked body cleanly.
    End,
    /// Drop the connection mid-body.
    Cut,
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn event(json: &str) -> Act {
    Act::Chunk(format!("data: {json}\n\n"))
}

fn content(text: &str) -> Act {
    event(&format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
    ))
}

fn finish(reason: &str) -> Act {
    event(&format!(
        r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"{reason}"}}]}}"#
    ))
}

/// Serves one request with the script; returns the base URL.
async fn scripted(script: Vec<Act>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 8192];
        // Read the head, then the body its content-length announces.
        loop {
            let n = tcp.read(&mut buffer).await.unwrap();
            request.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break;
                }
            }
        }
        for act in script {
            match act {
                Act::Send(text) => tcp.write_all(text.as_bytes()).await.unwrap(),
                Act::Chunk(data) => {
                    let chunk = format!("{:x}\r\n{data}\r\n", data.len());
                    tcp.write_all(chunk.as_bytes()).await.unwrap();
                }
                Act::Pause(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                Act::End => tcp.write_all(b"0\r\n\r\n").await.unwrap(),
                Act::Cut => return,
            }
        }
        // Keep the connection open until the client is done with it.
        let _ = tcp.read(&mut buffer).await;
    });
    format!("http://{addr}")
}

async fn run(script: Vec<Act>, stream: bool) -> Record {
    run_with(script, stream, |_| {}).await
}

/// [`run`] with the target changed first (its limits, its counting).
async fn run_with(script: Vec<Act>, stream: bool, change: impl FnOnce(&mut LlmTarget)) -> Record {
    let base = scripted(script).await;
    let mut target = llm::target(&base, stream);
    change(&mut target);
    llm::call_once(&target, "hello", false).await
}

#[tokio::test]
async fn a_well_formed_stream_is_ok() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("Hi"),
            content(" there"),
            finish("stop"),
            event(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#),
            event("[DONE]"),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        (r.content_events, r.output_tokens, r.input_tokens),
        (2, Some(2), Some(3))
    );
    assert_eq!(r.token_source, Some(TokenSource::Usage));
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    let line = serde_json::to_string(&r).unwrap();
    assert!(
        !line.contains("sk-secret"),
        "the API key never reaches a record"
    );
}

#[tokio::test]
async fn no_usage_means_a_local_estimate_like_llama_cpp() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("one"),
            content(" two"),
            content(" three"),
            finish("stop"),
            event("[DONE]"),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(
        (r.output_tokens, r.token_source),
        (Some(3), Some(TokenSource::Estimated))
    );
}

#[tokio::test]
async fn reasoning_tokens_count_as_first_token_and_are_told_apart() {
    let reasoning = event(
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think"},"finish_reason":null}]}"#,
    );
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            reasoning,
            Act::Pause(30),
            content("Answer"),
            finish("stop"),
            event("[DONE]"),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.first_token_us, r.first_reasoning_us);
    assert!(r.first_answer_us.unwrap() >= r.first_reasoning_us.unwrap() + 25_000);
}

#[tokio::test]
async fn a_stall_before_the_first_token_times_out_at_that_stage() {
    let role = event(
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    );
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            role,
            Act::Pause(2_000),
            content("late"),
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Timeout, FailStage::FirstToken, "timeout".into())
    );
    assert!(
        r.first_token_us.is_none(),
        "a role-only chunk is not a token"
    );
}

#[tokio::test]
async fn a_stall_between_tokens_times_out_in_the_stream() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("a"),
            content("b"),
            Act::Pause(2_000),
            content("c"),
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Timeout, FailStage::Stream, "timeout".into())
    );
    assert_eq!(r.content_events, 2);
}

#[tokio::test]
async fn tokens_keep_a_slow_stream_alive() {
    // 8 gaps of 200 ms: each under the 300 ms between-tokens limit, the sum over it.
    let mut script = vec![Act::Send(SSE_HEAD.into())];
    for _ in 0..8 {
        script.push(content("x"));
        script.push(Act::Pause(200));
    }
    script.extend([finish("length"), event("[DONE]"), Act::End]);
    let r = run(script, true).await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(r.content_events, 8);
}

#[tokio::test]
async fn a_stream_ended_early_is_truncated_and_a_missing_done_is_named() {
    let r = run(
        vec![Act::Send(SSE_HEAD.into()), content("a"), Act::End],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "truncated".into())
    );
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("a"),
            finish("stop"),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "missing_done".into())
    );
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_a_reset() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("a"),
            Act::Send("5\r\ndata".into()),
            Act::Cut,
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "reset".into())
    );
}

#[tokio::test]
async fn events_that_are_not_json_are_decode_errors() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("a"),
            Act::Chunk("data: {not json\n\n".into()),
            event("[DONE]"),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Decode, "invalid_json".into())
    );
}

#[tokio::test]
async fn an_error_object_inside_the_stream_is_a_stream_error() {
    let r = run(
        vec![
            Act::Send(SSE_HEAD.into()),
            content("a"),
            event(r#"{"error":{"message":"engine died","type":"InternalServerError"}}"#),
            Act::End,
        ],
        true,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "stream_error".into())
    );
    assert!(r.error.unwrap().message.contains("engine died"));
}

#[tokio::test]
async fn http_errors_keep_the_server_message() {
    let body = r#"{"error":{"message":"overloaded","type":"ServiceUnavailable"}}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = run(vec![Act::Send(head)], true).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::FirstByte, "http_5xx".into())
    );
    assert_eq!(r.status, Some(503));
    assert!(r.error.unwrap().message.ends_with("overloaded"));
}

#[tokio::test]
async fn a_non_json_answer_is_a_decode_error() {
    let body = "<html>gateway</html>";
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = run(vec![Act::Send(head)], false).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Decode, "invalid_json".into())
    );
}

#[tokio::test]
async fn a_huge_response_is_refused_not_buffered() {
    let mut script = vec![Act::Send(SSE_HEAD.into())];
    // One event with a 2 MiB data line: over the 1 MiB limit.
    script.push(Act::Chunk(format!("data: {}", "x".repeat(2 << 20))));
    script.push(Act::End);
    let r = run(script, true).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "too_large".into())
    );
}

/// A content event of `n` bytes of one letter: the worst case of BPE counting.
fn blob(n: usize) -> Act {
    content(&"a".repeat(n))
}

/// A hostile answer (one 5 MiB event without whitespace, as a runaway generation or a
/// base64 blob makes) once cost 8 s of client CPU counting tokens the server had
/// already counted. With usage there is nothing to count; the bytes are only read.
#[tokio::test]
async fn a_huge_answer_with_usage_is_read_not_counted() {
    let script = vec![
        Act::Send(SSE_HEAD.into()),
        blob(5 << 20),
        finish("length"),
        event(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":655360}}"#),
        event("[DONE]"),
        Act::End,
    ];
    let started = std::time::Instant::now();
    let r = run_with(script, true, |t| t.max_response_bytes = 16 << 20).await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        (r.output_tokens, r.token_source),
        (Some(655360), Some(TokenSource::Usage))
    );
    assert_eq!(r.output_tokens_local, None, "not counted: the server said");
    // Not a timing assertion of the client's speed, a bound on its folly: counting
    // 5 MiB of one letter whole takes seconds even in a release build.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Without usage, an answer over `max_local_count_bytes` is not counted: the record
/// says so, and why, instead of the run paying for it.
#[tokio::test]
async fn an_answer_over_the_count_limit_is_skipped_and_said() {
    let script = vec![
        Act::Send(SSE_HEAD.into()),
        blob(100 << 10),
        finish("stop"),
        event("[DONE]"),
        Act::End,
    ];
    let r = run_with(script, true, |t| t.max_response_bytes = 1 << 20).await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        (r.output_tokens, r.token_source),
        (None, Some(TokenSource::Skipped))
    );
    assert_eq!(
        r.token_note.as_deref(),
        Some("an answer of 102400 bytes is over limits.max_local_count_bytes (65536): not counted")
    );
    // The same answer under the limit is counted, off the async workers.
    let script = vec![
        Act::Send(SSE_HEAD.into()),
        blob(40 << 10),
        finish("stop"),
        event("[DONE]"),
        Act::End,
    ];
    let r = run(script, true).await;
    assert_eq!(r.token_source, Some(TokenSource::Estimated));
    assert!(r.output_tokens.unwrap() > 1000, "{:?}", r.output_tokens);
}

const NDJSON_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";

fn ollama_line(text: &str) -> Act {
    Act::Chunk(format!(
        "{{\"model\":\"m\",\"message\":{{\"role\":\"assistant\",\"content\":\"{text}\"}},\"done\":false}}\n"
    ))
}

const OLLAMA_DONE: &str = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"total_duration\":9000000,\"prompt_eval_count\":4,\"prompt_eval_duration\":1000000,\"eval_count\":2,\"eval_duration\":6000000}\n";

async fn run_api(script: Vec<Act>, api: LlmApi) -> Record {
    run_with(script, true, |t| t.api = api).await
}

#[tokio::test]
async fn an_ollama_stream_split_mid_line_is_read_whole_with_the_servers_timings() {
    let done = OLLAMA_DONE.split_at(40);
    let r = run_api(
        vec![
            Act::Send(NDJSON_HEAD.into()),
            ollama_line("Hi"),
            Act::Pause(20),
            ollama_line(" there"),
            Act::Chunk(done.0.into()),
            Act::Chunk(done.1.into()),
            Act::End,
        ],
        LlmApi::Ollama,
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        (r.content_events, r.output_tokens, r.input_tokens),
        (2, Some(2), Some(4))
    );
    assert_eq!(r.token_source, Some(TokenSource::Usage));
    assert!(r.second_token_us.unwrap() >= r.first_token_us.unwrap() + 15_000);
    let reported = r.server_reported.expect("Ollama's durations are kept");
    assert_eq!(
        (reported.total_us, reported.prefill_us, reported.decode_us),
        (Some(9_000), Some(1_000), Some(6_000))
    );
    assert_eq!(reported.time_per_token_us, Some(3_000));
}

#[tokio::test]
async fn an_ollama_stream_that_ends_before_done_is_truncated() {
    let r = run_api(
        vec![Act::Send(NDJSON_HEAD.into()), ollama_line("Hi"), Act::End],
        LlmApi::Ollama,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "truncated".into())
    );
    let r = run_api(
        vec![
            Act::Send(NDJSON_HEAD.into()),
            ollama_line("Hi"),
            Act::Chunk("{\"model\":\"m\",\"mess".into()),
            Act::End,
        ],
        LlmApi::Ollama,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "truncated".into()),
        "half a line is a cut answer"
    );
}

#[tokio::test]
async fn ollama_garbage_errors_and_oversized_lines_are_typed() {
    let garbage = run_api(
        vec![
            Act::Send(NDJSON_HEAD.into()),
            ollama_line("Hi"),
            Act::Chunk("<html>oops</html>\n".into()),
            Act::End,
        ],
        LlmApi::Ollama,
    )
    .await;
    assert_eq!(
        failure(&garbage),
        (Outcome::Error, FailStage::Decode, "invalid_json".into())
    );
    let error = run_api(
        vec![
            Act::Send(NDJSON_HEAD.into()),
            ollama_line("Hi"),
            Act::Chunk("{\"error\":\"out of memory\"}\n".into()),
            Act::End,
        ],
        LlmApi::Ollama,
    )
    .await;
    assert_eq!(
        failure(&error),
        (Outcome::Error, FailStage::Stream, "stream_error".into())
    );
    assert!(error.error.unwrap().message.contains("out of memory"));
    // A line that never ends, past the answer limit: refused once it is over.
    let huge = "x".repeat(64 << 10);
    let long = run_with(
        vec![
            Act::Send(NDJSON_HEAD.into()),
            Act::Chunk(format!("{{\"message\":{{\"content\":\"{huge}")),
            Act::Chunk(huge.clone()),
            Act::End,
        ],
        true,
        |t| {
            t.api = LlmApi::Ollama;
            t.max_response_bytes = 100 << 10;
        },
    )
    .await;
    assert_eq!(
        failure(&long),
        (Outcome::Error, FailStage::Stream, "too_large".into())
    );
}

#[tokio::test]
async fn a_tgi_stream_counts_tokens_not_its_end_token_and_needs_its_details() {
    let token = |i: u32, text: &str, special: bool| {
        event(&format!(
            r#"{{"index":{i},"token":{{"id":{i},"text":"{text}","logprob":-0.1,"special":{special}}},"generated_text":null,"details":null}}"#
        ))
    };
    let last = event(
        r#"{"index":3,"token":{"id":2,"text":"</s>","logprob":0.0,"special":true},"generated_text":"Hi there","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null,"input_length":5}}"#,
    );
    let r = run_api(
        vec![
            Act::Send(SSE_HEAD.into()),
            token(1, "Hi", false),
            token(2, " there", false),
            last,
            Act::End,
        ],
        LlmApi::Tgi,
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        (r.content_events, r.output_tokens, r.input_tokens),
        (2, Some(3), Some(5)),
        "two text tokens arrived; the server generated three (its end token)"
    );
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    let cut = run_api(
        vec![Act::Send(SSE_HEAD.into()), token(1, "Hi", false), Act::End],
        LlmApi::Tgi,
    )
    .await;
    assert_eq!(
        failure(&cut),
        (Outcome::Error, FailStage::Stream, "truncated".into()),
        "no details event: the answer was cut"
    );
}

#[tokio::test]
async fn a_kserve_stream_ends_with_its_body_and_an_error_object_fails_it() {
    let text = |t: &str| {
        event(&format!(
            r#"{{"model_name":"m","model_version":"1","text_output":"{t}"}}"#
        ))
    };
    let r = run_api(
        vec![
            Act::Send(SSE_HEAD.into()),
            text("Hi"),
            text(" there"),
            Act::End,
        ],
        LlmApi::Kserve,
    )
    .await;
    assert_eq!(
        r.outcome,
        Outcome::Ok,
        "no end marker: the body's end is the answer's"
    );
    assert_eq!(r.content_events, 2);
    let error = run_api(
        vec![
            Act::Send(SSE_HEAD.into()),
            text("Hi"),
            event(r#"{"error":"inference failed: out of memory"}"#),
            Act::End,
        ],
        LlmApi::Kserve,
    )
    .await;
    assert_eq!(
        failure(&error),
        (Outcome::Error, FailStage::Stream, "stream_error".into()),
        "Triton reports a failure mid-stream in an error object under status 200"
    );
    let cut = run_api(
        vec![Act::Send(SSE_HEAD.into()), text("Hi"), Act::Cut],
        LlmApi::Kserve,
    )
    .await;
    assert_eq!(
        failure(&cut),
        (Outcome::Error, FailStage::Stream, "reset".into())
    );
}

/// An Anthropic event, as its stream names it twice (`event:` and `type`).
fn anthropic(kind: &str, rest: &str) -> Act {
    let comma = if rest.is_empty() { "" } else { "," };
    Act::Chunk(format!(
        "event: {kind}\ndata: {{\"type\":\"{kind}\"{comma}{rest}}}\n\n"
    ))
}

fn message_start() -> Act {
    anthropic(
        "message_start",
        r#""message":{"id":"msg_1","usage":{"input_tokens":5,"cache_read_input_tokens":4,"output_tokens":1}}"#,
    )
}

fn text_block(index: u32, text: &str) -> Vec<Act> {
    vec![
        anthropic(
            "content_block_start",
            &format!(r#""index":{index},"content_block":{{"type":"text","text":""}}"#),
        ),
        anthropic(
            "content_block_delta",
            &format!(r#""index":{index},"delta":{{"type":"text_delta","text":"{text}"}}"#),
        ),
        anthropic("content_block_stop", &format!(r#""index":{index}"#)),
    ]
}

#[tokio::test]
async fn an_anthropic_stream_is_read_with_its_thinking_and_cache_counts() {
    let mut script = vec![
        Act::Send(SSE_HEAD.into()),
        message_start(),
        anthropic("ping", ""),
    ];
    script.push(anthropic(
        "content_block_start",
        r#""index":0,"content_block":{"type":"thinking","thinking":""}"#,
    ));
    script.push(anthropic(
        "content_block_delta",
        r#""index":0,"delta":{"type":"thinking_delta","thinking":"let me see"}"#,
    ));
    script.push(Act::Pause(30));
    script.push(anthropic("content_block_stop", r#""index":0"#));
    script.extend(text_block(1, "Hi"));
    script.push(anthropic(
        "message_delta",
        r#""delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":8}"#,
    ));
    script.push(anthropic("message_stop", ""));
    script.push(Act::End);
    let r = run_api(script, LlmApi::Anthropic).await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    assert_eq!(
        r.finish_reason.as_deref(),
        Some("length"),
        "max_tokens is a cut answer"
    );
    assert_eq!((r.input_tokens, r.output_tokens), (Some(9), Some(8)));
    assert_eq!(r.cached_tokens, Some(4));
    assert!(
        r.reasoning_tokens.is_some_and(|n| n > 0),
        "thinking counted locally"
    );
    assert_eq!(r.first_token_us, r.first_reasoning_us);
    assert!(r.first_answer_us.unwrap() >= r.first_reasoning_us.unwrap() + 25_000);
}

#[tokio::test]
async fn typed_streams_out_of_order_are_typed_failures() {
    let never_started = vec![
        Act::Send(SSE_HEAD.into()),
        message_start(),
        anthropic(
            "content_block_delta",
            r#""index":3,"delta":{"type":"text_delta","text":"x"}"#,
        ),
        Act::End,
    ];
    let mut before_start = vec![Act::Send(SSE_HEAD.into())];
    before_start.extend(text_block(0, "x"));
    before_start.push(Act::End);
    for script in [never_started, before_start] {
        let r = run_api(script, LlmApi::Anthropic).await;
        assert_eq!(
            failure(&r),
            (Outcome::Error, FailStage::Decode, "out_of_order".into())
        );
        assert!(r.error.unwrap().message.contains("out of order"));
    }
    let responses_delta_first = vec![
        Act::Send(SSE_HEAD.into()),
        event(r#"{"type":"response.created","response":{}}"#),
        event(r#"{"type":"response.output_text.delta","output_index":0,"delta":"x"}"#),
        Act::End,
    ];
    let r = run_api(responses_delta_first, LlmApi::Responses).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Decode, "out_of_order".into())
    );
}

#[tokio::test]
async fn a_responses_stream_without_its_terminal_event_is_truncated() {
    let r = run_api(
        vec![
            Act::Send(SSE_HEAD.into()),
            event(r#"{"type":"response.created","response":{}}"#),
            event(r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message"}}"#),
            event(r#"{"type":"response.output_text.delta","output_index":0,"delta":"Hi"}"#),
            event(r#"{"type":"response.output_item.done","output_index":0}"#),
            Act::End,
        ],
        LlmApi::Responses,
    )
    .await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "truncated".into())
    );
    assert_eq!(r.content_events, 1, "what came is kept");
    let failed = run_api(
        vec![
            Act::Send(SSE_HEAD.into()),
            event(r#"{"type":"response.created","response":{}}"#),
            event(r#"{"type":"response.failed","response":{"status":"failed","error":{"message":"overloaded"}}}"#),
            Act::End,
        ],
        LlmApi::Responses,
    )
    .await;
    assert_eq!(
        failure(&failed),
        (Outcome::Error, FailStage::Stream, "stream_error".into())
    );
}

#[tokio::test]
async fn a_five_mib_delta_stops_at_the_answer_limit() {
    let huge = "x".repeat(5 << 20);
    for api in [LlmApi::Responses, LlmApi::Anthropic] {
        let delta = match api {
            LlmApi::Responses => event(&format!(
                r#"{{"type":"response.output_text.delta","output_index":0,"delta":"{huge}"}}"#
            )),
            _ => anthropic(
                "content_block_delta",
                &format!(r#""index":0,"delta":{{"type":"text_delta","text":"{huge}"}}"#),
            ),
        };
        let r = run_api(vec![Act::Send(SSE_HEAD.into()), delta, Act::End], api).await;
        assert_eq!(
            failure(&r),
            (Outcome::Error, FailStage::Stream, "too_large".into()),
            "{api:?}"
        );
    }
}
