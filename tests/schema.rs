//! The committed JSON Schemas of summary.json and records.jsonl match the code, and
//! real output validates against them. `REDLINE_BLESS=1 cargo test --test integration schema::`
//! rewrites the committed files after an intended change.

use redline::report::{RunInfo, record_schema, render_json, summarize, summary_schema};
use redline::runner::{RunOptions, run};
use redline::scenario::Scenario;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn committed(name: &str, generated: &Value) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(name);
    let text = serde_json::to_string_pretty(generated).unwrap() + "\n";
    if std::env::var_os("REDLINE_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "docs/{name} is stale: run REDLINE_BLESS=1 cargo test --test integration schema:: and commit it"
    );
    serde_json::from_str(&on_disk).unwrap()
}

fn assert_valid(schema: &Value, instance: &Value, what: &str) {
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match its schema: {errors:#?}"
    );
}

/// A server span for the run's first traced request, joined to the records.
fn trace_report(dir: &std::path::Path) -> redline::trace::graph::TraceReport {
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let records: Vec<redline::record::Record> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let traced = records
        .iter()
        .find(|r| r.traceparent.is_some() && r.last_byte_us.is_some())
        .unwrap();
    let parts: Vec<&str> = traced.traceparent.as_ref().unwrap().split('-').collect();
    let export = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "llm"}}]},
        "scopeSpans": [{"spans": [{"traceId": parts[1], "spanId": "00000000000000aa", "parentSpanId": parts[2],
            "name": "generate", "startTimeUnixNano": "1000", "endTimeUnixNano": "2001000"}]}]}]});
    let spans = redline::trace::graph::parse_spans(&export.to_string()).unwrap();
    let report = redline::trace::graph::TraceReport {
        graph: redline::trace::graph::build(&spans),
        join: redline::trace::graph::join(&spans, &records),
        receiver: Some(redline::trace::graph::ReceiverCounts {
            requests: 1,
            spans_stored: 1,
            spans_dropped: 0,
            rejected: 0,
        }),
    };
    assert_eq!(report.join.joined, 1);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_output_validates_against_the_committed_schemas() {
    let summary_schema = committed("summary.schema.json", &summary_schema());
    let record_schema = committed("record.schema.json", &record_schema());

    // A run with successes and failures, so optional fields and errors both appear.
    let text = "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: schema }\nspec:\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 16, output_tokens: 4 } }\n  max_in_flight: 3\n  goodput: { ttft: 1s, tpot: 50ms }\n  faults:\n    - { name: slow, service: llm, delay: { probability: 1, ms: 2 } }\n    - { name: cut, service: llm, max: 1, cut_stream: { probability: 1, after_events: 2 } }\n  load:\n    - { arrival: constant, rate: 2000, requests: 40 }\n    - { sweep: { rates: 1, throughput_concurrency: 2 }, requests: 8 }\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nspec:\n  sloThresholds: { preset: redlines, output_throughput: \">= 1 tok/s\" }\n";
    let file = redline::spec::parse("schema.yaml", text).unwrap();
    let scenario = Scenario::from_spec(&file, text).unwrap();
    let slos = scenario.slos.clone().unwrap();
    let dir = std::env::temp_dir().join(format!("redline-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let result = run(
        scenario,
        RunOptions::records_to(dir.join("records.jsonl")),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(
        result.aggregator.counts.dropped > 0,
        "the in-flight limit dropped some requests"
    );
    let summary = summarize(
        &result.aggregator,
        RunInfo {
            name: "schema",
            target: &result.target_url,
            model: &result.model,
            interrupted: false,
            warnings: Vec::new(),
            elapsed_s: 1.0,
            stages: result.stages.clone(),
            dataset: None,
            server_metrics: None,
            verdicts: Some(slos.evaluate(&result.aggregator, None)),
            aborted: Some(redline::slo::Aborted {
                at_s: 0.5,
                breaches: slos.evaluate(&result.aggregator, None),
                episode: None,
            }),
            proxies: result.proxies.clone(),
            traces: Some(trace_report(&dir)),
            token_settlement: Some(redline::record::TokenSettlement {
                uncounted: 3,
                source: redline::record::TokenSource::ServerTokenizer,
                events_agree: 0,
                events_disagree: 1,
                server_tokenizer: Some("http://127.0.0.1:8080/tokenize".into()),
            }),
        },
    );
    let faults = summary.faults.as_ref().expect("the spec has faults");
    assert!(faults.rules.iter().all(|r| r.requests > 0), "{faults:?}");
    let summary: Value = serde_json::from_slice(&render_json(&summary)).unwrap();
    assert_valid(&summary_schema, &summary, "summary.json");
    let mut broken = summary.clone();
    broken["requests"]["ok"] = Value::from("many");
    assert!(
        !jsonschema::validator_for(&summary_schema)
            .unwrap()
            .is_valid(&broken),
        "the schema checks types"
    );
    for line in std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
    {
        assert_valid(
            &record_schema,
            &serde_json::from_str(line).unwrap(),
            "a record",
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_example_document_validates_against_the_spec_schema() {
    let schema = committed("spec.schema.json", &redline::spec::schema::spec_schema());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut documents = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for document in yaml_serde::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            assert_valid(&schema, &value, &path.display().to_string());
            documents += 1;
        }
    }
    assert!(documents >= 5, "{documents}");
    // A typo the spec parser rejects, the schema rejects too (editors flag it early).
    let typo: Value = yaml_serde::from_str(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nspec:\n  services: { llm: { url: embedded } }\n  payloadTemplate: {}\n  lod: []\n",
    )
    .unwrap();
    assert!(!jsonschema::validator_for(&schema).unwrap().is_valid(&typo));
}

#[test]
fn the_crds_are_kubernetes_custom_resource_definitions_for_each_kind() {
    let text = redline::spec::schema::crds();
    let crds: Vec<Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = crds
        .iter()
        .map(|c| c["spec"]["names"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["InferenceSpec", "ScaleSpec", "ModelLoadSpec", "TestRun"]
    );
    for crd in &crds {
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
        assert_eq!(crd["metadata"]["name"], format!("{plural}.redline.dev"));
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
    }
}

/// The TestRun example is valid under its CRD's schema (as the API server would check
/// it), and a TestRun without an image or with no workers is not.
#[test]
fn the_testrun_example_passes_its_crd_and_broken_ones_do_not() {
    let text = redline::spec::schema::crds();
    let test_run_crd: Value = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|c: &Value| c["spec"]["names"]["kind"] == "TestRun")
        .unwrap();
    let schema = &test_run_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::validator_for(schema).unwrap();
    let example: Value =
        yaml_serde::from_str(&std::fs::read_to_string("deploy/k8s/testrun.yaml").unwrap()).unwrap();
    assert!(
        validator.is_valid(&example),
        "{:?}",
        validator.validate(&example)
    );
    let mut no_image = example.clone();
    no_image["spec"].as_object_mut().unwrap().remove("image");
    assert!(!validator.is_valid(&no_image));
    let mut no_workers = example.clone();
    no_workers["spec"]["workers"] = 0.into();
    assert!(!validator.is_valid(&no_workers));
}
