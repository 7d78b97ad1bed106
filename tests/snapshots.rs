//! What a user reads, as insta snapshots: the terminal report and `summary.json` of
//! two frozen fixed-seed runs (a chat load with faults and SLOs, a RAG-agent flow with
//! faults), and the chat run's `junit.xml`, `slo rules`, `k8s render` and `validate`
//! (of it and of a broken copy). A refactor or a feature that changes what a user
//! reads fails here and shows the difference.
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

/// The chat fixture's spec, as `redline run` reads it.
fn chat_scenario() -> redline::scenario::Scenario {
    let path = std::path::Path::new("tests/fixtures/snapshot-chat.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let file = redline::spec::parse(&path.display().to_string(), &text).unwrap();
    redline::scenario::Scenario::from_spec(&file, &text).unwrap()
}

#[test]
fn junit_xml_of_a_judged_run_reads_as_before() {
    let summary = summary_of_fixture("snapshot-chat");
    let verdicts = summary.verdicts.as_deref().expect("the fixture has SLOs");
    insta::assert_snapshot!(
        "chat-junit-xml",
        redline::slo::junit::render(&summary.name, verdicts, false)
    );
    insta::assert_snapshot!(
        "chat-junit-xml-strict",
        redline::slo::junit::render(&summary.name, verdicts, true)
    );
}

#[test]
fn slo_rules_read_as_before_for_redline_and_vllm_metrics() {
    use redline::slo::rules::{MetricNames, RulesFormat, render};
    let scenario = chat_scenario();
    let slos = scenario.slos.as_ref().expect("the fixture has SLOs");
    for (label, names, format) in [
        (
            "slo-rules-redline",
            MetricNames::Redline,
            RulesFormat::Prometheus,
        ),
        (
            "slo-rules-vllm-operator",
            MetricNames::Vllm,
            RulesFormat::PrometheusRule,
        ),
    ] {
        let (yaml, skipped) = render(slos, &scenario.name, names, format);
        insta::assert_snapshot!(label, format!("{yaml}\n# skipped:\n{}", skipped.join("\n")));
    }
}

#[test]
fn k8s_render_with_a_coordinator_reads_as_before() {
    let (code, out, err) = crate::common::redline(&[
        "k8s",
        "render",
        "tests/fixtures/snapshot-chat.yaml",
        "--workers",
        "3",
        "--image",
        "registry.example/redline:test",
        "--namespace",
        "load",
        "--results-claim",
        "redline-results",
        "--coordinator",
    ]);
    assert_eq!(code, Some(0), "{err}");
    insta::assert_snapshot!("k8s-render-coordinator", out);
}

#[test]
fn validate_reads_as_before_for_a_good_spec_and_a_broken_one() {
    let (code, out, err) =
        crate::common::redline(&["validate", "tests/fixtures/snapshot-chat.yaml"]);
    assert_eq!(code, Some(0), "{err}");
    insta::assert_snapshot!("validate-good", format!("{out}{err}"));
    let dir = std::env::temp_dir().join(format!("redline-validate-snap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.yaml");
    let text = std::fs::read_to_string("tests/fixtures/snapshot-chat.yaml").unwrap();
    std::fs::write(&broken, text.replacen("error_rate:", "error_rat:", 1)).unwrap();
    let (code, out, err) = crate::common::redline(&["validate", broken.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    let shown = format!("{out}{err}").replace(&dir.display().to_string(), "TMP");
    insta::assert_snapshot!("validate-broken", shown);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The report page of both fixture runs as a reader sees it: its text, a line per
/// block, charts' labels included (the embedded data is `summary.json`, snapshotted
/// above and checked equal in `report::`).
#[test]
fn the_report_pages_read_as_before() {
    use redline::report::html;
    for name in ["snapshot-chat", "snapshot-flow"] {
        let summary = summary_of_fixture(name);
        let records = std::path::Path::new("tests/fixtures").join(format!("{name}.records.jsonl"));
        let digest = html::digest_of(&records, summary.requests.scheduled).unwrap();
        let page = html::render(&summary, &digest);
        insta::assert_snapshot!(format!("{name}-report-text"), visible_text(&page));
    }
}

/// The text between tags, a line per block element; the head, style and scripts left out.
fn visible_text(page: &str) -> String {
    let body = &page[page.find("<main>").expect("a main element")..];
    let body = &body[..body.find("<script").unwrap_or(body.len())];
    let mut text = String::new();
    let mut rest = body;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        let close = open + rest[open..].find('>').expect("a tag closes");
        let tag = &rest[open + 1..close];
        let name = tag
            .trim_start_matches('/')
            .split([' ', '/'])
            .next()
            .unwrap_or("");
        if [
            "p",
            "tr",
            "h1",
            "h2",
            "h3",
            "li",
            "section",
            "div",
            "figcaption",
            "br",
            "text",
        ]
        .contains(&name)
        {
            text.push('\n');
        } else if ["td", "th"].contains(&name) {
            text.push(' ');
        }
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    text.replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}
