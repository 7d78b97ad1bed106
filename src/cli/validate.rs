//! `redline validate`: what a spec would run, without running it.

use super::*;

pub(super) fn validate(path: &std::path::Path) -> Result<i32> {
    match load_scenario(path)? {
        Ok(scenario) => {
            outln!(
                "{}: valid — {} stage(s) against {}",
                path.display(),
                scenario.stages.len(),
                scenario.service().name
            );
            for (i, stage) in scenario.stages.iter().enumerate() {
                outln!("  stage {i}: {}", stage.describe(scenario.unit()));
            }
            match scenario.planned_duration() {
                Some(planned) => outln!("  planned: {:.1}s", planned.as_secs_f64()),
                None => outln!("  planned: bounded by request counts, not time"),
            }
            if let Some(session) = &scenario.session {
                outln!(
                    "  sessions: {} turns each, {:?} think time; rates count sessions",
                    session.turns.describe(),
                    session.think_time
                );
            }
            if let Some(slos) = &scenario.slos {
                outln!(
                    "  SLOs ({:.0}% one-sided bounds{}):",
                    slos.confidence * 100.0,
                    if slos.abort_on_fail {
                        format!("; abort_on_fail after {:?}", slos.delay)
                    } else {
                        String::new()
                    }
                );
                for slo in &slos.slos {
                    outln!("    {} {}", slo.name, slo.expression);
                }
            }
            for warning in scenario.warnings() {
                outln!("  note: {warning}");
            }
            if let Some(flow) = &scenario.flow {
                let steps: Vec<String> = flow
                    .steps
                    .iter()
                    .map(|s| format!("{} ({} → {})", s.name, s.kind.name(), s.service))
                    .collect();
                outln!("  flow: {}", steps.join(" · "));
                outln!(
                    "  circuit breaker: after {} consecutive tool timeouts",
                    flow.breaker
                );
            }
            for rule in &scenario.faults {
                outln!(
                    "  fault: {} ({}) in front of {}",
                    rule.spec.name,
                    rule.fault.kind(),
                    rule.spec.service.as_deref().unwrap_or_default()
                );
            }
            if let Some(plan) = scenario.streaming.as_ref().filter(|p| !p.watch.is_empty()) {
                let watch: Vec<String> = plan.watch.iter().map(ToString::to_string).collect();
                outln!(
                    "  streaming SLOs: {} over {}s windows every {}s on {}",
                    plan.rule.name(),
                    plan.window.as_secs_f64(),
                    plan.step.as_secs_f64(),
                    watch.join(", ")
                );
            }
            for t in scenario.streaming.iter().flat_map(|p| &p.thresholds) {
                let limit = t.series.unit().limit(t.rule.limit);
                outln!(
                    "  windowed SLO: {} over {}s windows every {}s, {} in a row past {limit}",
                    t.slo,
                    t.window.as_secs_f64(),
                    t.step.as_secs_f64(),
                    t.rule.windows,
                );
            }
            Ok(exit::OK)
        }
        Err(errors) => {
            err(&errors.to_string());
            Ok(exit::USAGE)
        }
    }
}
