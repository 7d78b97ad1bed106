//! The load's stages as written, checked: open and closed loops, sweeps, replays.

use super::*;

/// The stages of `load` (or the `qpsTarget` shorthand).
pub(super) fn stages_from_spec(
    spec: &InferenceSpec,
    spec_dir: &Path,
    feedback: Option<&feedback::FeedbackPlan>,
    problems: &mut Problems,
) -> (Vec<Stage>, Vec<TracePrompts>) {
    let mut stages = Vec::new();
    let mut traces = Vec::new();
    if let Some(plan) = feedback {
        // One Poisson stage at the live total rate; its `rate` is where it starts.
        let rate = plan.initial_rates().iter().sum();
        let duration = Some(plan.duration);
        stages.push(Stage::Open(OpenStage {
            arrival: ArrivalProcess::Poisson,
            rate,
            ramp_to: None,
            duration,
            requests: None,
            max_concurrency: None,
        }));
        return (stages, traces);
    }
    match (spec.qps_target, spec.load.is_empty()) {
        (Some(_), false) => problems.add("spec.qpsTarget", "cannot be combined with `load`".into(), Some("keep one: `qpsTarget` + `duration`, or `load` stages".into())),
        (Some(rate), true) if !(rate.is_finite() && rate > 0.0) => problems.add("spec.qpsTarget", format!("must be a positive number, got {rate}"), None),
        (Some(rate), true) => match spec.duration {
            Some(d) => stages.push(Stage::Open(OpenStage { arrival: ArrivalProcess::Constant, rate, ramp_to: None, duration: Some(d.0), requests: None, max_concurrency: None })),
            None => problems.add("spec.qpsTarget", "needs a `duration`".into(), Some("add e.g. `duration: 60s` beside it".into())),
        },
        (None, true) if spec.feedback.is_some() => {} // reported with the feedback
        (None, true) => problems.add("spec.load", "no load: nothing to run".into(), Some("add stages, e.g. `load: [{ arrival: poisson, rate: 10, duration: 30s }]`, or `qpsTarget` + `duration`".into())),
        (None, false) => {
            for (i, stage) in spec.load.iter().enumerate() {
                match stage_from_spec(stage, spec_dir, &mut traces) {
                    Ok(stage) => stages.push(stage),
                    Err(problem) => problems.push(problem.under(&format!("spec.load[{i}]"))),
                }
            }
        }
    }
    let planned: Option<Duration> = stages.iter().map(Stage::duration).sum();
    if !spec.cooldown.0.is_zero() && planned.is_none() {
        problems.add(
            "spec.cooldown",
            "needs every stage to have a `duration`, to know when the end is".into(),
            None,
        );
    }
    (stages, traces)
}

/// The first field that is set but means nothing for this kind of stage, as a problems.
pub(super) fn reject_set(
    fields: &[(bool, &'static str)],
    message: &str,
    fix: &str,
) -> Result<(), Problem> {
    match fields.iter().find(|(set, _)| *set) {
        Some((_, field)) => Err(Problem::new(*field, message.into(), Some(fix.into()))),
        None => Ok(()),
    }
}

/// One stage; a replay's prompts go to `traces`, which the stage names by index.
pub(super) fn stage_from_spec(
    s: &StageSpec,
    spec_dir: &Path,
    traces: &mut Vec<TracePrompts>,
) -> Result<Stage, Problem> {
    if let Some(replay) = &s.replay {
        return replay_stage(s, replay, spec_dir, traces);
    }
    if s.duration.is_none() && s.requests.is_none() {
        return Err(Problem::new(
            "",
            "a stage needs a `duration` or a `requests` budget".into(),
            Some("add e.g. `duration: 30s`".into()),
        ));
    }
    if s.requests == Some(0) {
        return Err(Problem::new(".requests", "must be at least 1".into(), None));
    }
    let duration = s.duration.map(|d| d.0);
    if let Some(sweep) = s.sweep {
        return sweep_stage(s, sweep, duration);
    }
    match (s.rate, s.concurrency) {
        (Some(_), Some(_)) => Err(Problem::new("", "has both `rate` (open loop) and `concurrency` (closed loop)".into(), Some("keep one: `rate` for a target request rate, `concurrency` for N sessions back to back".into()))),
        (None, None) => Err(Problem::new("", "needs `rate` (open loop) or `concurrency` (closed loop)".into(), Some("add e.g. `rate: 10` or `concurrency: 8`".into()))),
        (Some(rate), None) => open_stage(s, rate, duration),
        (None, Some(concurrency)) => closed_stage(s, concurrency, duration),
    }
}

pub(super) fn replay_stage(
    s: &StageSpec,
    replay: &crate::spec::ReplaySpec,
    spec_dir: &Path,
    traces: &mut Vec<TracePrompts>,
) -> Result<Stage, Problem> {
    reject_set(
        &[
            (s.rate.is_some(), ".rate"),
            (s.concurrency.is_some(), ".concurrency"),
            (s.sweep.is_some(), ".sweep"),
            (s.duration.is_some(), ".duration"),
            (s.requests.is_some(), ".requests"),
            (s.arrival.is_some(), ".arrival"),
            (s.ramp_to.is_some(), ".ramp_to"),
            (s.burstiness.is_some(), ".burstiness"),
            (s.think_time.is_some(), ".think_time"),
            (s.max_concurrency.is_some(), ".max_concurrency"),
        ],
        "does not apply to a `replay`, which takes its times and count from the trace",
        "remove it, or make it a stage of its own",
    )?;
    let speed = replay.speed.unwrap_or(1.0);
    if !(speed.is_finite() && speed > 0.0) {
        return Err(Problem::new(
            ".replay.speed",
            format!("must be a positive number, got {speed}"),
            None,
        ));
    }
    let block_tokens = replay.block_tokens.unwrap_or(512);
    if block_tokens == 0 {
        return Err(Problem::new(
            ".replay.block_tokens",
            "must be at least 1".into(),
            None,
        ));
    }
    let trace = crate::workload::mooncake::read(&spec_dir.join(&replay.file), block_tokens)
        .map_err(|e| Problem::new(".replay.file", e, None))?;
    traces.push(trace.prompts);
    Ok(Stage::Replay(ReplayStage {
        offsets: std::sync::Arc::new(trace.offsets),
        speed,
        trace: traces.len() - 1,
        file: replay.file.display().to_string(),
    }))
}

pub(super) fn sweep_stage(
    s: &StageSpec,
    sweep: crate::spec::SweepSpec,
    duration: Option<Duration>,
) -> Result<Stage, Problem> {
    reject_set(
        &[
            (s.rate.is_some(), ".rate"),
            (s.concurrency.is_some(), ".concurrency"),
            (s.ramp_to.is_some(), ".ramp_to"),
            (s.think_time.is_some(), ".think_time"),
            (s.max_concurrency.is_some(), ".max_concurrency"),
        ],
        "does not apply to a `sweep`, which finds its own rates",
        "remove it, or make it a stage of its own",
    )?;
    if sweep.rates == 0 {
        return Err(Problem::new(
            ".sweep.rates",
            "must be at least 1".into(),
            None,
        ));
    }
    if sweep.throughput_concurrency == 0 {
        return Err(Problem::new(
            ".sweep.throughput_concurrency",
            "must be at least 1".into(),
            None,
        ));
    }
    let arrival = arrival_from_spec(s)?;
    Ok(Stage::Sweep(SweepStage {
        arrival,
        rates: sweep.rates,
        throughput_concurrency: sweep.throughput_concurrency,
        duration,
        requests: s.requests,
    }))
}

pub(super) fn open_stage(
    s: &StageSpec,
    rate: f64,
    duration: Option<Duration>,
) -> Result<Stage, Problem> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(Problem::new(
            ".rate",
            format!("must be a positive number, got {rate}"),
            None,
        ));
    }
    if s.think_time.is_some() {
        return Err(Problem::new(
            ".think_time",
            "applies only to closed-loop stages".into(),
            Some("remove it, or use `concurrency`".into()),
        ));
    }
    let arrival = arrival_from_spec(s)?;
    if let Some(to) = s.ramp_to {
        if !(to.is_finite() && to >= 0.0) {
            return Err(Problem::new(
                ".ramp_to",
                format!("must be a rate >= 0, got {to}"),
                None,
            ));
        }
        if duration.is_none() {
            return Err(Problem::new(
                ".ramp_to",
                "a ramp needs a `duration`".into(),
                None,
            ));
        }
    }
    if s.max_concurrency == Some(0) {
        return Err(Problem::new(
            ".max_concurrency",
            "must be at least 1".into(),
            None,
        ));
    }
    Ok(Stage::Open(OpenStage {
        arrival,
        rate,
        ramp_to: s.ramp_to,
        duration,
        requests: s.requests,
        max_concurrency: s.max_concurrency,
    }))
}

pub(super) fn closed_stage(
    s: &StageSpec,
    concurrency: u32,
    duration: Option<Duration>,
) -> Result<Stage, Problem> {
    if concurrency == 0 {
        return Err(Problem::new(
            ".concurrency",
            "must be at least 1".into(),
            None,
        ));
    }
    reject_set(
        &[
            (s.arrival.is_some(), ".arrival"),
            (s.ramp_to.is_some(), ".ramp_to"),
            (s.burstiness.is_some(), ".burstiness"),
            (s.max_concurrency.is_some(), ".max_concurrency"),
        ],
        "applies only to open-loop (`rate`) stages",
        "remove it, or use `rate` instead of `concurrency`",
    )?;
    Ok(Stage::Closed(ClosedStage {
        concurrency,
        think_time: s.think_time.map_or(Duration::ZERO, |d| d.0),
        duration,
        requests: s.requests,
    }))
}

/// The arrival process of an open stage or a sweep (default poisson).
pub(super) fn arrival_from_spec(s: &StageSpec) -> Result<ArrivalProcess, Problem> {
    Ok(
        match (s.arrival.unwrap_or(ArrivalKind::Poisson), s.burstiness) {
            (ArrivalKind::Gamma, Some(b)) if !(b.is_finite() && b > 0.0) => {
                return Err(Problem::new(
                    ".burstiness",
                    format!("must be a positive number, got {b}"),
                    None,
                ));
            }
            (ArrivalKind::Gamma, b) => ArrivalProcess::Gamma {
                burstiness: b.unwrap_or(1.0),
            },
            (_, Some(_)) => {
                return Err(Problem::new(
                    ".burstiness",
                    "applies only to `arrival: gamma`".into(),
                    Some("set `arrival: gamma`, or remove `burstiness`".into()),
                ));
            }
            (ArrivalKind::Constant, None) => ArrivalProcess::Constant,
            (ArrivalKind::Poisson, None) => ArrivalProcess::Poisson,
        },
    )
}
