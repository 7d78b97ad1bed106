//! The validated scenario: what a spec file (or the CLI's shorthands, which build the
//! same spec types) means, checked once. Every problem is reported together, each with
//! the file, line and field it comes from.

pub mod flow;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use hyper::header::{HeaderName, HeaderValue};

use crate::chaos::RuleDef;
use crate::client::Timeouts;
use crate::client::openai::Api;
use crate::client::tls::{TlsOptions, TlsSettings};
use crate::metrics::RequestSlo;
use crate::scenario::flow::FlowPlan;
use crate::schedule::{Arrival, ClosedStage, OpenStage, ReplayStage, Stage, SweepStage, Unit};
use crate::slo::SloSet;
use crate::spec::error::locate;
use crate::spec::{
    ApiKind, ArrivalKind, DatasetFormat, DatasetOrder, HttpRequestSpec, InferenceSpec, PromptsSpec,
    ServiceSpec, SpecError, SpecErrors, SpecFile, StageSpec,
};
use crate::tokenizer::{DEFAULT_MAX_COUNT_BYTES, LocalTokenizer, TokenCounting};
use crate::workload::{Length, PromptSource};

/// Where the service is.
#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    /// Start the built-in simulator with this profile.
    Embedded { profile: String },
    /// `http://host:port` (no trailing slash, no `/v1`).
    Url(String),
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
        api: Api,
        prompts: PromptSource,
        stream: bool,
        include_usage: bool,
        /// Merged into every request body.
        extra_body: serde_json::Map<String, serde_json::Value>,
    },
    /// A plain HTTP request, the same every time.
    Http(HttpRequest),
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
    pub service: Service,
    pub workload: Workload,
    pub stages: Vec<Stage>,
    pub warmup: Duration,
    pub cooldown: Duration,
    pub timeouts: Timeouts,
    pub trace_ids: crate::spec::TraceIds,
    /// Largest response read (`limits.max_response_bytes`).
    pub max_response_bytes: usize,
    pub max_in_flight: u32,
    pub drain_timeout: Duration,
    /// Per-request SLOs of goodput, when the spec sets them.
    pub goodput: Option<RequestSlo>,
    /// The gate, from a `ScaleSpec`'s `sloThresholds`.
    pub slos: Option<SloSet>,
    /// Multi-turn sessions, when the payload template asks for them.
    pub session: Option<SessionPlan>,
    /// Scraping of the server's metrics: an explicit URL (else the service's
    /// `/metrics`) and the interval.
    pub scrape: Option<(Option<String>, Duration)>,
    /// Fault rules for a chaos proxy in front of the service (validated).
    pub faults: Vec<RuleDef>,
    /// A RAG or agent chain each session runs, when the payload template has a flow.
    pub flow: Option<Arc<FlowPlan>>,
}

/// Default of `limits.max_response_bytes`.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Validated multi-turn sessions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionPlan {
    pub turns: Length,
    pub think_time: Duration,
}

impl Scenario {
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
        let mut errors = Vec::new();
        let mut problem = |path: &str, message: String, fix: Option<String>| {
            let (line, column) = locate(text, path);
            errors.push(SpecError {
                file: file.path.clone(),
                line,
                column,
                path: path.to_owned(),
                message,
                fix,
            });
        };

        let spec_dir = Path::new(&file.path).parent().unwrap_or(Path::new(""));
        // Every service is checked, used or not; then the one the payload calls.
        let max_count_bytes = spec
            .limits
            .max_local_count_bytes
            .map_or(DEFAULT_MAX_COUNT_BYTES, |s| s.0 as usize);
        let services: Vec<Service> = spec
            .services
            .iter()
            .filter_map(|(name, s)| {
                service_from_spec(name, s, spec_dir, max_count_bytes, &mut problem)
            })
            .collect();
        let resolved: BTreeMap<String, Service> = services
            .iter()
            .map(|s| (s.name.clone(), s.clone()))
            .collect();
        let flow = crate::scenario::flow::from_spec(
            &spec.payload_template,
            &spec.services,
            &resolved,
            spec_dir,
            &mut problem,
        );
        embedded_profiles_agree(spec, &mut problem);
        let service_name = main_service(spec, flow.as_ref(), &mut problem);
        let service = services
            .into_iter()
            .find(|s| Some(&s.name) == service_name.as_ref());
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
        let workload = workload_from_spec(file, api, tokenizer, &mut problem);

        let stages = stages_from_spec(spec, spec_dir, &mut problem);

        let timeouts = timeouts_from_spec(&spec.timeouts);
        let goodput = goodput_from_spec(spec, &mut problem);
        let session = session_from_spec(spec, workload.as_ref(), &mut problem);
        let slos = file
            .scale
            .as_ref()
            .filter(|scale| !scale.slo_thresholds.is_empty())
            .and_then(|scale| SloSet::from_spec(&scale.slo_thresholds, &mut problem));
        let scrape = scrape_from_spec(spec, &mut problem);
        if spec.max_in_flight == Some(0) {
            problem("spec.max_in_flight", "must be at least 1".into(), None);
        }
        let called = service_name.as_deref().unwrap_or("llm");
        let faults = faults_from_spec(spec, called, flow.as_ref(), &mut problem);
        if !errors.is_empty() {
            // In file order, as a reader goes through the file to fix them.
            errors.sort_by_key(|e| (e.line, e.column));
            return Err(SpecErrors(errors));
        }
        Ok(Scenario {
            name: if file.metadata.name.is_empty() {
                "redline".into()
            } else {
                file.metadata.name.clone()
            },
            seed: spec.seed,
            service: service.expect("no errors means a service"),
            workload: workload.expect("no errors means a workload"),
            stages,
            warmup: spec.warmup.0,
            cooldown: spec.cooldown.0,
            timeouts,
            trace_ids: spec.trace_ids,
            max_response_bytes: spec
                .limits
                .max_response_bytes
                .map_or(DEFAULT_MAX_RESPONSE_BYTES, |s| s.0 as usize),
            max_in_flight: spec.max_in_flight.unwrap_or(10_000),
            drain_timeout: spec.drain_timeout.map_or(Duration::from_secs(10), |d| d.0),
            goodput,
            slos,
            session,
            scrape,
            faults,
            flow: flow.map(Arc::new),
        })
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
        let flow_services = self
            .flow
            .iter()
            .flat_map(|f| f.services.values().map(|s| &s.service));
        let mut named = BTreeSet::new();
        std::iter::once(&self.service)
            .chain(flow_services)
            .filter(|s| s.tls.as_ref().is_some_and(TlsSettings::insecure))
            .filter(|s| named.insert(s.name.clone()))
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

/// A validated prompt source, or `None` after reporting why not.
fn prompts_from_spec(
    prompts: &PromptsSpec,
    spec_path: &str,
    seed: u64,
    tokenizer: LocalTokenizer,
    problem: &mut Problem,
) -> Option<PromptSource> {
    let given = [
        prompts.synthetic.is_some(),
        prompts.file.is_some(),
        prompts.dataset.is_some(),
        prompts.templates.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        problem(
            "spec.payloadTemplate.prompts",
            "needs exactly one source".into(),
            Some(
                "give `synthetic: {…}`, `file: prompts.jsonl`, `dataset: { file: … }` or `templates: { file: templates.yaml, output_tokens: 128 }`"
                    .into(),
            ),
        );
        return None;
    }
    let relative = |path: &Path| {
        Path::new(spec_path)
            .parent()
            .unwrap_or(Path::new("."))
            .join(path)
    };
    if let Some(t) = &prompts.templates {
        return templates_source(t, &relative(&t.file), tokenizer, problem);
    }
    if let Some(s) = &prompts.synthetic {
        return synthetic_source(s, seed, problem);
    }
    if let Some(path) = &prompts.file {
        return file_source(&relative(path), tokenizer, problem);
    }
    let d = prompts.dataset.as_ref()?;
    dataset_source(d, &relative(&d.file), tokenizer, problem)
}

fn templates_source(
    t: &crate::spec::TemplatesSpec,
    path: &Path,
    tokenizer: LocalTokenizer,
    problem: &mut Problem,
) -> Option<PromptSource> {
    let generator = crate::workload::datagen::Generator::load(path)
        .map_err(|e| problem("spec.payloadTemplate.prompts.templates.file", e, None))
        .ok();
    let output = Length::from_spec(&t.output_tokens)
        .map_err(|e| {
            problem(
                "spec.payloadTemplate.prompts.templates.output_tokens",
                e,
                None,
            )
        })
        .ok();
    generator
        .zip(output)
        .map(|(generator, output)| PromptSource::Templates {
            generator,
            output,
            tokenizer,
        })
}

fn synthetic_source(
    s: &crate::spec::SyntheticSpec,
    seed: u64,
    problem: &mut Problem,
) -> Option<PromptSource> {
    let input = Length::from_spec(&s.input_tokens)
        .map_err(|e| {
            problem(
                "spec.payloadTemplate.prompts.synthetic.input_tokens",
                e,
                None,
            )
        })
        .ok();
    let output = Length::from_spec(&s.output_tokens)
        .map_err(|e| {
            problem(
                "spec.payloadTemplate.prompts.synthetic.output_tokens",
                e,
                None,
            )
        })
        .ok();
    if let Some(input) = input
        && s.prefix_tokens > 0
        && input.upper() <= s.prefix_tokens
    {
        problem(
            "spec.payloadTemplate.prompts.synthetic.prefix_tokens",
            format!(
                "{} leaves no room in prompts of at most {} tokens",
                s.prefix_tokens,
                input.upper()
            ),
            Some("make input_tokens longer than prefix_tokens".into()),
        );
    }
    input
        .zip(output)
        .map(|(i, o)| PromptSource::synthetic(i, o, s.prefix_tokens, s.prefixes, seed))
}

/// `prompts: { file: … }`: JSONL prompts in order, with their own max_tokens.
fn file_source(
    path: &Path,
    tokenizer: LocalTokenizer,
    problem: &mut Problem,
) -> Option<PromptSource> {
    let options = crate::workload::dataset::Options {
        format: DatasetFormat::Jsonl,
        prompt_column: "prompt".into(),
        max_tokens_column: None,
        min_input_tokens: 0,
        max_input_tokens: u32::MAX,
        skip_invalid: false,
        tokenizer,
        default_max_tokens: None,
    };
    crate::workload::dataset::load(path, DatasetOrder::Sequential, &options)
        .map(PromptSource::Dataset)
        .map_err(|e| problem("spec.payloadTemplate.prompts.file", e, None))
        .ok()
}

fn dataset_source(
    d: &crate::spec::DatasetSpec,
    path: &Path,
    tokenizer: LocalTokenizer,
    problem: &mut Problem,
) -> Option<PromptSource> {
    let format = d
        .format
        .unwrap_or_else(|| match d.file.extension().and_then(|e| e.to_str()) {
            Some("json") => DatasetFormat::Sharegpt,
            Some("csv") => DatasetFormat::Csv,
            _ => DatasetFormat::Jsonl,
        });
    let (min, max) = (
        d.min_input_tokens.unwrap_or(0),
        d.max_input_tokens.unwrap_or(u32::MAX),
    );
    if min > max {
        problem(
            "spec.payloadTemplate.prompts.dataset.min_input_tokens",
            format!("is above max_input_tokens ({min} > {max})"),
            None,
        );
        return None;
    }
    let default_max_tokens = match &d.output_tokens {
        Some(spec) => Some(
            Length::from_spec(spec)
                .map_err(|e| {
                    problem(
                        "spec.payloadTemplate.prompts.dataset.output_tokens",
                        e,
                        None,
                    )
                })
                .ok()?,
        ),
        None => None,
    };
    let options = crate::workload::dataset::Options {
        default_max_tokens,
        format,
        prompt_column: d.prompt_column.clone().unwrap_or_else(|| "prompt".into()),
        max_tokens_column: d.max_tokens_column.clone(),
        min_input_tokens: min,
        max_input_tokens: max,
        skip_invalid: d.skip_invalid,
        tokenizer,
    };
    crate::workload::dataset::load(path, d.order, &options)
        .map(PromptSource::Dataset)
        .map_err(|e| problem("spec.payloadTemplate.prompts.dataset.file", e, None))
        .ok()
}

fn http_request_from_spec(r: &HttpRequestSpec, problem: &mut Problem) -> Option<HttpRequest> {
    let path = "spec.payloadTemplate.request";
    let method = Method::from_bytes(r.method.as_bytes())
        .map_err(|_| {
            problem(
                &format!("{path}.method"),
                format!("`{}` is not an HTTP method", r.method),
                Some("write e.g. GET or POST".into()),
            )
        })
        .ok();
    if !r.path.starts_with('/') || r.path.parse::<hyper::Uri>().is_err() {
        problem(
            &format!("{path}.path"),
            format!("`{}` is not a path", r.path),
            Some("start it with `/`, e.g. `/health`".into()),
        );
        return None;
    }
    if let Some(status) = r.expect_status
        && !(100..=599).contains(&status)
    {
        problem(
            &format!("{path}.expect_status"),
            format!("{status} is not an HTTP status"),
            None,
        );
    }
    let headers = headers_from_spec(&r.headers, path, problem);
    Some(HttpRequest {
        method: method?,
        path: r.path.clone(),
        headers,
        body: Bytes::from(r.body.clone().unwrap_or_default()),
        expect_status: r.expect_status,
    })
}

/// Embedded services share one simulator, so at most one of them names a profile.
fn embedded_profiles_agree(spec: &InferenceSpec, problem: &mut Problem) {
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
        problem(
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
    problem: &mut Problem,
) -> Option<String> {
    let names: Vec<&str> = spec.services.keys().map(String::as_str).collect();
    let service_name = match &spec.payload_template.service {
        Some(name) => Some(name.clone()),
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
        problem("spec.payloadTemplate.service", message, Some(fix));
    }
    service_name
}

/// What each request sends, checked against the service's API.
fn workload_from_spec(
    file: &SpecFile,
    api: Option<ApiKind>,
    tokenizer: LocalTokenizer,
    problem: &mut Problem,
) -> Option<Workload> {
    let spec = &file.inference;
    let template = &spec.payload_template;
    match (api, &template.prompts, &template.request) {
        (None, prompts, request) => {
            // The service is already reported; still check what the payload says.
            if let Some(prompts) = prompts {
                prompts_from_spec(prompts, &file.path, spec.seed, LocalTokenizer::Sim, problem);
            }
            if let Some(request) = request {
                http_request_from_spec(request, problem);
            }
            None
        }
        (Some(ApiKind::Http), Some(_), _) => {
            problem(
                "spec.payloadTemplate.prompts",
                "applies to chat and completions services, not `api: http`".into(),
                Some("describe the request under `request:` instead".into()),
            );
            None
        }
        (Some(ApiKind::Http), None, None) => {
            problem(
                "spec.payloadTemplate",
                "an `api: http` service needs a `request`".into(),
                Some("add e.g. `request: { method: GET, path: / }`".into()),
            );
            None
        }
        (Some(ApiKind::Http), None, Some(request)) => {
            http_request_from_spec(request, problem).map(Workload::Http)
        }
        (Some(_), _, Some(_)) => {
            problem(
                "spec.payloadTemplate.request",
                "applies only to `api: http` services".into(),
                Some("set `api: http` on the service, or describe prompts instead".into()),
            );
            None
        }
        (Some(_), None, None) => {
            problem(
                "spec.payloadTemplate",
                "needs `prompts`: where do the prompts come from?".into(),
                Some(
                    "add e.g. `prompts: { synthetic: { input_tokens: 256, output_tokens: 128 } }`"
                        .into(),
                ),
            );
            None
        }
        (Some(kind), Some(prompts), None) => {
            prompts_from_spec(prompts, &file.path, spec.seed, tokenizer, problem).map(|prompts| {
                Workload::Llm {
                    api: if kind == ApiKind::Completions {
                        Api::Completions
                    } else {
                        Api::Chat
                    },
                    prompts,
                    stream: template.stream,
                    include_usage: template.include_usage,
                    extra_body: template.body.clone(),
                }
            })
        }
    }
}

/// The stages of `load` (or the `qpsTarget` shorthand).
fn stages_from_spec(spec: &InferenceSpec, spec_dir: &Path, problem: &mut Problem) -> Vec<Stage> {
    let mut stages = Vec::new();
    match (spec.qps_target, spec.load.is_empty()) {
        (Some(_), false) => problem("spec.qpsTarget", "cannot be combined with `load`".into(), Some("keep one: `qpsTarget` + `duration`, or `load` stages".into())),
        (Some(rate), true) if !(rate.is_finite() && rate > 0.0) => problem("spec.qpsTarget", format!("must be a positive number, got {rate}"), None),
        (Some(rate), true) => match spec.duration {
            Some(d) => stages.push(Stage::Open(OpenStage { arrival: Arrival::Constant, rate, ramp_to: None, duration: Some(d.0), requests: None, max_concurrency: None })),
            None => problem("spec.qpsTarget", "needs a `duration`".into(), Some("add e.g. `duration: 60s` beside it".into())),
        },
        (None, true) => problem("spec.load", "no load: nothing to run".into(), Some("add stages, e.g. `load: [{ arrival: poisson, rate: 10, duration: 30s }]`, or `qpsTarget` + `duration`".into())),
        (None, false) => {
            for (i, stage) in spec.load.iter().enumerate() {
                match stage_from_spec(stage, spec_dir) {
                    Ok(stage) => stages.push(stage),
                    Err((field, message, fix)) => problem(&format!("spec.load[{i}]{field}"), message, fix),
                }
            }
        }
    }
    let planned: Option<Duration> = stages.iter().map(Stage::duration).sum();
    if !spec.cooldown.0.is_zero() && planned.is_none() {
        problem(
            "spec.cooldown",
            "needs every stage to have a `duration`, to know when the end is".into(),
            None,
        );
    }
    stages
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
fn goodput_from_spec(spec: &InferenceSpec, problem: &mut Problem) -> Option<RequestSlo> {
    spec.goodput.and_then(|g| {
        let ms = |d: Option<crate::spec::Dur>| d.map(|d| d.0.as_secs_f64() * 1e3);
        let slo = RequestSlo {
            ttft_ms: ms(g.ttft),
            tpot_ms: ms(g.tpot),
            e2e_ms: ms(g.e2e),
        };
        if slo == RequestSlo::default() {
            problem(
                "spec.goodput",
                "sets no bound".into(),
                Some(
                    "give at least one of `ttft`, `tpot`, `e2e`, e.g. `goodput: { ttft: 500ms }`"
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
    problem: &mut Problem,
) -> Option<SessionPlan> {
    spec.payload_template.session.as_ref().and_then(|session| {
        let chat = matches!(workload, Some(Workload::Llm { api: Api::Chat, .. }));
        if !chat {
            problem(
                "spec.payloadTemplate.session",
                "needs a chat service: a session sends its history as messages".into(),
                Some("use `api: chat` (the default) on the service".into()),
            );
            return None;
        }
        Length::from_spec(&session.turns)
            .map_err(|e| problem("spec.payloadTemplate.session.turns", e, None))
            .ok()
            .map(|turns| SessionPlan {
                turns,
                think_time: session.think_time.map_or(Duration::ZERO, |d| d.0),
            })
    })
}

/// Where and how often to scrape the server's Prometheus metrics.
fn scrape_from_spec(
    spec: &InferenceSpec,
    problem: &mut Problem,
) -> Option<(Option<String>, Duration)> {
    spec.server_metrics.as_ref().and_then(|m| {
        let interval = m.interval.map_or(Duration::from_secs(1), |d| d.0);
        if interval < Duration::from_millis(100) {
            problem(
                "spec.server_metrics.interval",
                "must be at least 100ms".into(),
                None,
            );
            return None;
        }
        if let Some(url) = &m.url
            && url
                .parse::<hyper::Uri>()
                .map_or(true, |u| !matches!(u.scheme_str(), Some("http" | "https")))
        {
            problem(
                "spec.server_metrics.url",
                format!("`{url}` is not an http:// or https:// URL"),
                Some("e.g. `url: http://127.0.0.1:8000/metrics`".into()),
            );
            return None;
        }
        Some((m.url.clone(), interval))
    })
}

/// The fault rules, each in front of a service the run calls, validated.
fn faults_from_spec(
    spec: &InferenceSpec,
    called: &str,
    flow: Option<&FlowPlan>,
    problem: &mut Problem,
) -> Vec<RuleDef> {
    let names: Vec<&str> = spec.services.keys().map(String::as_str).collect();
    let flow_services: Vec<&str> = flow
        .map(|f| f.services.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let mut faults = Vec::new();
    for (i, rule) in spec.faults.iter().enumerate() {
        let at = format!("spec.faults[{i}]");
        match rule.service.as_deref() {
            None => problem(
                &format!("{at}.name"),
                "the rule names no service".into(),
                Some(format!(
                    "add `service: {called}`: the proxy sits in front of one service"
                )),
            ),
            Some(name) if !spec.services.contains_key(name) => problem(
                &format!("{at}.service"),
                format!("names service `{name}`, which is not under spec.services"),
                Some(format!("choose from: {}", names.join(", "))),
            ),
            Some(name) if name != called && !flow_services.contains(&name) => problem(
                &format!("{at}.service"),
                format!("the run sends no traffic to `{name}`; it calls `{called}`"),
                Some(format!("put the rule in front of `{called}`")),
            ),
            Some(name) if spec.services[name].api == ApiKind::Pgvector => problem(
                &format!("{at}.service"),
                format!("`{name}` speaks PostgreSQL's protocol; the chaos proxy speaks HTTP"),
                Some("inject search faults into an HTTP vector store (`api: qdrant`)".into()),
            ),
            Some(name) => {
                let url = &spec.services[name].url;
                if url != "embedded" && crate::chaos::upstream_uri(url, false).is_err() {
                    problem(
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
            problem(
                &format!("{at}.name"),
                format!("a rule named `{}` comes earlier", rule.name),
                Some("give every rule its own name".into()),
            );
        }
        match RuleDef::validate(rule, &at) {
            Ok(def) => faults.push(def),
            Err(found) => {
                for p in found {
                    problem(&p.path, p.message, p.fix);
                }
            }
        }
    }
    faults
}

type Problem<'a> = dyn FnMut(&str, String, Option<String>) + 'a;

fn service_from_spec(
    name: &str,
    s: &ServiceSpec,
    spec_dir: &Path,
    max_count_bytes: usize,
    problem: &mut Problem,
) -> Option<Service> {
    let path = format!("spec.services.{name}");
    let endpoint = endpoint_from_spec(s, &path, problem);
    let tls = tls_from_spec(s, &path, spec_dir, problem);
    if let Some(profile) = &s.profile {
        if s.url != "embedded" {
            problem(
                &format!("{path}.profile"),
                "a profile only applies to `url: embedded`".into(),
                Some("remove `profile`, or set `url: embedded`".into()),
            );
        } else if let Err(e) = crate::sim::Profile::load(profile) {
            problem(&format!("{path}.profile"), e.to_string(), None);
        }
    }
    let needs_model = matches!(
        s.api,
        ApiKind::Chat | ApiKind::Completions | ApiKind::Embeddings
    );
    if s.model.is_none() && s.url != "embedded" && needs_model {
        problem(
            &format!("{path}.model"),
            "is required for a real server".into(),
            Some("name the served model, as GET /v1/models lists it".into()),
        );
    }
    let api_key = s
        .api_key_env
        .as_deref()
        .and_then(|var| api_key_from_env(var, &format!("{path}.api_key_env"), problem));
    let headers = headers_from_spec(&s.headers, &path, problem);
    let tokenizer = tokenizer_from_spec(s, &path, spec_dir, problem);
    Some(Service {
        counting: TokenCounting {
            tokenizer: tokenizer?,
            named: s.tokenizer.is_some(),
            always: s.always_count_locally,
            max_bytes: max_count_bytes,
        },
        name: name.to_owned(),
        endpoint: endpoint?,
        model: s.model.clone(),
        api_key,
        headers,
        http2: s.http2,
        tls: tls?,
    })
}

/// Where the service is: the simulator, a PostgreSQL DSN (pgvector), or an http(s)
/// base URL without a trailing `/v1`.
fn endpoint_from_spec(s: &ServiceSpec, path: &str, problem: &mut Problem) -> Option<Endpoint> {
    if s.url == "embedded" {
        if s.api == ApiKind::Pgvector {
            problem(
                &format!("{path}.url"),
                "the simulator speaks Qdrant's API, not PostgreSQL's".into(),
                Some(
                    "set `api: qdrant` for the embedded search tier, or give a postgresql:// URL"
                        .into(),
                ),
            );
            return None;
        }
        Some(Endpoint::Embedded {
            profile: s.profile.clone().unwrap_or_else(|| "7b".into()),
        })
    } else if s.api == ApiKind::Pgvector {
        let is_dsn = s.url.starts_with("postgresql://") || s.url.starts_with("postgres://");
        if !is_dsn || s.url.parse::<tokio_postgres::Config>().is_err() {
            problem(
                &format!("{path}.url"),
                format!("`{}` is not a PostgreSQL connection URL", s.url),
                Some("write e.g. `postgresql://postgres@127.0.0.1:5432/postgres`".into()),
            );
            None
        } else if s.pgvector.is_none() {
            problem(
                &format!("{path}.pgvector"),
                "a pgvector service needs its table".into(),
                Some(
                    "add `pgvector: { table: docs }` (columns default to id, text, embedding)"
                        .into(),
                ),
            );
            None
        } else {
            Some(Endpoint::Url(s.url.clone()))
        }
    } else if let Some(rest) = s
        .url
        .strip_prefix("http://")
        .or(s.url.strip_prefix("https://"))
    {
        if rest.is_empty() || s.url.parse::<hyper::Uri>().is_err() {
            problem(
                &format!("{path}.url"),
                format!("`{}` is not a valid URL", s.url),
                Some("write e.g. `http://127.0.0.1:8000`".into()),
            );
            None
        } else {
            let base = s.url.trim_end_matches('/');
            Some(Endpoint::Url(
                base.strip_suffix("/v1").unwrap_or(base).to_owned(),
            ))
        }
    } else {
        problem(
            &format!("{path}.url"),
            format!(
                "`{}` is neither `embedded` nor an http:// or https:// URL",
                s.url
            ),
            Some("write `embedded` or e.g. `https://llm.example.com`".into()),
        );
        None
    }
}

/// The service's local tokenizer: the one named (a tokenizer.json path is relative to
/// the spec file, like a prompts file), else the simulator's or cl100k.
fn tokenizer_from_spec(
    s: &ServiceSpec,
    path: &str,
    spec_dir: &Path,
    problem: &mut Problem,
) -> Option<LocalTokenizer> {
    let default_tokenizer = if s.url == "embedded" {
        "sim"
    } else {
        "cl100k_base"
    };
    match s.tokenizer.as_deref().unwrap_or(default_tokenizer) {
        // A tokenizer.json path is relative to the spec file, like a prompts file.
        name if LocalTokenizer::NAMES.contains(&name) => LocalTokenizer::by_name(name),
        file if file.ends_with(".json") || spec_dir.join(file).is_dir() => {
            LocalTokenizer::by_name(&spec_dir.join(file).to_string_lossy())
        }
        unknown => LocalTokenizer::by_name(unknown),
    }
    .map_err(|e| problem(&format!("{path}.tokenizer"), e, None))
    .ok()
}

/// The TLS settings of an https service, loaded once (certificates read, the key
/// checked against its certificate); `Some(None)` for an http service.
fn tls_from_spec(
    s: &ServiceSpec,
    path: &str,
    spec_dir: &Path,
    problem: &mut Problem,
) -> Option<Option<TlsSettings>> {
    let https = s.url.starts_with("https://");
    match (&s.tls, https) {
        (None, false) => Some(None),
        (Some(_), false) => {
            problem(
                &format!("{path}.tls"),
                format!("applies to https:// URLs; `{}` is not one", s.url),
                Some("remove `tls`, or write the URL with https://".into()),
            );
            None
        }
        (None, true) => Some(Some(TlsSettings::system())),
        (Some(t), true) => {
            let relative = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| spec_dir.join(p));
            let options = TlsOptions {
                ca_cert: relative(&t.ca_cert),
                client_cert: relative(&t.client_cert),
                client_key: relative(&t.client_key),
                insecure_skip_verify: t.insecure_skip_verify,
            };
            if t.insecure_skip_verify && t.ca_cert.is_some() {
                problem(
                    &format!("{path}.tls.insecure_skip_verify"),
                    "checks nothing, so the `ca_cert` beside it would not be used".into(),
                    Some(
                        "keep one: `ca_cert` to trust a private CA, or `insecure_skip_verify`"
                            .into(),
                    ),
                );
                return None;
            }
            TlsSettings::load(&options)
                .map_err(|e| problem(&format!("{path}.tls.{}", e.field), e.message, None))
                .ok()
                .map(Some)
        }
    }
}

/// Extra request headers, checked once. Their values are marked sensitive: they often
/// carry credentials (`x-api-key`), and nothing redline prints or records shows them.
fn headers_from_spec(
    headers: &BTreeMap<String, String>,
    path: &str,
    problem: &mut Problem,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut valid = Vec::new();
    for (k, v) in headers {
        let at = format!("{path}.headers.{k}");
        let Ok(name) = HeaderName::try_from(k.as_str()) else {
            problem(
                &at,
                format!("`{k}` is not an HTTP header name"),
                Some("use letters, digits and `-`, e.g. `x-api-key`".into()),
            );
            continue;
        };
        match HeaderValue::try_from(v.as_str()) {
            Ok(mut value) => {
                value.set_sensitive(true);
                valid.push((name, value));
            }
            Err(_) => problem(
                &at,
                "its value holds a control character (a newline?), which no header can carry"
                    .into(),
                Some("remove it from the value".into()),
            ),
        }
    }
    valid
}

/// The `Authorization` value of the key in environment variable `var`, checked once
/// here: a key that cannot go in a header (a trailing newline from `echo`, say) is a
/// spec error naming the variable, not a failure of every request.
fn api_key_from_env(var: &str, at: &str, problem: &mut Problem) -> Option<HeaderValue> {
    let key = match std::env::var(var) {
        Ok(key) => key,
        Err(std::env::VarError::NotPresent) => {
            problem(
                at,
                format!("environment variable `{var}` is not set"),
                Some(format!("export {var}=… before the run")),
            );
            return None;
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            problem(
                at,
                format!("environment variable `{var}` is not valid UTF-8"),
                None,
            );
            return None;
        }
    };
    let mut value = match HeaderValue::try_from(format!("Bearer {key}")) {
        Ok(value) => value,
        Err(_) => {
            let what = match key.chars().find(|c| c.is_control()) {
                Some('\n') => "a newline".to_owned(),
                Some(c) => format!("the control character U+{:04X}", c as u32),
                None => "a character an HTTP header cannot carry".to_owned(),
            };
            problem(
                at,
                format!("the key in `{var}` holds {what}, so it cannot be sent as a header"),
                Some(format!(
                    "set it without it, e.g. `export {var}=\"$(printf %s \"${var}\" | tr -d '\\r\\n')\"`"
                )),
            );
            return None;
        }
    };
    value.set_sensitive(true);
    Some(value)
}

type StageProblem = (&'static str, String, Option<String>);

/// The first field that is set but means nothing for this kind of stage, as a problem.
fn reject_set(
    fields: &[(bool, &'static str)],
    message: &str,
    fix: &str,
) -> Result<(), StageProblem> {
    match fields.iter().find(|(set, _)| *set) {
        Some((_, field)) => Err((field, message.into(), Some(fix.into()))),
        None => Ok(()),
    }
}

fn stage_from_spec(s: &StageSpec, spec_dir: &Path) -> Result<Stage, StageProblem> {
    if let Some(replay) = &s.replay {
        return replay_stage(s, replay, spec_dir);
    }
    if s.duration.is_none() && s.requests.is_none() {
        return Err((
            "",
            "a stage needs a `duration` or a `requests` budget".into(),
            Some("add e.g. `duration: 30s`".into()),
        ));
    }
    if s.requests == Some(0) {
        return Err((".requests", "must be at least 1".into(), None));
    }
    let duration = s.duration.map(|d| d.0);
    if let Some(sweep) = s.sweep {
        return sweep_stage(s, sweep, duration);
    }
    match (s.rate, s.concurrency) {
        (Some(_), Some(_)) => Err(("", "has both `rate` (open loop) and `concurrency` (closed loop)".into(), Some("keep one: `rate` for a target request rate, `concurrency` for N sessions back to back".into()))),
        (None, None) => Err(("", "needs `rate` (open loop) or `concurrency` (closed loop)".into(), Some("add e.g. `rate: 10` or `concurrency: 8`".into()))),
        (Some(rate), None) => open_stage(s, rate, duration),
        (None, Some(concurrency)) => closed_stage(s, concurrency, duration),
    }
}

fn replay_stage(
    s: &StageSpec,
    replay: &crate::spec::ReplaySpec,
    spec_dir: &Path,
) -> Result<Stage, StageProblem> {
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
        return Err((
            ".replay.speed",
            format!("must be a positive number, got {speed}"),
            None,
        ));
    }
    let block_tokens = replay.block_tokens.unwrap_or(512);
    if block_tokens == 0 {
        return Err((".replay.block_tokens", "must be at least 1".into(), None));
    }
    let trace = crate::workload::replay::read(&spec_dir.join(&replay.file))
        .map_err(|e| (".replay.file", e, None))?;
    Ok(Stage::Replay(ReplayStage {
        trace: std::sync::Arc::new(trace),
        speed,
        block_tokens,
        file: replay.file.display().to_string(),
    }))
}

fn sweep_stage(
    s: &StageSpec,
    sweep: crate::spec::SweepSpec,
    duration: Option<Duration>,
) -> Result<Stage, StageProblem> {
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
        return Err((".sweep.rates", "must be at least 1".into(), None));
    }
    if sweep.throughput_concurrency == 0 {
        return Err((
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

fn open_stage(s: &StageSpec, rate: f64, duration: Option<Duration>) -> Result<Stage, StageProblem> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err((
            ".rate",
            format!("must be a positive number, got {rate}"),
            None,
        ));
    }
    if s.think_time.is_some() {
        return Err((
            ".think_time",
            "applies only to closed-loop stages".into(),
            Some("remove it, or use `concurrency`".into()),
        ));
    }
    let arrival = arrival_from_spec(s)?;
    if let Some(to) = s.ramp_to {
        if !(to.is_finite() && to >= 0.0) {
            return Err((".ramp_to", format!("must be a rate >= 0, got {to}"), None));
        }
        if duration.is_none() {
            return Err((".ramp_to", "a ramp needs a `duration`".into(), None));
        }
    }
    if s.max_concurrency == Some(0) {
        return Err((".max_concurrency", "must be at least 1".into(), None));
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

fn closed_stage(
    s: &StageSpec,
    concurrency: u32,
    duration: Option<Duration>,
) -> Result<Stage, StageProblem> {
    if concurrency == 0 {
        return Err((".concurrency", "must be at least 1".into(), None));
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
fn arrival_from_spec(s: &StageSpec) -> Result<Arrival, StageProblem> {
    Ok(
        match (s.arrival.unwrap_or(ArrivalKind::Poisson), s.burstiness) {
            (ArrivalKind::Gamma, Some(b)) if !(b.is_finite() && b > 0.0) => {
                return Err((
                    ".burstiness",
                    format!("must be a positive number, got {b}"),
                    None,
                ));
            }
            (ArrivalKind::Gamma, b) => Arrival::Gamma {
                burstiness: b.unwrap_or(1.0),
            },
            (_, Some(_)) => {
                return Err((
                    ".burstiness",
                    "applies only to `arrival: gamma`".into(),
                    Some("set `arrival: gamma`, or remove `burstiness`".into()),
                ));
            }
            (ArrivalKind::Constant, None) => Arrival::Constant,
            (ArrivalKind::Poisson, None) => Arrival::Poisson,
        },
    )
}
