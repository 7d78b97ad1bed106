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

pub use agent::{Agent, Ending};
pub use runbook::Runbook;
