//! Validated fault rules: matching, the time window and budget, and the per-request
//! roll. Rolls are seeded by the rule, the run's seed and the request's own key (the
//! span ID of its `traceparent` when it has one), so the same requests get the same
//! faults whatever order they arrive in and whichever connection carries them.
//! Checking a rule as written, into its [`RuleDef`], is `check`'s.

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
    AbortSpec, CutStreamSpec, DelayAt, DelaySpec, FaultRuleSpec, MatchSpec, McpMatchSpec,
    RateLimitSpec,
};

mod check;

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
    CutStream {
        after: u32,
        end: CutEnd,
    },
    CorruptEvent(u32),
    DropDone,
    Bandwidth(u64),
    /// A JSON-RPC error with this code and message, for the request's id.
    McpError(i64, Option<String>),
    /// A `tools/list` result of at least this many bytes, for the request's id.
    McpOversize(u64),
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
            Fault::Fixed(FixedFault::McpError(..)) => "mcp_error",
            Fault::Fixed(FixedFault::McpOversize(..)) => "mcp_oversize",
        }
    }
}

/// The fault names a rule may use.
pub const FAULTS: [&str; 13] = [
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
    "mcp_error",
    "mcp_oversize",
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
    /// MCP requests only: the JSON-RPC method and tool they must have.
    mcp: Option<McpMatchSpec>,
    window: (Duration, Option<Duration>),
    max: Option<u64>,
    pub fault: Fault,
}

impl RuleDef {
    /// Whether rolling it needs the request's JSON-RPC message: it matches MCP
    /// requests, or answers one.
    pub fn needs_rpc(&self) -> bool {
        self.mcp.is_some()
            || matches!(
                self.fault,
                Fault::Fixed(FixedFault::McpError(..) | FixedFault::McpOversize(..))
            )
    }
}

/// What a rule sees of an MCP request: its JSON-RPC method, the tool a `tools/call`
/// names, and its id (none for a notification).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcCall {
    pub method: String,
    pub tool: Option<String>,
    pub id: Option<serde_json::Value>,
}

impl RpcCall {
    /// The message in a request body, if it is one JSON-RPC request or notification.
    pub fn of(body: &[u8]) -> Option<RpcCall> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let method = value.get("method")?.as_str()?.to_owned();
        let tool = (method == "tools/call")
            .then(|| value.pointer("/params/name")?.as_str().map(str::to_owned))
            .flatten();
        Some(RpcCall {
            method,
            tool,
            id: value.get("id").cloned(),
        })
    }
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
    pub fn roll(
        &self,
        (head, rpc): (&Parts, Option<&RpcCall>),
        key: u64,
        seed: u64,
        since_start: Duration,
    ) -> Option<Action> {
        if !self.matches(head, rpc)
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

    fn matches(&self, head: &Parts, rpc: Option<&RpcCall>) -> bool {
        let mcp = match (&self.def.mcp, rpc) {
            (None, _) if !self.def.needs_rpc() => true,
            (None, rpc) => rpc.is_some(),
            (Some(_), None) => false,
            (Some(wanted), Some(rpc)) => {
                wanted.method.as_ref().is_none_or(|m| *m == rpc.method)
                    && wanted
                        .tool
                        .as_ref()
                        .is_none_or(|t| rpc.tool.as_ref() == Some(t))
            }
        };
        mcp && self
            .def
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
            .map(|key| rule.roll((&head, None), key, 7, Duration::ZERO))
            .collect();
        let again: Vec<_> = (0..200)
            .rev()
            .map(|key| rule.roll((&head, None), key, 7, Duration::ZERO))
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
            mcp: None,
        };
        spec.window = Some(crate::spec::faults::WindowSpec {
            from: crate::spec::values::Dur(Duration::from_secs(1)),
            to: Some(crate::spec::values::Dur(Duration::from_secs(2))),
        });
        let rule = Rule::validate(&spec, "rules[0]").unwrap();
        let chat = head("POST", "/v1/chat/completions");
        let inside = Duration::from_millis(1500);
        assert!(
            rule.roll((&chat, None), 1, 0, Duration::from_millis(500))
                .is_none()
        );
        assert!(
            rule.roll((&chat, None), 1, 0, Duration::from_secs(2))
                .is_none()
        );
        assert!(
            rule.roll((&head("GET", "/v1/chat/completions"), None), 1, 0, inside)
                .is_none()
        );
        assert!(
            rule.roll((&head("POST", "/v1/embeddings"), None), 1, 0, inside)
                .is_none()
        );
        let hits = (0..10)
            .filter_map(|k| rule.roll((&chat, None), k, 0, inside))
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
            .map(|k| rule.roll((&head, None), k, 0, Duration::ZERO).is_some())
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

    /// An MCP matcher sees only JSON-RPC requests, by method and tool; an `mcp_error`
    /// rule without one still needs a JSON-RPC request to answer.
    #[test]
    fn mcp_rules_match_json_rpc_requests_by_method_and_tool() {
        let call = |tool: &str| {
            RpcCall::of(format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}"}}}}"#).as_bytes()).unwrap()
        };
        let list = RpcCall::of(br#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#).unwrap();
        assert_eq!(
            (call("a").tool.as_deref(), call("a").id),
            (Some("a"), Some(serde_json::json!(7)))
        );
        assert_eq!(RpcCall::of(b"not json"), None);
        let mut spec = delay_rule(1.0);
        spec.matches.mcp = Some(McpMatchSpec {
            method: Some("tools/call".into()),
            tool: Some("search".into()),
        });
        let rule = Rule::validate(&spec, "rules[0]").unwrap();
        let post = head("POST", "/mcp");
        let rolls = |rpc: Option<&RpcCall>| rule.roll((&post, rpc), 1, 0, Duration::ZERO).is_some();
        assert!(rolls(Some(&call("search"))));
        assert!(!rolls(Some(&call("other"))));
        assert!(!rolls(Some(&list)));
        assert!(!rolls(None));
        let mut error = delay_rule(1.0);
        error.delay = None;
        error.mcp_error = Some(crate::spec::faults::McpErrorSpec {
            probability: 1.0,
            code: -32000,
            message: None,
        });
        let rule = Rule::validate(&error, "rules[1]").unwrap();
        assert!(rule.def.needs_rpc());
        assert!(
            rule.roll((&post, Some(&list)), 1, 0, Duration::ZERO)
                .is_some()
        );
        assert!(rule.roll((&post, None), 1, 0, Duration::ZERO).is_none());
    }
}
