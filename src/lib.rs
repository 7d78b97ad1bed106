//! redline: a load tester for AI-native services.
//!
//! # Layout
//! - [`spec`]: the spec file's types (serde), parsed strictly with located errors.
//! - [`scenario`]: the validated scenario a spec (or the CLI's shorthands) means.
//! - [`schedule`]: arrival processes and stages, pure and seeded.
//! - [`pacer`]: releases open-loop arrivals on time, from a thread of its own.
//! - [`replay`]: timestamped request traces, replayed on their own schedule.
//! - [`dataset`]: prompt datasets (JSONL, ShareGPT, CSV), checked and ordered.
//! - [`flow`]: RAG and agent flows: steps, templates, search backends, recall, assertions.
//! - [`workload`]: prompt sources (synthetic lengths, shared prefixes, JSONL datasets).
//! - [`client`]: protocol clients and the incremental SSE decoder.
//! - [`record`]: the outcome record, one per scheduled request.
//! - [`metrics`]: HDR histograms, counters and windows over the records.
//! - [`runner`]: carries out a scenario: scheduling, sending, collecting, draining.
//! - [`graph`]: the dependency graph of traces (OTLP/JSON, Jaeger JSON) as JSON, DOT, Mermaid.
//! - [`otlp`]: redline's own spans over OTLP/HTTP, with `gen_ai.*` attributes.
//! - [`live`]: a run's own metrics in Prometheus's format while it runs.
//! - [`scrape`]: the server's Prometheus metrics, scraped during a run.
//! - [`report`]: the JSON summary and the terminal table.
//! - [`serve`]: the accept loop the simulator and the chaos proxy share.
//! - [`sim`]: the embedded simulators (an OpenAI-compatible LLM server over a
//!   continuous-batching engine model, embeddings), with ground truth on every answer.
//! - [`tokenize`]: the simulator's tokenizer, also exported as a `tokenizer.json`.
//! - [`tokenizer`]: local token counting (sim, tiktoken BPEs, Hugging Face files).
//! - [`chaos`]: the fault-injecting reverse proxy, HTTP- and SSE-aware, with a live
//!   admin API.
//! - [`collect`]: an OTLP/HTTP trace receiver that stores spans for [`graph`].
//! - [`cli`]: the `redline` command line; subcommands only.

pub mod chaos;
pub mod cli;
pub mod client;
pub mod collect;
pub mod datagen;
pub mod dataset;
pub mod flow;
pub mod graph;
pub mod live;
pub mod metrics;
pub mod otlp;
pub mod pacer;
pub mod record;
pub mod replay;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod schedule;
pub mod scrape;
pub mod serve;
pub mod sim;
pub mod slo;
pub mod spec;
pub mod tokenize;
pub mod tokenizer;
pub mod workload;
