//! `feedback`: per-service request rates driven by a live gauge of GPU memory use
//! (the source document's formulas as the defaults).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Dur;

/// The controller: every `interval` it reads `gauge` (u = memory used ÷ total) and
/// sets each service's rate to max(floor, ⌊base × (1 − u)^exponent⌋), smoothed and
/// limited per step. It replaces `load`: the run lasts `duration`, its arrivals one
/// Poisson process per service at the live rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackSpec {
    pub gauge: GaugeSpec,
    /// How long the run lasts.
    pub duration: Dur,
    /// How often the gauge is read (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Dur>,
    /// Weight of the newest reading in the smoothed u (1 = no smoothing; default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoothing: Option<f64>,
    /// Most a rate may change in one interval, as a share of its current value
    /// (default 0.5), so the loop does not oscillate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_step: Option<f64>,
    /// Per service of the mix (by name): its rate's formula.
    pub rates: BTreeMap<String, RateSpec>,
}

/// A service's rate: max(`floor`, ⌊`base` × (1 − u)^`exponent`⌋) requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    pub base: f64,
    pub floor: f64,
    #[serde(default = "one")]
    pub exponent: f64,
}

/// Where u comes from; exactly one source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GaugeSpec {
    /// A command and its arguments, run without a shell, printing `used, total` lines
    /// (`nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A URL answering `used, total` lines or one number u in [0, 1]; `embedded` is the
    /// embedded simulator's `/redline/nvidia-smi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Prometheus server and an instant query whose value is u, e.g.
    /// `sum(DCGM_FI_DEV_FB_USED) / sum(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)` or
    /// `max(vllm:kv_cache_usage_perc)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGauge>,
    /// With several GPUs' lines: `sum` (default: used and total summed) or `max` (the
    /// fullest GPU's u).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<GpuReduce>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrometheusGauge {
    /// The server's base URL (`http://127.0.0.1:9090`).
    pub url: String,
    pub query: String,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GpuReduce {
    #[default]
    Sum,
    Max,
}

fn one() -> f64 {
    1.0
}
