//! Servers redline starts itself: the server under test for `redline coldstart`, the
//! replicas a run restarts under `disruptions:`. A command runs without a shell in a
//! process group of its own, and is waited for from outside.
//!
//! # Layout
//! - [`process`] — start, watch, measure and stop a server's process group
//! - [`ready`] — wait for its port and its ready endpoint
//! - [`pagecache`] — a file's residency in the page cache, and dropping it (a cold
//!   start's weights)

pub mod pagecache;
pub mod process;
pub mod ready;

/// What kind of start a server's was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartKind {
    /// A fresh process, weights from the disk.
    Cold,
    /// A fresh process, weights (mostly) from the page cache.
    Warm,
    /// Woken from sleep mode within the process.
    Wake,
}

impl StartKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StartKind::Cold => "cold",
            StartKind::Warm => "warm",
            StartKind::Wake => "wake",
        }
    }
}
