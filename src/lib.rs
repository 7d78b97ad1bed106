//! redline: a load tester for AI-native services.
//!
//! # Layout
//! - [`sim`]: the embedded simulators (an OpenAI-compatible LLM server over a
//!   continuous-batching engine model, embeddings), with ground truth on every answer.
//! - [`tokenize`]: the simulator's tokenizer, also the client's fallback counter.
//! - [`cli`]: the `redline` command line; subcommands only.

pub mod cli;
pub mod sim;
pub mod tokenize;
