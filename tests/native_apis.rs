//! TGI's, Ollama's and KServe v2's (Triton's, over HTTP and gRPC) native APIs end to end: redline's client against the simulator's
//! routes for them, the client's timing and counts checked against the engine's ground
//! truth, and the timings each API reports of itself against the same timeline.

use crate::common::{run_to_records, scenario, summary_of};
use redline::record::{Outcome, Record};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn run_api(api: &str, stream: bool, requests: u32) -> Vec<Record> {
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: embedded, profile: 7b, api: {api} }}\n  payloadTemplate:\n    stream: {stream}\n    prompts: {{ synthetic: {{ input_tokens: {{ min: 20, max: 200 }}, output_tokens: {{ min: 5, max: 30 }} }} }}\n  load:\n    - {{ concurrency: 10, requests: {requests} }}\n"
    ));
    let (result, records) = run_to_records(s, &format!("native-{api}-{stream}")).await;
    assert_eq!(records.len(), requests as usize);
    // The summary holds the server's own account wherever every record had one.
    let reported = summary_of(&result).server.reported;
    let with_account = records
        .iter()
        .filter(|r| r.server_reported.is_some())
        .count();
    assert_eq!(
        reported.map_or(0, |r| r.total_ms.count),
        with_account as u64,
        "{api}: the summary's server account counts what the records hold"
    );
    assert_eq!(
        result.aggregator.counts.ok,
        requests as u64,
        "{api}: {:?}",
        records.iter().find_map(|r| r.error.as_ref())
    );
    records
}

/// What every answer of every API must agree on with the engine.
fn counts_agree(api: &str, r: &Record) {
    let truth = r.server.expect("the simulator reports ground truth");
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(
        r.output_tokens,
        Some(truth.completion_tokens),
        "{api}: the server's count"
    );
    assert_eq!(r.input_tokens, Some(truth.prompt_tokens), "{api}: prompt");
    assert!(
        r.output_tokens <= r.max_tokens,
        "{api}: max_tokens reached the server: {:?} > {:?}",
        r.output_tokens,
        r.max_tokens
    );
    let reason = r.finish_reason.as_deref();
    assert_eq!(
        reason == Some("length"),
        r.output_tokens == r.max_tokens,
        "{api}: finish reason {reason:?} with {:?} of {:?} tokens",
        r.output_tokens,
        r.max_tokens
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_native_answers_time_and_count_as_the_engine_did() {
    let _serial = crate::common::CLIENT_TIMING.lock().await;
    // KServe's HTTP answers send no counts: its are the content events, settled after
    // the run; over gRPC the count comes as the `num_output_tokens` output.
    for api in ["tgi", "ollama", "ollama_generate", "kserve", "kserve_grpc"] {
        let records = run_api(api, true, 120).await;
        let mut overheads = Vec::new();
        for r in &records {
            counts_agree(api, r);
            let truth = r.server.unwrap();
            assert_eq!(
                r.content_events, truth.completion_tokens,
                "{api}: one event per token (TGI's end token is not text)"
            );
            let client_ttft = r.ttft_us().unwrap();
            let server_ttft = truth.first_token_us - truth.arrival_us;
            assert!(
                client_ttft >= server_ttft,
                "{api}: no token before it exists"
            );
            overheads.push((client_ttft - server_ttft) as f64 / 1e3);
            if api.starts_with("ollama") {
                // Ollama's durations, read back from its last line: the engine's
                // timeline in nanoseconds, so within a microsecond of the truth.
                let reported = r.server_reported.expect("Ollama reports durations");
                let total = reported.total_us.unwrap() as i64;
                let truth_total = (truth.finish_us - truth.arrival_us) as i64;
                assert!(
                    (total - truth_total).abs() <= 1,
                    "{api}: {total} vs {truth_total}"
                );
                assert_eq!(reported.output_tokens, Some(truth.completion_tokens));
            }
        }
        // As the OpenAI path's test: transport and parsing, under half a ~13 ms step
        // at the median (a token stamped a step late would move it).
        let p50 = median(overheads);
        assert!(
            p50 < 6.5,
            "{api}: client TTFT − server TTFT p50 {p50:.3} ms"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_native_answers_carry_the_servers_own_timings() {
    for api in ["tgi", "ollama", "kserve", "kserve_grpc"] {
        for r in run_api(api, false, 40).await {
            counts_agree(api, &r);
            assert_eq!(
                r.content_events, 0,
                "{api}: a whole answer has no token events"
            );
            if api.starts_with("kserve") {
                // No timings of its own; counted locally, and the prompt was not
                // repeated (`exclude_input_in_output`) or the count would be over.
                assert!(r.server_reported.is_none());
                continue;
            }
            let truth = r.server.unwrap();
            let reported = r.server_reported.expect("the server's timings are kept");
            let truth_total = (truth.finish_us - truth.arrival_us) as i64;
            let total = reported.total_us.unwrap() as i64;
            // TGI reports whole milliseconds, Ollama nanoseconds.
            let resolution = if api == "tgi" { 1_000 } else { 1 };
            assert!(
                (total - truth_total).abs() <= resolution,
                "{api}: reported total {total} µs, truth {truth_total} µs"
            );
            if api == "tgi" {
                let queue = reported.queue_us.unwrap() as i64;
                let truth_queue = (truth.scheduled_us - truth.arrival_us) as i64;
                assert!(
                    (queue - truth_queue).abs() <= 1_000,
                    "queue {queue} vs {truth_queue}"
                );
                assert_eq!(reported.output_tokens, Some(truth.completion_tokens));
            }
        }
    }
}

/// `GET /redline/endpoints` names what each API needs, and what it names answers: the
/// same prompt at temperature 0 gives the same text by every generating API.
#[tokio::test]
async fn the_endpoints_listed_answer_the_same_text_by_every_api() {
    use crate::common::{client, get_text, post, sim};
    use serde_json::{Value, json};
    let sim = sim(redline::sim::Profile::tiny()).await;
    let (base, http) = (sim.base_url(), client());
    let listed: Value =
        serde_json::from_str(&get_text(&http, format!("{base}/redline/endpoints")).await).unwrap();
    let model = listed["model"].as_str().unwrap();
    let embedded = post(
        &http,
        format!("{base}/v1/embeddings"),
        json!({"input": "a", "encoding_format": "float"}),
    )
    .await;
    let dim = embedded.body["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        listed["embedding_dim"], dim,
        "the dimension listed is served"
    );
    let prompt = "Describe a queue.";
    let answers = [
        (
            listed["apis"]["tgi"][0].as_str().unwrap().to_owned(),
            json!({"inputs": prompt, "parameters": {"max_new_tokens": 6}}),
            "/generated_text",
        ),
        (
            listed["apis"]["ollama"][1].as_str().unwrap().to_owned(),
            json!({"model": model, "prompt": prompt, "stream": false, "options": {"num_predict": 6, "temperature": 0}}),
            "/response",
        ),
        (
            listed["apis"]["kserve"][0].as_str().unwrap().to_owned(),
            json!({"text_input": prompt, "max_tokens": 6, "temperature": 0, "exclude_input_in_output": true}),
            "/text_output",
        ),
        (
            listed["apis"]["openai"][1].as_str().unwrap().to_owned(),
            json!({"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 0}),
            "/choices/0/text",
        ),
    ];
    let mut texts = Vec::new();
    for (path, body, pointer) in answers {
        let answer = post(&http, format!("{base}{path}"), body).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(
            answer.header_u64("x-redline-completion-tokens"),
            6,
            "{path}"
        );
        texts.push(
            answer
                .body
                .pointer(pointer)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(
        texts.windows(2).all(|pair| pair[0] == pair[1]),
        "one engine behind every API: {texts:?}"
    );
}
