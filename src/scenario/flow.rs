//! A flow, validated: step names unique, each step's service of the right kind, every
//! template compiled and every variable it reads defined by an earlier step.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use serde_json::{Value, json};

use crate::flow::assert::Assertion;
use crate::flow::recall::GroundTruth;
use crate::scenario::{Endpoint, Service};
use crate::sim::tiers::TierConfig;
use crate::spec::error::nearest;
use crate::spec::flow::{AssertSpec, FlowStep};
use crate::spec::{ApiKind, PayloadTemplate, PgvectorSpec, ServiceSpec};

/// A service a flow calls, with what its kind needs.
#[derive(Debug, Clone)]
pub struct FlowService {
    pub service: Service,
    pub api: ApiKind,
    /// Qdrant's collection.
    pub collection: String,
    pub pgvector: Option<PgvectorSpec>,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum StepKind {
    Embed,
    Search {
        /// The embed step whose vector is searched with.
        embedding: String,
        top_k: u32,
        truth: Option<Arc<GroundTruth>>,
        recall_threshold: f64,
    },
    Chat {
        max_tokens: Option<u32>,
        has_system: bool,
        /// OpenAI `tools` and `tool_choice`, and the rest of the body.
        body: serde_json::Map<String, Value>,
        tool_names: Vec<String>,
    },
    Tool {
        /// The chat step whose tool calls it runs.
        chat: String,
        timeout: Duration,
        paths: BTreeMap<String, String>,
        max_iterations: u32,
    },
    Http {
        method: Method,
        path: String,
        has_body: bool,
        expect_status: Option<u16>,
        timeout: Option<Duration>,
    },
}

impl StepKind {
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Embed => "embed",
            StepKind::Search { .. } => "search",
            StepKind::Chat { .. } => "chat",
            StepKind::Tool { .. } => "tool",
            StepKind::Http { .. } => "http",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub service: String,
    pub kind: StepKind,
    pub assert: Option<Assertion>,
}

/// The validated flow.
#[derive(Debug, Clone)]
pub struct FlowPlan {
    pub steps: Vec<Step>,
    /// Consecutive tool timeouts that open the circuit breaker.
    pub breaker: u32,
    /// Templates by `<step>.<field>`.
    pub templates: Arc<minijinja::Environment<'static>>,
    pub services: BTreeMap<String, FlowService>,
    /// How the embedded simulator's search and tool tiers behave.
    pub tiers: TierConfig,
}

impl FlowPlan {
    /// The recall@k bar of the flow's (first) search step.
    pub fn recall_threshold(&self) -> Option<f64> {
        self.steps.iter().find_map(|s| match &s.kind {
            StepKind::Search {
                recall_threshold, ..
            } => Some(*recall_threshold),
            _ => None,
        })
    }

    /// Renders `<step>.<field>` against the session's context.
    pub fn render(&self, template: &str, context: &Value) -> Result<String, String> {
        self.templates
            .get_template(template)
            .and_then(|t| t.render(context))
            .map_err(|e| format!("template {template}: {e}"))
    }
}

type Problem<'a> = dyn FnMut(&str, String, Option<String>) + 'a;

const DEFAULT_USER: &str = "{% if passages %}Answer from the context below.\n\nContext:\n{% for p in passages %}[{{ p.id }}] {{ p.text }}\n{% endfor %}\nQuestion: {% endif %}{{ prompt }}";

/// Checks a flow as written; `None` when it has problems (all reported).
pub fn from_spec(
    template: &PayloadTemplate,
    specs: &BTreeMap<String, ServiceSpec>,
    resolved: &BTreeMap<String, Service>,
    spec_dir: &Path,
    report: &mut Problem,
) -> Option<FlowPlan> {
    let mut failed = false;
    let mut problem_fn = |path: &str, message: String, fix: Option<String>| {
        failed = true;
        report(path, message, fix);
    };
    let problem: &mut Problem = &mut problem_fn;
    if template.flow.is_empty() {
        if template.circuit_breaker.is_some() {
            problem(
                "spec.payloadTemplate.circuitBreaker",
                "applies to flows only".into(),
                Some("add a `flow:` with a `tool` step, or remove it".into()),
            );
        }
        return None;
    }
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let mut steps: Vec<Step> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut flow: Vec<(usize, FlowStep)> = Vec::new();
    for (i, step) in template.flow.iter().enumerate() {
        let kinds = step.kinds();
        match kinds.as_slice() {
            [one] => flow.push((i, *one)),
            _ => problem(
                &format!("spec.payloadTemplate.flow[{i}]"),
                match kinds.len() {
                    0 => "the step names no kind".to_owned(),
                    n => format!("the step names {n} kinds"),
                },
                Some("write each step as one of `- embed: {…}`, `- search: {…}`, `- chat: {…}`, `- tool: {…}`, `- http: {…}`".into()),
            ),
        }
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, step) in &flow {
        *counts.entry(kind_of(step)).or_default() += 1;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut used_services = BTreeSet::new();
    for (i, step) in flow.iter().map(|(i, step)| (*i, step)) {
        let kind = kind_of(step);
        let at = format!("spec.payloadTemplate.flow[{i}].{kind}");
        let n = seen.entry(kind).or_default();
        *n += 1;
        let name = explicit_name(step).cloned().unwrap_or_else(|| {
            if counts[kind] > 1 {
                format!("{kind}-{n}")
            } else {
                kind.to_owned()
            }
        });
        if names.contains(&name) {
            problem(
                &format!("{at}.name"),
                format!("a step named `{name}` comes earlier"),
                Some("give every step its own `name`".into()),
            );
        }
        let service = service_of(step);
        used_services.insert(service.to_owned());
        let wanted: &[ApiKind] = match step {
            FlowStep::Embed(_) => &[ApiKind::Embeddings, ApiKind::Chat, ApiKind::Completions],
            FlowStep::Search(_) => &[ApiKind::Qdrant, ApiKind::Pgvector],
            FlowStep::Chat(_) => &[ApiKind::Chat],
            FlowStep::Tool(_) => &[ApiKind::Tools, ApiKind::Http],
            FlowStep::Http(_) => &[
                ApiKind::Http,
                ApiKind::Tools,
                ApiKind::Chat,
                ApiKind::Embeddings,
            ],
        };
        match specs.get(service) {
            None => {
                let known: Vec<&str> = specs.keys().map(String::as_str).collect();
                problem(
                    &format!("{at}.service"),
                    format!("names service `{service}`, which is not under spec.services"),
                    Some(match nearest(service, &known) {
                        Some(near) => {
                            format!("did you mean `{near}`? Choose from: {}", known.join(", "))
                        }
                        None => format!("choose from: {}", known.join(", ")),
                    }),
                );
            }
            Some(s) if !wanted.contains(&s.api) => {
                let list = wanted
                    .iter()
                    .map(|a| api_name(*a))
                    .collect::<Vec<_>>()
                    .join(" or ");
                problem(
                    &format!("{at}.service"),
                    format!(
                        "a `{kind}` step needs a service with `api: {list}`; `{service}` has `api: {}`",
                        api_name(s.api)
                    ),
                    Some(format!(
                        "set `api:` on spec.services.{service}, or call another service"
                    )),
                );
            }
            Some(_) => {}
        }
        // What templates of this step may read.
        // `passages` is always there: empty until a search fills it.
        let mut defined: Vec<String> = vec!["prompt".into(), "passages".into()];
        defined.extend(names.iter().map(|n| format!("steps.{n}")));
        let mut template = |field: &str, source: &str, problem: &mut Problem| {
            let key = format!("{name}.{field}");
            if let Err(e) = env.add_template_owned(key.clone(), source.to_owned()) {
                problem(
                    &format!("{at}.{field}"),
                    format!("is not a valid template: {e}"),
                    Some(
                        "templates are minijinja (Jinja2): `{{ prompt }}`, `{{ steps.NAME.text }}`"
                            .into(),
                    ),
                );
                return;
            }
            let variables = env
                .get_template(&key)
                .map(|t| t.undeclared_variables(true))
                .unwrap_or_default();
            let mut variables: Vec<String> = variables.into_iter().collect();
            variables.sort();
            for variable in variables {
                if !is_defined(&variable, &defined) {
                    let choices: Vec<&str> = defined.iter().map(String::as_str).collect();
                    let root = variable.split('.').take(2).collect::<Vec<_>>().join(".");
                    let near = nearest(&root, &choices)
                        .map(|n| format!("did you mean `{n}`? "))
                        .unwrap_or_default();
                    problem(
                        &format!("{at}.{field}"),
                        format!("`{variable}` is not defined before step `{name}`"),
                        Some(format!("{near}Defined here: {}", defined.join(", "))),
                    );
                }
            }
        };
        let assert_spec = assert_of(step);
        let kind = match step {
            FlowStep::Embed(e) => {
                template(
                    "input",
                    e.input.as_deref().unwrap_or("{{ prompt }}"),
                    problem,
                );
                Some(StepKind::Embed)
            }
            FlowStep::Search(s) => {
                let embedding = match &s.embedding {
                    Some(from) => {
                        let is_embed = steps
                            .iter()
                            .any(|st| &st.name == from && matches!(st.kind, StepKind::Embed));
                        if !is_embed {
                            problem(
                                &format!("{at}.embedding"),
                                format!("`{from}` is not an embed step before this one"),
                                Some("name an earlier `embed` step".into()),
                            );
                        }
                        Some(from.clone())
                    }
                    None => steps
                        .iter()
                        .rev()
                        .find(|st| matches!(st.kind, StepKind::Embed))
                        .map(|st| st.name.clone())
                        .or_else(|| {
                            problem(
                                &at,
                                "a search needs a vector: no `embed` step comes before it".into(),
                                Some("add `- embed: { service: …, input: \"{{ prompt }}\" }` before the search".into()),
                            );
                            None
                        }),
                };
                if !(1..=10_000).contains(&s.top_k) {
                    problem(
                        &format!("{at}.top_k"),
                        format!("{} is not between 1 and 10000", s.top_k),
                        None,
                    );
                }
                let threshold = s.recall_threshold.unwrap_or(0.82);
                if !(0.0..=1.0).contains(&threshold) {
                    problem(
                        &format!("{at}.recall_threshold"),
                        format!("{threshold} is not between 0 and 1"),
                        Some("write a share: 0.82 for 82 %".into()),
                    );
                }
                let truth = s.ground_truth.as_ref().and_then(|file| {
                    match GroundTruth::load(&spec_dir.join(file)) {
                        Ok(truth) => Some(Arc::new(truth)),
                        Err(e) => {
                            problem(&format!("{at}.ground_truth"), e, None);
                            None
                        }
                    }
                });
                embedding.map(|embedding| StepKind::Search {
                    embedding,
                    top_k: s.top_k,
                    truth,
                    recall_threshold: threshold,
                })
            }
            FlowStep::Chat(c) => {
                if let Some(system) = &c.system {
                    template("system", system, problem);
                }
                template("user", c.user.as_deref().unwrap_or(DEFAULT_USER), problem);
                let mut body = c.body.clone();
                if !c.tools.is_empty() {
                    let tools: Vec<Value> = c
                        .tools
                        .iter()
                        .map(|t| {
                            json!({"type": "function", "function": {
                                "name": t.name,
                                "description": t.description,
                                "parameters": t.parameters.clone().unwrap_or(json!({"type": "object", "properties": {}})),
                            }})
                        })
                        .collect();
                    body.insert("tools".into(), Value::from(tools));
                }
                match c.tool_choice.as_deref() {
                    None => {}
                    Some(choice @ ("auto" | "required" | "none")) => {
                        body.insert("tool_choice".into(), json!(choice));
                    }
                    Some(other) => problem(
                        &format!("{at}.tool_choice"),
                        format!("`{other}` is not a tool choice"),
                        Some("choose from: auto, required, none".into()),
                    ),
                }
                Some(StepKind::Chat {
                    max_tokens: c.max_tokens,
                    has_system: c.system.is_some(),
                    body,
                    tool_names: c.tools.iter().map(|t| t.name.clone()).collect(),
                })
            }
            FlowStep::Tool(t) => {
                let chat = steps.iter().rev().find_map(|st| match &st.kind {
                    StepKind::Chat { tool_names, .. } => {
                        Some((st.name.clone(), tool_names.clone()))
                    }
                    _ => None,
                });
                match chat {
                    Some((chat, tool_names)) if !tool_names.is_empty() => {
                        for path_of in t.paths.keys() {
                            if !tool_names.contains(path_of) {
                                problem(
                                    &format!("{at}.paths.{path_of}"),
                                    format!("`{path_of}` is not a tool the `{chat}` step offers"),
                                    Some(format!("offered: {}", tool_names.join(", "))),
                                );
                            }
                        }
                        Some(StepKind::Tool {
                            chat,
                            timeout: t.timeout.map_or(Duration::from_secs(10), |d| d.0),
                            paths: t.paths.clone(),
                            max_iterations: t.max_iterations.unwrap_or(3).max(1),
                        })
                    }
                    _ => {
                        problem(
                            &at,
                            "a tool step runs the tool calls of a chat step before it, and none offers tools".into(),
                            Some("offer `tools:` in an earlier `chat` step".into()),
                        );
                        None
                    }
                }
            }
            FlowStep::Http(h) => {
                if let Some(body) = &h.body {
                    template("body", body, problem);
                }
                let method = h.method.as_deref().unwrap_or("POST");
                let method = Method::from_bytes(method.to_uppercase().as_bytes())
                    .ok()
                    .or_else(|| {
                        problem(
                            &format!("{at}.method"),
                            format!("`{method}` is not an HTTP method"),
                            Some("write e.g. POST".into()),
                        );
                        None
                    });
                if !h.path.starts_with('/') {
                    problem(
                        &format!("{at}.path"),
                        format!("`{}` is not a path", h.path),
                        Some("start it with `/`".into()),
                    );
                }
                method.map(|method| StepKind::Http {
                    method,
                    path: h.path.clone(),
                    has_body: h.body.is_some(),
                    expect_status: h.expect_status,
                    timeout: h.timeout.map(|d| d.0),
                })
            }
        };
        if let Some(service) = assert_spec.and_then(|a| a.embed_service.as_ref()) {
            used_services.insert(service.clone());
        }
        let assert = assert_spec
            .and_then(|a| Assertion::from_spec(a, specs, &format!("{at}.assert"), problem));
        if let Some(kind) = kind {
            steps.push(Step {
                name: name.clone(),
                service: service.to_owned(),
                kind,
                assert,
            });
        }
        names.push(name);
    }
    let breaker = template
        .circuit_breaker
        .unwrap_or_default()
        .consecutive_timeouts;
    if breaker == 0 {
        problem(
            "spec.payloadTemplate.circuitBreaker.consecutiveTimeouts",
            "must be at least 1".into(),
            None,
        );
    }
    let mut services = BTreeMap::new();
    let mut tiers = TierConfig::default();
    for name in &used_services {
        let (Some(spec), Some(service)) = (specs.get(name), resolved.get(name)) else {
            continue;
        };
        if matches!(service.endpoint, Endpoint::Embedded { .. }) {
            match spec.api {
                ApiKind::Qdrant => {
                    tiers.warm_corpus = true;
                    if let Some(latency) = spec.latency {
                        tiers.search_latency = latency;
                    }
                    if let Some(size) = spec.corpus_size {
                        tiers.corpus_size = size as usize;
                    }
                }
                ApiKind::Tools => {
                    if let Some(latency) = spec.latency {
                        tiers.tool_latency = latency;
                    }
                    tiers.tool_failure_rate = spec.failure_rate.unwrap_or(0.0);
                }
                _ => {}
            }
        }
        if let Some(table) = &spec.pgvector
            && let Err(e) = crate::flow::search::pg_query(table)
        {
            problem(&format!("spec.services.{name}.pgvector"), e, None);
        }
        services.insert(
            name.clone(),
            FlowService {
                service: service.clone(),
                api: spec.api,
                collection: spec.collection.clone().unwrap_or_else(|| "docs".into()),
                pgvector: spec.pgvector.clone(),
            },
        );
    }
    (!failed).then(|| FlowPlan {
        steps,
        breaker,
        templates: Arc::new(env),
        services,
        tiers,
    })
}

fn is_defined(variable: &str, defined: &[String]) -> bool {
    let mut parts = variable.split('.');
    let root = parts.next().unwrap_or_default();
    match root {
        "steps" => match parts.next() {
            None => true,
            Some(step) => defined
                .iter()
                .any(|d| d.strip_prefix("steps.") == Some(step)),
        },
        _ => defined.iter().any(|d| d == root),
    }
}

fn kind_of(step: &FlowStep<'_>) -> &'static str {
    match step {
        FlowStep::Embed(_) => "embed",
        FlowStep::Search(_) => "search",
        FlowStep::Chat(_) => "chat",
        FlowStep::Tool(_) => "tool",
        FlowStep::Http(_) => "http",
    }
}

fn explicit_name<'a>(step: &FlowStep<'a>) -> Option<&'a String> {
    match step {
        FlowStep::Embed(s) => s.name.as_ref(),
        FlowStep::Search(s) => s.name.as_ref(),
        FlowStep::Chat(s) => s.name.as_ref(),
        FlowStep::Tool(s) => s.name.as_ref(),
        FlowStep::Http(s) => s.name.as_ref(),
    }
}

fn service_of<'a>(step: &FlowStep<'a>) -> &'a str {
    match step {
        FlowStep::Embed(s) => &s.service,
        FlowStep::Search(s) => &s.service,
        FlowStep::Chat(s) => &s.service,
        FlowStep::Tool(s) => &s.service,
        FlowStep::Http(s) => &s.service,
    }
}

fn assert_of<'a>(step: &FlowStep<'a>) -> Option<&'a AssertSpec> {
    match step {
        FlowStep::Embed(s) => s.assert.as_ref(),
        FlowStep::Search(s) => s.assert.as_ref(),
        FlowStep::Chat(s) => s.assert.as_ref(),
        FlowStep::Tool(s) => s.assert.as_ref(),
        FlowStep::Http(s) => s.assert.as_ref(),
    }
}

pub fn api_name(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Chat => "chat",
        ApiKind::Completions => "completions",
        ApiKind::Http => "http",
        ApiKind::Embeddings => "embeddings",
        ApiKind::Qdrant => "qdrant",
        ApiKind::Pgvector => "pgvector",
        ApiKind::Tools => "tools",
    }
}
