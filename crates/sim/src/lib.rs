//! The embedded simulators: an OpenAI-compatible LLM server (with TGI's and Ollama's
//! native APIs beside it) driven by a continuous-batching engine model, with
//! embeddings, and ground truth on every answer.
//!
//! Pure parts ([`scheduler`], [`kv`], [`text`], [`profile`], [`embed`], [`openai`])
//! do no IO; [`engine`] gives the scheduler a real clock; [`server`] speaks HTTP.
//!
//! A crate of its own, beneath `redline` and above `redline-base` (seeds, gRPC
//! messages, the accept loop and TLS, the tokenizer its words are made of): an edit here
//! does not recompile the load tester, nor one there the simulator. The modules are
//! declared from the foundation up, and each names only modules declared before it
//! (`tests/layers.rs` checks it, as for the root crate).

pub mod gpu;
pub mod kv;
pub mod planted;
pub mod profile;
pub mod text;
pub mod scheduler;
pub mod metrics;
pub mod engine;
pub mod openai;
pub mod conversations;
pub mod script;
pub mod startup;
pub mod embed;
pub mod tiers;
pub mod mcp;
pub mod state;
pub mod answer;
pub mod chunks;
pub mod responses;
pub mod messages;
pub mod grpc;
pub mod native;
pub mod kserve_grpc;
pub mod media;
pub mod realtime;
pub mod server;

pub use profile::Profile;
pub use server::EmbeddedSim;
pub use state::{SimConfig, SimState};
