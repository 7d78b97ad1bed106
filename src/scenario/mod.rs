//! The validated scenario: what a spec file (or the CLI's shorthands, which build the
//! same spec types) means, checked once. Every problems is reported together, each with
//! the file, line and field it comes from.

mod disruption;
pub mod flow;
pub mod feedback;
pub mod media;
pub mod mix;
mod prompts;
mod service;
mod stages;

use disruption::*;
pub use disruption::{Disruption, Replica};
pub(crate) use prompts::llm_api;
use prompts::*;
use service::*;
use stages::*;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use hyper::header::{HeaderName, HeaderValue};

use crate::chaos::RuleDef;
use crate::client::Timeouts;
use crate::client::dialect::LlmApi;
use crate::client::tls::{TlsOptions, TlsSettings};
use crate::metrics::RequestSlo;
use crate::scenario::flow::FlowPlan;
use crate::schedule::{
    ArrivalProcess, ClosedStage, OpenStage, ReplayStage, Stage, SweepStage, Unit,
};
use crate::sim::tiers::TierConfig;
use crate::slo::SloSet;
use crate::slo::streaming::StreamingPlan;
use crate::spec::{
    ApiKind, ArrivalKind, DatasetFormat, DatasetOrder, HttpRequestSpec, InferenceSpec, Problem,
    Problems, PromptsSpec, ServiceSpec, SpecErrors, SpecFile, StageSpec,
};
use crate::tokenizer::{DEFAULT_MAX_COUNT_BYTES, LocalTokenizer, TokenCounting};
use crate::workload::mcp::McpWorkload;
use crate::workload::mooncake::TracePrompts;
use crate::workload::{Length, PromptSource};

/// Where the service is.
#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    /// Start the built-in simulator with this profile.
    Embedded { profile: String },
    /// `http://host:port` (no trailing slash, no `/v1`).
    Url(String),
    /// The run's own balancer in front of these replicas.
    Balanced {
        replicas: Vec<Replica>,
        balance: crate::chaos::balance::Balance,
    },
    /// An MCP server started per session from this argv, spoken to over stdio.
    Stdio { command: Vec<String> },
}

/// The service the load goes to.
#[derive(Debug, Clone)]
pub struct Service {
    pub name: String,
    pub endpoint: Endpoint,
    /// `None` only for an embedded simulator (its own model name is used).
    pub model: Option<String>,
    /// `Bearer <key>`, marked sensitive (never printed, never recorded).
    pub api_key: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub http2: bool,
    /// What it speaks (an embedded gRPC service is the simulator's listener for it).
    pub api: crate::spec::ApiKind,
    /// Certificates for an https service (none: the system's roots).
    pub tls: Option<TlsSettings>,
    /// Counts what the server does not report.
    pub counting: TokenCounting,
}

impl Service {
    /// A keep-alive pool for this service's requests: its HTTP version, its TLS.
    pub fn http_client(&self, timeouts: &Timeouts) -> crate::client::HttpClient {
        crate::client::http_client_with(timeouts, self.http2, self.tls.as_ref())
    }
}

/// What each request sends.
#[derive(Debug, Clone)]
pub enum Workload {
    /// An OpenAI-compatible API, with prompts from a source.
    Llm {
        api: LlmApi,
        prompts: PromptSource,
        stream: bool,
        include_usage: bool,
        /// Merged into every request body.
        extra_body: serde_json::Map<String, serde_json::Value>,
    },
    /// A plain HTTP request, the same every time.
    Http(HttpRequest),
    /// Images, transcriptions or speech.
    Media(media::MediaWorkload),
    /// MCP calls, drawn from an operation mix.
    Mcp(Arc<crate::workload::mcp::McpWorkload>),
    /// Several services on one arrival process, drawn by weight.
    Mix(Vec<mix::MixEntry>),
}

/// A validated plain HTTP request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: Method,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub expect_status: Option<u16>,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    /// Every service the run calls, by name: the payload's and a flow's steps'.
    pub services: BTreeMap<String, Service>,
    /// The one the payload calls (a flow's: its first step's); see [`Scenario::service`].
    pub main_service: String,
    /// How the embedded simulator's search and tool tiers behave.
    pub sim_tiers: TierConfig,
    pub workload: Workload,
    pub stages: Vec<Stage>,
    /// The prompts of the replay stages' traces; a replay stage names its own.
    pub traces: Vec<TracePrompts>,
    pub warmup: Duration,
    pub cooldown: Duration,
    pub timeouts: Timeouts,
    pub trace_ids: crate::spec::TraceIds,
    /// This process's share of the run (`--segment`); the whole run by default.
    pub segment: crate::schedule::segment::Segment,
    /// Largest response read (`limits.max_response_bytes`).
    pub max_response_bytes: usize,
    pub max_in_flight: u32,
    pub drain_timeout: Duration,
    /// Per-request SLOs of goodput, when the spec sets them.
    pub goodput: Option<RequestSlo>,
    /// The gate, from a `ScaleSpec`'s `sloThresholds`.
    pub slos: Option<SloSet>,
    /// SLOs watched window by window, from a `ScaleSpec`'s `streaming`.
    pub streaming: Option<StreamingPlan>,
    /// Multi-turn sessions, when the payload template asks for them.
    pub session: Option<SessionPlan>,
    /// Scraping of the server's metrics: an explicit URL (else the service's
    /// `/metrics`) and the interval.
    pub scrape: Option<ScrapePlan>,
    /// Fault rules for a chaos proxy in front of the service (validated).
    pub faults: Vec<RuleDef>,
    /// A RAG or agent chain each session runs, when the payload template has a flow.
    pub flow: Option<Arc<FlowPlan>>,
    /// The remediation agent a failed run is handed to.
    pub remediate: Option<crate::spec::RemediateSpec>,
    /// Restarts and hooks during the run.
    pub disruptions: Vec<Disruption>,
    /// Rates set by a gauge of GPU memory (`spec.feedback`).
    pub feedback: Option<feedback::FeedbackPlan>,
}

/// `remediate:` with its runbook found beside the spec.
fn remediate_from_spec(
    spec: &InferenceSpec,
    spec_dir: &Path,
    problems: &mut Problems,
) -> Option<crate::spec::RemediateSpec> {
    let mut remediate = spec.remediate.clone()?;
    remediate.runbook = spec_dir.join(&remediate.runbook);
    if !remediate.runbook.is_file() {
        problems.add(
            "spec.remediate.runbook",
            format!("{} is not a file", remediate.runbook.display()),
            Some("give the runbook's path relative to the spec (see docs/heal.md)".into()),
        );
        return None;
    }
    Some(remediate)
}

/// Default of `limits.max_response_bytes`.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Validated multi-turn sessions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionPlan {
    pub turns: Length,
    pub think_time: Duration,
    pub history: crate::spec::HistoryMode,
}

/// Every service of the spec, checked, by name.
fn services_from_spec(
    spec: &InferenceSpec,
    spec_dir: &Path,
    problems: &mut Problems,
) -> BTreeMap<String, Service> {
    let max_count_bytes = spec
        .limits
        .max_local_count_bytes
        .map_or(DEFAULT_MAX_COUNT_BYTES, |s| s.0 as usize);
    spec.services
        .iter()
        .filter_map(|(name, s)| service_from_spec(name, s, spec_dir, max_count_bytes, problems))
        .map(|s| (s.name.clone(), s))
        .collect()
}

/// The ScaleSpec's gate: its SLOs, and the streaming plan of its windowed ones.
fn gate_from_spec(
    file: &SpecFile,
    problems: &mut Problems,
) -> (Option<SloSet>, Option<StreamingPlan>) {
    let slos = file
        .scale
        .as_ref()
        .filter(|scale| !scale.slo_thresholds.is_empty())
        .and_then(|scale| SloSet::from_spec(&scale.slo_thresholds, problems));
    let streaming = StreamingPlan::build(
        file.scale
            .as_ref()
            .and_then(|scale| scale.streaming.as_ref()),
        slos.as_ref(),
        problems,
    );
    (slos, streaming)
}

impl Scenario {
    /// Gives this scenario its share of the run. A sweep is refused: its rates come from
    /// the throughput its closed-loop points measure, which each worker would measure
    /// alone.
    pub fn take_segment(
        &mut self,
        segment: crate::schedule::segment::Segment,
    ) -> Result<(), String> {
        if !segment.is_whole() && self.stages.iter().any(|s| matches!(s, Stage::Sweep(_))) {
            return Err(format!(
                "--segment {segment}: a sweep cannot be split, as its rates come from the \
                 throughput its first points measure; give the sweep's rates as open-loop \
                 stages instead"
            ));
        }
        self.segment = segment;
        Ok(())
    }

    /// An aggregator for this scenario: its goodput SLOs and its recall bar.
    pub fn aggregator(&self) -> crate::metrics::Aggregator {
        let mut aggregator = crate::metrics::Aggregator::new(self.goodput);
        if let Some(threshold) = self.flow.as_ref().and_then(|f| f.recall_threshold()) {
            aggregator.flow.recall_threshold = threshold;
        }
        aggregator
    }

    /// Validates a parsed spec; `text` is the file's text, to locate problems.
    pub fn from_spec(file: &SpecFile, text: &str) -> Result<Scenario, SpecErrors> {
        let spec = &file.inference;
        let mut problems = Problems::new();

        let spec_dir = Path::new(&file.path).parent().unwrap_or(Path::new(""));
        // Every service is checked, used or not; then the one the payload calls.
        let mut resolved = services_from_spec(spec, spec_dir, &mut problems);
        let flow = crate::scenario::flow::from_spec(
            &spec.payload_template,
            &spec.services,
            &resolved,
            spec_dir,
            &mut problems,
        );
        embedded_profiles_agree(spec, &mut problems);
        let service_name = main_service(spec, flow.as_ref(), &mut problems);
        let service = service_name.as_ref().and_then(|n| resolved.get(n));
        let tokenizer = service
            .as_ref()
            .map_or(LocalTokenizer::Sim, |s| s.counting.tokenizer.clone());

        // What each request sends, checked against the service's API.
        let api = service_name
            .as_deref()
            .and_then(|n| spec.services.get(n))
            .map(|s| s.api)
            // A flow's prompts feed its steps, whatever API the first one speaks.
            .map(|api| if flow.is_some() { ApiKind::Chat } else { api });
        let workload = workload_from_spec(file, api, tokenizer, &resolved, &mut problems);
        let stdio = service.is_some_and(|s| matches!(s.endpoint, Endpoint::Stdio { .. }));
        if stdio && spec.payload_template.mcp.as_ref().is_some_and(|m| m.listen) {
            problems.add(
                "spec.payloadTemplate.mcp.listen",
                "opens Streamable HTTP's GET stream; a stdio server's messages come on its output, which is always read".into(),
                Some("remove `listen`".into()),
            );
        }

        let feedback = feedback::feedback_from_spec(spec, &mut problems);
        let (stages, traces) = stages_from_spec(spec, spec_dir, feedback.as_ref(), &mut problems);

        let timeouts = timeouts_from_spec(&spec.timeouts);
        let goodput = goodput_from_spec(spec, &mut problems);
        let session = session_from_spec(spec, workload.as_ref(), &mut problems);
        let (slos, streaming) = gate_from_spec(file, &mut problems);
        let scrape = scrape_from_spec(spec, &mut problems);
        if spec.max_in_flight == Some(0) {
            problems.add("spec.max_in_flight", "must be at least 1".into(), None);
        }
        let called = service_name.as_deref().unwrap_or("llm");
        let faults = faults_from_spec(spec, called, flow.as_ref(), &mut problems);
        let remediate = remediate_from_spec(spec, spec_dir, &mut problems);
        let disruptions = disruptions_from_spec(spec, &resolved, &mut problems);
        if !problems.is_empty() {
            return Err(problems.located(&file.path, text));
        }
        let main = service_name.expect("no problems means a service");
        let mixed = |name: &String| spec.payload_template.mix.iter().any(|e| e.service == *name);
        resolved.retain(|name, _| {
            *name == main
                || mixed(name)
                || flow.as_ref().is_some_and(|f| f.services.contains_key(name))
        });
        let sim_tiers = embedded_tiers(&resolved, &spec.services);
        Ok(Scenario {
            name: if file.metadata.name.is_empty() {
                "redline".into()
            } else {
                file.metadata.name.clone()
            },
            seed: spec.seed,
            main_service: main,
            services: resolved,
            sim_tiers,
            workload: workload.expect("no errors means a workload"),
            stages,
            traces,
            warmup: spec.warmup.0,
            cooldown: spec.cooldown.0,
            timeouts,
            trace_ids: spec.trace_ids,
            segment: crate::schedule::segment::Segment::WHOLE,
            max_response_bytes: spec
                .limits
                .max_response_bytes
                .map_or(DEFAULT_MAX_RESPONSE_BYTES, |s| s.0 as usize),
            max_in_flight: spec.max_in_flight.unwrap_or(10_000),
            drain_timeout: spec.drain_timeout.map_or(Duration::from_secs(10), |d| d.0),
            goodput,
            slos,
            streaming,
            session,
            scrape,
            faults,
            flow: flow.map(Arc::new),
            remediate,
            disruptions,
            feedback,
        })
    }

    /// The service the payload calls.
    pub fn service(&self) -> &Service {
        &self.services[&self.main_service]
    }

    /// Every service the run calls, the payload's first.
    pub fn called_services(&self) -> impl Iterator<Item = &Service> {
        let others = self
            .services
            .values()
            .filter(|s| s.name != self.main_service);
        std::iter::once(self.service()).chain(others)
    }

    /// What the workload's dataset held, when it reads one.
    pub fn dataset_info(&self) -> Option<crate::workload::dataset::DatasetInfo> {
        match &self.workload {
            Workload::Llm {
                prompts: PromptSource::Dataset(dataset),
                ..
            } => Some(dataset.info.clone()),
            _ => None,
        }
    }

    /// What a reader of the results must know first: services whose certificates were
    /// not checked.
    pub fn warnings(&self) -> Vec<String> {
        self.called_services()
            .filter(|s| s.tls.as_ref().is_some_and(TlsSettings::insecure))
            .map(|s| {
                format!(
                    "TLS certificates of `{}` were not verified (insecure_skip_verify / --insecure): the server's identity is unchecked",
                    s.name
                )
            })
            .chain(self.unbounded_answers())
            .collect()
    }

    /// Answers whose length only the server decides: a flow's chat steps without
    /// `max_tokens` (a flow's steps never take the dataset's), else dataset prompts
    /// without one.
    fn unbounded_answers(&self) -> Vec<String> {
        if let Some(flow) = &self.flow {
            return flow
                .steps
                .iter()
                .filter(|s| matches!(&s.kind, flow::StepKind::Chat(chat) if chat.max_tokens.is_none()))
                .map(|s| {
                    format!(
                        "flow step `{}` sets no max_tokens: the server decides how long its answers are (set `max_tokens` on the step)",
                        s.name
                    )
                })
                .collect();
        }
        self.dataset_info()
            .filter(|d| d.without_max_tokens > 0)
            .map(|d| {
                format!(
                    "{} of the {} prompts of {} carry no max_tokens: the server decides how long those answers are (set `output_tokens` on the dataset, or --output-tokens)",
                    d.without_max_tokens, d.used, d.file
                )
            })
            .into_iter()
            .collect()
    }

    /// What the load counts: sessions when each arrival is a flow or a conversation.
    pub fn unit(&self) -> Unit {
        if self.flow.is_some() || self.session.is_some() {
            Unit::Sessions
        } else {
            Unit::Requests
        }
    }

    /// When the schedule ends, if every stage is bounded in time.
    pub fn planned_duration(&self) -> Option<Duration> {
        self.stages.iter().map(Stage::duration).sum()
    }
}

/// Embedded services share one simulator, so at most one of them names a profile.
fn embedded_profiles_agree(spec: &InferenceSpec, problems: &mut Problems) {
    let profiles: BTreeSet<&str> = spec
        .services
        .values()
        .filter(|s| s.url == "embedded")
        .map(|s| s.profile.as_deref().unwrap_or("7b"))
        .collect();
    if profiles.len() > 1
        && spec
            .services
            .values()
            .filter(|s| s.url == "embedded" && s.profile.is_some())
            .count()
            > 1
    {
        problems.add(
            "spec.services",
            format!(
                "embedded services share one simulator, but name {} profiles ({})",
                profiles.len(),
                profiles.iter().copied().collect::<Vec<_>>().join(", ")
            ),
            Some("set `profile` on one embedded service only".into()),
        );
    }
}

/// The service the payload calls: the one named, the only one, `llm`, or a flow's
/// first step's; reported when it is not under `spec.services`.
fn main_service(
    spec: &InferenceSpec,
    flow: Option<&FlowPlan>,
    problems: &mut Problems,
) -> Option<String> {
    let names: Vec<&str> = spec.services.keys().map(String::as_str).collect();
    let service_name = match &spec.payload_template.service {
        Some(name) => Some(name.clone()),
        // A mix's first service is the one its header and scrapes name.
        None if !spec.payload_template.mix.is_empty() => {
            Some(spec.payload_template.mix[0].service.clone())
        }
        None if names.len() == 1 => Some(names[0].to_owned()),
        None if names.contains(&"llm") => Some("llm".to_owned()),
        // A flow calls many services; its prompts are the first step's input.
        None => flow
            .as_ref()
            .and_then(|f| f.steps.first())
            .map(|s| s.service.clone()),
    };
    let known = service_name
        .as_deref()
        .is_some_and(|n| spec.services.contains_key(n));
    if !known {
        let (message, near) = match &service_name {
            Some(n) => (
                format!("names service `{n}`, which is not under spec.services"),
                crate::spec::error::nearest(n, &names),
            ),
            None => ("does not say which service to call".into(), None),
        };
        let fix = match near {
            Some(near) => format!("did you mean `{near}`? Choose from: {}", names.join(", ")),
            None if names.is_empty() => {
                "add a service under spec.services, e.g. `llm: { url: embedded }`".into()
            }
            None => format!("set `service:` to one of: {}", names.join(", ")),
        };
        problems.add("spec.payloadTemplate.service", message, Some(fix));
    }
    service_name
}

fn timeouts_from_spec(t: &crate::spec::TimeoutsSpec) -> Timeouts {
    let defaults = Timeouts::default();
    Timeouts {
        connect: t.connect.map_or(defaults.connect, |d| d.0),
        first_token: t.first_token.map_or(defaults.first_token, |d| d.0),
        between_tokens: t.between_tokens.map_or(defaults.between_tokens, |d| d.0),
        total: t.total.map_or(defaults.total, |d| d.0),
    }
}

/// The per-request bounds of goodput, when set.
fn goodput_from_spec(spec: &InferenceSpec, problems: &mut Problems) -> Option<RequestSlo> {
    spec.goodput.and_then(|g| {
        let ms = |d: Option<crate::spec::Dur>| d.map(|d| d.0.as_secs_f64() * 1e3);
        let slo = RequestSlo {
            ttft_ms: ms(g.ttft),
            tpot_ms: ms(g.tpot),
            e2e_ms: ms(g.e2e),
            correct: g.correct,
        };
        let graded = spec
            .payload_template
            .prompts
            .as_ref()
            .and_then(|p| p.dataset.as_ref())
            .is_some_and(|d| d.grader.is_some());
        if slo.correct && !graded {
            problems.add(
                "spec.goodput.correct",
                "needs graded answers: no dataset here has a `grader`".into(),
                Some("add `grader: { type: … }` to `prompts.dataset`, or drop `correct`".into()),
            );
            return None;
        }
        if slo == RequestSlo::default() {
            problems.add(
                "spec.goodput",
                "sets no bound".into(),
                Some(
                    "give at least one of `ttft`, `tpot`, `e2e`, `correct`, e.g. `goodput: { ttft: 500ms }`"
                        .into(),
                ),
            );
            return None;
        }
        Some(slo)
    })
}

/// Multi-turn sessions, which need a chat service.
fn session_from_spec(
    spec: &InferenceSpec,
    workload: Option<&Workload>,
    problems: &mut Problems,
) -> Option<SessionPlan> {
    spec.payload_template.session.as_ref().and_then(|session| {
        let api = match workload {
            Some(Workload::Llm { api, .. }) => Some(*api),
            _ => None,
        };
        let messages = matches!(
            api,
            Some(LlmApi::Chat | LlmApi::Responses | LlmApi::Anthropic)
        );
        if !messages {
            problems.add(
                "spec.payloadTemplate.session",
                "needs a chat, responses or anthropic service: a session sends its history as messages".into(),
                Some("use `api: chat` (the default), `responses` or `anthropic` on the service".into()),
            );
            return None;
        }
        if session.history == crate::spec::HistoryMode::Server && api != Some(LlmApi::Responses) {
            problems.add(
                "spec.payloadTemplate.session.history",
                "`server` keeps the history on the server, which only OpenAI's Responses API does".into(),
                Some("use `api: responses` on the service, or `history: resend`".into()),
            );
            return None;
        }
        Length::from_spec(&session.turns)
            .map_err(|e| problems.add("spec.payloadTemplate.session.turns", e, None))
            .ok()
            .map(|turns| SessionPlan {
                turns,
                think_time: session.think_time.map_or(Duration::ZERO, |d| d.0),
                history: session.history,
            })
    })
}

/// Where and how often to scrape the server's Prometheus metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapePlan {
    /// An explicit URL; else the service's `/metrics`.
    pub url: Option<hyper::Uri>,
    pub interval: Duration,
}

fn scrape_from_spec(spec: &InferenceSpec, problems: &mut Problems) -> Option<ScrapePlan> {
    spec.server_metrics.as_ref().and_then(|m| {
        let interval = m.interval.map_or(Duration::from_secs(1), |d| d.0);
        if interval < Duration::from_millis(100) {
            problems.add(
                "spec.server_metrics.interval",
                "must be at least 100ms".into(),
                None,
            );
            return None;
        }
        let url = match &m.url {
            None => None,
            Some(url) => match url.parse::<hyper::Uri>() {
                Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) => Some(uri),
                _ => {
                    problems.add(
                        "spec.server_metrics.url",
                        format!("`{url}` is not an http:// or https:// URL"),
                        Some("e.g. `url: http://127.0.0.1:8000/metrics`".into()),
                    );
                    return None;
                }
            },
        };
        Some(ScrapePlan { url, interval })
    })
}

/// The fault rules, each in front of a service the run calls, validated.
fn faults_from_spec(
    spec: &InferenceSpec,
    called: &str,
    flow: Option<&FlowPlan>,
    problems: &mut Problems,
) -> Vec<RuleDef> {
    let names: Vec<&str> = spec.services.keys().map(String::as_str).collect();
    let flow_services: Vec<&str> = flow
        .map(|f| f.services.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let mut faults = Vec::new();
    for (i, rule) in spec.faults.iter().enumerate() {
        let at = format!("spec.faults[{i}]");
        match rule.service.as_deref() {
            None => problems.add(
                &format!("{at}.name"),
                "the rule names no service".into(),
                Some(format!(
                    "add `service: {called}`: the proxy sits in front of one service"
                )),
            ),
            Some(name) if !spec.services.contains_key(name) => problems.add(
                &format!("{at}.service"),
                format!("names service `{name}`, which is not under spec.services"),
                Some(format!("choose from: {}", names.join(", "))),
            ),
            Some(name) if name != called && !flow_services.contains(&name) => problems.add(
                &format!("{at}.service"),
                format!("the run sends no traffic to `{name}`; it calls `{called}`"),
                Some(format!("put the rule in front of `{called}`")),
            ),
            Some(name) if spec.services[name].api == ApiKind::Pgvector => problems.add(
                &format!("{at}.service"),
                format!("`{name}` speaks PostgreSQL's protocol; the chaos proxy speaks HTTP"),
                Some("inject search faults into an HTTP vector store (`api: qdrant`)".into()),
            ),
            Some(name) if spec.services[name].url == "stdio" => problems.add(
                &format!("{at}.service"),
                format!("`{name}` is an MCP server over stdio; the chaos proxy speaks HTTP"),
                Some(
                    "inject MCP faults in front of a Streamable HTTP server (`url: http://…/mcp`)"
                        .into(),
                ),
            ),
            Some(name) => {
                let url = &spec.services[name].url;
                if url != "embedded" && crate::chaos::upstream_uri(url, false).is_err() {
                    problems.add(
                        &format!("{at}.service"),
                        format!(
                            "`{name}` is at {url}, not on loopback: a run injects faults only into services on this machine"
                        ),
                        Some(format!(
                            "run `redline chaos --upstream {url} --allow-remote-upstream` yourself and point the service's url at it"
                        )),
                    );
                }
            }
        }
        if spec.faults[..i].iter().any(|r| r.name == rule.name) {
            problems.add(
                &format!("{at}.name"),
                format!("a rule named `{}` comes earlier", rule.name),
                Some("give every rule its own name".into()),
            );
        }
        match RuleDef::validate(rule, &at) {
            Ok(def) => faults.push(def),
            Err(found) => problems.extend(found),
        }
    }
    faults
}
