//! JUnit XML of the verdicts, for CI pages: one testcase per SLO. A failed SLO is a
//! `<failure>` with the figures; a `not_proven` one is `<skipped>` — or a failure under
//! `--strict`, as the exit code has it.

use std::fmt::Write;

use super::{Judgement, Verdict};

/// The verdicts of run `name` as a JUnit XML document.
pub fn render(name: &str, verdicts: &[Verdict], strict: bool) -> String {
    let failed =
        |v: &Verdict| v.outcome == Judgement::Fail || (strict && v.outcome == Judgement::NotProven);
    let failures = verdicts.iter().filter(|v| failed(v)).count();
    let skipped = verdicts
        .iter()
        .filter(|v| !failed(v) && v.outcome == Judgement::NotProven)
        .count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let suite = escape(&format!("redline SLOs: {name}"));
    let _ = writeln!(
        out,
        "<testsuites name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">",
        verdicts.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"0\">",
        verdicts.len()
    );
    for v in verdicts {
        let case = escape(&format!("{} {}", v.slo, v.expression));
        let _ = write!(
            out,
            "    <testcase classname=\"redline.slo\" name=\"{case}\" time=\"0\""
        );
        let detail = escape(&describe(v));
        if failed(v) {
            let _ = writeln!(
                out,
                ">\n      <failure message=\"{detail}\" type=\"{}\">{detail}</failure>\n    </testcase>",
                outcome_name(v.outcome)
            );
        } else if v.outcome == Judgement::NotProven {
            let _ = writeln!(
                out,
                ">\n      <skipped message=\"{detail}\"/>\n    </testcase>"
            );
        } else {
            let _ = writeln!(out, "/>");
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

fn outcome_name(outcome: Judgement) -> &'static str {
    match outcome {
        Judgement::Pass => "pass",
        Judgement::Fail => "fail",
        Judgement::NotProven => "not_proven",
    }
}

/// One line with the figures behind a verdict.
pub fn describe(v: &Verdict) -> String {
    let figure = |x: Option<f64>| x.map_or("n/a".to_owned(), |x| format!("{x:.4} {}", v.unit));
    let mut text = format!(
        "{}: observed {}, {:.0}% bound {}, {} samples",
        outcome_name(v.outcome),
        figure(v.observed),
        v.confidence * 100.0,
        figure(v.bound),
        v.samples
    );
    if let Some(more) = v.samples_to_decide {
        let _ = write!(
            text,
            "; about {more} more would decide it at the observed value"
        );
    }
    if let Some(note) = &v.note {
        let _ = write!(text, " ({note})");
    }
    text
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(slo: &str, outcome: Judgement) -> Verdict {
        Verdict {
            slo: slo.into(),
            expression: "<= 350ms".into(),
            outcome,
            observed: Some(400.0),
            bound: Some(420.0),
            unit: crate::slo::ValueUnit::Ms,
            confidence: 0.95,
            samples: 1000,
            samples_to_decide: None,
            note: None,
        }
    }

    #[test]
    fn failures_carry_the_figures_and_strict_fails_the_unproven() {
        let verdicts = [
            verdict("ttft.p99", Judgement::Fail),
            verdict("e2e.p99", Judgement::Pass),
            verdict("tpot.p95", Judgement::NotProven),
        ];
        let xml = render("t", &verdicts, false);
        assert!(xml.contains("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""));
        assert!(xml.contains("name=\"ttft.p99 &lt;= 350ms\""));
        assert!(xml.contains("fail: observed 400.0000 ms, 95% bound 420.0000 ms, 1000 samples"));
        let strict = render("t", &verdicts, true);
        assert!(strict.contains("failures=\"2\" errors=\"0\" skipped=\"0\""));
    }
}
