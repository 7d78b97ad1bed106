//! Validated fault rules: matching, the time window and budget, and the per-request
//! roll. Rolls are seeded by the rule, the run's seed and the request's own key (the
//! span ID of its `traceparent` when it has one), so the same requests get the same
//! faults whatever order they arrive in and whichever connection carries them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::http::request::Parts;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::seed::mix_seed;
use crate::spec::Problems;
use crate::spec::faults::{
    AbortSpec, CutStreamSpec, DelayAt, DelaySpec, FaultRuleSpec, MatchSpec, RateLimitSpec,
};

/// How a delay is drawn, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DelayDist {
    Fixed(f64),
    Uniform(f64, f64),
    Normal(f64, f64),
}

impl DelayDist {
    fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        match *self {
            DelayDist::Fixed(ms) => ms,
            DelayDist::Uniform(min, max) if min == max => min,
            DelayDist::Uniform(min, max) => rng.random_range(min..=max),
            DelayDist::Normal(mean, stddev) => Normal::new(mean, stddev)
                .map_or(mean, |normal| normal.sample(rng))
                .max(0.0),
        }
    }
}

/// What an abort does instead of forwarding.
#[derive(Debug, Clone, PartialEq)]
pub enum AbortHow {
    Status(u16, Option<String>),
    /// A gRPC status and its message.
    Grpc(tonic::Code, Option<String>),
    Reset,
    /// Never answer.
    Hang,
}

/// How a cut stream ends after its last event.
#[derive(Debug, Clone, PartialEq)]
pub enum CutEnd {
    /// The body just ends.
    Plain,
    /// With the stream's end marker: a clean early stop.
    Marker,
    /// The stream is reset (the connection closed, on HTTP/1.1).
    Reset,
    /// A gRPC stream ends with this status and message in its trailers.
    Grpc(tonic::Code, Option<String>),
}

/// What `empty_result` empties: the list at a JSON path, or a repeated field of each
/// gRPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct EmptyTarget {
    pub json_path: Vec<String>,
    pub grpc_field: u32,
}

/// The fault a rule injects.
#[derive(Debug, Clone)]
pub enum Fault {
    Delay(DelayDist, DelayAt),
    /// A token bucket of `rps` tokens a second holding at most `burst`; each proxy's
    /// rule has its own bucket.
    RateLimit {
        rps: f64,
        burst: f64,
    },
    Slice(usize),
    /// Done the same way to every request it hits.
    Fixed(FixedFault),
}

/// A fault with nothing drawn per request: a rule's fault and a request's action alike.
#[derive(Debug, Clone, PartialEq)]
pub enum FixedFault {
    Abort(AbortHow),
    EmptyResult(EmptyTarget),
    StallFirstToken(Duration),
    TokenDrip(Duration),
    CutStream { after: u32, end: CutEnd },
    CorruptEvent(u32),
    DropDone,
    Bandwidth(u64),
}

impl Fault {
    /// The fault's name, as written in a rule and reported.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Delay(..) => "delay",
            Fault::RateLimit { .. } => "rate_limit",
            Fault::Slice(..) => "slice",
            Fault::Fixed(FixedFault::Abort(..)) => "abort",
            Fault::Fixed(FixedFault::EmptyResult(..)) => "empty_result",
            Fault::Fixed(FixedFault::StallFirstToken(..)) => "stall_first_token",
            Fault::Fixed(FixedFault::TokenDrip(..)) => "token_drip",
            Fault::Fixed(FixedFault::CutStream { .. }) => "cut_stream",
            Fault::Fixed(FixedFault::CorruptEvent(..)) => "corrupt_event",
            Fault::Fixed(FixedFault::DropDone) => "drop_done",
            Fault::Fixed(FixedFault::Bandwidth(..)) => "bandwidth",
        }
    }
}

/// The fault names a rule may use.
pub const FAULTS: [&str; 11] = [
    "delay",
    "abort",
    "rate_limit",
    "empty_result",
    "stall_first_token",
    "token_drip",
    "cut_stream",
    "corrupt_event",
    "drop_done",
    "bandwidth",
    "slice",
];

/// `rps` tokens a second, at most `burst` saved; starts full.
#[derive(Debug)]
pub struct TokenBucket {
    rps: f64,
    burst: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl TokenBucket {
    fn new(rps: f64, burst: f64) -> Self {
        TokenBucket {
            rps,
            burst,
            tokens: burst,
            at: None,
        }
    }

    /// Takes a token if there is one; otherwise the seconds until there will be.
    fn take(&mut self, now: Instant) -> Result<(), f64> {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * self.rps;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - self.tokens) / self.rps)
        }
    }
}

/// A decided fault for one request, with anything drawn for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Delay {
        ms: f64,
        at: DelayAt,
    },
    RateLimited {
        retry_after_s: u64,
    },
    /// Split points are drawn from `seed`.
    Slice {
        max_bytes: usize,
        seed: u64,
    },
    Fixed(FixedFault),
}

/// A rule as validated: what it matches and injects, checked once (with the spec, or
/// when the admin API or a rules file brings it), and cloned into every proxy that
/// runs it.
#[derive(Debug, Clone)]
pub struct RuleDef {
    /// As written: what the admin API lists.
    pub spec: FaultRuleSpec,
    probability: f64,
    path: Option<PathPattern>,
    method: Option<String>,
    headers: Vec<(String, String)>,
    window: (Duration, Option<Duration>),
    max: Option<u64>,
    pub fault: Fault,
}

/// A rule running in a proxy: its definition and what it has done.
#[derive(Debug)]
pub struct Rule {
    pub def: RuleDef,
    /// The rate limit's bucket, for `rate_limit` rules.
    bucket: Option<Mutex<TokenBucket>>,
    /// Requests the rule matched (inside its window).
    pub matched: AtomicU64,
    /// Faults it injected.
    pub injected: AtomicU64,
}

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
    stream_fault(spec, problems)
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

impl Rule {
    pub fn new(def: RuleDef) -> Rule {
        let bucket = match def.fault {
            Fault::RateLimit { rps, burst } => Some(Mutex::new(TokenBucket::new(rps, burst))),
            _ => None,
        };
        Rule {
            def,
            bucket,
            matched: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Validates a rule as written and makes it ready to run.
    pub fn validate(spec: &FaultRuleSpec, at: &str) -> Result<Rule, Problems> {
        RuleDef::validate(spec, at).map(Rule::new)
    }

    pub fn name(&self) -> &str {
        &self.def.spec.name
    }
    /// Decides whether this rule injects into the request: it matches, the time is in
    /// the window, the budget is not spent and the roll comes up. Takes from the
    /// budget when it does.
    pub fn roll(&self, head: &Parts, key: u64, seed: u64, since_start: Duration) -> Option<Action> {
        if !self.matches(head)
            || since_start < self.def.window.0
            || self.def.window.1.is_some_and(|to| since_start >= to)
        {
            return None;
        }
        self.matched.fetch_add(1, Ordering::Relaxed);
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, name_hash(self.name()), key]));
        let action = match (&self.def.fault, &self.bucket) {
            (Fault::RateLimit { .. }, Some(bucket)) => {
                let wait = bucket
                    .lock()
                    .expect("a token bucket holds no invariant a panic could break")
                    .take(Instant::now())
                    .err()?;
                Action::RateLimited {
                    retry_after_s: wait.ceil().max(1.0) as u64,
                }
            }
            (fault, _) => {
                if !rng.random_bool(self.def.probability) {
                    return None;
                }
                match fault {
                    Fault::Delay(dist, at) => Action::Delay {
                        ms: dist.sample(&mut rng),
                        at: *at,
                    },
                    Fault::Fixed(fault) => Action::Fixed(fault.clone()),
                    Fault::Slice(max_bytes) => Action::Slice {
                        max_bytes: *max_bytes,
                        seed: rng.random(),
                    },
                    // `Rule::new` (its only constructor) gives a rate limit its bucket,
                    // so the arm above takes every rate limit.
                    Fault::RateLimit { .. } => return None,
                }
            }
        };
        self.take_budget().then_some(action)
    }

    /// Counts one injection, unless the rule's `max` is spent.
    fn take_budget(&self) -> bool {
        self.injected
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                self.def.max.is_none_or(|max| n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn matches(&self, head: &Parts) -> bool {
        self.def
            .method
            .as_ref()
            .is_none_or(|m| head.method.as_str() == m)
            && self
                .def
                .path
                .as_ref()
                .is_none_or(|p| p.matches(head.uri.path()))
            && self.def.headers.iter().all(|(name, value)| {
                head.headers
                    .get(name)
                    .is_some_and(|v| v.as_bytes() == value.as_bytes())
            })
    }
}

fn headers_lowercase(matches: &MatchSpec) -> Vec<(String, String)> {
    matches
        .headers
        .iter()
        .map(|(name, value)| (name.to_lowercase(), value.clone()))
        .collect()
}

fn ms_duration(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1e3)
}

fn name_hash(name: &str) -> u64 {
    crate::seed::fnv64(name.as_bytes())
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

/// A path prefix, or a glob over whole segments when it holds `*`.
#[derive(Debug, Clone)]
enum PathPattern {
    Prefix(String),
    Glob(Vec<String>),
}

impl PathPattern {
    fn new(pattern: &str) -> Self {
        if pattern.contains('*') {
            PathPattern::Glob(pattern.split('/').map(str::to_owned).collect())
        } else {
            PathPattern::Prefix(pattern.to_owned())
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            PathPattern::Prefix(prefix) => path.starts_with(prefix.as_str()),
            PathPattern::Glob(pattern) => {
                let segments: Vec<&str> = path.split('/').collect();
                glob(pattern, &segments)
            }
        }
    }
}

fn glob(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| glob(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((segment, path_rest)) => segment_matches(first, segment) && glob(rest, path_rest),
            None => false,
        },
    }
}

/// `*` inside a segment matches any run of characters in it.
fn segment_matches(pattern: &str, segment: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = segment.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::faults::{CutStreamSpec, HoldSpec, RateLimitSpec};

    fn head(method: &str, path: &str) -> Parts {
        hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("x-tenant", "a")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn delay_rule(probability: f64) -> FaultRuleSpec {
        FaultRuleSpec {
            name: "slow".into(),
            delay: Some(DelaySpec {
                probability,
                min_ms: Some(300.0),
                max_ms: Some(800.0),
                ..DelaySpec::default()
            }),
            ..FaultRuleSpec::default()
        }
    }

    #[test]
    fn globs_match_whole_segments_and_prefixes_match_starts() {
        let search = PathPattern::new("/collections/*/points/search");
        assert!(search.matches("/collections/docs/points/search"));
        assert!(!search.matches("/collections/docs/points/search/x"));
        assert!(!search.matches("/collections/a/b/points/search"));
        let deep = PathPattern::new("/v1/**/completions");
        assert!(deep.matches("/v1/chat/completions"));
        assert!(deep.matches("/v1/completions"));
        assert!(PathPattern::new("/v1/*.json").matches("/v1/a.json"));
        assert!(!PathPattern::new("/v1/*.json").matches("/v1/a.yaml"));
        assert!(PathPattern::new("/v1/").matches("/v1/embeddings"));
        assert!(!PathPattern::new("/v1/").matches("/health"));
    }

    #[test]
    fn rolls_are_a_function_of_seed_rule_and_request() {
        let rule = Rule::validate(&delay_rule(0.5), "rules[0]").unwrap();
        let head = head("POST", "/v1/chat/completions");
        let rolls: Vec<_> = (0..200)
            .map(|key| rule.roll(&head, key, 7, Duration::ZERO))
            .collect();
        let again: Vec<_> = (0..200)
            .rev()
            .map(|key| rule.roll(&head, key, 7, Duration::ZERO))
            .rev()
            .collect();
        assert_eq!(rolls, again, "arrival order must not change the faults");
        let hits = rolls.iter().flatten().count();
        assert!((70..130).contains(&hits), "{hits} of 200 at p = 0.5");
        for action in rolls.iter().flatten() {
            let Action::Delay { ms, .. } = action else {
                panic!("{action:?}")
            };
            assert!((300.0..=800.0).contains(ms));
        }
    }

    #[test]
    fn window_match_and_budget_limit_injections() {
        let mut spec = delay_rule(1.0);
        spec.max = Some(3);
        spec.matches = MatchSpec {
            path: Some("/v1/chat".into()),
            method: Some("post".into()),
            headers: [("X-Tenant".to_owned(), "a".to_owned())].into(),
        };
        spec.window = Some(crate::spec::faults::WindowSpec {
            from: crate::spec::values::Dur(Duration::from_secs(1)),
            to: Some(crate::spec::values::Dur(Duration::from_secs(2))),
        });
        let rule = Rule::validate(&spec, "rules[0]").unwrap();
        let chat = head("POST", "/v1/chat/completions");
        let inside = Duration::from_millis(1500);
        assert!(rule.roll(&chat, 1, 0, Duration::from_millis(500)).is_none());
        assert!(rule.roll(&chat, 1, 0, Duration::from_secs(2)).is_none());
        assert!(
            rule.roll(&head("GET", "/v1/chat/completions"), 1, 0, inside)
                .is_none()
        );
        assert!(
            rule.roll(&head("POST", "/v1/embeddings"), 1, 0, inside)
                .is_none()
        );
        let hits = (0..10)
            .filter_map(|k| rule.roll(&chat, k, 0, inside))
            .count();
        assert_eq!(hits, 3, "max: 3");
        assert_eq!(rule.injected.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn token_bucket_lets_the_rate_through_and_names_the_wait() {
        let spec = FaultRuleSpec {
            name: "limit".into(),
            rate_limit: Some(RateLimitSpec {
                rps: 2.0,
                burst: Some(2.0),
            }),
            ..FaultRuleSpec::default()
        };
        let rule = Rule::validate(&spec, "rules[0]").unwrap();
        let head = head("GET", "/");
        let limited: Vec<bool> = (0..4)
            .map(|k| rule.roll(&head, k, 0, Duration::ZERO).is_some())
            .collect();
        assert_eq!(limited, [false, false, true, true], "a burst of 2 passes");
        let mut bucket = TokenBucket::new(2.0, 2.0);
        let t0 = Instant::now();
        assert!(bucket.take(t0).is_ok() && bucket.take(t0).is_ok());
        let wait = bucket.take(t0).unwrap_err();
        assert!((wait - 0.5).abs() < 1e-9, "{wait}");
        assert!(bucket.take(t0 + Duration::from_millis(500)).is_ok());
    }

    #[test]
    fn a_cut_ends_one_way_and_its_status_is_a_grpc_code() {
        let cut = |edit: fn(&mut CutStreamSpec)| {
            let mut cut = CutStreamSpec {
                probability: 1.0,
                after_events: 2,
                ..CutStreamSpec::default()
            };
            edit(&mut cut);
            let spec = FaultRuleSpec {
                name: "cut".into(),
                cut_stream: Some(cut),
                ..FaultRuleSpec::default()
            };
            Rule::validate(&spec, "rules[0]").map(|rule| match rule.def.fault {
                Fault::Fixed(FixedFault::CutStream { end, .. }) => end,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(cut(|_| {}).unwrap(), CutEnd::Plain);
        assert_eq!(cut(|c| c.reset = true).unwrap(), CutEnd::Reset);
        let status = cut(|c| c.grpc_status = Some("unavailable".into())).unwrap();
        assert_eq!(status, CutEnd::Grpc(tonic::Code::Unavailable, None));
        let both = cut(|c| (c.done, c.reset) = (true, true)).unwrap_err();
        assert_eq!(both[0].path, "rules[0].cut_stream");
        assert!(both[0].fix.as_ref().unwrap().contains("reset: true"));
        let bad = cut(|c| c.grpc_status = Some("sideways".into())).unwrap_err();
        assert_eq!(bad[0].path, "rules[0].cut_stream.grpc_status");
        let alone = cut(|c| c.grpc_message = Some("bye".into())).unwrap_err();
        assert_eq!(alone[0].path, "rules[0].cut_stream.grpc_message");
    }

    #[test]
    fn bad_rules_name_every_problem_with_a_fix() {
        let mut spec = delay_rule(1.5);
        spec.delay.as_mut().unwrap().min_ms = Some(900.0);
        spec.cut_stream = Some(CutStreamSpec::default());
        let problems = Rule::validate(&spec, "rules[1]").unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "rules[1]",
                "rules[1].delay.probability",
                "rules[1].delay.min_ms"
            ]
        );
        assert_eq!(
            problems[0].message,
            "the rule names 2 faults (delay, cut_stream)"
        );
        assert_eq!(
            problems[1].message,
            "probability 1.5 is not between 0 and 1"
        );
        assert_eq!(
            problems[2].message,
            "min_ms 900 and max_ms 800 do not make a range"
        );
        let none = FaultRuleSpec {
            name: "x".into(),
            ..FaultRuleSpec::default()
        };
        let problems = Rule::validate(&none, "rules[0]").unwrap_err();
        assert_eq!(problems[0].message, "the rule names no fault");
        assert!(
            problems[0]
                .fix
                .as_ref()
                .unwrap()
                .contains("stall_first_token")
        );
        let negative = FaultRuleSpec {
            name: "x".into(),
            token_drip: Some(HoldSpec {
                probability: 1.0,
                ms: -1.0,
            }),
            ..FaultRuleSpec::default()
        };
        assert_eq!(
            Rule::validate(&negative, "r").unwrap_err()[0].path,
            "r.token_drip.ms"
        );
    }
}
