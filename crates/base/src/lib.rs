//! What redline and its simulator share beneath them: the parts both crates name,
//! none of which names anything above it.
//!
//! - [`seed`]: seeded mixing and FNV-1a, which every seeded part draws from.
//! - [`vector`]: cosine similarity and normalisation of embeddings.
//! - [`grpc`]: gRPC on the wire: Qdrant's and KServe's messages, message framing, the
//!   one rewrite inside a message the chaos proxy makes.
//! - [`sim_tokenizer`]: the simulator's tokenizer, which synthetic prompts are made of.
//! - [`net`]: the accept loop and TLS the simulator, the chaos proxy and the
//!   receivers share.
//! - [`histogram`]: summary statistics of an HDR histogram.
//! - [`latency`]: a latency drawn per call (a tool's, a search's).
//! - [`wav`]: a WAV clip's length from its header.
//! - [`launch`]: a server start's kind, and the page cache its weights come from.

pub mod seed;
pub mod vector;
pub mod grpc;
pub mod sim_tokenizer;
pub mod net;
pub mod histogram;
pub mod latency;
pub mod wav;
pub mod launch;
