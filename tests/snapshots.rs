//! The terminal report and `summary.json` of two frozen fixed-seed runs (a chat load
//! with faults and SLOs, a RAG-agent flow with faults), as insta snapshots: a refactor
//! or a feature that changes what a user reads fails here and shows the difference.
//! Review a deliberate change with `cargo insta review` (or `INSTA_UPDATE=always`).
//!
//! The records are files under `tests/fixtures/`, so the figures do not depend on this
//! machine's timing; everything from the records on — aggregation, verdicts, summary,
//! rendering — is what `redline run` does.

use std::path::Path;

use redline::record::read_records;
use redline::report::{RunInfo, render_json, render_terminal, summarize};
use redline::scenario::Scenario;
use redline::schedule::ExecutedStage;

/// The summary of a fixture's records under its spec, as `redline run` would build it
/// (without the live parts: proxies' own counts, scraped metrics, collected traces).
fn summary_of_fixture(name: &str) -> redline::report::Summary {
    // Relative to the crate (where cargo runs tests), so paths in the report do not
    // depend on where the repository is checked out.
    let dir = Path::new("tests/fixtures");
    let spec_path = dir.join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&spec_path).unwrap();
    let file = redline::spec::parse(&spec_path.display().to_string(), &text).unwrap();
    let scenario = Scenario::from_spec(&file, &text).unwrap();
    let mut aggregator = scenario.aggregator();
    let read = read_records(&dir.join(format!("{name}.records.jsonl")), None, |r| {
        aggregator.add(&r)
    })
    .unwrap();
    assert!(read.records > 100, "{read:?}");
    let verdicts = scenario.slos.as_ref().map(|s| s.evaluate(&aggregator));
    let stages = scenario
        .stages
        .iter()
        .map(|s| ExecutedStage::of(s, None, scenario.unit()))
        .collect();
    summarize(
        &aggregator,
        RunInfo {
            name: &scenario.name,
            target: "http://127.0.0.1:8000",
            model: "sim-tiny",
            interrupted: false,
            warnings: scenario.warnings(),
            elapsed_s: 2.0,
            stages,
            dataset: scenario.dataset_info(),
            server_metrics: None,
            verdicts,
            aborted: None,
            proxies: Vec::new(),
            traces: None,
            token_settlement: None,
        },
    )
}

#[test]
fn a_chat_run_with_faults_and_slos_reads_as_before() {
    let summary = summary_of_fixture("snapshot-chat");
    insta::assert_snapshot!("chat-terminal", render_terminal(&summary));
    insta::assert_snapshot!(
        "chat-summary-json",
        String::from_utf8(render_json(&summary)).unwrap()
    );
}

#[test]
fn a_flow_run_with_faults_reads_as_before() {
    let summary = summary_of_fixture("snapshot-flow");
    insta::assert_snapshot!("flow-terminal", render_terminal(&summary));
    insta::assert_snapshot!(
        "flow-summary-json",
        String::from_utf8(render_json(&summary)).unwrap()
    );
}
