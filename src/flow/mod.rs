//! Flows: RAG and agent sessions as chains of steps (embed, search, chat, tool,
//! http), validated from the spec, with the pieces a session needs as it runs:
//! templates over its context, vector search backends, recall against a ground truth,
//! and assertions on each step's output. The runner drives the steps.
//!
//! # Layout
//! - [`search`] — Qdrant's REST API and PostgreSQL + pgvector
//! - [`recall`] — recall@k against a ground-truth file
//! - [`assert`](mod@assert) — checks on step outputs

pub mod assert;
pub mod recall;
pub mod search;
