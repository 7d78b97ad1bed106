//! A synthetic run's records and summary, for tests and benches that need a big run
//! without running one (`#[path]`-included by `benches/report.rs`).

use std::path::Path;

use redline::record::{FailStage, Outcome, Phase, Record};
use redline::report::{RunInfo, Summary, summarize};

/// The records of a steady chat run of `requests`, 5 ms apart and `tokens` tokens
/// each, every 97th a 503, written to `dir/records.jsonl`; and its summary.
pub fn chat_run(dir: &Path, requests: u64, tokens: u32) -> Summary {
    let text = std::fs::read_to_string("tests/fixtures/snapshot-chat.yaml").unwrap();
    let file = redline::spec::parse("snapshot-chat.yaml", &text).unwrap();
    let scenario = redline::scenario::Scenario::from_spec(&file, &text).unwrap();
    let mut aggregator = scenario.aggregator();
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(dir.join("records.jsonl")).unwrap());
    for seq in 0..requests {
        let intended = seq * 5_000;
        let mut r = Record::unsent(seq, 0, Phase::Measure, intended);
        r.sent_us = Some(intended + 50);
        if seq % 97 == 0 {
            r.fail(Outcome::Error, FailStage::FirstByte, "http_5xx", "503");
        } else {
            r.status = Some(200);
            r.first_token_us = Some(intended + 20_000 + seq % 7_000);
            r.itl_us = vec![12_000 + (seq % 900) as u32; tokens as usize - 1];
            r.content_events = tokens;
            r.last_byte_us = Some(r.first_token_us.unwrap() + 12_000 * u64::from(tokens - 1));
            r.input_tokens = Some(200);
            r.output_tokens = Some(tokens);
        }
        aggregator.add(&r);
        serde_json::to_writer(&mut out, &r).unwrap();
        std::io::Write::write_all(&mut out, b"\n").unwrap();
    }
    drop(out);
    summarize(
        &aggregator,
        RunInfo {
            name: "synthetic",
            target: "http://127.0.0.1:8000",
            model: "m",
            interrupted: false,
            warnings: Vec::new(),
            elapsed_s: requests as f64 * 0.005,
            stages: Vec::new(),
            dataset: None,
            server_metrics: None,
            verdicts: None,
            aborted: None,
            proxies: Vec::new(),
            traces: None,
            token_settlement: None,
        },
    )
}
