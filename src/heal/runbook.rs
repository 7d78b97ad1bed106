//! The runbook: the whitelist of what the remediation agent may do. Each action has a
//! description for the model, a JSON Schema for its arguments, how it runs (a command
//! with arguments substituted as argv items, a webhook, an `ansible-playbook` run or an
//! AWX job-template launch), an optional rollback and an optional verify load. Parsed
//! strictly and checked once, with every problem located in the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::spec::error::{SpecError, SpecErrors};
use crate::spec::problems::Problems;
use crate::spec::values::Dur;

/// The most steps one decision may take: the source's limit, and ours.
pub const MAX_STEPS: u32 = 3;

/// The action name the model uses to end the loop; no runbook action may take it.
pub const FINISH: &str = "finish";

/// A runbook file as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunbookFile {
    /// Steps one decision may take, 1 to 3 (default 3).
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// How long an action (or its rollback) may run before it is stopped (default 60s).
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// The hosts (`host` or `host:port`) webhooks and AWX may be called on.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Environment variables commands and playbooks inherit, by name; they get only
    /// these and PATH, HOME, LANG.
    #[serde(default)]
    pub env: Vec<String>,
    /// The check after every action that names none.
    #[serde(default)]
    pub verify: Option<VerifySpec>,
    /// The whitelist: each action the agent may take, by name.
    pub actions: BTreeMap<String, ActionSpec>,
}

/// One action as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// What it does and when to use it: the model reads this.
    pub description: String,
    /// The JSON Schema its arguments must satisfy (an object schema).
    #[serde(default)]
    pub schema: Option<Value>,
    /// How it runs.
    pub run: RunSpec,
    /// What undoes it, run with the same arguments when the action fails.
    #[serde(default)]
    pub rollback: Option<RunSpec>,
    /// How long it may run (default: the runbook's `timeout`).
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// The check after it (default: the runbook's `verify`).
    #[serde(default)]
    pub verify: Option<VerifySpec>,
}

/// How an action runs: exactly one of these.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// A program and its arguments, no shell: `{name}` in an item is replaced by that
    /// argument's value, and the item stays one argv item whatever the value holds.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// An HTTP call with the arguments as its JSON body.
    #[serde(default)]
    pub webhook: Option<WebhookSpec>,
    /// `ansible-playbook -i INVENTORY PLAYBOOK --extra-vars ARGUMENTS`.
    #[serde(default)]
    pub ansible: Option<AnsibleSpec>,
    /// An AWX / Ansible Tower job-template launch with the arguments as `extra_vars`,
    /// polled until the job ends.
    #[serde(default)]
    pub awx: Option<AwxSpec>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    pub url: String,
    /// `POST` (default) or `PUT`.
    #[serde(default)]
    pub method: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnsibleSpec {
    /// The playbook, relative to the runbook's folder.
    pub playbook: PathBuf,
    /// An inventory file, or a list such as `localhost,` (default `localhost,`).
    #[serde(default)]
    pub inventory: Option<String>,
    /// `local` to run on the control host without ssh.
    #[serde(default)]
    pub connection: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwxSpec {
    /// The AWX / Tower base URL, e.g. `https://awx.example`.
    pub url: String,
    pub job_template: u64,
    /// The environment variable holding the OAuth2 token (sent as a Bearer token).
    pub token_env: String,
    /// Between two polls of the job (default 2s).
    #[serde(default)]
    pub poll: Option<Dur>,
}

/// The check after an action: a short redline run whose gate must pass.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifySpec {
    /// A spec, relative to the runbook's folder; the action is verified when
    /// `redline run SPEC` exits 0 (its SLOs passed).
    pub spec: PathBuf,
}

/// A checked runbook.
#[derive(Debug, Clone)]
pub struct Runbook {
    /// Absolute: its folder is where actions run and relative paths start.
    pub path: PathBuf,
    pub max_steps: u32,
    pub allow_hosts: Vec<String>,
    pub env: Vec<String>,
    pub actions: BTreeMap<String, Action>,
}

impl Runbook {
    /// The folder actions run in.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("/"))
    }
}

/// A checked action.
#[derive(Debug, Clone)]
pub struct Action {
    pub name: String,
    pub description: String,
    pub schema: Value,
    pub validator: Arc<jsonschema::Validator>,
    pub run: Run,
    pub rollback: Option<Run>,
    pub timeout: Duration,
    pub verify: Option<PathBuf>,
}

/// How a checked action runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Run {
    Command(Vec<String>),
    Webhook {
        url: String,
        method: hyper::Method,
    },
    Ansible {
        playbook: PathBuf,
        inventory: String,
        connection: Option<String>,
    },
    Awx {
        url: String,
        job_template: u64,
        token_env: String,
        poll: Duration,
    },
}

/// Reads and checks a runbook: every problem, with file, line and field.
pub fn load(path: &Path) -> Result<Runbook, SpecErrors> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| SpecErrors::unreadable(&file, "runbook", &e))?;
    parse(path, &text)
}

/// Parses runbook text; `path` names it in errors and anchors its relative paths.
pub fn parse(path: &Path, text: &str) -> Result<Runbook, SpecErrors> {
    let file = path.display().to_string();
    let spec: RunbookFile = yaml_serde::from_str(text)
        .map_err(|e| SpecErrors(vec![SpecError::from_yaml(&file, &e, 0)]))?;
    // Absolute, so playbooks and verify specs are found whatever folder a command
    // runs in.
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut problems = Problems::new();
    let runbook = check(&spec, &path, dir, &mut problems);
    match runbook {
        Some(runbook) if problems.is_empty() => Ok(runbook),
        _ => Err(problems.located(&file, text)),
    }
}

fn check(spec: &RunbookFile, path: &Path, dir: &Path, problems: &mut Problems) -> Option<Runbook> {
    let max_steps = spec.max_steps.unwrap_or(MAX_STEPS);
    if !(1..=MAX_STEPS).contains(&max_steps) {
        problems.add(
            "max_steps",
            format!("{max_steps} steps: a decision takes 1 to {MAX_STEPS}"),
            Some(format!("write `max_steps: {MAX_STEPS}` or fewer")),
        );
    }
    if spec.actions.is_empty() {
        problems.add(
            "actions",
            "a runbook needs at least one action: the agent may do only what it lists".into(),
            None,
        );
    }
    let timeout = spec.timeout.map_or(Duration::from_secs(60), |d| d.0);
    let verify = spec
        .verify
        .as_ref()
        .and_then(|v| check_verify(v, dir, "verify", problems));
    let context = Context {
        dir,
        allow_hosts: &spec.allow_hosts,
        timeout,
        verify,
    };
    let mut actions = BTreeMap::new();
    for (name, action) in &spec.actions {
        let at = format!("actions.{name}");
        if let Some(action) = check_action(name, action, &at, &context, problems) {
            actions.insert(name.clone(), action);
        }
    }
    Some(Runbook {
        path: path.to_path_buf(),
        max_steps,
        allow_hosts: spec.allow_hosts.clone(),
        env: spec.env.clone(),
        actions,
    })
}

/// What every action's check needs from the runbook: its folder, its hosts and the
/// defaults an action may override.
struct Context<'a> {
    dir: &'a Path,
    allow_hosts: &'a [String],
    timeout: Duration,
    verify: Option<PathBuf>,
}

fn check_action(
    name: &str,
    spec: &ActionSpec,
    at: &str,
    cx: &Context,
    problems: &mut Problems,
) -> Option<Action> {
    let before = problems.count();
    check_name(name, at, problems);
    if spec.description.trim().is_empty() {
        problems.add(
            &format!("{at}.description"),
            "is empty: the model chooses actions by their descriptions".into(),
            Some("say what the action does and when it helps".into()),
        );
    }
    let (schema, validator) = check_schema(spec.schema.as_ref(), at, problems)?;
    let properties = top_level_properties(&schema);
    let run = check_run(&spec.run, &properties, &format!("{at}.run"), cx, problems);
    let rollback = spec
        .rollback
        .as_ref()
        .map(|r| check_run(r, &properties, &format!("{at}.rollback"), cx, problems));
    let verify = match &spec.verify {
        Some(v) => check_verify(v, cx.dir, &format!("{at}.verify"), problems),
        None => cx.verify.clone(),
    };
    if problems.count() > before {
        return None;
    }
    Some(Action {
        name: name.to_owned(),
        description: spec.description.trim().to_owned(),
        schema,
        validator: Arc::new(validator),
        run: run?,
        rollback: rollback.flatten(),
        timeout: spec.timeout.map_or(cx.timeout, |d| d.0),
        verify,
    })
}

/// Names go to the model as function names: OpenAI's `^[a-zA-Z0-9_-]{1,64}$`.
fn check_name(name: &str, at: &str, problems: &mut Problems) {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        problems.add(
            at,
            format!("`{name}` cannot be a tool name"),
            Some("use letters, digits, `_` and `-`, at most 64".into()),
        );
    }
    if name == FINISH {
        problems.add(
            at,
            format!("`{FINISH}` is how the model ends the loop"),
            Some("give the action another name".into()),
        );
    }
}

fn check_schema(
    schema: Option<&Value>,
    at: &str,
    problems: &mut Problems,
) -> Option<(Value, jsonschema::Validator)> {
    let Some(schema) = schema else {
        problems.add(
            at,
            "has no `schema`: every action's arguments are checked against one".into(),
            Some("for an action without arguments: `schema: { type: object, properties: {}, additionalProperties: false }`".into()),
        );
        return None;
    };
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        problems.add(
            &format!("{at}.schema"),
            "must describe an object (`type: object`): the arguments are named".into(),
            None,
        );
        return None;
    }
    match jsonschema::validator_for(schema) {
        Ok(validator) => Some((schema.clone(), validator)),
        Err(e) => {
            problems.add(
                &format!("{at}.schema"),
                format!("is not a JSON Schema: {e}"),
                None,
            );
            None
        }
    }
}

fn top_level_properties(schema: &Value) -> BTreeSet<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn check_run(
    spec: &RunSpec,
    properties: &BTreeSet<String>,
    at: &str,
    cx: &Context,
    problems: &mut Problems,
) -> Option<Run> {
    let given = [
        spec.command.is_some(),
        spec.webhook.is_some(),
        spec.ansible.is_some(),
        spec.awx.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        problems.add(
            at,
            "needs exactly one of `command`, `webhook`, `ansible`, `awx`".into(),
            None,
        );
        return None;
    }
    if let Some(argv) = &spec.command {
        return check_command(argv, properties, &format!("{at}.command"), problems);
    }
    if let Some(hook) = &spec.webhook {
        let at = format!("{at}.webhook");
        let url = check_url(&hook.url, &format!("{at}.url"), cx, problems);
        let method = match hook.method.as_deref().unwrap_or("POST") {
            "POST" => hyper::Method::POST,
            "PUT" => hyper::Method::PUT,
            other => {
                problems.add(
                    &format!("{at}.method"),
                    format!("`{other}` is not a method a webhook uses"),
                    Some("choose from: POST, PUT".into()),
                );
                return None;
            }
        };
        return Some(Run::Webhook { url: url?, method });
    }
    if let Some(play) = &spec.ansible {
        let playbook = cx.dir.join(&play.playbook);
        if !playbook.is_file() {
            problems.add(
                &format!("{at}.ansible.playbook"),
                format!("{} is not a file", playbook.display()),
                Some("give the playbook's path relative to the runbook".into()),
            );
            return None;
        }
        return Some(Run::Ansible {
            playbook,
            inventory: play
                .inventory
                .clone()
                .unwrap_or_else(|| "localhost,".into()),
            connection: play.connection.clone(),
        });
    }
    let awx = spec.awx.as_ref()?;
    let url = check_url(&awx.url, &format!("{at}.awx.url"), cx, problems)?;
    Some(Run::Awx {
        url: url.trim_end_matches('/').to_owned(),
        job_template: awx.job_template,
        token_env: awx.token_env.clone(),
        poll: awx.poll.map_or(Duration::from_secs(2), |d| d.0),
    })
}

fn check_command(
    argv: &[String],
    properties: &BTreeSet<String>,
    at: &str,
    problems: &mut Problems,
) -> Option<Run> {
    let Some(program) = argv.first() else {
        problems.add(
            at,
            "is empty".into(),
            Some("write the program and its arguments: `[systemctl, restart, '{unit}']`".into()),
        );
        return None;
    };
    if !placeholders(program).is_empty() {
        problems.add(
            &format!("{at}[0]"),
            "the program is fixed: an argument may not choose it".into(),
            None,
        );
    }
    for (i, item) in argv.iter().enumerate() {
        for name in placeholders(item) {
            if !properties.contains(name) {
                problems.add(
                    &format!("{at}[{i}]"),
                    format!("`{{{name}}}` is not an argument the schema declares"),
                    Some(format!(
                        "add `{name}` to the schema's properties, or remove it here"
                    )),
                );
            }
        }
    }
    Some(Run::Command(argv.to_vec()))
}

/// The `{name}` placeholders in a command item.
pub fn placeholders(item: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            found.push(name);
        }
        rest = &rest[open + close + 1..];
    }
    found
}

fn check_url(url: &str, at: &str, cx: &Context, problems: &mut Problems) -> Option<String> {
    let uri: hyper::Uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => {
            problems.add(at, format!("`{url}` is not a URL: {e}"), None);
            return None;
        }
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        problems.add(
            at,
            format!("`{url}` needs http:// or https:// and a host"),
            None,
        );
        return None;
    };
    if scheme != "http" && scheme != "https" {
        problems.add(at, format!("`{scheme}` is not http or https"), None);
        return None;
    }
    if !host_allowed(&uri, cx.allow_hosts) {
        problems.add(
            at,
            format!(
                "{} is not among the runbook's allow_hosts",
                authority.as_str()
            ),
            Some(format!(
                "add `{}` to `allow_hosts` if the agent may call it",
                authority.as_str()
            )),
        );
        return None;
    }
    Some(url.to_owned())
}

/// Whether `uri`'s host is one the runbook names: as `host:port` (the scheme's port
/// when the URL gives none), or as `host` alone for any port.
pub fn host_allowed(uri: &hyper::Uri, allowed: &[String]) -> bool {
    let Some(host) = uri.host() else {
        return false;
    };
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let with_port = format!("{host}:{port}");
    allowed.iter().any(|a| *a == with_port || a == host)
}

fn check_verify(
    spec: &VerifySpec,
    dir: &Path,
    at: &str,
    problems: &mut Problems,
) -> Option<PathBuf> {
    let path = dir.join(&spec.spec);
    if !path.is_file() {
        problems.add(
            &format!("{at}.spec"),
            format!("{} is not a file", path.display()),
            Some("give the verify spec's path relative to the runbook".into()),
        );
        return None;
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_allowed_by_name_or_by_name_and_port() {
        let allowed = ["awx.example:443".to_owned(), "127.0.0.1".to_owned()];
        let ok = |url: &str| host_allowed(&url.parse().unwrap(), &allowed);
        assert!(ok("https://awx.example/api"));
        assert!(ok("https://awx.example:443/api"));
        assert!(!ok("http://awx.example/api"), "port 80 is not 443");
        assert!(ok("http://127.0.0.1:9000/hook"));
        assert!(!ok("http://127.0.0.2/hook"));
        assert!(!ok("http://awx.example.evil.com/"));
    }

    #[test]
    fn placeholders_are_names_in_braces() {
        assert_eq!(placeholders("--replicas={n}"), ["n"]);
        assert_eq!(placeholders("{a}-{b_c}"), ["a", "b_c"]);
        assert!(placeholders("{\"json\": 1}").is_empty());
    }
}
