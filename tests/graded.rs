//! Graded datasets: each answer judged against its line's expected one, against a
//! server whose answers are known, so every verdict is known too.

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};

use crate::common::{redline, temp_dir};
use redline::record::{GradeVerdict, Outcome, Record};

/// The prompts, the server's answer to each, the expected answer, and the verdict.
const CASES: [(&str, &str, &str, GradeVerdict); 4] = [
    (
        "q1",
        "Adding them up, it is 42.",
        "42",
        GradeVerdict::Correct,
    ),
    ("q2", "That makes 8", "7", GradeVerdict::Wrong),
    ("q3", "I cannot say.", "3", GradeVerdict::Unparsed),
    (
        "q4",
        "The total is 1000",
        "\"1,000\"",
        GradeVerdict::Correct,
    ),
];

/// A chat server that answers each prompt of [`CASES`] with its fixed answer.
async fn server() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|Json(body): Json<Value>| async move {
            let prompt = body["messages"][0]["content"].as_str().unwrap_or_default();
            let answer = CASES.iter().find(|c| c.0 == prompt).map_or("?", |c| c.1);
            Json(json!({
                "id": "c", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn spec(url: &str, dataset: &std::path::Path) -> String {
    format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: graded }}\nspec:\n  services:\n    llm: {{ url: \"{url}\", model: m }}\n  payloadTemplate:\n    stream: false\n    prompts: {{ dataset: {{ file: {}, grader: {{ type: numeric, tolerance: 0.001 }}, output_tokens: 8 }} }}\n  goodput: {{ e2e: 10s, correct: true }}\n  load:\n    - {{ concurrency: 4, requests: 40 }}\n    - {{ concurrency: 2, requests: 20 }}\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nspec:\n  sloThresholds:\n    accuracy: \">= 30%\"\n    unparsed: \"<= 1%\"\n",
        dataset.display()
    )
}

fn scenario_of(text: &str) -> Result<redline::scenario::Scenario, String> {
    let file = redline::spec::parse("graded.yaml", text).map_err(|e| e.to_string())?;
    redline::scenario::Scenario::from_spec(&file, text).map_err(|e| format!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graded_answers_are_counted_as_the_server_answered() {
    let url = server().await;
    let dir = temp_dir("graded");
    std::fs::create_dir_all(&dir).unwrap();
    let dataset = dir.join("qa.jsonl");
    let lines: Vec<String> = CASES
        .iter()
        .map(|(q, _, expected, _)| format!("{{\"prompt\": \"{q}\", \"expected\": {expected}}}"))
        .collect();
    std::fs::write(&dataset, lines.join("\n")).unwrap();
    let spec_file = dir.join("graded.yaml");
    std::fs::write(&spec_file, spec(&url, &dataset)).unwrap();
    let out = dir.join("out");
    let args = [
        "run",
        spec_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]
    .map(str::to_owned);
    // As a user runs it, so the gate's verdicts and exit code are the CLI's.
    let (code, _, stderr) = tokio::task::spawn_blocking(move || {
        redline(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "the unparsed SLO fails the gate: {stderr}");
    let records: Vec<Record> = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 60);
    for r in &records {
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        // Sequential order: request n sends line n mod 4.
        let (_, _, _, verdict) = CASES[(r.seq % 4) as usize];
        let grade = r.grade.as_ref().expect("every answer is graded");
        assert_eq!(grade.verdict, verdict, "{r:?}");
        assert_eq!(grade.note.is_some(), verdict != GradeVerdict::Correct);
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let q = &summary["quality"];
    assert_eq!(
        [&q["graded"], &q["correct"], &q["wrong"], &q["unparsed"]],
        [60, 30, 15, 15]
    );
    // Each stage's own counts: the first sent lines 0–39, the second 40–59.
    for (stage, graded, correct) in [(0, 40, 20), (1, 20, 10)] {
        let q = &summary["stages"][stage]["quality"];
        assert_eq!(
            [&q["graded"], &q["correct"]],
            [graded, correct],
            "stage {stage}"
        );
    }
    // Fast and wrong is not good: only the correct half counts.
    assert_eq!(
        summary["goodput"]["ratio"].as_f64(),
        Some(0.5),
        "{}",
        summary["goodput"]
    );
    assert_eq!(
        (q["accuracy"].as_f64(), q["unparsed_rate"].as_f64()),
        (Some(0.5), Some(0.25))
    );
    let interval = |i: usize| q["accuracy_interval"][i].as_f64().unwrap();
    assert!(interval(0) < 0.5 && 0.5 < interval(1), "{q}");
    let verdict = |name: &str| {
        let all = summary["verdicts"].as_array().unwrap();
        all.iter().find(|v| v["slo"] == name).unwrap()["outcome"].clone()
    };
    assert_eq!(verdict("accuracy"), "pass", "50% of 60, bounded above 30%");
    assert_eq!(verdict("unparsed"), "fail", "a quarter unparsed");
    // `compare` sets the accuracy of two runs side by side: here the run and itself.
    let run = out.to_str().unwrap().to_owned();
    let args = ["compare", &run, &run, "--fail-on", "accuracy < -1pp"].map(str::to_owned);
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        redline(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("accuracy: 30/60 → 30/60 correct, +0.0 points")
            && stdout.contains("within noise"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_line_its_grader_cannot_use_is_named_with_its_line() {
    let dir = temp_dir("graded-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let dataset = dir.join("qa.jsonl");
    std::fs::write(
        &dataset,
        "{\"prompt\": \"q1\", \"expected\": 1}\n{\"prompt\": \"q2\"}\n",
    )
    .unwrap();
    let error = scenario_of(&spec("http://127.0.0.1:9", &dataset)).unwrap_err();
    assert!(
        error.contains("qa.jsonl:2: needs an \"expected\" number for the numeric grader"),
        "{error}"
    );
    let ungraded = spec("http://127.0.0.1:9", &dataset)
        .replace(", grader: { type: numeric, tolerance: 0.001 }", "");
    let error = scenario_of(&ungraded).unwrap_err();
    assert!(
        error.contains("spec.goodput.correct: needs graded answers"),
        "{error}"
    );
    let unknown = spec("http://127.0.0.1:9", &dataset).replace("type: numeric", "type: nearly");
    let error = scenario_of(&unknown).unwrap_err();
    assert!(
        error.contains("nearly") && error.contains("grader"),
        "{error}"
    );
}

/// A dataset line whose tool the simulator calls with the one value each parameter's
/// `enum` allows: its clean answer is the expected call.
fn forecast_line(i: usize) -> String {
    let city = ["Oslo", "Lima", "Pune", "Kyiv"][i % 4];
    let tool = json!({"type": "function", "function": {"name": "get_forecast",
        "parameters": {"type": "object", "required": ["city", "days"], "properties": {
            "city": {"type": "string", "enum": [city]},
            "days": {"type": "integer", "enum": [i % 7 + 1]}}}}});
    json!({"prompt": format!("get_forecast for {city}, line {i}"), "tools": [tool],
        "tool_choice": "required",
        "expected": [{"get_forecast": {"city": [city], "days": [i % 7 + 1]}}]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_the_load_spoiled_are_graded_as_the_simulator_spoiled_them() {
    let mut profile = redline::sim::Profile::tiny();
    profile.planted = Some(redline::sim::planted::Planted {
        tool_calls_spoiled_above: Some(1),
        ..Default::default()
    });
    let sim = redline::sim::EmbeddedSim::start(redline::sim::SimConfig {
        profile,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = temp_dir("graded-spoiled");
    let dataset = dir.join("calls.jsonl");
    let lines: Vec<String> = (0..40).map(forecast_line).collect();
    std::fs::write(&dataset, lines.join("\n")).unwrap();
    // One request at a time (never more than 1 in the engine), then 16 at a time.
    let spec = format!(
        "  services:\n    llm: {{ url: \"{}\", model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ dataset: {{ file: {}, grader: {{ type: tool_ast }}, output_tokens: 64 }} }}\n  load:\n    - {{ concurrency: 1, requests: 40 }}\n    - {{ concurrency: 16, requests: 160 }}\n",
        sim.base_url(),
        dataset.display()
    );
    let (result, records) =
        crate::common::run_to_records(crate::common::scenario(&spec), "graded-spoiled").await;
    assert!(records.iter().all(|r| r.outcome == Outcome::Ok));
    let truth: Value = serde_json::from_str(
        &crate::common::get_text(
            &crate::common::client(),
            format!("{}/redline/truth", sim.base_url()),
        )
        .await,
    )
    .unwrap();
    let calls = &truth["tool_calls"];
    let (answered, cut, changed) = (
        calls["answered"].as_u64().unwrap(),
        calls["cut"].as_u64().unwrap(),
        calls["changed"].as_u64().unwrap(),
    );
    let summary = crate::common::summary_of(&result);
    let q = summary.quality.as_ref().unwrap();
    // Every spoiled answer graded as its spoiling makes it, every clean one correct.
    assert_eq!(q.graded, answered);
    assert_eq!(
        (q.unparsed, q.buckets.get("unparsed").copied().unwrap_or(0)),
        (cut, cut)
    );
    assert_eq!(
        (q.wrong, q.buckets.get("param_value").copied().unwrap_or(0)),
        (changed, changed)
    );
    assert_eq!(q.correct, answered - cut - changed, "{q:?}");
    // The unparsed rate rises with the load: none one at a time, some sixteen at a
    // time (how many depends on how full the client keeps the engine: on two busy
    // cores, 1 in 5 at the fewest seen).
    let stage = |i: usize| summary.stages[i].quality.as_ref().unwrap();
    assert_eq!(
        (stage(0).wrong, stage(0).unparsed),
        (0, 0),
        "{:?}",
        stage(0)
    );
    assert!(stage(1).unparsed * 10 > stage(1).graded, "{:?}", stage(1));
    let _ = std::fs::remove_dir_all(dir);
}
