//! MCP calls as the load: which operation call `seq` makes, drawn by weight from the
//! spec's mix, with its argument templates rendered. A pure function of (seed, seq).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::seed::mix_seed;
use crate::spec::Problems;
use crate::spec::mcp::{McpList, McpOpSpec, McpSpec};

/// The validated mix.
#[derive(Debug, Clone)]
pub struct McpWorkload {
    ops: Vec<WeightedOp>,
    /// The share of calls after which their session is ended.
    pub churn: f64,
    /// Ask for progress notifications on tool calls.
    pub progress: bool,
    /// Open each session's GET stream.
    pub listen: bool,
    templates: Arc<minijinja::Environment<'static>>,
}

#[derive(Debug, Clone)]
struct WeightedOp {
    /// The cumulative weight up to and with this one.
    until: u64,
    op: Op,
}

/// An operation with its templates named (in the workload's environment).
#[derive(Debug, Clone)]
enum Op {
    Tool { name: String, args: Args },
    Read { uri: Text },
    List(McpList),
    Prompt { name: String, args: Args },
    Ping,
}

/// A JSON object whose string leaves at `templated` (JSON pointers) are templates
/// (by name).
#[derive(Debug, Clone)]
struct Args {
    value: Map<String, Value>,
    templated: Vec<(String, String)>,
}

/// A string, or the name of the template that makes it.
#[derive(Debug, Clone)]
enum Text {
    Plain(String),
    Template(String),
}

/// One call, rendered: what the client sends.
#[derive(Debug, Clone, PartialEq)]
pub enum McpCall {
    Tool {
        name: String,
        args: Map<String, Value>,
    },
    Read {
        uri: String,
    },
    List(McpList),
    Prompt {
        name: String,
        args: Map<String, Value>,
    },
    Ping,
}

impl McpCall {
    /// The JSON-RPC method it calls.
    pub fn method(&self) -> &'static str {
        match self {
            McpCall::Tool { .. } => "tools/call",
            McpCall::Read { .. } => "resources/read",
            McpCall::List(list) => list.method(),
            McpCall::Prompt { .. } => "prompts/get",
            McpCall::Ping => "ping",
        }
    }

    /// The tool, prompt or resource it names, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            McpCall::Tool { name, .. } | McpCall::Prompt { name, .. } => Some(name),
            McpCall::Read { uri } => Some(uri),
            McpCall::List(_) | McpCall::Ping => None,
        }
    }
}

impl McpWorkload {
    /// The mix of `spec` (at `path` in the spec), or `None` after reporting what is
    /// wrong with it.
    pub fn from_spec(spec: &McpSpec, path: &str, problems: &mut Problems) -> Option<McpWorkload> {
        let before = problems.len();
        if spec.ops.is_empty() {
            problems.add(
                &format!("{path}.ops"),
                "names no operation".into(),
                Some("add e.g. `ops: [{ tool: echo, args: { text: \"hi {{ seq }}\" } }]`".into()),
            );
        }
        if !(0.0..=1.0).contains(&spec.churn) {
            problems.add(
                &format!("{path}.churn"),
                format!("is {}, not a share from 0 to 1", spec.churn),
                Some("e.g. `churn: 0.05` ends one session in twenty calls".into()),
            );
        }
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let mut ops = Vec::new();
        let mut until = 0u64;
        for (i, op) in spec.ops.iter().enumerate() {
            let at = format!("{path}.ops[{i}]");
            let Some(op) = op_from_spec(op, &at, &mut env, problems) else {
                continue;
            };
            if spec.ops[i].weight == 0 {
                problems.add(
                    &format!("{at}.weight"),
                    "is 0".into(),
                    Some("give a weight of 1 or more, or remove the operation".into()),
                );
            }
            until += u64::from(spec.ops[i].weight);
            ops.push(WeightedOp { until, op });
        }
        (problems.len() == before).then(|| McpWorkload {
            ops,
            churn: spec.churn,
            progress: spec.progress,
            listen: spec.listen,
            templates: Arc::new(env),
        })
    }

    /// Call `seq` of a run seeded `seed`.
    pub fn call(&self, seed: u64, seq: u64) -> McpCall {
        let total = self.ops.last().map_or(1, |op| op.until);
        let draw = mix_seed(&[seed, 0x4d43_5030, seq]) % total;
        let op = &self
            .ops
            .iter()
            .find(|op| draw < op.until)
            .expect("below the total")
            .op;
        let context = minijinja::context! { seq => seq, n => mix_seed(&[seed, 0x4e, seq]) % 1000 };
        match op {
            Op::Tool { name, args } => McpCall::Tool {
                name: name.clone(),
                args: self.render_args(args, &context),
            },
            Op::Read { uri } => McpCall::Read {
                uri: self.render_text(uri, &context),
            },
            Op::List(list) => McpCall::List(*list),
            Op::Prompt { name, args } => McpCall::Prompt {
                name: name.clone(),
                args: self.render_args(args, &context),
            },
            Op::Ping => McpCall::Ping,
        }
    }

    /// Whether call `seq` ends its session after it (the churn's draw).
    pub fn ends_session(&self, seed: u64, seq: u64) -> bool {
        self.churn > 0.0 && unit(mix_seed(&[seed, 0x4348_5552, seq])) < self.churn
    }

    fn render_args(&self, args: &Args, context: &minijinja::Value) -> Map<String, Value> {
        let mut value = args.value.clone();
        for (pointer, name) in &args.templated {
            let text = self.render(name, context);
            if let Some(leaf) = leaf_mut(&mut value, pointer) {
                *leaf = Value::String(text);
            }
        }
        value
    }

    fn render_text(&self, text: &Text, context: &minijinja::Value) -> String {
        match text {
            Text::Plain(text) => text.clone(),
            Text::Template(name) => self.render(name, context),
        }
    }

    /// Renders a template checked when the workload was built: it names only `seq`
    /// and `n`, which every context has, so it cannot fail.
    fn render(&self, name: &str, context: &minijinja::Value) -> String {
        let template = self.templates.get_template(name).expect("added when built");
        template.render(context).expect("checked when built")
    }
}

/// A draw as a share in [0, 1).
fn unit(draw: u64) -> f64 {
    (draw >> 11) as f64 / (1u64 << 53) as f64
}

/// One operation, its templates added to `env`; `None` after reporting.
fn op_from_spec(
    spec: &McpOpSpec,
    at: &str,
    env: &mut minijinja::Environment<'static>,
    problems: &mut Problems,
) -> Option<Op> {
    let given = [
        spec.tool.is_some(),
        spec.read.is_some(),
        spec.list.is_some(),
        spec.prompt.is_some(),
        spec.ping,
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        problems.add(
            at,
            "needs exactly one of `tool`, `read`, `list`, `prompt` and `ping`".into(),
            Some("write one operation per entry, e.g. `{ tool: echo, args: {…} }` or `{ list: tools }`".into()),
        );
        return None;
    }
    if spec.args.is_some() && spec.tool.is_none() && spec.prompt.is_none() {
        problems.add(
            &format!("{at}.args"),
            "applies only to a `tool` or a `prompt`".into(),
            Some("remove `args`".into()),
        );
        return None;
    }
    let mut args = || args_from_spec(spec.args.as_ref(), at, env, problems);
    Some(match (&spec.tool, &spec.read, spec.list, &spec.prompt) {
        (Some(name), ..) => Op::Tool {
            name: name.clone(),
            args: args()?,
        },
        (_, Some(uri), ..) => Op::Read {
            uri: text_from_spec(uri, &format!("{at}.read"), env, problems)?,
        },
        (_, _, Some(list), _) => Op::List(list),
        (.., Some(name)) => Op::Prompt {
            name: name.clone(),
            args: args()?,
        },
        _ => Op::Ping,
    })
}

fn args_from_spec(
    args: Option<&Map<String, Value>>,
    at: &str,
    env: &mut minijinja::Environment<'static>,
    problems: &mut Problems,
) -> Option<Args> {
    let value = args.cloned().unwrap_or_default();
    let leaves = string_leaves(&value);
    let before = problems.len();
    let mut templated = Vec::new();
    for (pointer, text) in leaves {
        let path = format!("{at}.args{}", pointer.replace('/', "."));
        if let Some(Text::Template(name)) = text_from_spec(&text, &path, env, problems) {
            templated.push((pointer, name));
        }
    }
    (problems.len() == before).then_some(Args { value, templated })
}

/// The value at a JSON pointer into an object of arguments.
pub fn leaf_mut<'a>(args: &'a mut Map<String, Value>, pointer: &str) -> Option<&'a mut Value> {
    let pointer = pointer.strip_prefix('/')?;
    let (key, rest) = pointer.split_once('/').unwrap_or((pointer, ""));
    let value = args.get_mut(&key.replace("~1", "/").replace("~0", "~"))?;
    if rest.is_empty() {
        Some(value)
    } else {
        value.pointer_mut(&format!("/{rest}"))
    }
}

/// Every string in `args`, with its JSON pointer (`/city`, `/filters/0`).
pub fn string_leaves(args: &Map<String, Value>) -> Vec<(String, String)> {
    let mut leaves = Vec::new();
    leaves_of(&Value::Object(args.clone()), String::new(), &mut leaves);
    leaves
}

fn leaves_of(value: &Value, pointer: String, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) => out.push((pointer, text.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                leaves_of(item, format!("{pointer}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                leaves_of(item, format!("{pointer}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// A string that holds `{{` or `{%` becomes a template of `env`, checked by
/// rendering it once.
fn text_from_spec(
    text: &str,
    path: &str,
    env: &mut minijinja::Environment<'static>,
    problems: &mut Problems,
) -> Option<Text> {
    if !text.contains("{{") && !text.contains("{%") {
        return Some(Text::Plain(text.to_owned()));
    }
    let name = path.to_owned();
    let checked = env
        .add_template_owned(name.clone(), text.to_owned())
        .and_then(|()| {
            let template = env.get_template(&name)?;
            template.render(minijinja::context! { seq => 0, n => 0 })
        });
    match checked {
        Ok(_) => Some(Text::Template(name)),
        Err(error) => {
            problems.add(
                path,
                format!("is not a template that renders: {error}"),
                Some(
                    "templates may use `{{ seq }}` (the call's number) and `{{ n }}` (0 to 999)"
                        .into(),
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(yaml: &str) -> Result<McpWorkload, Vec<String>> {
        let spec: McpSpec = yaml_serde::from_str(yaml).expect("parses");
        let mut problems = Problems::default();
        McpWorkload::from_spec(&spec, "spec.payloadTemplate.mcp", &mut problems).ok_or_else(|| {
            problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect()
        })
    }

    #[test]
    fn draws_by_weight_and_renders_templates() {
        let w = workload(
            "ops:\n  - { tool: echo, args: { text: 'call {{ seq }}', deep: [ 'n={{ n }}', 2 ] }, weight: 3 }\n  - { list: tools }\n",
        )
        .unwrap();
        let calls: Vec<McpCall> = (0..4000).map(|seq| w.call(7, seq)).collect();
        let tools = calls.iter().filter(|c| c.method() == "tools/call").count();
        // 3 in 4, binomial sd √(4000·¾·¼) ≈ 27: within 4 sd.
        assert!((tools as i64 - 3000).abs() < 110, "{tools}");
        let McpCall::Tool { args, .. } = w.call(7, 12).clone() else {
            return assert_eq!(w.call(7, 12), McpCall::List(McpList::Tools));
        };
        assert_eq!(args["text"], "call 12");
        assert!(args["deep"][0].as_str().unwrap().starts_with("n="));
        assert_eq!(args["deep"][1], 2);
        assert_eq!(
            w.call(7, 12),
            w.call(7, 12),
            "a pure function of seed and seq"
        );
    }

    #[test]
    fn churn_ends_about_its_share_of_sessions() {
        let w = workload("ops: [ { ping: true } ]\nchurn: 0.1\n").unwrap();
        let ended = (0..10_000).filter(|seq| w.ends_session(3, *seq)).count();
        // sd √(10000·0.1·0.9) = 30: within 4 sd.
        assert!((ended as i64 - 1000).abs() < 120, "{ended}");
        let never = workload("ops: [ { ping: true } ]\n").unwrap();
        assert!(!(0..1000).any(|seq| never.ends_session(3, seq)));
    }

    #[test]
    fn bad_mixes_are_reported_by_path() {
        let problems = workload(
            "ops:\n  - { tool: a, read: 'x' }\n  - { list: tools, args: { a: 1 } }\n  - { tool: a, args: { t: '{{ nope }}' } }\n  - { ping: true, weight: 0 }\nchurn: 2\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = problems
            .iter()
            .map(|p| p.split(':').next().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "spec.payloadTemplate.mcp.churn",
                "spec.payloadTemplate.mcp.ops[0]",
                "spec.payloadTemplate.mcp.ops[1].args",
                "spec.payloadTemplate.mcp.ops[2].args.t",
                "spec.payloadTemplate.mcp.ops[3].weight",
            ],
            "{problems:?}"
        );
    }
}
