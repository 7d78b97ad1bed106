//! The embedded simulators: an OpenAI-compatible LLM server (with TGI's and Ollama's
//! native APIs beside it) driven by a continuous-batching engine model, with
//! embeddings, and ground truth on every answer.
//!
//! Pure parts ([`scheduler`], [`kv`], [`text`], [`profile`], [`embed`], [`openai`])
//! do no IO; [`engine`] gives the scheduler a real clock; [`server`] speaks HTTP.

pub mod answer;
pub mod chunks;
pub mod embed;
pub mod engine;
pub mod gpu;
pub mod grpc;
pub mod kserve_grpc;
pub mod kv;
pub mod media;
pub mod metrics;
pub mod native;
pub mod openai;
pub mod planted;
pub mod profile;
pub mod scheduler;
pub mod script;
pub mod server;
pub mod startup;
pub mod state;
pub mod text;
pub mod tiers;

pub use profile::Profile;
pub use server::EmbeddedSim;
pub use state::{SimConfig, SimState};
