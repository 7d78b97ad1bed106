//! Self-healing: when a run fails, an LLM agent reads why (the failed SLOs and the
//! causal attribution), picks remediations from a runbook's whitelist, and runs them
//! with their arguments checked against each action's JSON Schema, at most three
//! steps, a rollback when an action fails and a verify load after each. Dry run by
//! default; every prompt, answer, check and action goes to `heal.jsonl`.

pub mod agent;
pub mod audit;
pub mod exec;
pub mod model;
pub mod observe;
pub mod runbook;
pub mod session;

pub use agent::{Agent, Ending};
pub use runbook::Runbook;

use serde_json::Value;

use crate::report::{HealStep, HealSummary};

/// The loop as the report shows it, from the audit log's lines.
pub fn summarize(
    lines: &[Value],
    model: &str,
    executed: bool,
    ending: &Ending,
    detail: String,
) -> HealSummary {
    let mut steps: Vec<HealStep> = Vec::new();
    for line in lines {
        let step = line["step"].as_u64().unwrap_or(0) as u32;
        let text = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
        let outcome = |o: &Value| match o["ok"].as_bool() {
            Some(true) => "ok".to_owned(),
            _ => format!("failed: {}", o["error"].as_str().unwrap_or_default()),
        };
        let current = steps.last_mut().filter(|s| s.step == step);
        match (line["event"].as_str().unwrap_or_default(), current) {
            ("decision", _) => steps.push(HealStep {
                step,
                action: text("action"),
                arguments: line["arguments"].clone(),
                thought: text("thought"),
                result: String::new(),
                rollback: None,
                verify: None,
            }),
            ("validation", Some(s)) if line["valid"] == false => {
                let why = line
                    .get("why")
                    .cloned()
                    .unwrap_or_else(|| line["errors"].clone());
                s.result = format!(
                    "refused: {}",
                    why.as_str().map_or_else(|| why.to_string(), str::to_owned)
                );
            }
            ("plan", Some(s)) => s.result = "planned".into(),
            ("action", Some(s)) => s.result = outcome(&line["outcome"]),
            ("rollback", Some(s)) => s.rollback = Some(outcome(&line["outcome"])),
            ("verify", Some(s)) => s.verify = line["passed"].as_bool(),
            _ => {}
        }
    }
    let ending_name = serde_json::to_value(ending)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_owned))
        .unwrap_or_default();
    HealSummary {
        model: model.to_owned(),
        executed,
        ending: ending_name,
        detail,
        steps,
    }
}
