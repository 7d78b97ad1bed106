//! The terminal report: the header printed before a run and the tables after it.

use super::*;
use crate::slo::{Aborted, Verdict};

/// The gate's table: each SLO with its outcome, the observed value, the bound that
/// decided it and the samples behind it.
pub(super) fn render_verdicts(
    verdicts: &[Verdict],
    aborted: Option<&Aborted>,
    line: &mut impl FnMut(String),
) {
    let confidence = verdicts.first().map_or(0.95, |v| v.confidence);
    line(String::new());
    line(format!(
        "  {:<40}{:<12}{:>14}{:>14}{:>10}",
        format!("SLO ({:.0}% one-sided bounds)", confidence * 100.0),
        "verdict",
        "observed",
        "bound",
        "samples"
    ));
    let figure = |x: Option<f64>, unit: &str| {
        x.map_or("n/a".to_owned(), |x| match unit {
            "%" => format!("{x:.4}%"),
            _ => format!("{x:.2} {unit}"),
        })
    };
    for v in verdicts {
        let outcome = match v.outcome {
            Judgement::Pass => "pass",
            Judgement::Fail => "FAIL",
            Judgement::NotProven => "not proven",
        };
        let mut extra = String::new();
        if let Some(more) = v.samples_to_decide {
            extra = format!("  ~{more} more samples would decide it");
        }
        if let Some(note) = &v.note {
            extra.push_str(&format!("  ({note})"));
        }
        line(format!(
            "  {:<40}{outcome:<12}{:>14}{:>14}{:>10}{extra}",
            format!("{} {}", v.slo, v.expression),
            figure(v.observed, v.unit.as_str()),
            figure(v.bound, v.unit.as_str()),
            v.samples,
        ));
    }
    if let Some(a) = aborted.filter(|a| a.episode.is_none()) {
        let names: Vec<String> = a
            .breaches
            .iter()
            .map(|v| format!("{} {}", v.slo, v.expression))
            .collect();
        line(format!(
            "  aborted at {:.1}s (abort_on_fail): certain to fail: {}",
            a.at_s,
            names.join(", ")
        ));
    }
}

/// What one open-loop stage offered against what succeeded, and whether the server
/// kept up (a multi-stage run has this in its stage table).
pub(super) fn render_offered(stage: &StageSummary, line: &mut impl FnMut(String)) {
    let Some(offered) = stage.offered_rate_per_s else {
        return;
    };
    let achieved = stage.achieved_rate_per_s;
    if stage.offered_sessions {
        line(format!(
            "  offered {offered:.2} sessions/s (each several requests) · {achieved:.2} requests/s succeeded"
        ));
    } else {
        let behind = if achieved < offered * 0.9 {
            " — the server did not keep up"
        } else {
            ""
        };
        line(format!(
            "  offered {offered:.2} req/s · achieved {achieved:.2} req/s ok{behind}"
        ));
    }
}

/// The per-stage table, and a sweep's knee.
pub(super) fn render_stages(s: &Summary, line: &mut impl FnMut(String)) {
    line(String::new());
    let graded = s.stages.iter().any(|st| st.quality.is_some());
    line(format!(
        "  {:<7}{:<13}{:>10}{:>10}{:>8}{:>8}{:>11}{:>11}{:>10}{:>10}{}{}",
        "stage",
        "",
        "offered/s",
        "ok/s",
        "ok",
        "failed",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "E2E p99",
        if s.goodput.is_some() { "    good" } else { "" },
        if graded { "  accuracy  unparsed" } else { "" }
    ));
    let knee = s.sweep.as_ref().and_then(|sw| sw.knee_stage);
    for (i, st) in s.stages.iter().enumerate() {
        let role = match st.sweep {
            Some(SweepRole::Synchronous) => "synchronous",
            Some(SweepRole::Throughput) => "throughput",
            Some(SweepRole::Rate) => "rate",
            None => "",
        };
        let offered = st
            .offered_rate_per_s
            .map_or("-".to_owned(), |r| format!("{r:.2}"));
        let marker = if knee == Some(i) { "  ← knee" } else { "" };
        let good = st
            .goodput_ratio
            .map_or(String::new(), |r| format!("{:>7.1}%", r * 100.0));
        let answers = match (&st.quality, graded) {
            (Some(q), _) => format!(
                "{:>9.1}%{:>9.1}%",
                q.accuracy * 100.0,
                q.unparsed_rate * 100.0
            ),
            (None, true) => format!("{:>10}{:>10}", "-", "-"),
            (None, false) => String::new(),
        };
        line(format!(
            "  {i:<7}{role:<13}{offered:>10}{:>10.2}{:>8}{:>8}{:>11.2}{:>11.2}{:>10.2}{:>10.2}{good}{answers}{marker}",
            st.achieved_rate_per_s,
            st.requests.ok,
            st.requests.failed(),
            st.ttft_from_intended_ms.p50,
            st.ttft_from_intended_ms.p99,
            st.itl_ms.p50,
            st.e2e_ms.p99,
        ));
    }
    if let Some(sweep) = &s.sweep {
        if !sweep.scales {
            let rate_of = |role| {
                s.stages
                    .iter()
                    .find(|st| st.sweep == Some(role))
                    .map_or(0.0, |st| st.achieved_rate_per_s)
            };
            line(format!(
                "  the server does not scale with concurrency: the throughput point completed {:.2} req/s, one at a time {:.2} — it serves one request at a time (llama.cpp does), or one saturates it; the rates ran from half to all of the higher",
                rate_of(SweepRole::Throughput),
                rate_of(SweepRole::Synchronous)
            ));
        }
        match sweep.knee_rate_per_s {
            Some(rate) if sweep.every_rate_sustained => line(format!(
                "  knee: at or above {rate:.2} req/s — every rate point was sustained ({}); the throughput point reached {:.2}",
                sweep.rule,
                s.stages
                    .iter()
                    .find(|st| st.sweep == Some(SweepRole::Throughput))
                    .map_or(0.0, |st| st.achieved_rate_per_s)
            )),
            Some(rate) => line(format!(
                "  knee: {rate:.2} req/s, the highest rate sustained ({})",
                sweep.rule
            )),
            None => line(format!(
                "  knee: none — no rate point was sustained ({})",
                sweep.rule
            )),
        }
    }
    line("  (TTFT here is from the intended start; ms)".into());
}

/// The lines printed before a run starts: the target, the stages, the planned time.
pub fn render_header(h: &crate::results::Header) -> String {
    // A service without a model (MCP, plain HTTP) names none.
    let model = if h.model.is_empty() {
        String::new()
    } else {
        format!(" ({})", h.model)
    };
    let mut out = format!("redline · {} → {}{model}\n", h.name, h.target);
    for (i, stage) in h.stages.iter().enumerate() {
        out.push_str(&format!("  stage {i}: {stage}\n"));
    }
    if let Some(planned) = h.planned {
        out.push_str(&format!("  planned: {:.1}s\n", planned.as_secs_f64()));
    }
    for note in &h.notes {
        out.push_str(&format!("  note: {note}\n"));
    }
    out
}

/// ` (output counts: 30 by content events (one token each))`, when not all came from
/// the server's usage.
pub(super) fn token_sources_text(
    sources: &std::collections::BTreeMap<crate::record::TokenSource, u64>,
) -> String {
    crate::record::describe_sources(sources)
        .map_or(String::new(), |s| format!(" (output counts: {s})"))
}

/// How the counts of answers without usage were settled, in a line.
pub(super) fn settlement_text(s: &crate::record::TokenSettlement) -> String {
    use crate::record::TokenSource::*;
    let evidence = format!(
        "{} of the answers cut by max_tokens had exactly max_tokens content events, {} did not",
        s.events_agree, s.events_disagree
    );
    let how = match s.source {
        Events => format!("counted by their content events, one token each ({evidence})"),
        ServerTokenizer => format!(
            "counted by the server's tokenizer at {} after the run",
            s.server_tokenizer.as_deref().unwrap_or("?")
        ),
        _ => format!(
            "counted locally: no one-token-per-event evidence ({evidence}) and no server tokenizer found"
        ),
    };
    format!(
        "  token counts: {} answers came without usage; {how}",
        s.uncounted
    )
}

/// The terminal summary, printed under the header once the run has ended.
/// Why a failed flow run's sessions breached: the top causes, or why there are none.
fn render_explanation(e: &crate::explain::Explanation, line: &mut impl FnMut(String)) {
    let a = &e.attribution;
    line(String::new());
    line(format!(
        "  why (redline explain: the {} breaching sessions against all {}):",
        a.incident_traces, a.baseline_traces
    ));
    if e.causes.is_empty() {
        line(format!(
            "    {}",
            e.no_cause.as_deref().unwrap_or("no cause")
        ));
    }
    for (rank, cause) in e.causes.iter().enumerate() {
        line(format!("    {}. {}", rank + 1, cause.suggestion));
    }
    line(
        "    (every node, with intervals: explain.json, or `redline explain` on the run folder)"
            .into(),
    );
}

pub fn render_terminal(s: &Summary) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    render_totals(s, &mut line);
    if s.stages.len() > 1 {
        render_stages(s, &mut line);
    } else if let Some(stage) = s.stages.first() {
        render_offered(stage, &mut line);
    }
    render_latency(s, &mut line);
    render_tokens_and_server(s, &mut line);
    if let Some(f) = &s.flow {
        chain::render_flow(f, &mut line);
    }
    if !s.media.is_empty() {
        super::media::render_media(&s.media, &mut line);
    }
    if let Some(m) = &s.mcp {
        super::mcp::render_mcp(m, &mut line);
    }
    if let Some(f) = &s.feedback {
        super::media::render_feedback(f, &mut line);
    }
    if let Some(t) = &s.traces {
        chain::render_traces(t, &mut line);
    }
    if let Some(f) = &s.faults {
        chain::render_faults(f, &mut line);
    }
    render_prefixes_and_turns(s, &mut line);
    if let Some(verdicts) = &s.verdicts {
        render_verdicts(verdicts, s.aborted.as_ref(), &mut line);
    }
    if let Some(d) = &s.drift {
        super::drift::render_drift(d, s.aborted.as_ref(), &mut line);
    }
    if let Some(a) = &s.disruptions {
        super::availability::render_availability(a, &mut line);
    }
    if let Some(e) = &s.explain {
        render_explanation(e, &mut line);
    }
    render_errors(s, &mut line);
    out
}

/// Counts, warnings, the default gate, the measured window, the dataset, goodput.
pub(super) fn render_totals(s: &Summary, line: &mut impl FnMut(String)) {
    let r = &s.requests;
    let state = if s.interrupted {
        "  (interrupted: partial results)"
    } else {
        ""
    };
    line(format!(
        "  requests: {} scheduled · {} ok · {} failed · {} timed out · {} cancelled · {} dropped   ({:.1}s){state}",
        r.scheduled, r.ok, r.error, r.timeout, r.cancelled, r.dropped, s.elapsed_s
    ));
    for warning in &s.warnings {
        line(format!("  WARNING: {warning}"));
    }
    if let Some(gate) = s.default_gate.filter(|g| !g.passed) {
        line(format!(
            "  FAILED: {} of {} requests failed ({:.1}%; without SLOs at most {:.0}% may){} — exit 1; set sloThresholds to judge the run your way",
            gate.failed,
            gate.attempted,
            gate.failed as f64 * 100.0 / gate.attempted.max(1) as f64,
            gate.bound * 100.0,
            if s.requests.ok == 0 {
                ", and none succeeded"
            } else {
                ""
            }
        ));
    }
    let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{:.3}%", v * 100.0));
    line(format!(
        "  measured: {} requests over {:.1}s · {:.2} req/s{} · pass {} · availability {}",
        s.measured.scheduled,
        s.measured_window_s,
        s.throughput.requests_per_s,
        // Plain HTTP runs have no tokens: say nothing rather than "0.0 tok/s".
        if s.tokens.output_total > 0 {
            format!(
                " · {:.1} output tok/s · {:.1} total tok/s",
                s.throughput.output_tokens_per_s, s.throughput.total_tokens_per_s
            )
        } else {
            String::new()
        },
        pct(s.pass_rate),
        pct(s.availability)
    ));
    if let Some(d) = &s.dataset {
        line(format!(
            "  dataset: {} · {} records · {} used · {} invalid skipped · {} outside the length bounds",
            d.file, d.records, d.used, d.skipped_invalid, d.outside_length
        ));
    }
    if let Some(g) = &s.goodput {
        let bounds: Vec<String> = [
            ("TTFT", g.slo.ttft_ms),
            ("TPOT", g.slo.tpot_ms),
            ("E2E", g.slo.e2e_ms),
        ]
        .iter()
        .filter_map(|(name, ms)| ms.map(|ms| format!("{name} ≤ {ms} ms")))
        .collect();
        line(format!(
            "  goodput: {:.2} req/s · {} of measured requests within {}",
            g.per_s,
            pct(g.ratio),
            bounds.join(", ")
        ));
    }
}

/// The latency table.
pub(super) fn render_latency(s: &Summary, line: &mut impl FnMut(String)) {
    line(String::new());
    line(format!(
        "  {:<22}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "mean", "p50", "p90", "p95", "p99", "max"
    ));
    let l = &s.latency_ms;
    // Without reasoning, the first answer token is the first token: one row says it.
    let reasoned = s.reasoning.is_some();
    let none = crate::metrics::Dist::default();
    let when_reasoned = |d| if reasoned { d } else { &none };
    for (name, d) in [
        ("TTFT", &l.ttft),
        (
            "time to 1st reasoning",
            when_reasoned(&l.time_to_first_reasoning),
        ),
        ("time to 1st answer", when_reasoned(&l.time_to_first_answer)),
        ("reasoning", when_reasoned(&l.reasoning)),
        ("TTFT from intended", &l.ttft_from_intended),
        ("time to 2nd token", &l.time_to_second_token),
        ("ITL (pooled)", &l.itl),
        ("ITL (per request)", &l.itl_per_request),
        ("TPOT", &l.tpot),
        ("E2E", &l.e2e),
        ("E2E from intended", &l.e2e_from_intended),
        ("send lag", &l.send_lag),
    ] {
        if d.count > 0 {
            line(format!(
                "  {name:<22}{:>9}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}",
                d.count, d.mean, d.p50, d.p90, d.p95, d.p99, d.max
            ));
        }
    }
}

/// Token totals and where they came from, the server's ground truth and metrics.
pub(super) fn render_tokens_and_server(s: &Summary, line: &mut impl FnMut(String)) {
    let t = &s.tokens;
    if t.output_total > 0 || !t.sources.is_empty() {
        line(format!(
            "  tokens: input {} (mean {:.1}) · output {} (mean {:.1}){}",
            t.input_total,
            t.input.mean,
            t.output_total,
            t.output.mean,
            token_sources_text(&t.sources)
        ));
    }
    if let Some(settled) = &t.settlement {
        line(settlement_text(settled));
    }
    if let Some(r) = &s.reasoning {
        line(format!(
            "  reasoning: {} requests · reasoning tokens p50 {:.0}, p90 {:.0} · answer tokens p50 {:.0} · share of E2E p50 {:.1}%, p90 {:.1}%",
            r.requests,
            r.tokens.p50,
            r.tokens.p90,
            r.answer_tokens.p50,
            r.share_of_e2e_pct.p50,
            r.share_of_e2e_pct.p90
        ));
    }
    if let Some(q) = &s.quality {
        line(format!(
            "  graded: {} answers · accuracy {:.1}% (95% interval {:.1}–{:.1}%) · {} wrong · {} unparsed ({:.1}%)",
            q.graded,
            q.accuracy * 100.0,
            q.accuracy_interval[0] * 100.0,
            q.accuracy_interval[1] * 100.0,
            q.wrong,
            q.unparsed,
            q.unparsed_rate * 100.0
        ));
        if !q.buckets.is_empty() {
            let buckets: Vec<String> = q.buckets.iter().map(|(b, n)| format!("{n} {b}")).collect();
            line(format!(
                "    tool calls not correct: {}",
                buckets.join(" · ")
            ));
        }
    }
    if s.server.cache_write_tokens > 0 {
        line(format!(
            "  prompt cache: {} prompt tokens read from the cache, {} written to it",
            s.server.cached_prompt_tokens, s.server.cache_write_tokens
        ));
    }
    if s.server.ttft_client_overhead_ms.count > 0 {
        let o = &s.server.ttft_client_overhead_ms;
        line(format!(
            "  server truth: client TTFT − server TTFT p50 {:.3} ms, p99 {:.3} ms · {} preempted · {} cached prompt tokens",
            o.p50, o.p99, s.server.preempted_requests, s.server.cached_prompt_tokens
        ));
    }
    if let Some(reported) = &s.server.reported {
        let (total, beyond) = (&reported.total_ms, &reported.client_e2e_beyond_ms);
        line(format!(
            "  server's own account: total p50 {:.3} ms, p99 {:.3} ms ({} requests) · client E2E − server total p50 {:.3} ms, p99 {:.3} ms",
            total.p50, total.p99, total.count, beyond.p50, beyond.p99
        ));
    }
    if let Some(m) = &s.server_metrics {
        let max = |f: fn(&crate::prometheus::scrape::ServerSample) -> Option<f64>| {
            m.samples
                .iter()
                .filter_map(f)
                .fold(None, |acc: Option<f64>, v| {
                    Some(acc.map_or(v, |a| a.max(v)))
                })
        };
        let show = |v: Option<f64>, pct: bool| match v {
            Some(v) if pct => format!("{:.1}%", v * 100.0),
            Some(v) => format!("{v:.0}"),
            None => "n/a".to_owned(),
        };
        line(format!(
            "  server metrics ({}, {} scrapes, {} failed): max KV usage {} · max waiting {} · max running {} · prefix hit rate {}",
            m.url,
            m.samples.len(),
            m.failed_scrapes,
            show(max(|s| s.kv_cache_usage), true),
            show(max(|s| s.waiting), false),
            show(max(|s| s.running), false),
            show(m.prefix_hit_rate, true),
        ));
    }
}

/// The prefix cache's expected and reported hit share, and the per-turn table.
pub(super) fn render_prefixes_and_turns(s: &Summary, line: &mut impl FnMut(String)) {
    if let Some(p) = &s.prefix_cache {
        line(format!(
            "  prefix cache: expected hit share {:.1}% (prompt tokens repeating an earlier prefix) · server reports {}",
            p.expected_hit_share * 100.0,
            p.server_hit_share
                .map_or("nothing".to_owned(), |h| format!("{:.1}%", h * 100.0))
        ));
    }
    if !s.turns.is_empty() {
        line(String::new());
        line(format!(
            "  {:<6}{:>10}{:>8}{:>11}{:>11}{:>15}{:>9}",
            "turn", "requests", "ok", "TTFT p50", "TTFT p99", "prompt tokens", "cached"
        ));
        for t in &s.turns {
            line(format!(
                "  {:<6}{:>10}{:>8}{:>11.2}{:>11.2}{:>15.1}{:>8.1}%",
                t.turn,
                t.requests,
                t.ok,
                t.ttft_ms.p50,
                t.ttft_ms.p99,
                t.mean_prompt_tokens,
                t.cached_share * 100.0
            ));
        }
    }
}

/// Failures by stage and kind, with one example each.
pub(super) fn render_errors(s: &Summary, line: &mut impl FnMut(String)) {
    if !s.errors.is_empty() {
        line("  errors:".into());
        for e in &s.errors {
            let stage = serde_json::to_value(e.stage)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            line(format!(
                "    {:>7} × {stage}/{}: {}",
                e.count, e.kind, e.example
            ));
        }
    }
}
