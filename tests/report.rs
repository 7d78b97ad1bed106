//! `report.html` and `timeline.json` of the frozen fixture runs (a chat load with faults
//! and SLOs, a RAG-agent flow): the page holds `summary.json` and shows its numbers,
//! asks for nothing outside itself, has the sections the run has data for; the
//! timeline is trace-event JSON with a slice per record and flow steps nested in their
//! session; a 100,000-request report stays under 3 MB.

use crate::common;

use std::path::Path;

use crate::common::{summary_of_fixture, temp_dir};
use redline::record::read_records;
use redline::report::{html, timeline};
use serde_json::Value;

fn fixture_records(name: &str) -> std::path::PathBuf {
    Path::new("tests/fixtures").join(format!("{name}.records.jsonl"))
}

fn page_of(name: &str) -> (Value, String) {
    let summary = summary_of_fixture(name);
    let digest = html::digest_of(&fixture_records(name), summary.requests.scheduled).unwrap();
    let page = html::render(&summary, &digest);
    (serde_json::to_value(&summary).unwrap(), page)
}

fn embedded_summary(page: &str) -> Value {
    let open = r#"<script type="application/json" id="summary-json">"#;
    let start = page.find(open).expect("the summary is embedded") + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end].replace("<\\/", "</")).unwrap()
}

/// `data-metric="ttft.p50" data-value="…"` pairs as (JSON pointer into the summary, value).
fn shown_numbers(page: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for part in page.split(r#"data-metric=""#).skip(1) {
        let metric = &part[..part.find('"').unwrap()];
        let value = part.split(r#"data-value=""#).nth(1).unwrap();
        let value: f64 = value[..value.find('"').unwrap()].parse().unwrap();
        let root = metric.split('.').next().unwrap();
        let prefix = if ["ttft", "itl", "tpot", "e2e"].contains(&root) {
            "/latency_ms/"
        } else {
            "/"
        };
        out.push((format!("{prefix}{}", metric.replace('.', "/")), value));
    }
    out
}

fn sections(page: &str) -> Vec<&str> {
    page.split(r#"<section id=""#)
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect()
}

#[test]
fn the_page_holds_the_summary_and_shows_its_numbers() {
    for (name, expected) in [
        (
            "snapshot-chat",
            &[
                "verdicts",
                "overview",
                "distributions",
                "over-time",
                "timeline",
                "server",
                "errors",
                "about",
            ][..],
        ),
        (
            "snapshot-flow",
            &[
                "verdicts",
                "overview",
                "distributions",
                "over-time",
                "timeline",
                "flow",
                "server",
                "errors",
                "about",
            ][..],
        ),
    ] {
        let (summary, page) = page_of(name);
        assert_eq!(
            embedded_summary(&page),
            summary,
            "{name}: the embedded summary"
        );
        let shown = shown_numbers(&page);
        assert!(shown.len() >= 8, "{name}: {shown:?}");
        for (pointer, value) in shown {
            let expected = summary.pointer(&pointer).and_then(Value::as_f64);
            assert_eq!(expected, Some(value), "{name}: {pointer}");
        }
        let c = &summary["requests"];
        let counts = [
            "scheduled",
            "ok",
            "error",
            "timeout",
            "cancelled",
            "dropped",
        ]
        .map(|k| c[k].as_u64().unwrap().to_string())
        .join(" ");
        assert!(
            page.contains(&format!(r#"data-counts="{counts}""#)),
            "{name}"
        );
        for verdict in summary["verdicts"].as_array().into_iter().flatten() {
            let shown = format!(
                r#"data-slo="{}" data-outcome="{}""#,
                verdict["slo"].as_str().unwrap(),
                verdict["outcome"].as_str().unwrap()
            );
            assert!(page.contains(&shown), "{name}: {shown}");
        }
        assert_eq!(sections(&page), expected, "{name}: sections");
    }
}

#[test]
fn the_page_asks_for_nothing_outside_itself() {
    use base64::Engine;
    for name in ["snapshot-chat", "snapshot-flow"] {
        let (_, page) = page_of(name);
        for reference in ["src=", "href=", "url(", "@import", "<script src", "<link"] {
            assert!(
                !page.contains(reference),
                "{name}: `{reference}` in the page"
            );
        }
        // Two scripts: the summary as data, and the one inline script, which the CSP
        // allows by its hash and nothing else may run beside.
        assert_eq!(page.matches("<script").count(), 2, "{name}");
        assert!(page.contains(r#"<script type="application/json""#));
        let code = page
            .split("<script>")
            .nth(1)
            .and_then(|rest| rest.split("</script>").next())
            .expect("the inline script");
        let digest = ring::digest::digest(&ring::digest::SHA256, code.as_bytes());
        let hash = base64::engine::general_purpose::STANDARD.encode(digest.as_ref());
        let csp = format!(
            r#"content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{hash}'""#
        );
        assert!(
            page.contains(&csp),
            "{name}: no CSP allowing exactly {hash}"
        );
    }
}

#[test]
fn a_flow_shows_a_typical_and_the_slowest_session_and_its_step_graph() {
    let (summary, page) = page_of("snapshot-flow");
    // The records' sessions, by their own end marks: E2E per session id.
    let mut e2e: Vec<(u64, u64)> = Vec::new();
    redline::record::read_records(&fixture_records("snapshot-flow"), None, |r| {
        if let (Some(end), Some(session)) = (&r.session_end, &r.session) {
            e2e.push((end.e2e_us, session.id));
        }
    })
    .unwrap();
    e2e.sort_unstable();
    let (typical, slowest) = (e2e[e2e.len() / 2].1, e2e.last().unwrap().1);
    assert_ne!(typical, slowest);
    for id in [typical, slowest] {
        assert!(
            page.contains(&format!(r#"class="waterfall" data-session="{id}""#)),
            "no waterfall of session {id}"
        );
    }
    // The graph: an edge per step-to-step move the flow's steps make.
    let steps: Vec<&str> = summary["flow"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    let graph = page.split(r#"class="graph""#).nth(1).expect("a graph");
    let graph = &graph[..graph.find("</svg>").unwrap()];
    for step in &steps {
        assert!(
            graph.contains(&format!(">{step}</text>")),
            "{step} not in the graph"
        );
    }
    assert!(graph.matches(r#"class="edge""#).count() >= steps.len() - 1);
}

#[test]
fn the_timeline_has_a_slice_per_record_and_nests_steps_in_sessions() {
    for name in ["snapshot-chat", "snapshot-flow"] {
        let mut records = Vec::new();
        read_records(&fixture_records(name), None, |r| records.push(r)).unwrap();
        let trace = timeline::trace_of(&records);
        let events = trace["traceEvents"].as_array().unwrap();
        let slices: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "request")
            .collect();
        assert_eq!(slices.len(), records.len(), "{name}: one slice per record");
        let mut seqs: Vec<u64> = slices
            .iter()
            .map(|e| e["args"]["seq"].as_u64().unwrap())
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), records.len(), "{name}: each record once");
        let times: Vec<u64> = events.iter().filter_map(|e| e["ts"].as_u64()).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "{name}: timestamps in order"
        );
        let firsts = events.iter().filter(|e| e["name"] == "first token").count();
        let with_first = records
            .iter()
            .filter(|r| r.first_token_us.is_some())
            .count();
        assert_eq!(
            firsts, with_first,
            "{name}: a first-token instant per request with one"
        );
        for session in events.iter().filter(|e| e["cat"] == "session") {
            let (start, end) = (
                session["ts"].as_u64().unwrap(),
                session["ts"].as_u64().unwrap() + session["dur"].as_u64().unwrap(),
            );
            let steps: Vec<&&Value> = slices
                .iter()
                .filter(|s| s["pid"] == session["pid"] && s["tid"] == session["tid"])
                .collect();
            assert!(
                !steps.is_empty(),
                "{name}: a session slice holds its requests"
            );
            for step in steps {
                let (s, d) = (step["ts"].as_u64().unwrap(), step["dur"].as_u64().unwrap());
                assert!(
                    start <= s && s + d <= end,
                    "{name}: a step inside its session"
                );
            }
        }
        if name == "snapshot-flow" {
            assert!(
                events.iter().any(|e| e["cat"] == "session"),
                "flow sessions are drawn"
            );
        }
    }
}

#[test]
fn a_report_of_100k_requests_stays_under_3_mb() {
    let dir = temp_dir("report-100k");
    let summary = common::synthetic::chat_run(&dir, 100_000, 8);
    let digest = html::digest_of(&dir.join("records.jsonl"), summary.requests.scheduled).unwrap();
    assert_eq!(digest.records, 100_000);
    assert_eq!(
        digest.timeline.len() as u64,
        html::TIMELINE_ROWS,
        "the timeline is sampled"
    );
    let page = html::render(&summary, &digest);
    assert!(page.len() < 3 << 20, "{} bytes", page.len());
    assert!(page.contains("400 of 100000 requests, every 250th by sequence number"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A short run against the embedded simulator (`service`: the service's options after
/// its url), its folder written as `redline run` writes it.
async fn run_folder(service: &str, name: &str) -> std::path::PathBuf {
    let scenario = common::scenario(&format!(
        "  seed: 7\n  services:\n    llm: {{ url: embedded, {service} }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: {{ mean: 200, stddev: 80, min: 16, max: 512 }}, output_tokens: 12 }} }}\n  load:\n    - {{ arrival: poisson, rate: 12, duration: 5s }}\n"
    ));
    let dir = temp_dir(name);
    let options = redline::runner::RunOptions::records_to(dir.join("records.jsonl"));
    let result = redline::runner::run(
        scenario,
        options,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let about = redline::report::conclude::RunAbout {
        name,
        slos: None,
        dataset: None,
        strict: false,
        invocation: None,
        segment: None,
    };
    redline::report::conclude::finish(&result, about, &dir).unwrap();
    assert!(dir.join("report.html").is_file() && dir.join("timeline.json").is_file());
    dir
}

/// Ollama reports its own durations on every answer: the page draws them beside the
/// client's E2E, every successful answer counted once and no server part longer than
/// the client's whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_account_of_its_time_is_drawn_beside_the_clients() {
    let dir = run_folder("profile: tiny, api: ollama", "report-ollama").await;
    let summary: redline::report::Summary =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let records = dir.join("records.jsonl");
    let digest = html::digest_of(&records, summary.requests.scheduled).unwrap();
    let count = |name: &str| -> usize {
        let per_second = digest
            .seconds
            .iter()
            .filter_map(|s| s.reported_us.get(name));
        per_second.map(Vec::len).sum()
    };
    let mut ok = 0;
    read_records(&records, None, |r| {
        ok += usize::from(r.outcome == redline::record::Outcome::Ok)
    })
    .unwrap();
    assert!(ok >= 40, "{ok} answers");
    for part in [
        "client E2E",
        "server total",
        "server prefill",
        "server decode",
    ] {
        assert_eq!(count(part), ok, "{part}: one value per answer");
    }
    for second in digest.seconds.iter().filter(|s| !s.reported_us.is_empty()) {
        let median = |name| second.reported_us[name][second.reported_us[name].len() / 2];
        assert!(median("server total") <= median("client E2E"));
        assert!(median("server decode") <= median("server total"));
    }
    assert_eq!(digest.server_total.len(), ok as u64);
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("The server's own account"));
    for series in ["client E2E", "server total", "server decode"] {
        assert!(page.contains(series), "{series}");
    }
    let plain = run_folder("profile: tiny", "report-openai").await;
    let page = std::fs::read_to_string(plain.join("report.html")).unwrap();
    assert!(
        !page.contains("The server's own account"),
        "nothing reported"
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(plain).unwrap();
}

fn compare(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redline"))
        .arg("compare")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_finds_a_slower_server_and_not_a_rerun() {
    // The fast run first, so the two runs compared with each other both find the
    // process warm (a first run pays for cold caches and pools). The rerun runs beside
    // its baseline, at the same time: on a busy machine two runs one after the other
    // meet different loads, and the comparison rightly finds that difference.
    let fast = run_folder("profile: tiny", "compare-fast").await;
    let (a, b) = tokio::join!(
        run_folder("profile: 7b", "compare-a"),
        run_folder("profile: 7b", "compare-b")
    );
    let [fast, a, b] = [&fast, &a, &b].map(|p| p.to_str().unwrap().to_owned());

    // The same spec twice: no TTFT percentile beyond noise, the gate passes; p99 of
    // about 60 requests is not judged at all (nor p90, with 6 samples above it).
    let (code, out) = compare(&[&a, &b, "--fail-on", "ttft.p50 > +10%"]);
    assert_eq!(code, 0, "{out}");
    for line in out.lines().filter(|l| l.trim_start().starts_with("ttft.")) {
        let judged: &[&str] = match line.trim_start() {
            l if l.starts_with("ttft.p50") => &["within noise"],
            l if l.starts_with("ttft.p99") => &["too few samples"],
            _ => &["within noise", "too few samples"],
        };
        assert!(judged.iter().any(|j| line.ends_with(j)), "{line}\n{out}");
    }

    // A slower model than the baseline's: TTFT flagged as a rise, the gate exits 1.
    let html = format!("{b}/compare.html");
    let (code, out) = compare(&[&fast, &b, "--fail-on", "ttft.p50 > +10%", "--html", &html]);
    assert_eq!(code, 1, "{out}");
    let ttft = out
        .lines()
        .find(|l| l.trim_start().starts_with("ttft.p50"))
        .unwrap();
    assert!(ttft.ends_with("slower"), "{ttft}");
    assert!(
        out.contains("FAIL") && out.contains("ttft.p50 > +10%"),
        "{out}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"data-verdict="ttft.p50">slower"#));

    // A malformed rule is a usage error that says how to write one.
    let (code, _) = compare(&[&a, &b, "--fail-on", "latency > 10"]);
    assert_eq!(code, 2);
}
