//! Checking a fault rule as written (with the spec, or when the admin API or a rules
//! file brings it): every problem named under the rule's path, and the rule as the
//! proxy runs it.

use super::*;

/// The checks of one rule: its problems named under `at` (e.g. `rules[2]`).
struct RuleCheck<'a> {
    at: &'a str,
    found: Problems,
}

impl RuleCheck<'_> {
    fn add(&mut self, field: &str, message: String, fix: Option<&str>) {
        let path = if field.is_empty() {
            self.at.to_owned()
        } else {
            format!("{}.{field}", self.at)
        };
        self.found.add(&path, message, fix.map(str::to_owned));
    }

    /// `p`, after checking it is a probability.
    fn probability(&mut self, field: &str, p: f64) -> f64 {
        if !(0.0..=1.0).contains(&p) || p.is_nan() {
            self.add(
                &format!("{field}.probability"),
                format!("probability {p} is not between 0 and 1"),
                Some("write a chance per request: 0.05 for 5 %"),
            );
        }
        p
    }
}

impl RuleDef {
    /// Checks a rule as written; every problem is named under `at` (e.g. `rules[2]`).
    pub fn validate(spec: &FaultRuleSpec, at: &str) -> Result<RuleDef, Problems> {
        let mut problems = RuleCheck {
            at,
            found: Problems::new(),
        };
        if spec.name.trim().is_empty() {
            problems.add(
                "name",
                "a rule needs a name".into(),
                Some("name it: the report counts faults by rule name"),
            );
        }
        let fault = one_fault(spec, &mut problems);
        let path = match_path(spec, &mut problems);
        let method = spec.matches.method.as_ref().map(|m| m.to_uppercase());
        if let Some(method) = &method
            && hyper::Method::from_bytes(method.as_bytes()).is_err()
        {
            problems.add(
                "match.method",
                format!("`{method}` is not an HTTP method"),
                Some("write e.g. `POST`"),
            );
        }
        let window = spec.window.unwrap_or_default();
        if let Some(to) = window.to
            && to.0 <= window.from.0
        {
            problems.add(
                "window.to",
                format!(
                    "the window ends ({:?}) before it starts ({:?})",
                    to.0, window.from.0
                ),
                Some("make `to` later than `from`"),
            );
        }
        match fault {
            Some((probability, fault)) if problems.found.is_empty() => Ok(RuleDef {
                spec: spec.clone(),
                probability,
                path,
                method,
                headers: headers_lowercase(&spec.matches),
                mcp: spec.matches.mcp.clone(),
                window: (window.from.0, window.to.map(|d| d.0)),
                max: spec.max,
                fault,
            }),
            _ => Err(problems.found),
        }
    }
}

/// The rule's one fault and its probability, checked.
fn one_fault(spec: &FaultRuleSpec, problems: &mut RuleCheck) -> Option<(f64, Fault)> {
    let set: Vec<&str> = [
        spec.delay.is_some(),
        spec.abort.is_some(),
        spec.rate_limit.is_some(),
        spec.empty_result.is_some(),
        spec.stall_first_token.is_some(),
        spec.token_drip.is_some(),
        spec.cut_stream.is_some(),
        spec.corrupt_event.is_some(),
        spec.drop_done.is_some(),
        spec.bandwidth.is_some(),
        spec.slice.is_some(),
        spec.mcp_error.is_some(),
        spec.mcp_oversize.is_some(),
    ]
    .into_iter()
    .zip(FAULTS)
    .filter_map(|(is_set, name)| is_set.then_some(name))
    .collect();
    if set.len() != 1 {
        let message = if set.is_empty() {
            "the rule names no fault".to_owned()
        } else {
            format!("the rule names {} faults ({})", set.len(), set.join(", "))
        };
        let fix = format!(
            "give each rule exactly one of: {}; write several rules for several faults",
            FAULTS.join(", ")
        );
        problems.add("", message, Some(&fix));
    }
    if let Some(delay) = &spec.delay {
        let p = problems.probability("delay", delay.probability);
        return delay_dist(delay, problems).map(|d| (p, Fault::Delay(d, delay.at)));
    }
    if let Some(abort) = &spec.abort {
        let p = problems.probability("abort", abort.probability);
        return abort_how(abort, problems).map(|how| (p, Fault::Fixed(FixedFault::Abort(how))));
    }
    if let Some(limit) = &spec.rate_limit {
        return rate_limit(limit, problems).map(|fault| (1.0, fault));
    }
    if let Some(error) = &spec.mcp_error {
        let p = problems.probability("mcp_error", error.probability);
        let fault = FixedFault::McpError(error.code, error.message.clone());
        return Some((p, Fault::Fixed(fault)));
    }
    if let Some(oversize) = &spec.mcp_oversize {
        return mcp_oversize(spec, oversize, problems);
    }
    stream_fault(spec, problems)
}

/// An oversized `tools/list`: only for rules that match `tools/list`, whose result
/// it is, and no larger than a gigabyte, which the proxy builds in memory.
fn mcp_oversize(
    spec: &FaultRuleSpec,
    oversize: &crate::spec::faults::McpOversizeSpec,
    problems: &mut RuleCheck,
) -> Option<(f64, Fault)> {
    let p = problems.probability("mcp_oversize", oversize.probability);
    let lists_tools = spec
        .matches
        .mcp
        .as_ref()
        .is_some_and(|m| m.method.as_deref() == Some("tools/list"));
    if !lists_tools {
        problems.add(
            "mcp_oversize",
            "answers `tools/list` in the server's place, so the rule must match only it".into(),
            Some("add `match: { mcp: { method: tools/list } }`"),
        );
    }
    if oversize.bytes.0 == 0 || oversize.bytes.0 > 1 << 30 {
        problems.add(
            "mcp_oversize.bytes",
            format!("is {} bytes, not from 1 byte to 1GiB", oversize.bytes.0),
            Some("e.g. `bytes: 10MiB`"),
        );
    }
    Some((p, Fault::Fixed(FixedFault::McpOversize(oversize.bytes.0))))
}

/// The faults that shape an answer (and need no more than their own field checked).
fn stream_fault(spec: &FaultRuleSpec, problems: &mut RuleCheck) -> Option<(f64, Fault)> {
    let (field, p, fault) = if let Some(f) = &spec.empty_result {
        if f.json_path.split('.').any(str::is_empty) {
            problems.add(
                "empty_result.json_path",
                format!("`{}` is not a dotted path", f.json_path),
                Some("name the list's key, e.g. `result` or `hits.hits`"),
            );
        }
        if f.grpc_field == Some(0) {
            problems.add(
                "empty_result.grpc_field",
                "0 is not a protobuf field number".into(),
                Some("field numbers start at 1; Qdrant's `result` is 1"),
            );
        }
        let target = EmptyTarget {
            json_path: f.json_path.split('.').map(str::to_owned).collect(),
            grpc_field: f.grpc_field.unwrap_or(crate::grpc::qdrant::RESULT_FIELD),
        };
        (
            "empty_result",
            f.probability,
            Fault::Fixed(FixedFault::EmptyResult(target)),
        )
    } else if let Some(f) = &spec.stall_first_token {
        check_ms(problems, "stall_first_token", f.ms);
        (
            "stall_first_token",
            f.probability,
            Fault::Fixed(FixedFault::StallFirstToken(ms_duration(f.ms))),
        )
    } else if let Some(f) = &spec.token_drip {
        check_ms(problems, "token_drip", f.ms);
        (
            "token_drip",
            f.probability,
            Fault::Fixed(FixedFault::TokenDrip(ms_duration(f.ms))),
        )
    } else if let Some(f) = &spec.cut_stream {
        let end = cut_end(f, problems)?;
        let fault = Fault::Fixed(FixedFault::CutStream {
            after: f.after_events,
            end,
        });
        ("cut_stream", f.probability, fault)
    } else if let Some(f) = &spec.corrupt_event {
        if f.event == 0 {
            problems.add(
                "corrupt_event.event",
                "events are numbered from 1".into(),
                Some("write `event: 1` for the first event"),
            );
        }
        (
            "corrupt_event",
            f.probability,
            Fault::Fixed(FixedFault::CorruptEvent(f.event)),
        )
    } else if let Some(f) = &spec.drop_done {
        (
            "drop_done",
            f.probability,
            Fault::Fixed(FixedFault::DropDone),
        )
    } else if let Some(f) = &spec.bandwidth {
        if f.bytes_per_second == 0 {
            problems.add(
                "bandwidth.bytes_per_second",
                "0 bytes per second would never finish".into(),
                Some("write a positive rate; use `abort: { timeout: true }` to never answer"),
            );
        }
        (
            "bandwidth",
            f.probability,
            Fault::Fixed(FixedFault::Bandwidth(f.bytes_per_second)),
        )
    } else if let Some(f) = &spec.slice {
        if f.max_bytes == 0 {
            problems.add(
                "slice.max_bytes",
                "writes of 0 bytes would never finish".into(),
                Some("write 1 or more"),
            );
        }
        ("slice", f.probability, Fault::Slice(f.max_bytes))
    } else {
        return None;
    };
    Some((problems.probability(field, p), fault))
}

fn check_ms(problems: &mut RuleCheck, field: &str, ms: f64) {
    if !(ms >= 0.0 && ms.is_finite()) {
        problems.add(
            &format!("{field}.ms"),
            format!("{ms} ms is not a duration"),
            Some("write milliseconds, 0 or more"),
        );
    }
}

fn rate_limit(limit: &RateLimitSpec, problems: &mut RuleCheck) -> Option<Fault> {
    let burst = limit.burst.unwrap_or(limit.rps.max(1.0));
    if !(limit.rps > 0.0 && limit.rps.is_finite()) {
        problems.add(
            "rate_limit.rps",
            format!("rps {} is not a positive rate", limit.rps),
            Some("write the requests per second let through, e.g. `rps: 50`"),
        );
        None
    } else if !(burst >= 1.0 && burst.is_finite()) {
        problems.add(
            "rate_limit.burst",
            format!("burst {burst} is below 1: no request could ever pass"),
            Some("write how many requests may pass at once, at least 1"),
        );
        None
    } else {
        Some(Fault::RateLimit {
            rps: limit.rps,
            burst,
        })
    }
}

fn match_path(spec: &FaultRuleSpec, problems: &mut RuleCheck) -> Option<PathPattern> {
    match &spec.matches.path {
        Some(path) if !path.starts_with('/') => {
            problems.add(
                "match.path",
                format!("`{path}` does not start with `/`"),
                Some("write the path as the server sees it, e.g. `/v1/chat/completions`"),
            );
            None
        }
        Some(path) => Some(PathPattern::new(path)),
        None => None,
    }
}

fn delay_dist(delay: &DelaySpec, problems: &mut RuleCheck) -> Option<DelayDist> {
    let bad = |ms: f64| !(ms >= 0.0 && ms.is_finite());
    let dist = match (
        delay.ms,
        delay.min_ms,
        delay.max_ms,
        delay.mean_ms,
        delay.stddev_ms,
    ) {
        (Some(ms), None, None, None, None) => DelayDist::Fixed(ms),
        (None, Some(min), Some(max), None, None) => DelayDist::Uniform(min, max),
        (None, None, None, Some(mean), Some(stddev)) => DelayDist::Normal(mean, stddev),
        _ => {
            problems.add(
                "delay",
                "the delay is not one of the three shapes".into(),
                Some(
                    "write `ms: 500` (fixed), `min_ms: 300, max_ms: 800` (uniform) or `mean_ms: 500, stddev_ms: 100` (normal)",
                ),
            );
            return None;
        }
    };
    match dist {
        DelayDist::Fixed(ms) | DelayDist::Normal(ms, _) if bad(ms) => {
            problems.add(
                "delay",
                format!("{ms} ms is not a delay"),
                Some("write milliseconds, 0 or more"),
            );
            None
        }
        DelayDist::Normal(_, stddev) if bad(stddev) => {
            problems.add(
                "delay.stddev_ms",
                format!("standard deviation {stddev} ms is not 0 or more"),
                Some("write milliseconds, 0 or more"),
            );
            None
        }
        DelayDist::Uniform(min, max) if bad(min) || bad(max) || min > max => {
            problems.add(
                "delay.min_ms",
                format!("min_ms {min} and max_ms {max} do not make a range"),
                Some("write 0 <= min_ms <= max_ms, e.g. `min_ms: 300, max_ms: 800`"),
            );
            None
        }
        dist => Some(dist),
    }
}

fn cut_end(cut: &CutStreamSpec, problems: &mut RuleCheck) -> Option<CutEnd> {
    let code = match &cut.grpc_status {
        None => None,
        Some(code) => Some(grpc_code(code, "cut_stream.grpc_status", problems)?),
    };
    if cut.grpc_message.is_some() && code.is_none() {
        problems.add(
            "cut_stream.grpc_message",
            "`grpc_message` goes with `grpc_status`".into(),
            Some("add `grpc_status: unavailable` (or remove `grpc_message`)"),
        );
        return None;
    }
    match (cut.done, cut.reset, code) {
        (false, false, None) => Some(CutEnd::Plain),
        (true, false, None) => Some(CutEnd::Marker),
        (false, true, None) => Some(CutEnd::Reset),
        (false, false, Some(code)) => Some(CutEnd::Grpc(code, cut.grpc_message.clone())),
        _ => {
            problems.add(
                "cut_stream",
                "a cut ends in one way: `done: true`, `reset: true`, `grpc_status` or none of them"
                    .into(),
                Some(
                    "write e.g. `cut_stream: { probability: 0.05, after_events: 3, reset: true }`",
                ),
            );
            None
        }
    }
}

/// A gRPC status code by name or number, or a problem at `field`.
fn grpc_code(code: &str, field: &str, problems: &mut RuleCheck) -> Option<tonic::Code> {
    let parsed = crate::grpc::code_from(code);
    if parsed.is_none() {
        problems.add(
            field,
            format!("`{code}` is not a gRPC status"),
            Some("write a code's name or number, e.g. `unavailable` or `14`"),
        );
    }
    parsed
}

fn abort_how(abort: &AbortSpec, problems: &mut RuleCheck) -> Option<AbortHow> {
    if let Some(code) = &abort.grpc_status {
        let code = grpc_code(code, "abort.grpc_status", problems)?;
        let alone = abort.status.is_none() && !abort.reset && !abort.timeout;
        if !alone {
            problems.add(
                "abort",
                "an abort is exactly one of `status`, `grpc_status`, `reset: true` or `timeout: true`".into(),
                Some("write e.g. `abort: { probability: 0.01, grpc_status: unavailable }`"),
            );
            return None;
        }
        return Some(AbortHow::Grpc(code, abort.grpc_message.clone()));
    }
    if abort.grpc_message.is_some() {
        problems.add(
            "abort.grpc_message",
            "`grpc_message` goes with `grpc_status`".into(),
            Some("add `grpc_status: unavailable` (or remove `grpc_message`)"),
        );
        return None;
    }
    match (abort.status, abort.reset, abort.timeout) {
        (Some(status), false, false) if (100..=599).contains(&status) => {
            Some(AbortHow::Status(status, abort.body.clone()))
        }
        (Some(status), false, false) => {
            problems.add(
                "abort.status",
                format!("{status} is not an HTTP status"),
                Some("write a status from 100 to 599, e.g. 503"),
            );
            None
        }
        (None, true, false) => Some(AbortHow::Reset),
        (None, false, true) => Some(AbortHow::Hang),
        _ => {
            problems.add(
                "abort",
                "an abort is exactly one of `status`, `reset: true` or `timeout: true`".into(),
                Some("write e.g. `abort: { probability: 0.01, status: 503 }`"),
            );
            None
        }
    }
}
