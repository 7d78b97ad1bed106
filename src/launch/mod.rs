//! Servers redline starts itself: the server under test for `redline coldstart`, the
//! replicas a run restarts under `disruptions:`. A command runs without a shell in a
//! process group of its own, and is waited for from outside.
//!
//! # Layout
//! - [`process`] — start, watch, measure and stop a server's process group
//! - [`ready`] — wait for its port and its ready endpoint
//! - [`pagecache`] — a file's residency in the page cache, and dropping it (a cold
//!   start's weights)

pub mod process;
pub mod ready;

pub use redline_base::launch::{StartKind, pagecache};
