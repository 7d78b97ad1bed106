//! Aggregators of two parts of a run, merged, equal the aggregator of the whole: every
//! count, sum and histogram (so every percentile), per stage, turn, window, failure
//! class, fault rule and flow step. Checked on the records of real runs against the
//! simulator: a flow with injected faults, and chat sessions with shared prefixes
//! and a warm-up — the figures whose merge depends on which request came first. Each
//! merge also goes through `aggregate.json`'s encoding and back unchanged.

use crate::common::{run_to_records, scenario, summary_of};
use redline::metrics::Aggregator;
use redline::record::Record;
use redline::scenario::Scenario;

/// The aggregator of `records` in completion order, as the run's collector takes them.
fn aggregate<'a>(scenario: &Scenario, records: impl Iterator<Item = &'a Record>) -> Aggregator {
    let mut aggregator = scenario.aggregator();
    for r in records {
        aggregator.add(r);
    }
    aggregator
}

/// Splits the records (in completion order) by `part`, aggregates each part, merges
/// the two and compares with the whole.
fn assert_merge_is_exact(
    scenario: &Scenario,
    records: &mut [Record],
    part: impl Fn(usize) -> bool,
) {
    records.sort_by_key(Record::done_us);
    let whole = aggregate(scenario, records.iter());
    let first = records.iter().enumerate().filter(|(i, _)| part(*i));
    let second = records.iter().enumerate().filter(|(i, _)| !part(*i));
    let mut merged = aggregate(scenario, first.map(|(_, r)| r));
    merged.merge(&aggregate(scenario, second.map(|(_, r)| r)));
    // Recall is a sum of fractions: the only figure whose floating-point sum may round
    // differently in another order.
    let recall = (merged.flow.recall_sum, whole.flow.recall_sum);
    assert!((recall.0 - recall.1).abs() < 1e-9, "{recall:?}");
    merged.flow.recall_sum = whole.flow.recall_sum;
    // What `aggregate.json` holds reads back as the aggregator it was written from.
    let text = redline::metrics::file::render(&merged).unwrap();
    assert_eq!(redline::metrics::file::parse(&text).unwrap(), merged);
    if merged != whole {
        let (m, w) = (format!("{merged:#?}"), format!("{whole:#?}"));
        let differ: Vec<String> = m
            .lines()
            .zip(w.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(12)
            .map(|(i, (a, b))| format!("line {i}: merged {a} · whole {b}"))
            .collect();
        panic!("the merge differs from the whole:\n{}", differ.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parts_of_a_flow_with_faults_merge_into_the_whole() {
    let text = std::fs::read_to_string("examples/fault-plan.yaml")
        .unwrap()
        .replace("profile: 7b", "profile: tiny")
        .replace("probability: 0.05,", "probability: 0.3,")
        .replace("probability: 0.012,", "probability: 0.2,")
        .replace(
            "window: { from: 8s, to: 14s }",
            "window: { from: 1s, to: 2s }",
        )
        .replace(
            "- { arrival: poisson, rate: 3, duration: 20s }",
            "- { concurrency: 8, requests: 120 }",
        );
    assert!(
        text.contains("requests: 120"),
        "the example's load line moved"
    );
    let file = redline::spec::parse("examples/fault-plan.yaml", &text).unwrap();
    let s = Scenario::from_spec(&file, &text).unwrap();
    let (result, mut records) = run_to_records(s.clone(), "merge-flow").await;
    let summary = summary_of(&result);
    let faults = summary.faults.expect("faults were injected");
    assert!(faults.requests_with_faults > 10, "{faults:?}");
    assert!(summary.flow.is_some_and(|f| f.recall.is_some()));
    // Interleaved halves, and a first part that ends early: both orders of parts.
    assert_merge_is_exact(&s, &mut records, |i| i % 2 == 0);
    assert_merge_is_exact(&s, &mut records, |i| i < 37);
    assert_merge_is_exact(&s, &mut records, |i| i >= 37);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parts_of_sessions_with_shared_prefixes_merge_into_the_whole() {
    let s = scenario(
        "  seed: 5\n  warmup: 300ms\n  services:\n    llm: { url: embedded, profile: tiny }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: { min: 40, max: 80 }, output_tokens: { min: 2, max: 12 }, prefix_tokens: 32, prefixes: 5 } }\n  load:\n    - { concurrency: 4, requests: 120 }\n    - { arrival: poisson, rate: 80, requests: 120 }\n",
    );
    let (result, mut records) = run_to_records(s.clone(), "merge-prefixes").await;
    assert_eq!(result.aggregator.counts.scheduled, 240);
    assert!(result.aggregator.repeated_prefix_tokens > 0);
    assert_merge_is_exact(&s, &mut records, |i| i % 2 == 1);
    assert_merge_is_exact(&s, &mut records, |i| i % 3 == 0);
    assert_merge_is_exact(&s, &mut records, |i| i >= 200);
}
