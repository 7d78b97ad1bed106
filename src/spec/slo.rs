//! `sloThresholds` in a `ScaleSpec`, as written: the gate's settings and its SLOs by
//! metric, read into types. Which keys and shapes may be written is the format's, so a
//! typo is named here and the schema documents every metric; what an expression means
//! (`<= 350ms`, `>= 99.9% over 1m`) is the gate's to judge ([`crate::slo`]).
//!
//! Read by hand rather than derived: every problem is collected with its path, so a
//! spec with five mistakes in its SLOs names all five at once.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use yaml_serde::{Mapping, Value};

use super::error::nearest;
use super::problems::Problem;
use super::values::Dur;

/// What a metric measures, which decides its statistics and units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A latency distribution: judged per percentile.
    Latency,
    /// A share of good events (pass rate, availability): higher is better.
    GoodShare,
    /// A share of bad events (error rate): lower is better.
    BadShare,
    /// Output tokens per second.
    Throughput,
    /// A per-request token count: judged per percentile.
    Tokens,
    /// A per-request share (of its own E2E): judged per percentile.
    RequestShare,
}

impl Kind {
    /// How an SLO of this kind is written, for a problem's fix.
    pub const fn example(self) -> &'static str {
        match self {
            Kind::Latency => "write e.g. `p99: \"<= 350ms\"` (units us, ms, s)",
            Kind::GoodShare => "write e.g. `\">= 99.9%\"`",
            Kind::BadShare => "write e.g. `\"<= 0.1%\"`",
            Kind::Throughput => "write e.g. `\">= 900 tok/s\"`",
            Kind::Tokens => "write e.g. `p95: \"<= 2000 tokens\"`",
            Kind::RequestShare => "write e.g. `p90: \"<= 60%\"`",
        }
    }
}

/// A metric of `sloThresholds`: one enum, so judging matches on variants and a new
/// metric cannot fall into another's catch-all arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    TtftFromIntended,
    TimeToSecondToken,
    TimeToFirstAnswer,
    TimeToFirstReasoning,
    ReasoningTime,
    ReasoningTokens,
    ReasoningShare,
    Itl,
    Tpot,
    E2e,
    E2eFromIntended,
    PassRate,
    Availability,
    ErrorRate,
    Goodput,
    OutputThroughput,
    KvCacheHitRate,
    ToolSuccess,
    RecallAtK,
    Accuracy,
    Unparsed,
}

impl Metric {
    /// Every metric, in the order the docs list them.
    pub const ALL: [Metric; 22] = [
        Metric::Ttft,
        Metric::TtftFromIntended,
        Metric::TimeToSecondToken,
        Metric::TimeToFirstAnswer,
        Metric::TimeToFirstReasoning,
        Metric::ReasoningTime,
        Metric::ReasoningTokens,
        Metric::ReasoningShare,
        Metric::Itl,
        Metric::Tpot,
        Metric::E2e,
        Metric::E2eFromIntended,
        Metric::PassRate,
        Metric::Availability,
        Metric::ErrorRate,
        Metric::Goodput,
        Metric::OutputThroughput,
        Metric::KvCacheHitRate,
        Metric::ToolSuccess,
        Metric::RecallAtK,
        Metric::Accuracy,
        Metric::Unparsed,
    ];

    /// The name a spec writes.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::TtftFromIntended => "ttft_from_intended",
            Metric::TimeToSecondToken => "time_to_second_token",
            Metric::TimeToFirstAnswer => "time_to_first_answer",
            Metric::TimeToFirstReasoning => "time_to_first_reasoning",
            Metric::ReasoningTime => "reasoning_time",
            Metric::ReasoningTokens => "reasoning_tokens",
            Metric::ReasoningShare => "reasoning_share",
            Metric::Itl => "itl",
            Metric::Tpot => "tpot",
            Metric::E2e => "e2e",
            Metric::E2eFromIntended => "e2e_from_intended",
            Metric::PassRate => "pass_rate",
            Metric::Availability => "availability",
            Metric::ErrorRate => "error_rate",
            Metric::Goodput => "goodput",
            Metric::OutputThroughput => "output_throughput",
            Metric::KvCacheHitRate => "kv_cache_hit_rate",
            Metric::ToolSuccess => "tool_success",
            Metric::RecallAtK => "recall_at_k",
            Metric::Accuracy => "accuracy",
            Metric::Unparsed => "unparsed",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    pub const fn kind(self) -> Kind {
        match self {
            Metric::Ttft
            | Metric::TtftFromIntended
            | Metric::TimeToSecondToken
            | Metric::TimeToFirstAnswer
            | Metric::TimeToFirstReasoning
            | Metric::ReasoningTime
            | Metric::Itl
            | Metric::Tpot
            | Metric::E2e
            | Metric::E2eFromIntended => Kind::Latency,
            Metric::ErrorRate | Metric::Unparsed => Kind::BadShare,
            Metric::ReasoningTokens => Kind::Tokens,
            Metric::ReasoningShare => Kind::RequestShare,
            Metric::OutputThroughput => Kind::Throughput,
            Metric::PassRate
            | Metric::Availability
            | Metric::Goodput
            | Metric::KvCacheHitRate
            | Metric::ToolSuccess
            | Metric::RecallAtK
            | Metric::Accuracy => Kind::GoodShare,
        }
    }

    /// Whether its figure is made of output token counts (which may be estimates).
    pub const fn counts_tokens(self) -> bool {
        matches!(self, Metric::Tpot | Metric::OutputThroughput)
    }

    /// What it measures, as the schema documents it (docs/slo.md says more).
    pub const fn about(self) -> &'static str {
        match self {
            Metric::Ttft => "Time to first token, from the request's send.",
            Metric::TtftFromIntended => {
                "Time to first token from the request's intended start: queueing in the client counts (no coordinated omission)."
            }
            Metric::TimeToSecondToken => "Time from the request's send to its second token.",
            Metric::TimeToFirstAnswer => {
                "Time from the request's send to its first answer token (text or tool call), after any reasoning: TTFT for a model that does not reason."
            }
            Metric::TimeToFirstReasoning => {
                "Time from the request's send to its first reasoning token, of requests that reasoned."
            }
            Metric::ReasoningTime => {
                "How long a request reasoned: its first reasoning token to its first answer token."
            }
            Metric::ReasoningTokens => {
                "Reasoning tokens per request, of requests that reasoned (the server's count, else the reasoning text counted)."
            }
            Metric::ReasoningShare => {
                "The share of a request's E2E spent reasoning (first reasoning token to first answer token), of requests that reasoned."
            }
            Metric::Itl => "Inter-token latency: every gap between two tokens of a stream.",
            Metric::Tpot => "Time per output token after the first: (e2e - ttft) / (tokens - 1).",
            Metric::E2e => "End-to-end latency of a whole request, from its send.",
            Metric::E2eFromIntended => {
                "End-to-end latency from the request's intended start (no coordinated omission)."
            }
            Metric::PassRate => "Share of requests that succeeded.",
            Metric::Availability => {
                "Share of requests not refused, reset, timed out or answered 5xx."
            }
            Metric::ErrorRate => {
                "Share of requests that failed; `error_rate{kind=timeout}` counts one kind of failure."
            }
            Metric::Goodput => "Share of requests within the spec's per-request goodput SLOs.",
            Metric::OutputThroughput => "Output tokens per second, judged second by second.",
            Metric::KvCacheHitRate => "Share of prompt tokens served from the prefix cache.",
            Metric::ToolSuccess => "Share of a flow's tool calls that succeeded.",
            Metric::RecallAtK => "Recall@k of a flow's retrieval against its relevant ids.",
            Metric::Accuracy => {
                "Share of graded answers that were correct (wrong and unparsed ones are not)."
            }
            Metric::Unparsed => {
                "Share of graded answers that could not be read as an answer (no number, no choice, not JSON)."
            }
        }
    }
}

/// A named set of SLOs a spec can start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The source document's redlines (DESIGN.md, "Numbers the source document names").
    Redlines,
}

impl Preset {
    pub const ALL: [Preset; 1] = [Preset::Redlines];

    pub const fn name(self) -> &'static str {
        match self {
            Preset::Redlines => "redlines",
        }
    }
}

/// Keys of `sloThresholds` that are settings, not metrics.
pub const SETTINGS: [&str; 4] = ["preset", "confidence", "abort_on_fail", "delay"];

/// `sloThresholds`, read: settings, and one entry per metric key in the order written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SloThresholds {
    /// SLOs to start from; entries written beside it override its SLOs of the same name.
    pub preset: Option<Preset>,
    /// Confidence of the one-sided bounds, as a fraction.
    pub confidence: Option<f64>,
    /// Stop the run once a breach is certain at that confidence.
    pub abort_on_fail: Option<bool>,
    /// How long into the run before breaches may abort it.
    pub delay: Option<Duration>,
    pub entries: Vec<SloEntry>,
    /// What could not be read, with paths below `sloThresholds` (`.ttf`), reported
    /// with the spec's other problems.
    pub problems: Vec<Problem>,
}

/// One metric's entry: `ttft: { p99: "<= 350ms", p50: "<= 80ms" }`, `pass_rate: ">= 99%"`.
#[derive(Debug, Clone, PartialEq)]
pub struct SloEntry {
    /// As written: `ttft`, `error_rate{kind=timeout}`.
    pub key: String,
    pub metric: Metric,
    /// For `error_rate{kind=…}`: the failure kind counted.
    pub error_kind: Option<String>,
    /// One per percentile for a latency metric, else one.
    pub limits: Vec<Limit>,
}

/// One limit of an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// For a latency metric: the percentile.
    pub percentile: Option<Percentile>,
    /// As written, judged by the gate: `<= 350ms`, `<= 1% over 1m`.
    pub expression: String,
}

/// A percentile key: `p99.9`.
#[derive(Debug, Clone, PartialEq)]
pub struct Percentile {
    /// As written, which names the SLO: `p99.9` in `ttft.p99.9`.
    pub written: String,
    /// As a fraction: 0.999.
    pub quantile: f64,
}

impl SloThresholds {
    /// Whether nothing was written: no gate.
    pub fn is_empty(&self) -> bool {
        self.preset.is_none()
            && self.confidence.is_none()
            && self.abort_on_fail.is_none()
            && self.delay.is_none()
            && self.entries.is_empty()
            && self.problems.is_empty()
    }

    /// Reads the mapping key by key; what cannot be read becomes a problem.
    pub fn read(mapping: &Mapping) -> SloThresholds {
        let mut read = SloThresholds::default();
        for (key, value) in mapping {
            let Some(key) = key.as_str() else {
                read.problem("", "keys must be metric names".into(), None);
                continue;
            };
            let path = format!(".{key}");
            match key {
                "preset" => read.preset = read.setting(&path, preset(value)),
                "confidence" => read.confidence = read.setting(&path, confidence(value)),
                "abort_on_fail" => {
                    let flag = value.as_bool().ok_or(unread("must be true or false", None));
                    read.abort_on_fail = read.setting(&path, flag);
                }
                "delay" => {
                    let delay = match value.as_str().map(Dur::parse) {
                        Some(Ok(d)) => Ok(d.0),
                        _ => Err(unread("must be a duration", Some("e.g. `delay: 10s`"))),
                    };
                    read.delay = read.setting(&path, delay);
                }
                _ => {
                    if let Some(entry) = read.entry(key, &path, value) {
                        read.entries.push(entry);
                    }
                }
            }
        }
        read
    }

    fn problem(&mut self, path: &str, message: String, fix: Option<String>) {
        self.problems.push(Problem::new(path, message, fix));
    }

    /// A setting's value, or its problem.
    fn setting<T>(&mut self, path: &str, read: Result<T, Unread>) -> Option<T> {
        match read {
            Ok(value) => Some(value),
            Err((message, fix)) => {
                self.problem(path, message, fix);
                None
            }
        }
    }

    /// A metric's entry; none, with its problems noted, when it cannot be read.
    fn entry(&mut self, key: &str, path: &str, value: &Value) -> Option<SloEntry> {
        let (metric, error_kind) = match metric_of(key) {
            Ok(target) => target,
            Err((message, fix)) => {
                self.problem(path, message, Some(fix));
                return None;
            }
        };
        let limits = match metric.kind() {
            Kind::Latency | Kind::Tokens | Kind::RequestShare => {
                self.percentiles(metric, path, value)?
            }
            kind => match value.as_str() {
                Some(text) => vec![Limit {
                    percentile: None,
                    expression: text.to_owned(),
                }],
                None => {
                    let fix = Some(kind.example().into());
                    self.problem(path, "must be an expression".into(), fix);
                    return None;
                }
            },
        };
        Some(SloEntry {
            key: key.to_owned(),
            metric,
            error_kind,
            limits,
        })
    }

    /// A latency entry's limits, one per percentile it names.
    fn percentiles(&mut self, metric: Metric, path: &str, value: &Value) -> Option<Vec<Limit>> {
        let Some(map) = value.as_mapping() else {
            let fix = format!("write e.g. `{}: {{ p99: \"<= 350ms\" }}`", metric.name());
            let message = "a latency SLO names its percentiles".into();
            self.problem(path, message, Some(fix));
            return None;
        };
        let mut limits = Vec::new();
        for (stat, text) in map {
            let stat = stat.as_str().unwrap_or("?");
            let quantile = stat
                .strip_prefix('p')
                .and_then(|p| p.parse::<f64>().ok())
                .filter(|p| *p > 0.0 && *p < 100.0);
            let (Some(q), Some(text)) = (quantile, text.as_str()) else {
                self.problem(
                    &format!("{path}.{stat}"),
                    format!(
                        "`{stat}` is not a percentile between p0 and p100 (exclusive) with an expression"
                    ),
                    Some("write e.g. `p99: \"<= 350ms\"` or `p99.9: \"< 1s\"`".into()),
                );
                continue;
            };
            limits.push(Limit {
                percentile: Some(Percentile {
                    written: stat.to_owned(),
                    quantile: q / 100.0,
                }),
                expression: text.to_owned(),
            });
        }
        Some(limits)
    }
}

/// What a value that cannot be read gets: a message and perhaps a fix.
type Unread = (String, Option<String>);

fn unread(message: &str, fix: Option<&str>) -> Unread {
    (message.to_owned(), fix.map(str::to_owned))
}

fn preset(value: &Value) -> Result<Preset, Unread> {
    let name = value.as_str();
    Preset::ALL
        .into_iter()
        .find(|p| Some(p.name()) == name)
        .ok_or_else(|| {
            let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
            (
                format!("unknown preset `{}`", name.unwrap_or("?")),
                Some(format!("choose from: {}", names.join(", "))),
            )
        })
}

/// `95%` or `0.95`, strictly between a half and one.
fn confidence(value: &Value) -> Result<f64, Unread> {
    let level = match value.as_str() {
        Some(text) => parse_share(text).ok(),
        None => value.as_f64(),
    };
    level.filter(|c| *c > 0.5 && *c < 1.0).ok_or(unread(
        "must be a level between 50% and 100%",
        Some("e.g. `confidence: 95%`"),
    ))
}

/// `99.995%` or `0.95` as a fraction.
pub fn parse_share(text: &str) -> Result<f64, String> {
    let text = text.trim();
    match text.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.parse::<f64>(),
    }
    .map_err(|e| e.to_string())
}

/// What a key judges: the metric, and for `error_rate{kind=…}` the kind.
fn metric_of(key: &str) -> Result<(Metric, Option<String>), (String, String)> {
    let (name, error_kind) = match key.split_once('{') {
        Some((metric, selector)) => {
            let kind = selector
                .strip_suffix('}')
                .and_then(|s| s.strip_prefix("kind="))
                .filter(|k| !k.is_empty() && metric == "error_rate");
            let Some(kind) = kind else {
                return Err((
                    format!("malformed selector in `{key}`"),
                    "only `error_rate` takes one, as `error_rate{kind=timeout}`".into(),
                ));
            };
            (metric, Some(kind.to_owned()))
        }
        None => (key, None),
    };
    let metric = Metric::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Metric::ALL.iter().map(|m| m.name()).collect();
        let fix = match nearest(name, &[&names[..], &SETTINGS[..]].concat()) {
            Some(near) => format!("did you mean `{near}`? Choose from: {}", names.join(", ")),
            None => format!("choose from: {}", names.join(", ")),
        };
        (format!("unknown metric `{name}`"), fix)
    })?;
    Ok((metric, error_kind))
}

impl<'de> Deserialize<'de> for SloThresholds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Mapping::deserialize(deserializer).map(|mapping| SloThresholds::read(&mapping))
    }
}

impl schemars::JsonSchema for SloThresholds {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SloThresholds".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut properties = serde_json::Map::new();
        for metric in Metric::ALL {
            properties.insert(metric.name().into(), metric_schema(metric));
        }
        let presets: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
        properties.insert(
            "preset".into(),
            serde_json::json!({
                "description": "SLOs to start from: `redlines`, the source document's numbers. Entries written beside it override its SLOs of the same name.",
                "enum": presets,
            }),
        );
        properties.insert(
            "confidence".into(),
            serde_json::json!({
                "description": "Confidence of the one-sided bounds a verdict rests on: `95%` (the default) or `0.95`.",
                "type": ["string", "number"],
            }),
        );
        properties.insert(
            "abort_on_fail".into(),
            serde_json::json!({
                "description": "Stop the run once a breach is certain at that confidence.",
                "type": "boolean",
            }),
        );
        properties.insert(
            "delay".into(),
            serde_json::json!({
                "description": "How long into the run before breaches may abort it: `10s`.",
                "type": "string",
            }),
        );
        schemars::json_schema!({
            "description": "SLOs by metric, k6-style: `ttft: { p99: \"<= 350ms\" }`, `pass_rate: \">= 99.995%\"`, `error_rate{kind=timeout}: \"<= 0.1%\"`; an expression may be judged over windows: `\"<= 800ms over 30s for 3 windows\"`. See docs/slo.md.",
            "type": "object",
            "properties": properties,
            "patternProperties": {
                "^error_rate\\{kind=[^}]+\\}$": {
                    "description": "Share of requests that failed with one kind of failure (`timeout`, `http_5xx`, …).",
                    "type": "string",
                }
            },
            "additionalProperties": false,
        })
    }
}

/// A metric's entry in the schema: percentiles for a latency, else one expression.
fn metric_schema(metric: Metric) -> serde_json::Value {
    match metric.kind() {
        Kind::Latency | Kind::Tokens | Kind::RequestShare => serde_json::json!({
            "description": format!("{} By percentile: {}.", metric.about(), metric.kind().example().trim_start_matches("write e.g. ")),
            "type": "object",
            "patternProperties": { "^p[0-9]+(\\.[0-9]+)?$": { "type": "string" } },
            "additionalProperties": false,
        }),
        kind => serde_json::json!({
            "description": format!("{} {}.", metric.about(), kind.example().trim_start_matches("write ")),
            "type": "string",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_metric() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Metric::from_name("ttft.p99"), None);
    }

    fn read(text: &str) -> SloThresholds {
        SloThresholds::read(&yaml_serde::from_str(text).unwrap())
    }

    #[test]
    fn entries_and_settings_read_into_their_types() {
        let read = read(
            "preset: redlines\nconfidence: 99%\nabort_on_fail: true\ndelay: 10s\nttft: { p99: \"<= 350ms\", p99.9: \"< 1s\" }\nerror_rate{kind=timeout}: \"<= 0.1%\"\n",
        );
        assert_eq!(read.problems, vec![]);
        assert_eq!(read.preset, Some(Preset::Redlines));
        assert_eq!(read.confidence, Some(0.99));
        assert_eq!(read.abort_on_fail, Some(true));
        assert_eq!(read.delay, Some(Duration::from_secs(10)));
        assert_eq!(read.entries.len(), 2);
        let ttft = &read.entries[0];
        assert_eq!((ttft.metric, ttft.limits.len()), (Metric::Ttft, 2));
        let p999 = ttft.limits[1].percentile.as_ref().unwrap();
        assert_eq!(p999.written, "p99.9");
        assert!((p999.quantile - 0.999).abs() < 1e-12);
        let timeouts = &read.entries[1];
        assert_eq!(timeouts.metric, Metric::ErrorRate);
        assert_eq!(timeouts.error_kind.as_deref(), Some("timeout"));
        assert_eq!(timeouts.limits[0].expression, "<= 0.1%");
    }

    #[test]
    fn every_problem_is_kept_with_its_path() {
        let read = read(
            "ttf: { p99: \"<= 350ms\" }\nconfidence: 40%\nitl: \"<= 5ms\"\ntpot: { p99: \"<= 9ms\", max: \"<= 20ms\" }\nrecall{kind=x}: \">= 90%\"\n",
        );
        let paths: Vec<_> = read.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".ttf",
                ".confidence",
                ".itl",
                ".tpot.max",
                ".recall{kind=x}"
            ]
        );
        assert!(
            read.problems[0]
                .fix
                .as_deref()
                .unwrap()
                .starts_with("did you mean `ttft`?")
        );
        assert_eq!(
            read.entries.len(),
            1,
            "tpot's good percentile is still read"
        );
    }
}
