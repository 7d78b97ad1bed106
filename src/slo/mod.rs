//! SLO-as-code: thresholds written in the spec, judged with confidence bounds.

pub mod stats;
