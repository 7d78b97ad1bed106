//! The integration tests, as the modules of one test binary. Cargo would link each
//! file under `tests/` into a binary of its own and run those one after another, so
//! the two-minute availability run, which mostly waits, held the whole suite while
//! the other core idled. As modules of one binary the files' tests share libtest's
//! threads, and the crate's dependencies are linked once instead of twenty times.
//! `tests/layers.rs` checks that every file here is declared below, or is a test
//! binary of its own in Cargo.toml (`hostile.rs`, which reads its process's peak RSS).

mod common;

mod agent_apis;
mod availability;
mod chaos;
mod cli;
mod client_faults;
mod coldstart;
mod collect;
mod durability;
mod explain;
mod flows;
mod graded;
mod grpc;
mod heal;
mod layers;
mod mcp;
mod mcp_stdio;
mod media;
mod merge;
mod native_apis;
mod realtime;
mod report;
mod run;
mod schema;
mod segments;
mod shadow;
mod sim_http;
mod snapshots;
mod spec_errors;
mod streaming;
mod tls;
