//! The embedded simulators: an OpenAI-compatible LLM server driven by a
//! continuous-batching engine model, with embeddings, and ground truth on every answer.

pub mod kv;
pub mod profile;
pub mod scheduler;
pub mod text;
