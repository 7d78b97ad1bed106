//! The simulator over real HTTP: the source's load points, KV pressure, prefix cache,
//! preemption, stop conditions, tool calls and bad input, checked against the
//! simulator's own ground truth.

use crate::common;

use std::time::Duration;

use crate::common::*;
use futures_util::future::join_all;
use serde_json::{Value, json};

/// Tests whose figures are timings take this lock, so they do not share the two cores.
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Point {
    mean_ttft_ms: f64,
    median_tpot_ms: f64,
    output_tok_per_s: f64,
}

/// One wave of `concurrency` simultaneous completions of `prompt_len` tokens, 256 out:
/// the table's load point. Over HTTP the wave's requests reach the server a little
/// apart, and an idle engine starts on the first one alone (as vLLM would); so a
/// pacer request with a long prompt goes first, the wave queues behind its ~100 ms
/// step, and the engine admits the wave together. Prefill is timed from the moment the
/// engine began the wave (the ground truth's earliest `scheduled_us`) to each first
/// token; decode from each first token to its last in the engine's own clock (the
/// profile's calibration; the client's agreement with that clock is
/// `client_timing_agrees_with_the_ground_truth`); throughput spans the wave in the
/// engine. Prefill is the wave's mean, as the source's table has it (chunked prefill
/// spreads the first tokens, by the engine's plan); decode the median, so one stream
/// slowed by a busy machine moves nothing.
async fn load_point(concurrency: u64, prompt_len: usize) -> Point {
    let sim = sim(Profile::seven_b()).await;
    let client = client();
    let url = format!("{}/v1/completions", sim.base_url());
    // Open the connections first, so arrivals are not spread over TCP handshakes.
    join_all((0..=concurrency).map(|i| {
        stream(
            &client,
            url.clone(),
            json!({"prompt": prompt(900_000 + i, 4), "max_tokens": 1, "stream": true}),
        )
    }))
    .await;
    let pacer = stream(
        &client,
        url.clone(),
        json!({"prompt": prompt(800_000, 7_000), "max_tokens": 1, "stream": true}),
    );
    let wave = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        join_all((0..concurrency).map(|i| {
            let body = json!({"prompt": prompt(i + 100 * prompt_len as u64, prompt_len), "max_tokens": 256, "stream": true, "temperature": 0});
            stream(&client, url.clone(), body)
        }))
        .await
    };
    let (pacer, streams) = tokio::join!(pacer, wave);
    let truth = |s: &Stream, key: &str| s.truth()[key].as_u64().unwrap() as f64 / 1e3;
    let pacer_finish = truth(&pacer, "finish_us");
    let began = streams
        .iter()
        .map(|s| truth(s, "scheduled_us"))
        .fold(f64::MAX, f64::min);
    let ended = streams
        .iter()
        .map(|s| truth(s, "finish_us"))
        .fold(0.0, f64::max);
    assert!(
        streams
            .iter()
            .all(|s| truth(s, "arrival_us") < pacer_finish),
        "the wave queued behind the pacer"
    );
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    for s in &streams {
        let times = s.content_times();
        assert_eq!(times.len(), 256);
        assert_eq!(
            s.truth()["prompt_tokens"],
            prompt_len as u64,
            "prompt length is exact"
        );
        ttft.push(truth(s, "first_token_us") - began);
        tpot.push((truth(s, "finish_us") - truth(s, "first_token_us")) / 255.0);
    }
    let point = Point {
        mean_ttft_ms: ttft.iter().sum::<f64>() / ttft.len() as f64,
        median_tpot_ms: median(tpot),
        output_tok_per_s: concurrency as f64 * 256.0 / ((ended - began) / 1e3),
    };
    eprintln!(
        "{concurrency} x {prompt_len}: prefill {:.1} ms, decode {:.2} ms/token, {:.0} output tok/s",
        point.mean_ttft_ms, point.median_tpot_ms, point.output_tok_per_s
    );
    point
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn assert_within(what: &str, actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() <= 0.10 * expected,
        "{what}: {actual:.2} is not within 10% of {expected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_b_reproduces_the_source_table_at_8_concurrent_128_tokens() {
    let _serial = TIMING.lock().await;
    let p = load_point(8, 128).await;
    assert_within("prefill (mean TTFT, ms)", p.mean_ttft_ms, 48.2);
    assert_within("decode (ms/token)", p.median_tpot_ms, 12.7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_b_reproduces_the_source_table_at_16_concurrent_2048_tokens() {
    let _serial = TIMING.lock().await;
    let p = load_point(16, 2048).await;
    assert_within("prefill (mean TTFT, ms)", p.mean_ttft_ms, 312.5);
    assert_within("decode (ms/token)", p.median_tpot_ms, 15.3);
    assert_within("output throughput (tok/s)", p.output_tok_per_s, 940.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_timing_agrees_with_the_ground_truth() {
    let _serial = TIMING.lock().await;
    // The 7b profile's ~13 ms step: a token stamped a step off stands out of the jitter.
    let sim = sim(Profile::seven_b()).await;
    let client = client();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let body = json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 30, "stream": true, "stream_options": {"include_usage": true}});
    let mut span_gaps = Vec::new();
    let mut ttft_gaps = Vec::new();
    for _ in 0..7 {
        let s = stream(&client, url.clone(), body.clone()).await;
        let truth = s.truth();
        let times = s.content_times();
        assert_eq!(
            times.len() as u64,
            truth["completion_tokens"].as_u64().unwrap()
        );
        let json = s.json();
        let usage = &json.last().unwrap().1["usage"];
        assert_eq!(usage["completion_tokens"], 30);
        assert_eq!(usage["prompt_tokens"], truth["prompt_tokens"]);
        let us = |key: &str| truth[key].as_u64().unwrap() as f64 / 1e3;
        // Server-side first token to last token vs. what the client saw.
        let server_span = us("finish_us") - us("first_token_us");
        let client_span = (times[29] - times[0]).as_secs_f64() * 1e3;
        span_gaps.push((server_span - client_span).abs());
        let server_ttft = us("first_token_us") - us("arrival_us");
        let client_ttft = (times[0] - s.sent).as_secs_f64() * 1e3;
        assert!(
            client_ttft >= server_ttft,
            "a token cannot arrive before it exists: {client_ttft} vs {server_ttft}"
        );
        ttft_gaps.push(client_ttft - server_ttft);
        // Handed to the connection after the engine made it, and before the client
        // could read it.
        let sent = us("first_token_sent_us");
        assert!(
            sent >= us("first_token_us") && sent < us("finish_us"),
            "{truth}"
        );
        assert!(
            client_ttft >= sent - us("arrival_us"),
            "{client_ttft} vs {truth}"
        );
    }
    // Medians of seven: the same spans within loopback jitter, where a mistimed token
    // would be off by a whole engine step. A few noisy deliveries on a shared machine
    // do not move a median.
    span_gaps.sort_by(f64::total_cmp);
    ttft_gaps.sort_by(f64::total_cmp);
    assert!(span_gaps[3] < 5.0, "decode span gaps {span_gaps:?} ms");
    assert!(ttft_gaps[3] < 5.0, "TTFT gaps {ttft_gaps:?} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_exhaustion_queues_requests_raises_ttft_and_drops_nothing() {
    let _serial = TIMING.lock().await;
    let mut profile = Profile::tiny();
    profile.num_blocks = 64; // room for about five of these requests at once
    profile.max_model_len = 1_024;
    let sim = sim(profile).await;
    let client = client();
    let url = format!("{}/v1/completions", sim.base_url());
    let metrics_url = format!("{}/metrics", sim.base_url());
    let requests = join_all((0..20u64).map(|i| {
        let body = json!({"prompt": prompt(i, 180), "max_tokens": 40, "stream": true});
        stream(&client, url.clone(), body)
    }));
    let watcher = async {
        let mut max_waiting: f64 = 0.0;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let text = get_text(&client, metrics_url.clone()).await;
            max_waiting = max_waiting.max(metric(&text, "vllm:num_requests_waiting"));
        }
        max_waiting
    };
    let (streams, max_waiting) = tokio::join!(requests, watcher);
    assert!(
        max_waiting >= 5.0,
        "requests waited for KV blocks: {max_waiting}"
    );
    assert_eq!(streams.len(), 20);
    let mut ttfts: Vec<f64> = streams
        .iter()
        .map(|s| {
            assert_eq!(s.content_times().len(), 40, "every request finished whole");
            let t = s.truth();
            (t["first_token_us"].as_u64().unwrap() - t["arrival_us"].as_u64().unwrap()) as f64
        })
        .collect();
    ttfts.sort_by(f64::total_cmp);
    assert!(
        ttfts[19] > 4.0 * ttfts[0],
        "queueing raised TTFT: {ttfts:?}"
    );
    let text = get_text(&client, metrics_url).await;
    assert_eq!(metric(&text, "vllm:request_success_total"), 20.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_1024_token_prefix_hits_the_cache_and_lowers_ttft() {
    let _serial = TIMING.lock().await;
    let sim = sim(Profile::seven_b()).await;
    let client = client();
    let url = format!("{}/v1/completions", sim.base_url());
    let shared = prompt(42, 1024);
    let first = stream(
        &client,
        url.clone(),
        json!({"prompt": format!("{shared}{}", prompt(1, 64)), "max_tokens": 4, "stream": true}),
    )
    .await;
    let second = stream(
        &client,
        url,
        json!({"prompt": format!("{shared}{}", prompt(2, 64)), "max_tokens": 4, "stream": true}),
    )
    .await;
    assert_eq!(first.truth()["cached_prompt_tokens"], 0);
    assert_eq!(second.truth()["cached_prompt_tokens"], 1024);
    let ttft = |s: &Stream| s.content_times()[0] - s.sent;
    assert!(
        ttft(&second) < ttft(&first),
        "{:?} vs {:?}",
        ttft(&second),
        ttft(&first)
    );
    let text = get_text(&client, format!("{}/metrics", sim.base_url())).await;
    assert_eq!(metric(&text, "vllm:prefix_cache_hits_total"), 1024.0);
    assert_eq!(
        metric(&text, "vllm:prefix_cache_queries_total"),
        2.0 * 1088.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempted_requests_are_recomputed_and_reported() {
    let mut profile = Profile::tiny();
    profile.num_blocks = 20;
    profile.max_model_len = 320;
    let sim = sim(profile).await;
    let client = client();
    let url = format!("{}/v1/completions", sim.base_url());
    let answers = join_all((0..4u64).map(|i| {
        post(
            &client,
            url.clone(),
            json!({"prompt": prompt(i, 60), "max_tokens": 40, "temperature": 0}),
        )
    }))
    .await;
    let preempted = answers
        .iter()
        .filter(|a| a.header_u64("x-redline-preemptions") > 0)
        .count();
    assert!(preempted > 0, "the KV cache was too small for all four");
    for a in &answers {
        assert_eq!(a.status, 200);
        assert_eq!(a.body["usage"]["completion_tokens"], 40);
    }
    let text = get_text(&client, format!("{}/metrics", sim.base_url())).await;
    assert!(metric(&text, "vllm:num_preemptions_total") >= preempted as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sequences_and_length_limits_end_answers() {
    let sim = sim(Profile::tiny()).await;
    let client = client();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let ask = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "tell me"}], "temperature": 0, "max_tokens": 50});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post(&client, url.clone(), body)
    };
    let full = ask(json!({})).await;
    assert_eq!(full.body["choices"][0]["finish_reason"], "length");
    assert_eq!(full.body["usage"]["completion_tokens"], 50);
    let text = full.body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    // Stop at the 10th word: the answer is the text before it.
    let words: Vec<&str> = redline::tokenizer::sim::Pieces::new(&text).collect();
    let stop = words[9];
    let cut = ask(json!({"stop": [stop]})).await;
    assert_eq!(cut.body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        cut.body["choices"][0]["message"]["content"],
        text[..text.find(stop).unwrap()]
    );

    // Without max_tokens the model ends on its own, with `stop`.
    let natural = post(
        &client,
        url.clone(),
        json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(natural.body["choices"][0]["finish_reason"], "stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_stream_as_openai_deltas() {
    let sim = sim(Profile::tiny()).await;
    let client = client();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let body = json!({
        "messages": [{"role": "user", "content": "please use lookup_order for order 17"}],
        "tools": [{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}}}],
        "stream": true
    });
    let s = stream(&client, url.clone(), body.clone()).await;
    assert_eq!(s.finish_reason(), "tool_calls");
    let mut name = String::new();
    let mut arguments = String::new();
    for (_, event) in s.json() {
        if let Some(calls) = event["choices"][0]["delta"]["tool_calls"].as_array() {
            name.push_str(calls[0]["function"]["name"].as_str().unwrap_or_default());
            arguments.push_str(
                calls[0]["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default(),
            );
        }
    }
    assert_eq!(name, "lookup_order");
    let args: Value = serde_json::from_str(&arguments).unwrap();
    assert!(args["order_id"].is_i64());

    let mut body = body;
    body["stream"] = json!(false);
    let whole = post(&client, url, body).await;
    let call = &whole.body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup_order");
    assert_eq!(call["function"]["arguments"], arguments.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_vllm_shaped_errors() {
    let sim = sim(Profile::tiny()).await;
    let client = client();
    let base = sim.base_url();
    let cases = [
        (
            "/v1/chat/completions",
            json!("not an object"),
            400,
            "invalid request body",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": "hi"}),
            400,
            "invalid request body",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
            404,
            "The model `nope` does not exist.",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 100000}),
            400,
            "This model's maximum context length",
        ),
        (
            "/v1/embeddings",
            json!({"input": ""}),
            400,
            "input must not be empty",
        ),
        (
            "/v1/embeddings",
            json!({"input": "x", "encoding_format": "hex"}),
            400,
            "invalid encoding_format `hex`",
        ),
    ];
    for (path, body, status, message) in cases {
        let answer = post(&client, format!("{base}{path}"), body.clone()).await;
        assert_eq!(answer.status, status, "{path} {body}");
        let got = answer.body["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{got}");
        assert!(answer.body["error"]["type"].is_string());
    }
    // Still serving.
    let ok = post(
        &client,
        format!("{base}/v1/completions"),
        json!({"prompt": "x", "max_tokens": 2}),
    )
    .await;
    assert_eq!(ok.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_have_meaningful_similarity_in_float_and_base64() {
    let sim = sim(Profile::tiny()).await;
    let client = client();
    let url = format!("{}/v1/embeddings", sim.base_url());
    let answer = post(&client, url.clone(), json!({"input": ["reset my password please", "please reset my password", "quarterly revenue in the north"], "dimensions": 256})).await;
    assert_eq!(answer.status, 200);
    let vectors: Vec<Vec<f32>> = answer.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    assert_eq!(vectors[0].len(), 256);
    let cos = redline::vector::cosine;
    assert!(cos(&vectors[0], &vectors[1]) > 0.9);
    assert!(cos(&vectors[0], &vectors[2]) < 0.3);

    use base64::Engine as _;
    let b64 = post(&client, url, json!({"input": "reset my password please", "dimensions": 256, "encoding_format": "base64"})).await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.body["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(decoded, vectors[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_sequence() {
    let sim = sim(Profile::seven_b()).await;
    let client = client();
    let url = format!("{}/v1/completions", sim.base_url());
    let body = json!({"prompt": prompt(5, 100), "max_tokens": 2000, "stream": true});
    let request = tokio::spawn(async move { stream(&client, url, body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let metrics_client = common::client();
    let text = get_text(&metrics_client, format!("{}/metrics", sim.base_url())).await;
    assert_eq!(metric(&text, "vllm:num_requests_running"), 1.0);
    request.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = get_text(&metrics_client, format!("{}/metrics", sim.base_url())).await;
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0);
    assert!(metric(&text, "vllm:generation_tokens_total") < 100.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_truth_endpoint_aggregates_exactly_what_each_answer_reported() {
    let sim = sim(Profile::tiny()).await;
    let client = client();
    let base = sim.base_url();
    let url = format!("{base}/v1/chat/completions");
    let mut ttfts = Vec::new();
    let mut arrivals = Vec::new();
    let mut tokens = 0;
    for n in 1..=12u64 {
        let body = json!({"messages": [{"role": "user", "content": prompt(n, 20)}], "max_tokens": n, "stream": true});
        let truth = stream(&client, url.clone(), body).await.truth();
        ttfts.push(
            truth["first_token_us"].as_u64().unwrap() - truth["arrival_us"].as_u64().unwrap(),
        );
        tokens += truth["completion_tokens"].as_u64().unwrap();
        arrivals.push(truth["arrival_us"].as_u64().unwrap());
    }
    let report: Value =
        serde_json::from_str(&get_text(&client, format!("{base}/redline/truth")).await).unwrap();
    assert_eq!(report["requests"], 12);
    assert_eq!(report["completion_tokens"], tokens);
    // The arrival rate spans the first to the last arrival the answers reported.
    let rate = report["arrival_rate_per_s"].as_f64().unwrap();
    let span_s = (arrivals.iter().max().unwrap() - arrivals.iter().min().unwrap()) as f64 / 1e6;
    let expected = 11.0 / span_s;
    assert!(
        (rate - expected).abs() < expected * 1e-3,
        "{rate} vs {expected}"
    );
    // 1 + 2 + … + 12 tokens: a gap between each consecutive pair.
    assert_eq!(report["inter_token_ms"]["count"], tokens - 12);
    // HDR histograms keep three significant digits.
    let max_ms = *ttfts.iter().max().unwrap() as f64 / 1e3;
    let reported = report["ttft_ms"]["max"].as_f64().unwrap();
    assert!(
        (reported - max_ms).abs() <= max_ms * 1e-3 + 1e-3,
        "{reported} vs {max_ms}"
    );
    // DELETE answers the same and starts afresh.
    let request = hyper::Request::delete(format!("{base}/redline/truth"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(client.request(request).await.unwrap().status(), 200);
    let after: Value =
        serde_json::from_str(&get_text(&client, format!("{base}/redline/truth")).await).unwrap();
    assert_eq!(after["requests"], 0);
}
