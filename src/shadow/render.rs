//! The diff for a terminal: what the candidate changed, by significance, with the
//! module each belongs to; then what was noise and ignored.

use std::fmt::Write;

use super::diff::{DiffReport, FieldKind, FieldVerdict};

/// Noise fields listed at most (the rest are counted).
const NOISE_SHOWN: usize = 12;

pub fn terminal(report: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "redline replay: {} requests from {}; noise baseline: {}",
        report.requests, report.recording, report.noise_baseline
    );
    for (side, counts) in &report.sides {
        let failures: Vec<String> = counts
            .failures
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {side:<10} {:<32} ok {:>6}  failed {:>6}{}",
            counts.url,
            counts.ok,
            counts.failed,
            if failures.is_empty() {
                String::new()
            } else {
                format!("  ({})", failures.join(", "))
            }
        );
    }
    for skipped in &report.skipped {
        let _ = writeln!(out, "  {skipped}");
    }
    if report.flagged.is_empty() {
        let _ = writeln!(out, "\nNo field differs beyond the noise.");
    } else {
        let _ = writeln!(out, "\nFlagged ({}), largest first:", report.flagged.len());
        for verdict in &report.flagged {
            flagged_line(&mut out, verdict);
        }
        let modules: Vec<String> = report
            .modules
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect();
        let _ = writeln!(out, "By module: {}", modules.join(", "));
    }
    if !report.noise.is_empty() {
        let _ = writeln!(out, "\nNoise, ignored (differs as much in the baseline):");
        for verdict in report.noise.iter().take(NOISE_SHOWN) {
            let _ = writeln!(
                out,
                "  {:<44} baseline {:>6.1} %  candidate {:>6.1} %",
                short(verdict),
                verdict.noise * 100.0,
                verdict.candidate * 100.0
            );
        }
        if report.noise.len() > NOISE_SHOWN {
            let _ = writeln!(out, "  … and {} more", report.noise.len() - NOISE_SHOWN);
        }
    }
    let _ = writeln!(
        out,
        "\n{} fields within the margins, {} the same on every request.",
        report.within.len(),
        report.same
    );
    out
}

fn short(verdict: &FieldVerdict) -> String {
    let path = verdict.endpoint.split(' ').nth(1).unwrap_or("");
    format!("{path} {}", verdict.field)
}

fn flagged_line(out: &mut String, v: &FieldVerdict) {
    let module = v.module.as_deref().unwrap_or("unattributed");
    let figures = match v.kind {
        FieldKind::Timing => format!(
            "median ×{:.2} (baseline ×{:.2}, 95 % CI ×{:.2}–×{:.2})",
            v.candidate, v.noise, v.interval[0], v.interval[1]
        ),
        _ => format!(
            "{:.1} % vs baseline {:.1} % (difference 95 % CI {:+.1} to {:+.1} pts)",
            v.candidate * 100.0,
            v.noise * 100.0,
            v.interval[0] * 100.0,
            v.interval[1] * 100.0
        ),
    };
    let _ = writeln!(
        out,
        "  [{module}] {} — {figures}, p = {:.1e}",
        short(v),
        v.p_value
    );
    let _ = writeln!(out, "      {}: {}", v.measure, v.detail);
    if let Some(example) = v.examples.first() {
        let _ = writeln!(
            out,
            "      e.g. trace {}: primary {} → candidate {}",
            example.trace_id, example.primary, example.candidate
        );
    }
}
