//! The model APIs agents call — OpenAI's Responses, Anthropic's Messages — and chat,
//! with a model that reasons: redline's client against the simulator's routes for
//! them, every count and the three first-token times (any token, the first reasoning
//! token, the first answer token) checked against the engine's ground truth.

use crate::common::{run_to_records, scenario, summary_of};
use redline::record::{Outcome, Record};

/// Reasoning tokens each answer begins with.
const REASONING: u32 = 12;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `requests` reasoning requests on `api`, `concurrency` at a time.
async fn run_reasoning(
    api: &str,
    requests: u32,
    concurrency: u32,
) -> (Vec<Record>, redline::report::Summary) {
    // Anthropic thinks only when asked, with a budget of at least 1,024 tokens below
    // `max_tokens`: its answers are long, so they run all at once.
    let (body, output) = match api {
        "anthropic" => (
            format!(
                "{{ reasoning_tokens: {REASONING}, thinking: {{ type: enabled, budget_tokens: 1024 }} }}"
            ),
            "{ min: 1025, max: 1030 }",
        ),
        _ => (
            format!("{{ reasoning_tokens: {REASONING} }}"),
            "{ min: 20, max: 40 }",
        ),
    };
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: embedded, profile: 7b, api: {api} }}\n  payloadTemplate:\n    body: {body}\n    prompts: {{ synthetic: {{ input_tokens: {{ min: 20, max: 200 }}, output_tokens: {output} }} }}\n  load:\n    - {{ concurrency: {concurrency}, requests: {requests} }}\n"
    ));
    let (result, records) = run_to_records(s, &format!("agent-{api}")).await;
    assert_eq!(records.len(), requests as usize);
    (records, summary_of(&result))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_timed_and_counted_as_the_engine_did_on_every_api() {
    let _serial = crate::common::CLIENT_TIMING.lock().await;
    for (api, requests, concurrency) in [
        ("chat", 80, 10),
        ("responses", 80, 10),
        ("anthropic", 20, 10),
    ] {
        let (records, summary) = run_reasoning(api, requests, concurrency).await;
        let (mut first, mut answer) = (Vec::new(), Vec::new());
        for r in &records {
            assert_eq!(r.outcome, Outcome::Ok, "{api}: {:?}", r.error);
            let truth = r.server.expect("the simulator reports ground truth");
            assert_eq!(
                r.output_tokens,
                Some(truth.completion_tokens),
                "{api}: output"
            );
            assert_eq!(r.input_tokens, Some(truth.prompt_tokens), "{api}: prompt");
            assert_eq!(
                truth.reasoning_tokens,
                Some(REASONING),
                "{api}: the engine reasoned"
            );
            assert_eq!(
                r.reasoning_tokens,
                Some(REASONING),
                "{api}: reasoning counted apart"
            );
            assert_eq!(
                r.content_events, truth.completion_tokens,
                "{api}: one event a token"
            );
            assert_eq!(
                r.first_token_us, r.first_reasoning_us,
                "{api}: it thinks first"
            );
            let client_ttft = r.ttft_us().unwrap();
            let server_ttft = truth.first_token_us - truth.arrival_us;
            let client_answer = r.time_to_first_answer_us().unwrap();
            let server_answer = truth.first_answer_us.unwrap() - truth.arrival_us;
            assert!(
                client_ttft >= server_ttft,
                "{api}: no token before it exists"
            );
            assert!(
                client_answer >= server_answer,
                "{api}: no answer before it exists"
            );
            // A connection's set-up lies before the server's clock starts: the
            // overheads are of requests on a connection already open (here half of the
            // Anthropic run's twenty opened one, and their set-up moved the median).
            if r.connect_us.is_none() {
                first.push((client_ttft - server_ttft) as f64 / 1e3);
                answer.push((client_answer - server_answer) as f64 / 1e3);
            }
        }
        // As the native APIs' test: transport and parsing, under half a ~13 ms step at
        // the median, for the first token and for the first answer token alike.
        let (first, answer) = (median(first), median(answer));
        assert!(
            first < 6.5,
            "{api}: client TTFT − server TTFT p50 {first:.3} ms"
        );
        assert!(
            answer < 6.5,
            "{api}: client − server time to first answer p50 {answer:.3} ms"
        );
        let reasoning = summary
            .reasoning
            .expect("the summary has a reasoning section");
        assert_eq!(reasoning.requests, u64::from(requests));
        assert_eq!((reasoning.tokens.p50, reasoning.tokens.max), (12.0, 12.0));
        let l = &summary.latency_ms;
        assert!(
            l.time_to_first_answer.p50 > l.ttft.p50 && l.reasoning.count == u64::from(requests),
            "{api}: the answer comes after the reasoning"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_cache_reads_are_the_engines_prefix_hits() {
    // The same system prompt with a breakpoint on every request: from the second on,
    // the engine finds it cached and Anthropic's usage says so.
    let s = scenario(
        "  services:\n    llm: { url: embedded, profile: 7b, api: anthropic }\n  payloadTemplate:\n    body: { system: [ { type: text, text: \"You answer questions about load testing, briefly and precisely, citing the numbers you were given and nothing else.\", cache_control: { type: ephemeral } } ] }\n    prompts: { synthetic: { input_tokens: 40, output_tokens: 8 } }\n  load:\n    - { concurrency: 1, requests: 12 }\n",
    );
    let (result, records) = run_to_records(s, "agent-anthropic-cache").await;
    for r in &records {
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        let truth = r.server.unwrap();
        assert_eq!(
            r.input_tokens,
            Some(truth.prompt_tokens),
            "input + read + written"
        );
        let read = r.cached_tokens.unwrap();
        let written = r.cache_write_tokens.unwrap();
        assert!(
            read <= truth.cached_prompt_tokens,
            "reads are the engine's hits"
        );
        assert!(
            read + written > 0,
            "the breakpoint's prefix is cached or written"
        );
    }
    assert!(
        records[1..].iter().all(|r| r.cached_tokens.unwrap() > 0),
        "later requests read the cache"
    );
    assert!(summary_of(&result).server.cache_write_tokens > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_count_reasoning_as_the_engine_did() {
    for (api, body, output) in [
        ("responses", "{ reasoning_tokens: 5 }", 20),
        (
            "anthropic",
            "{ reasoning_tokens: 5, thinking: { type: enabled, budget_tokens: 1024 } }",
            1025,
        ),
    ] {
        let s = scenario(&format!(
            "  services:\n    llm: {{ url: embedded, profile: tiny, api: {api} }}\n  payloadTemplate:\n    stream: false\n    body: {body}\n    prompts: {{ synthetic: {{ input_tokens: 30, output_tokens: {output} }} }}\n  load:\n    - {{ concurrency: 4, requests: 8 }}\n"
        ));
        let (_, records) = run_to_records(s, &format!("agent-whole-{api}")).await;
        for r in &records {
            assert_eq!(r.outcome, Outcome::Ok, "{api}: {:?}", r.error);
            let truth = r.server.expect("ground truth in the headers");
            assert_eq!(r.output_tokens, Some(truth.completion_tokens), "{api}");
            assert_eq!(r.input_tokens, Some(truth.prompt_tokens), "{api}");
            assert_eq!(r.reasoning_tokens, Some(5), "{api}: reasoning told apart");
            assert_eq!(
                r.finish_reason.as_deref(),
                Some("length"),
                "{api}: cut at the limit"
            );
            assert_eq!(
                r.content_events, 0,
                "{api}: a whole answer has no token events"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sessions_keep_their_history_on_the_server_or_resend_it() {
    // The same conversations, twice: the server's prompt is the whole history either
    // way, so the prompt lengths it counts and the prefix hits match turn for turn.
    let mut prompts = Vec::new();
    for history in ["resend", "server"] {
        let s = scenario(&format!(
            "  services:\n    llm: {{ url: embedded, profile: tiny, api: responses }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 40, output_tokens: 12 }} }}\n    session: {{ turns: 4, history: {history} }}\n  load:\n    - {{ concurrency: 2, requests: 16 }}\n"
        ));
        let (_, mut records) = run_to_records(s, &format!("agent-history-{history}")).await;
        records.sort_by_key(|r| r.session.as_ref().map(|s| (s.id, s.turn)));
        for r in &records {
            assert_eq!(r.outcome, Outcome::Ok, "{history}: {:?}", r.error);
        }
        let lengths: Vec<u32> = records.iter().map(|r| r.input_tokens.unwrap()).collect();
        let turn = |n: u32| {
            records
                .iter()
                .filter(move |r| r.session.as_ref().unwrap().turn == n)
        };
        assert!(
            turn(4).all(|r| r.cached_tokens.unwrap() > 0),
            "{history}: a later turn finds its history in the prefix cache"
        );
        prompts.push(lengths);
    }
    assert_eq!(
        prompts[0], prompts[1],
        "the server saw the same prompts either way"
    );
}
