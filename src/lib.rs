//! redline: a load tester for AI-native services.
//!
//! # Layout
//! Data flows one way: spec → scenario → schedule → runner → client → record → metrics
//! → slo → report. The modules are declared below from the foundation up, and each
//! names only modules declared before it (`tests/layers.rs` checks every `crate::`
//! path against this order).
//!
//! Two parts are crates of their own beneath this one, taken in under their names at
//! their place in the order: `redline-base` (`crates/base`: [`seed`], [`vector`],
//! [`grpc`], [`net`], the simulator's tokenizer, histogram summaries, drawn latencies,
//! WAV lengths, start kinds and the page cache) and `redline-sim` (`crates/sim`: [`sim`]).
//! An edit to the load tester does not recompile the simulator.
//! - [`seed`]: seeded mixing and FNV-1a, which every seeded part draws from.
//! - [`vector`]: cosine similarity and normalisation of embeddings.
//! - [`grpc`]: gRPC on the wire: Qdrant's messages, message framing, the one
//!   rewrite inside a message the chaos proxy makes.
//! - [`spec`]: the spec file's types (serde), parsed strictly with located errors, and
//!   the one collector of the problems later checks find.
//! - [`tokenizer`]: local token counting (the simulator's tokenizer, tiktoken BPEs,
//!   Hugging Face files).
//! - [`record`]: the outcome record, one per scheduled request, and its one reader.
//! - [`folder`]: a run's folder and the names of the files in it.
//! - [`net`]: the accept loop and TLS the simulator, the chaos proxy and the
//!   receivers share.
//! - [`workload`]: what each request sends: payloads, prompt sources, datasets,
//!   replayed traces, generated corpora.
//! - [`client`]: protocol clients (OpenAI-compatible, HTTP, JSON, TLS) on one send
//!   path, the incremental SSE decoder and framer, the server's own tokenizer.
//! - [`trace`]: redline's own spans over OTLP, `gen_ai.*` metrics, the OTLP receiver
//!   and the dependency graph of traces.
//! - [`launch`]: servers redline starts itself (coldstart's server, restarted
//!   replicas): no shell, a process group of their own, waited for from outside; a
//!   file's residency in the page cache, and dropping it (cold starts).
//! - [`prometheus`]: a run's own metrics while it runs, and the server's, scraped.
//! - [`schedule`]: arrival processes and stages, pure and seeded; the pacer that
//!   releases open-loop arrivals on time from a thread of its own; a process's
//!   segment (share) of the run.
//! - [`metrics`]: HDR histograms, counters and windows over the records.
//! - [`slo`]: SLOs as code: parsing, judging, JUnit.
//! - [`explain`]: causal attribution over the call graph: which node's own change
//!   made the root breach, with intervals and interventions.
//! - [`sim`]: the embedded simulators (an OpenAI-compatible LLM server over a
//!   continuous-batching engine model, embeddings, vector search), with ground truth
//!   on every answer.
//! - [`chaos`]: the fault-injecting reverse proxy, HTTP- and SSE-aware, with a live
//!   admin API; it balances over replicas and ejects failing ones.
//! - [`flow`]: what a flow session checks as it runs: search backends, recall,
//!   assertions.
//! - [`scenario`]: the validated scenario a spec (or the CLI's shorthands) means.
//! - [`results`]: what a run hands the report: its result and header, the accounts
//!   of its disruptions and its feedback controller.
//! - [`runner`]: carries out a scenario: scheduling, sending, recording, draining.
//! - [`report`]: the JSON summary, the terminal table, JUnit, the files a run writes.
//! - [`dist`]: a run spread over processes and machines: segment workers,
//!   their folders merged into one run, the Kubernetes manifests.
//! - [`shadow`]: shadow traffic: a recording proxy, replay against primary,
//!   candidate and secondary, and a diff with the primary's own noise cancelled.
//! - [`capacity`]: a model server's start-up, cold and warm, timed from outside to
//!   its first token with the memory it took (`coldstart`); those start-ups and a
//!   sweep turned into autoscaler settings (`advise`).
//! - [`heal`]: the remediation agent: a runbook's whitelisted actions, chosen by an
//!   LLM from a failed run's report, schema-checked, rolled back, verified, audited.
//! - [`cli`]: the `redline` command line; subcommands only.

pub use redline_base::grpc;
pub use redline_base::seed;
pub use redline_base::vector;
pub mod spec;
pub mod tokenizer;
pub mod record;
pub mod folder;
pub use redline_base::net;
pub mod workload;
pub mod client;
pub mod trace;
pub mod launch;
pub mod prometheus;
pub mod schedule;
pub mod metrics;
pub mod slo;
pub mod coordinator;
pub mod explain;
pub use redline_sim as sim;
pub mod chaos;
pub mod flow;
pub mod scenario;
pub mod results;
pub mod runner;
pub mod report;
pub mod dist;
pub mod shadow;
pub mod capacity;
pub mod heal;
pub mod cli;
