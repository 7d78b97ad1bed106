//! What the simulator and the launcher share about a server's start: its kind, and a
//! file's residency in the page cache (a cold start's weights).

pub mod pagecache;

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
