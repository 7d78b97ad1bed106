//! `redline heal`: the remediation agent on a failed run — a plan by default, actions
//! with `--execute` — and its audit log, RUN/heal.jsonl.

use super::*;
use crate::heal::model::Protocol;
use crate::heal::runbook;
use crate::heal::session::{Ask, heal};

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

async fn heal_run(ask: Ask) -> Result<i32> {
    let runbook = match runbook::load(&ask.runbook) {
        Ok(runbook) => runbook,
        Err(errors) => {
            err(&errors.of("runbook"));
            return Ok(exit::USAGE);
        }
    };
    let healed = heal(&ask, &runbook).await?;
    print_loop(&healed.audit);
    outln!("{}", healed.detail);
    outln!("audit log: {}", healed.audit_path.display());
    if let Some(page) = &healed.report {
        outln!("report: {}", page.display());
    }
    Ok(if healed.ending.succeeded() {
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
