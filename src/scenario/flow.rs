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
use crate::scenario::Service;
use crate::spec::error::nearest;
use crate::spec::flow::{
    AssertSpec, ChatStep, ChatTools, FlowStep, HttpStep, McpStep, SearchStep, ToolStep,
};
use crate::spec::{ApiKind, PayloadTemplate, PgvectorSpec, Problems, ServiceSpec};

/// A service a flow calls, with what its kind needs.
#[derive(Debug, Clone)]
pub struct FlowService {
    pub api: ApiKind,
    /// Qdrant's collection.
    pub collection: String,
    pub pgvector: Option<PgvectorSpec>,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum StepKind {
    Embed,
    Search(SearchPlan),
    Chat(ChatPlan),
    Tool(ToolPlan),
    Http(HttpPlan),
    Mcp(McpStepPlan),
}

#[derive(Debug, Clone)]
pub struct SearchPlan {
    /// The embed step whose vector is searched with.
    pub embedding: String,
    pub top_k: u32,
    pub truth: Option<Arc<GroundTruth>>,
    pub recall_threshold: f64,
}

#[derive(Debug, Clone)]
pub struct ChatPlan {
    pub max_tokens: Option<u32>,
    pub has_system: bool,
    /// OpenAI `tools` and `tool_choice`, and the rest of the body.
    pub body: serde_json::Map<String, Value>,
    pub tool_names: Vec<String>,
    /// The `api: mcp` service whose listed tools are offered, when `tools: { from }`.
    pub tools_from: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ToolPlan {
    /// The chat step whose tool calls it runs.
    pub chat: String,
    pub timeout: Duration,
    pub paths: BTreeMap<String, String>,
    pub max_iterations: u32,
}

/// A direct MCP call: the operation, its string arguments' templates named
/// `<step>.args<pointer>` (and a read's URI `<step>.read`) in the flow's templates.
#[derive(Debug, Clone)]
pub struct McpStepPlan {
    pub op: McpStepOp,
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone)]
pub enum McpStepOp {
    Tool { name: String, args: McpArgs },
    Read,
    Prompt { name: String, args: McpArgs },
    List(crate::spec::mcp::McpList),
    Ping,
}

/// Arguments as written, and the JSON pointers of their strings, each a template.
#[derive(Debug, Clone, Default)]
pub struct McpArgs {
    pub value: serde_json::Map<String, Value>,
    pub templated: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct HttpPlan {
    pub method: Method,
    pub path: String,
    pub has_body: bool,
    pub expect_status: Option<u16>,
    pub timeout: Option<Duration>,
}

impl StepKind {
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Embed => "embed",
            StepKind::Search(SearchPlan { .. }) => "search",
            StepKind::Chat(ChatPlan { .. }) => "chat",
            StepKind::Tool(ToolPlan { .. }) => "tool",
            StepKind::Http(HttpPlan { .. }) => "http",
            StepKind::Mcp(McpStepPlan { .. }) => "mcp",
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
}

impl FlowPlan {
    /// The recall@k bar of the flow's (first) search step.
    pub fn recall_threshold(&self) -> Option<f64> {
        self.steps.iter().find_map(|s| match &s.kind {
            StepKind::Search(SearchPlan {
                recall_threshold, ..
            }) => Some(*recall_threshold),
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

const DEFAULT_USER: &str = "{% if passages %}Answer from the context below.\n\nContext:\n{% for p in passages %}[{{ p.id }}] {{ p.text }}\n{% endfor %}\nQuestion: {% endif %}{{ prompt }}";

/// Checks a flow as written; `None` when it has problems (all reported).
pub fn from_spec(
    template: &PayloadTemplate,
    specs: &BTreeMap<String, ServiceSpec>,
    resolved: &BTreeMap<String, Service>,
    spec_dir: &Path,
    problems: &mut Problems,
) -> Option<FlowPlan> {
    let before = problems.count();
    if template.flow.is_empty() {
        if template.circuit_breaker.is_some() {
            problems.add(
                "spec.payloadTemplate.circuitBreaker",
                "applies to flows only".into(),
                Some("add a `flow:` with a `tool` step, or remove it".into()),
            );
        }
        return None;
    }
    let flow = one_kind_each(template, problems);
    let mut planner = Planner {
        specs,
        spec_dir,
        env: minijinja::Environment::new(),
        steps: Vec::new(),
        names: Vec::new(),
        used_services: BTreeSet::new(),
    };
    planner
        .env
        .set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for ((i, step), name) in flow.iter().zip(step_names(&flow)) {
        planner.add(*i, step, name, problems);
    }
    let breaker = template
        .circuit_breaker
        .unwrap_or_default()
        .consecutive_timeouts;
    if breaker == 0 {
        problems.add(
            "spec.payloadTemplate.circuitBreaker.consecutiveTimeouts",
            "must be at least 1".into(),
            None,
        );
    }
    let services = flow_services(&planner.used_services, specs, resolved, problems);
    let Planner { env, steps, .. } = planner;
    (problems.count() == before).then(|| FlowPlan {
        steps,
        breaker,
        templates: Arc::new(env),
        services,
    })
}

/// The steps that name exactly one kind, with their index; the others reported.
fn one_kind_each<'a>(
    template: &'a PayloadTemplate,
    problems: &mut Problems,
) -> Vec<(usize, FlowStep<'a>)> {
    let mut flow = Vec::new();
    for (i, step) in template.flow.iter().enumerate() {
        let kinds = step.kinds();
        match kinds.as_slice() {
            [one] => flow.push((i, *one)),
            _ => problems.add(
                &format!("spec.payloadTemplate.flow[{i}]"),
                match kinds.len() {
                    0 => "the step names no kind".to_owned(),
                    n => format!("the step names {n} kinds"),
                },
                Some("write each step as one of `- embed: {…}`, `- search: {…}`, `- chat: {…}`, `- tool: {…}`, `- http: {…}`, `- mcp: {…}`".into()),
            ),
        }
    }
    flow
}

/// Each step's name: its own, else its kind, numbered when the kind repeats.
fn step_names(flow: &[(usize, FlowStep<'_>)]) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, step) in flow {
        *counts.entry(kind_of(step)).or_default() += 1;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    flow.iter()
        .map(|(_, step)| {
            let kind = kind_of(step);
            let n = seen.entry(kind).or_default();
            *n += 1;
            explicit_name(step).cloned().unwrap_or_else(|| {
                if counts[kind] > 1 {
                    format!("{kind}-{n}")
                } else {
                    kind.to_owned()
                }
            })
        })
        .collect()
}

/// The flow as checked so far: the steps before the one being checked are what its
/// templates may read and what its references may name.
struct Planner<'a> {
    specs: &'a BTreeMap<String, ServiceSpec>,
    spec_dir: &'a Path,
    env: minijinja::Environment<'static>,
    steps: Vec<Step>,
    names: Vec<String>,
    used_services: BTreeSet<String>,
}

impl Planner<'_> {
    fn add(&mut self, i: usize, step: &FlowStep<'_>, name: String, problems: &mut Problems) {
        let kind = kind_of(step);
        let at = format!("spec.payloadTemplate.flow[{i}].{kind}");
        if self.names.contains(&name) {
            problems.add(
                &format!("{at}.name"),
                format!("a step named `{name}` comes earlier"),
                Some("give every step its own `name`".into()),
            );
        }
        let service = service_of(step);
        self.used_services.insert(service.to_owned());
        self.check_service(&at, step, problems);
        let step_kind = match step {
            FlowStep::Embed(e) => {
                let input = e.input.as_deref().unwrap_or("{{ prompt }}");
                self.template(&name, &at, "input", input, problems);
                Some(StepKind::Embed)
            }
            FlowStep::Search(s) => self.search(s, &at, problems),
            FlowStep::Chat(c) => self.chat(c, &name, &at, problems),
            FlowStep::Tool(t) => self.tool(t, &at, problems),
            FlowStep::Http(h) => self.http(h, &name, &at, problems),
            FlowStep::Mcp(m) => self.mcp(m, &name, &at, problems),
        };
        let assert_spec = assert_of(step);
        if let Some(service) = assert_spec.and_then(|a| a.embed_service.as_ref()) {
            self.used_services.insert(service.clone());
        }
        let assert = assert_spec
            .and_then(|a| Assertion::from_spec(a, self.specs, &format!("{at}.assert"), problems));
        if let Some(kind) = step_kind {
            self.steps.push(Step {
                name: name.clone(),
                service: service.to_owned(),
                kind,
                assert,
            });
        }
        self.names.push(name);
    }

    /// The step's service exists and speaks what the step needs.
    fn check_service(&self, at: &str, step: &FlowStep<'_>, problems: &mut Problems) {
        let (kind, service) = (kind_of(step), service_of(step));
        let wanted: &[ApiKind] = match step {
            FlowStep::Embed(_) => &[ApiKind::Embeddings, ApiKind::Chat, ApiKind::Completions],
            FlowStep::Search(_) => &[ApiKind::Qdrant, ApiKind::QdrantGrpc, ApiKind::Pgvector],
            FlowStep::Chat(_) => &[ApiKind::Chat, ApiKind::Responses, ApiKind::Anthropic],
            FlowStep::Tool(_) => &[ApiKind::Tools, ApiKind::Http, ApiKind::Mcp],
            FlowStep::Mcp(_) => &[ApiKind::Mcp],
            FlowStep::Http(_) => &[
                ApiKind::Http,
                ApiKind::Tools,
                ApiKind::Chat,
                ApiKind::Embeddings,
            ],
        };
        match self.specs.get(service) {
            None => {
                let known: Vec<&str> = self.specs.keys().map(String::as_str).collect();
                problems.add(
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
                problems.add(
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
    }

    /// Compiles `<name>.<field>` and checks that every variable it reads is defined
    /// before the step: the prompt, the passages (empty until a search fills them) and
    /// the earlier steps.
    fn template(
        &mut self,
        name: &str,
        at: &str,
        field: &str,
        source: &str,
        problems: &mut Problems,
    ) {
        let key = format!("{name}.{field}");
        if let Err(e) = self.env.add_template_owned(key.clone(), source.to_owned()) {
            problems.add(
                &format!("{at}.{field}"),
                format!("is not a valid template: {e}"),
                Some(
                    "templates are minijinja (Jinja2): `{{ prompt }}`, `{{ steps.NAME.text }}`"
                        .into(),
                ),
            );
            return;
        }
        let mut defined: Vec<String> = vec!["prompt".into(), "passages".into()];
        defined.extend(self.names.iter().map(|n| format!("steps.{n}")));
        let variables = self
            .env
            .get_template(&key)
            .map(|t| t.undeclared_variables(true))
            .unwrap_or_default();
        let mut variables: Vec<String> = variables.into_iter().collect();
        variables.sort();
        for variable in variables.iter().filter(|v| !is_defined(v, &defined)) {
            let choices: Vec<&str> = defined.iter().map(String::as_str).collect();
            let root = variable.split('.').take(2).collect::<Vec<_>>().join(".");
            let near = nearest(&root, &choices)
                .map(|n| format!("did you mean `{n}`? "))
                .unwrap_or_default();
            problems.add(
                &format!("{at}.{field}"),
                format!("`{variable}` is not defined before step `{name}`"),
                Some(format!("{near}Defined here: {}", defined.join(", "))),
            );
        }
    }

    fn search(&self, s: &SearchStep, at: &str, problems: &mut Problems) -> Option<StepKind> {
        let embedding = self.search_embedding(s, at, problems);
        if !(1..=10_000).contains(&s.top_k) {
            problems.add(
                &format!("{at}.top_k"),
                format!("{} is not between 1 and 10000", s.top_k),
                None,
            );
        }
        let threshold = s.recall_threshold.unwrap_or(0.82);
        if !(0.0..=1.0).contains(&threshold) {
            problems.add(
                &format!("{at}.recall_threshold"),
                format!("{threshold} is not between 0 and 1"),
                Some("write a share: 0.82 for 82 %".into()),
            );
        }
        let truth = s.ground_truth.as_ref().and_then(|file| {
            match GroundTruth::load(&self.spec_dir.join(file)) {
                Ok(truth) => Some(Arc::new(truth)),
                Err(e) => {
                    problems.add(&format!("{at}.ground_truth"), e, None);
                    None
                }
            }
        });
        embedding.map(|embedding| {
            StepKind::Search(SearchPlan {
                embedding,
                top_k: s.top_k,
                truth,
                recall_threshold: threshold,
            })
        })
    }

    /// The embed step a search takes its vector from: the one it names, else the
    /// last before it.
    fn search_embedding(
        &self,
        s: &SearchStep,
        at: &str,
        problems: &mut Problems,
    ) -> Option<String> {
        let is_embed = |st: &&Step| matches!(st.kind, StepKind::Embed);
        match &s.embedding {
            Some(from) => {
                if !self
                    .steps
                    .iter()
                    .filter(is_embed)
                    .any(|st| &st.name == from)
                {
                    problems.add(
                        &format!("{at}.embedding"),
                        format!("`{from}` is not an embed step before this one"),
                        Some("name an earlier `embed` step".into()),
                    );
                }
                Some(from.clone())
            }
            None => {
                let last = self.steps.iter().rev().find(is_embed);
                if last.is_none() {
                    problems.add(
                        at,
                        "a search needs a vector: no `embed` step comes before it".into(),
                        Some("add `- embed: { service: …, input: \"{{ prompt }}\" }` before the search".into()),
                    );
                }
                last.map(|st| st.name.clone())
            }
        }
    }

    fn chat(
        &mut self,
        c: &ChatStep,
        name: &str,
        at: &str,
        problems: &mut Problems,
    ) -> Option<StepKind> {
        if let Some(system) = &c.system {
            self.template(name, at, "system", system, problems);
        }
        let user = c.user.as_deref().unwrap_or(DEFAULT_USER);
        self.template(name, at, "user", user, problems);
        let mut body = c.body.clone();
        let (listed, tools_from) = match &c.tools {
            ChatTools::Listed(tools) => (tools.as_slice(), None),
            ChatTools::From(from) => {
                self.tools_from(&from.from, at, problems);
                (&[][..], Some(from.from.clone()))
            }
        };
        if !listed.is_empty() {
            let tools: Vec<Value> = listed
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
            Some(other) => problems.add(
                &format!("{at}.tool_choice"),
                format!("`{other}` is not a tool choice"),
                Some("choose from: auto, required, none".into()),
            ),
        }
        Some(StepKind::Chat(ChatPlan {
            max_tokens: c.max_tokens,
            has_system: c.system.is_some(),
            body,
            tool_names: listed.iter().map(|t| t.name.clone()).collect(),
            tools_from,
        }))
    }

    /// `tools: { from }` names an `api: mcp` service, which the flow then calls.
    fn tools_from(&mut self, service: &str, at: &str, problems: &mut Problems) {
        match self.specs.get(service) {
            Some(s) if s.api == ApiKind::Mcp => {
                self.used_services.insert(service.to_owned());
            }
            Some(s) => problems.add(
                &format!("{at}.tools.from"),
                format!(
                    "`{service}` has `api: {}`; tools come from an `api: mcp` service",
                    api_name(s.api)
                ),
                Some(format!("set `api: mcp` on spec.services.{service}")),
            ),
            None => {
                let known: Vec<&str> = self.specs.keys().map(String::as_str).collect();
                problems.add(
                    &format!("{at}.tools.from"),
                    format!("names service `{service}`, which is not under spec.services"),
                    Some(format!("choose from: {}", known.join(", "))),
                );
            }
        }
    }

    /// A tool step runs the tool calls of the last chat step before it that offers
    /// tools.
    fn tool(&self, t: &ToolStep, at: &str, problems: &mut Problems) -> Option<StepKind> {
        let chat = self.steps.iter().rev().find_map(|st| match &st.kind {
            StepKind::Chat(ChatPlan {
                tool_names,
                tools_from,
                ..
            }) => Some((st.name.clone(), tool_names, tools_from.is_some())),
            _ => None,
        });
        let offers = |(_, tools, from): &(String, &Vec<String>, bool)| !tools.is_empty() || *from;
        let Some((chat, tool_names, _)) = chat.filter(offers) else {
            problems.add(
                at,
                "a tool step runs the tool calls of a chat step before it, and none offers tools"
                    .into(),
                Some("offer `tools:` in an earlier `chat` step".into()),
            );
            return None;
        };
        for path_of in t.paths.keys().filter(|p| !tool_names.contains(p)) {
            problems.add(
                &format!("{at}.paths.{path_of}"),
                format!("`{path_of}` is not a tool the `{chat}` step offers"),
                Some(format!("offered: {}", tool_names.join(", "))),
            );
        }
        Some(StepKind::Tool(ToolPlan {
            chat,
            timeout: t.timeout.map_or(Duration::from_secs(10), |d| d.0),
            paths: t.paths.clone(),
            max_iterations: t.max_iterations.unwrap_or(3).max(1),
        }))
    }

    /// A direct MCP call: one operation, its strings templates over the session.
    fn mcp(
        &mut self,
        m: &McpStep,
        name: &str,
        at: &str,
        problems: &mut Problems,
    ) -> Option<StepKind> {
        let given = [
            m.tool.is_some(),
            m.read.is_some(),
            m.prompt.is_some(),
            m.list.is_some(),
            m.ping,
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            problems.add(
                at,
                "needs exactly one of `tool`, `read`, `prompt`, `list` and `ping`".into(),
                Some("e.g. `- mcp: { service: tools, tool: search_docs, args: { query: \"{{ prompt }}\" } }`".into()),
            );
            return None;
        }
        if m.args.is_some() && m.tool.is_none() && m.prompt.is_none() {
            problems.add(
                &format!("{at}.args"),
                "applies only to a `tool` or a `prompt`".into(),
                Some("remove `args`".into()),
            );
            return None;
        }
        let mut args = || {
            let value = m.args.clone().unwrap_or_default();
            let templated = crate::workload::mcp::string_leaves(&value);
            for (pointer, text) in &templated {
                self.template(name, at, &format!("args{pointer}"), text, problems);
            }
            McpArgs {
                value,
                templated: templated.into_iter().map(|(pointer, _)| pointer).collect(),
            }
        };
        let op = match (&m.tool, &m.read, &m.prompt, m.list) {
            (Some(tool), ..) => McpStepOp::Tool {
                name: tool.clone(),
                args: args(),
            },
            (_, Some(uri), ..) => {
                self.template(name, at, "read", uri, problems);
                McpStepOp::Read
            }
            (_, _, Some(prompt), _) => McpStepOp::Prompt {
                name: prompt.clone(),
                args: args(),
            },
            (.., Some(list)) => McpStepOp::List(list),
            _ => McpStepOp::Ping,
        };
        Some(StepKind::Mcp(McpStepPlan {
            op,
            timeout: m.timeout.map(|d| d.0),
        }))
    }

    fn http(
        &mut self,
        h: &HttpStep,
        name: &str,
        at: &str,
        problems: &mut Problems,
    ) -> Option<StepKind> {
        if let Some(body) = &h.body {
            self.template(name, at, "body", body, problems);
        }
        let method = h.method.as_deref().unwrap_or("POST");
        let method = Method::from_bytes(method.to_uppercase().as_bytes())
            .ok()
            .or_else(|| {
                problems.add(
                    &format!("{at}.method"),
                    format!("`{method}` is not an HTTP method"),
                    Some("write e.g. POST".into()),
                );
                None
            });
        if !h.path.starts_with('/') {
            problems.add(
                &format!("{at}.path"),
                format!("`{}` is not a path", h.path),
                Some("start it with `/`".into()),
            );
        }
        method.map(|method| {
            StepKind::Http(HttpPlan {
                method,
                path: h.path.clone(),
                has_body: h.body.is_some(),
                expect_status: h.expect_status,
                timeout: h.timeout.map(|d| d.0),
            })
        })
    }
}

/// The services the flow calls, resolved, with what their kinds need.
fn flow_services(
    used: &BTreeSet<String>,
    specs: &BTreeMap<String, ServiceSpec>,
    resolved: &BTreeMap<String, Service>,
    problems: &mut Problems,
) -> BTreeMap<String, FlowService> {
    let mut services = BTreeMap::new();
    for name in used {
        let (Some(spec), true) = (specs.get(name), resolved.contains_key(name)) else {
            continue;
        };
        if let Some(table) = &spec.pgvector
            && let Err(e) = crate::client::search::pg_query(table)
        {
            problems.add(&format!("spec.services.{name}.pgvector"), e, None);
        }
        services.insert(
            name.clone(),
            FlowService {
                api: spec.api,
                collection: spec.collection.clone().unwrap_or_else(|| "docs".into()),
                pgvector: spec.pgvector.clone(),
            },
        );
    }
    services
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
        FlowStep::Mcp(_) => "mcp",
    }
}

fn explicit_name<'a>(step: &FlowStep<'a>) -> Option<&'a String> {
    match step {
        FlowStep::Embed(s) => s.name.as_ref(),
        FlowStep::Search(s) => s.name.as_ref(),
        FlowStep::Chat(s) => s.name.as_ref(),
        FlowStep::Tool(s) => s.name.as_ref(),
        FlowStep::Http(s) => s.name.as_ref(),
        FlowStep::Mcp(s) => s.name.as_ref(),
    }
}

fn service_of<'a>(step: &FlowStep<'a>) -> &'a str {
    match step {
        FlowStep::Embed(s) => &s.service,
        FlowStep::Search(s) => &s.service,
        FlowStep::Chat(s) => &s.service,
        FlowStep::Tool(s) => &s.service,
        FlowStep::Http(s) => &s.service,
        FlowStep::Mcp(s) => &s.service,
    }
}

fn assert_of<'a>(step: &FlowStep<'a>) -> Option<&'a AssertSpec> {
    match step {
        FlowStep::Embed(s) => s.assert.as_ref(),
        FlowStep::Search(s) => s.assert.as_ref(),
        FlowStep::Chat(s) => s.assert.as_ref(),
        FlowStep::Tool(s) => s.assert.as_ref(),
        FlowStep::Http(s) => s.assert.as_ref(),
        FlowStep::Mcp(s) => s.assert.as_ref(),
    }
}

pub fn api_name(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Chat => "chat",
        ApiKind::Completions => "completions",
        ApiKind::Tgi => "tgi",
        ApiKind::Ollama => "ollama",
        ApiKind::OllamaGenerate => "ollama_generate",
        ApiKind::Kserve => "kserve",
        ApiKind::KserveGrpc => "kserve_grpc",
        ApiKind::Responses => "responses",
        ApiKind::Anthropic => "anthropic",
        ApiKind::Http => "http",
        ApiKind::Embeddings => "embeddings",
        ApiKind::Qdrant => "qdrant",
        ApiKind::QdrantGrpc => "qdrant_grpc",
        ApiKind::Pgvector => "pgvector",
        ApiKind::Tools => "tools",
        ApiKind::Images => "images",
        ApiKind::Transcriptions => "transcriptions",
        ApiKind::Speech => "speech",
        ApiKind::Realtime => "realtime",
        ApiKind::Mcp => "mcp",
    }
}
