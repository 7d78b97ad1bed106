//! `redline heal`: the remediation agent on a failed run — a plan by default, actions
//! with `--execute` — and its audit log, RUN/heal.jsonl.

use super::*;
use crate::folder::RunFolder;
use crate::heal::exec::{self, Runner};
use crate::heal::model::{Model, Protocol};
use crate::heal::{Agent, Ending, observe, runbook};
use crate::report::conclude::{Conclude, conclude};

#[derive(Debug, clap::Args)]
pub struct HealArgs {
    /// The failed run's folder (summary.json; explain.json when explained).
    run: PathBuf,
    /// The whitelist of actions (see docs/heal.md).
    #[arg(long)]
    runbook: PathBuf,
    /// An OpenAI-compatible server (`http://127.0.0.1:11434` for Ollama, `…/v1`).
    #[arg(long)]
    model_url: String,
    /// The model to ask.
    #[arg(long)]
    model: String,
    /// The environment variable holding the server's API key, if it needs one.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// How decisions are asked for.
    #[arg(long, value_enum, default_value = "auto")]
    protocol: Protocol,
    /// Run the actions (and their rollbacks and verify loads). Without it the plan is
    /// only printed and logged.
    #[arg(long)]
    execute: bool,
    /// How long one model answer may take.
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    model_timeout: std::time::Duration,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    Ok(spec::Dur::parse(text)?.0)
}

pub(super) async fn heal_command(args: HealArgs) -> Result<i32> {
    let ask = Ask {
        run: args.run,
        runbook: args.runbook,
        model_url: args.model_url,
        model: args.model,
        api_key_env: args.api_key_env,
        protocol: args.protocol,
        execute: args.execute,
        model_timeout: args.model_timeout,
    };
    heal_run(ask).await
}

/// A failed run handed to the agent by its spec's `remediate:`: its exit code is the
/// run's, whatever the agent does.
pub(super) async fn remediate(run: &Path, spec: &crate::spec::RemediateSpec) -> Result<()> {
    outln!(
        "remediate: handing the failed run to {} at {}",
        spec.model,
        spec.model_url
    );
    let ask = Ask {
        run: run.to_path_buf(),
        runbook: spec.runbook.clone(),
        model_url: spec.model_url.clone(),
        model: spec.model.clone(),
        api_key_env: spec.api_key_env.clone(),
        protocol: Protocol::Auto,
        execute: spec.execute,
        model_timeout: std::time::Duration::from_secs(120),
    };
    heal_run(ask).await.map(|_| ())
}

/// What the agent is asked to do, from the command line or a spec.
struct Ask {
    run: PathBuf,
    runbook: PathBuf,
    model_url: String,
    model: String,
    api_key_env: Option<String>,
    protocol: Protocol,
    execute: bool,
    model_timeout: std::time::Duration,
}

async fn heal_run(args: Ask) -> Result<i32> {
    let runbook = match runbook::load(&args.runbook) {
        Ok(runbook) => runbook,
        Err(errors) => {
            err(&errors.of("runbook"));
            return Ok(exit::USAGE);
        }
    };
    let summary = crate::report::read_summary(&args.run)?;
    let key = match &args.api_key_env {
        Some(var) => Some(std::env::var(var).with_context(|| format!("${var} is not set"))?),
        None => None,
    };
    let http = exec::http_client();
    let model = Model {
        url: Model::chat_url(&args.model_url),
        name: args.model.clone(),
        key,
        protocol: args.protocol,
        timeout: args.model_timeout,
        http: http.clone(),
    };
    let folder = RunFolder::new(&args.run);
    let audit_path = folder.heal_log();
    let mut audit = crate::heal::audit::Audit::create(&audit_path)
        .with_context(|| format!("cannot write {}", audit_path.display()))?;
    let start = crate::heal::audit::Event::Start {
        run: &args.run,
        runbook: &args.runbook,
        model_url: &model.url,
        model: &model.name,
        protocol: args.protocol,
        execute: args.execute,
        actions: runbook.actions.keys().map(String::as_str).collect(),
        max_steps: runbook.max_steps,
    };
    audit.log(0, &start)?;
    let mut agent = Agent {
        runbook: &runbook,
        model,
        runner: Runner {
            dir: runbook.dir(),
            env: &runbook.env,
            allow_hosts: &runbook.allow_hosts,
            http: &http,
        },
        execute: args.execute,
        verify_dir: std::path::absolute(folder.heal_runs())?,
        redline: std::env::current_exe().context("cannot find this program for verify runs")?,
    };
    let first = observe::failed_run(&args.run, &summary);
    let ending = agent.heal(first, &mut audit).await;
    print_loop(&audit.lines);
    let detail = describe(&ending, args.execute);
    outln!("{detail}");
    outln!("audit log: {}", audit_path.display());
    // The run's report gets a section on what the agent did.
    let mut summary = summary;
    summary.heal = Some(crate::heal::summarize(
        &audit.lines,
        &args.model,
        args.execute,
        &ending,
        detail,
    ));
    // Concluded again with the agent's section; the run's own exit code stands.
    let how = Conclude {
        aggregator: None,
        junit: false,
        strict: false,
        explain: false,
        pictures: true,
        html: None,
    };
    let concluded = conclude(&folder, summary, how)?;
    if let Some(page) = concluded.report {
        outln!("report: {}", page.display());
    }
    Ok(if ending.succeeded() {
        exit::OK
    } else {
        exit::SLO_FAILED
    })
}

/// The loop as it went, one line per decision, action, rollback and verify.
fn print_loop(lines: &[serde_json::Value]) {
    for line in lines {
        let step = &line["step"];
        let text = match line["event"].as_str().unwrap_or_default() {
            "decision" => format!(
                "step {step}: the model chose `{}` {} — {}",
                str_of(&line["action"]),
                line["arguments"],
                str_of(&line["thought"])
            ),
            "validation" if line["valid"] == false => format!(
                "step {step}: refused: {}",
                line.get("why")
                    .or(line.get("errors"))
                    .unwrap_or(&serde_json::Value::Null)
            ),
            "plan" => format!(
                "step {step}: would run `{}` {} (dry run)",
                str_of(&line["action"]),
                line["arguments"]
            ),
            "action" => format!(
                "step {step}: ran `{}`: {}",
                str_of(&line["action"]),
                outcome_text(&line["outcome"])
            ),
            "rollback" => format!(
                "step {step}: rolled back: {}",
                outcome_text(&line["outcome"])
            ),
            "verify" => format!(
                "step {step}: verify load {}",
                if line["passed"] == true {
                    "passed: the SLOs hold"
                } else {
                    "failed"
                }
            ),
            _ => continue,
        };
        outln!("{text}");
    }
}

fn str_of(value: &serde_json::Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn outcome_text(outcome: &serde_json::Value) -> String {
    match outcome["ok"].as_bool() {
        Some(true) => format!(
            "ok in {:.0} ms",
            outcome["elapsed_ms"].as_f64().unwrap_or(0.0)
        ),
        _ => format!("failed: {}", str_of(&outcome["error"])),
    }
}

fn describe(ending: &Ending, execute: bool) -> String {
    match ending {
        Ending::Recovered { action } => format!("healed: after `{action}` the verify load passed"),
        Ending::Finished { summary } => format!("the model finished: {summary}"),
        Ending::Planned { steps } if steps.is_empty() => {
            "dry run: the model planned no action".into()
        }
        Ending::Planned { steps } => format!(
            "dry run: the plan is {}{}",
            steps.join(", then "),
            if execute {
                ""
            } else {
                " (run again with --execute to carry it out)"
            }
        ),
        Ending::StepLimit { limit } => format!("stopped: the model wanted more than {limit} steps"),
        Ending::UnknownAction { action } => {
            format!("stopped: `{action}` is not in the runbook, and nothing runs that is not")
        }
        Ending::InvalidArguments { action, errors } => format!(
            "stopped: the arguments for `{action}` fail its schema: {}",
            errors.join("; ")
        ),
        Ending::RepeatedFailure { action } => {
            format!("stopped: the model chose `{action}` again after it failed")
        }
        Ending::ModelFailed { error } => format!("stopped: {error}"),
        Ending::AuditFailed { error } => {
            format!("stopped: the audit log cannot be written: {error}")
        }
    }
}
