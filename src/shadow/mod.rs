//! Shadow traffic: record what production sends and gets, replay it against a
//! candidate beside the primary, and diff the answers with the primary's own noise
//! cancelled out.
//!
//! # Layout
//! - [`recording`] — the recording format (versioned JSONL and a manifest), read back
//! - [`capture`] — the chaos proxy's tap that writes a recording, secrets redacted
//! - [`replay`] — each recorded request sent to primary, candidate and secondary
//! - [`similarity`] — chrF, ROUGE-L, edit similarity and tool-call F1
//! - [`config`] — what the diff ignores, tolerates, treats as text, attributes
//! - [`diff`] — per-field verdicts against the noise baseline
//! - [`render`] — the diff for a terminal
//! - [`html`] — the diff as a page
//! - [`outputs`] — the files a replay leaves

pub mod config;
pub mod diff;
pub mod html;
pub mod outputs;
pub mod capture;
pub mod recording;
pub mod render;
pub mod replay;
pub mod similarity;
