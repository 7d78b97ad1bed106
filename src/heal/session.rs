//! One healing session, start to end: the runbook's agent on a failed run, its audit
//! log written, and the run's summary and report concluded again with what it did.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::Value;

use super::exec::{self, Runner};
use super::model::{Model, Protocol};
use super::{Agent, Ending, Runbook, observe};
use crate::folder::RunFolder;
use crate::report::conclude::{Conclude, conclude};

/// What the agent is asked to do, from the command line or a spec.
pub struct Ask {
    pub run: PathBuf,
    pub runbook: PathBuf,
    pub model_url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    pub protocol: Protocol,
    pub execute: bool,
    pub model_timeout: std::time::Duration,
}

/// What a session did.
pub struct Healed {
    pub ending: Ending,
    /// How it ended, in a sentence (also in the report).
    pub detail: String,
    /// The audit log's lines.
    pub audit: Vec<Value>,
    pub audit_path: PathBuf,
    /// The run's report, drawn again with the agent's section.
    pub report: Option<PathBuf>,
}

/// The agent on the failed run `args.run`, by `runbook`.
pub async fn heal(args: &Ask, runbook: &Runbook) -> Result<Healed> {
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
    let mut audit = super::audit::Audit::create(&audit_path)
        .with_context(|| format!("cannot write {}", audit_path.display()))?;
    let start = super::audit::Event::Start {
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
        runbook,
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
    let detail = ending.describe(args.execute);
    // The run's report gets a section on what the agent did.
    let mut summary = summary;
    summary.heal = Some(super::summarize(
        &audit.lines,
        &args.model,
        args.execute,
        &ending,
        detail.clone(),
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
    Ok(Healed {
        ending,
        detail,
        audit: audit.lines,
        audit_path,
        report: concluded.report,
    })
}
