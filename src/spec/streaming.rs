//! `streaming:` in a `ScaleSpec`, as written: SLOs watched window by window while a
//! run goes (and by `redline watch` afterwards). `slo::streaming` validates it.

use serde::{Deserialize, Serialize};

use super::values::Dur;

/// Sliding windows over the records as they complete, a drift detector per watched
/// series, and what to do when a violation opens.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamingSpec {
    /// Length of a window (default `30s`): a multiple of `step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    /// How often a window closes (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Dur>,
    /// The series to watch, each `metric.stat`: metrics `ttft`, `itl`, `tpot`, `e2e`,
    /// `e2e_per_token` (E2E per output token), `ttft_per_1k_input` (TTFT per 1,000
    /// prompt tokens), stats `p50`, `p95`, `p99`, `mean`; or `error_rate`. Default:
    /// `ttft.p95`, `ttft_per_1k_input.p95`, `e2e.p95`, `e2e_per_token.p95` — the
    /// token-normalised series beside the raw ones, so a change of prompt mix is told
    /// apart from a slower server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch: Vec<String>,
    /// The detector every watched series runs: `ewma` (the default: the source
    /// document's rule), `page_hinkley` or `cusum`.
    #[serde(default)]
    pub detector: DetectorKind,
    /// Settings of the `ewma` detector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ewma: Option<EwmaSpec>,
    /// Settings of the `page_hinkley` detector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_hinkley: Option<PageHinkleySpec>,
    /// Settings of the `cusum` detector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cusum: Option<CusumSpec>,
    /// Windows the detectors learn the baseline from before they judge (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_windows: Option<u32>,
    /// A window with fewer samples than this is not judged (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u64>,
    /// A violation is WARN when it opens and CRITICAL once it has lasted this long
    /// (default `60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_after: Option<Dur>,
    /// What to do once per episode, when it opens (every episode is printed and
    /// written to `drift.jsonl` whatever this says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_violation: Option<ActionsSpec>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DetectorKind {
    #[default]
    Ewma,
    PageHinkley,
    Cusum,
}

/// The source document's rule: an EWMA baseline of the window value and of its spread,
/// a threshold μ + k·σ, and drift confirmed when the window's σ stays above the
/// baseline σ by `sigma_growth` for `confirm` windows; a violation is both at once.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EwmaSpec {
    /// Weight of the newest window in the baseline (default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// The threshold in baseline standard deviations above the mean (default 2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<f64>,
    /// Growth of the window's σ that counts towards drift (default `40%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma_growth: Option<String>,
    /// Consecutive windows of σ growth that confirm drift (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<u32>,
}

/// Page–Hinkley on the window value standardised by the baseline: the cumulative
/// excess over `delta` against its running minimum, an alarm past `lambda`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageHinkleySpec {
    /// Change tolerated, in baseline standard deviations (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// Alarm threshold, in baseline standard deviations (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
}

/// Two-sided tabular CUSUM on the window value standardised by the baseline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CusumSpec {
    /// Slack per window, in baseline standard deviations (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<f64>,
    /// Decision threshold, in baseline standard deviations (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h: Option<f64>,
}

/// What an episode's opening does.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionsSpec {
    /// Stop the run, as Ctrl-C would: in-flight requests drain, the records stay, the
    /// run exits 1.
    #[serde(default)]
    pub abort: bool,
    /// Call a URL once per episode — the degrade switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSpec>,
}

/// A webhook: called once when an episode opens, retried a bounded number of times,
/// never holding up the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    pub url: String,
    /// `POST` (default) or `PUT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The body: a minijinja template where `{{ episode|tojson }}` is the episode as
    /// JSON and `{{ episode.series }}`, `{{ episode.severity }}`… its fields (default:
    /// the episode as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Tries after the first failed one (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Per try (default `2s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
}
