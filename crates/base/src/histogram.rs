//! Summary statistics of an HDR histogram, as the summary and the simulator's own
//! ground truth both report them.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Summary statistics of one histogram, in milliseconds (or tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dist {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Dist {
    /// Of a histogram, values divided by `scale` (1000 for µs → ms, 1 for tokens).
    pub fn of(h: &Histogram<u64>, scale: f64) -> Dist {
        if h.is_empty() {
            return Dist::default();
        }
        let q = |q: f64| h.value_at_quantile(q) as f64 / scale;
        Dist {
            count: h.len(),
            mean: h.mean() / scale,
            p50: q(0.5),
            p90: q(0.9),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max() as f64 / scale,
        }
    }
}
