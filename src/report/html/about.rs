//! What the run was: a few of its exchanges, the command line, the spec, and the
//! versions that built the page.

use std::fmt::Write;

use super::digest::Digest;
use super::parts::{section, wire_name};
use super::svg::{escape, num};
use crate::report::Summary;

/// The first requests' prompts and answers (cut short; never headers or keys).
pub fn samples(summary: &Summary) -> Option<String> {
    if summary.samples.is_empty() {
        return None;
    }
    let mut body = String::from(
        r#"<p class="note">The first requests of the run as sent and answered, each cut to 600 characters.</p>"#,
    );
    for sample in &summary.samples {
        let outcome = wire_name(sample.outcome);
        let mut facts = vec![format!("request {}", sample.seq), outcome];
        if let Some(ms) = sample.ttft_ms {
            facts.push(format!("TTFT {} ms", num(ms)));
        }
        if let Some(tokens) = sample.output_tokens {
            facts.push(format!("{tokens} output tokens"));
        }
        let _ = write!(
            body,
            r#"<div class="exchange" data-seq="{}"><h3>{}</h3><pre class="prompt">{}</pre><pre class="answer">{}</pre></div>"#,
            sample.seq,
            escape(&facts.join(" · ")),
            escape(&sample.prompt),
            if sample.answer.is_empty() {
                "(no answer)".to_owned()
            } else {
                escape(&sample.answer)
            }
        );
    }
    Some(section("samples", "Sample exchanges", &body))
}

/// Specs up to this many lines are shown open; longer ones fold.
const OPEN_SPEC_LINES: usize = 60;

pub fn about(summary: &Summary, digest: &Digest) -> String {
    let mut body = String::new();
    if let Some(run) = &summary.invocation {
        let _ = write!(
            body,
            r#"<p>Run by redline {} as:</p><pre id="command">{}</pre>"#,
            escape(&run.redline),
            escape(&run.command)
        );
        let what = match &run.spec_path {
            Some(path) => format!("The spec, <code>{}</code>", escape(path)),
            None => "The spec the command line's shorthands made".to_owned(),
        };
        let open = if run.spec.lines().count() <= OPEN_SPEC_LINES {
            " open"
        } else {
            ""
        };
        let _ = write!(
            body,
            r#"<details{open}><summary>{what} (header values and keys hidden)</summary><pre id="spec">{}</pre></details>"#,
            escape(&run.spec)
        );
    }
    let _ = write!(
        body,
        "<p class=\"note\">Page by redline {} · summary schema {} · {} records read · built from <code>summary.json</code> and <code>records.jsonl</code>; <code>redline report DIR</code> builds it again.</p>",
        env!("CARGO_PKG_VERSION"),
        summary.schema_version,
        digest.records
    );
    section("about", "About this run", &body)
}
