//! The terminal report and `summary.json` of two frozen fixed-seed runs (a chat load
//! with faults and SLOs, a RAG-agent flow with faults), as insta snapshots: a refactor
//! or a feature that changes what a user reads fails here and shows the difference.
//! Review a deliberate change with `cargo insta review` (or `INSTA_UPDATE=always`).
//!
//! The records are files under `tests/fixtures/`, so the figures do not depend on this
//! machine's timing; everything from the records on — aggregation, verdicts, summary,
//! rendering — is what `redline run` does.

use crate::common::summary_of_fixture;
use redline::report::{render_json, render_terminal};

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
