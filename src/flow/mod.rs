//! Flows: RAG and agent sessions as chains of steps (embed, search, chat, tool,
//! http), validated from the spec, with what a session checks as it runs: recall
//! against a ground truth, and assertions on each step's output. The runner drives
//! the steps; the search backends are clients (`client::search`).
//!
//! # Layout
//! - [`recall`] — recall@k against a ground-truth file
//! - [`assert`](mod@assert) — checks on step outputs

pub mod assert;
pub mod recall;
