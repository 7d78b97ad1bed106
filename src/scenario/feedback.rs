//! The feedback controller's plan (`spec.feedback`), checked against the mix it
//! drives: one rate formula per mixed service, one gauge source.

use std::time::Duration;

use crate::spec::feedback::{FeedbackSpec, GpuReduce, RateSpec};
use crate::spec::{InferenceSpec, Problems};

/// Where the gauge's reading comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum GaugeSource {
    /// A program and its arguments (no shell).
    Command(Vec<String>),
    /// A URL; `embedded` until the run knows the simulator's address.
    Url(String),
    /// The embedded simulator's `/redline/nvidia-smi`.
    Embedded,
    Prometheus {
        url: String,
        query: String,
    },
}

/// A service's rate formula.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateFormula {
    pub base: f64,
    pub floor: f64,
    pub exponent: f64,
}

impl RateFormula {
    /// max(floor, ⌊base × (1 − u)^exponent⌋), u clamped to [0, 1]. The floor is
    /// taken a hair above the product, so that 120 × (1 − 0.9) is 12 and not the 11
    /// its binary rounding (11.999…) would give.
    pub fn rate(&self, u: f64) -> f64 {
        let free = (1.0 - u.clamp(0.0, 1.0)).powf(self.exponent);
        (self.base * free + 1e-9).floor().max(self.floor)
    }
}

/// A validated controller.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackPlan {
    pub gauge: GaugeSource,
    pub reduce: GpuReduce,
    pub interval: Duration,
    pub smoothing: f64,
    pub max_step: f64,
    /// One per mix entry, in the mix's order.
    pub rates: Vec<RateFormula>,
    pub duration: Duration,
}

impl FeedbackPlan {
    /// Where the run starts: every service at its floor (at least 1 request a
    /// second), from where the step limit lets rates grow towards the formulas. An
    /// empty GPU's rates at once would fill it before the first reading could tell.
    pub fn initial_rates(&self) -> Vec<f64> {
        self.rates.iter().map(|r| r.floor.max(1.0)).collect()
    }
}

/// The plan, or `None` after reporting what is wrong (or when there is no feedback).
pub(super) fn feedback_from_spec(
    spec: &InferenceSpec,
    problems: &mut Problems,
) -> Option<FeedbackPlan> {
    let f = spec.feedback.as_ref()?;
    let before = problems.len();
    let mix = &spec.payload_template.mix;
    if mix.is_empty() {
        problems.add(
            "spec.feedback",
            "drives the rates of a mix's services: there is no `payloadTemplate.mix`".into(),
            Some("add `mix: [{ service: llm }, …]` and a rate per service".into()),
        );
    }
    if !spec.load.is_empty() || spec.qps_target.is_some() {
        problems.add(
            "spec.feedback",
            "replaces `load`: the controller sets the rates".into(),
            Some("remove `load` (or `qpsTarget`); `feedback.duration` says how long to run".into()),
        );
    }
    let rates = mix_rates(f, mix.iter().map(|e| e.service.as_str()), problems);
    let gauge = gauge_from_spec(f, spec, problems);
    let interval = f.interval.map_or(Duration::from_secs(1), |d| d.0);
    let smoothing = f.smoothing.unwrap_or(0.5);
    let max_step = f.max_step.unwrap_or(0.5);
    let checks = [
        (
            interval >= Duration::from_millis(100),
            "interval",
            "must be at least 100ms",
        ),
        (
            smoothing > 0.0 && smoothing <= 1.0,
            "smoothing",
            "must be in (0, 1]",
        ),
        (
            max_step.is_finite() && max_step > 0.0,
            "max_step",
            "must be a positive share",
        ),
        (!f.duration.0.is_zero(), "duration", "must be positive"),
    ];
    for (ok, field, message) in checks {
        if !ok {
            problems.add(&format!("spec.feedback.{field}"), message.into(), None);
        }
    }
    (problems.len() == before).then(|| FeedbackPlan {
        gauge: gauge.expect("no problems means a gauge"),
        reduce: f.gauge.gpus.unwrap_or_default(),
        interval,
        smoothing,
        max_step,
        rates,
        duration: f.duration.0,
    })
}

/// The formula of each mixed service, in the mix's order; every service needs one and
/// every formula a service.
fn mix_rates<'a>(
    f: &FeedbackSpec,
    services: impl Iterator<Item = &'a str> + Clone,
    problems: &mut Problems,
) -> Vec<RateFormula> {
    for name in f.rates.keys() {
        if !services.clone().any(|s| s == name) {
            problems.add(
                &format!("spec.feedback.rates.{name}"),
                format!("`{name}` is not a service of the mix"),
                None,
            );
        }
    }
    let mut rates = Vec::new();
    for service in services {
        let Some(&RateSpec {
            base,
            floor,
            exponent,
        }) = f.rates.get(service)
        else {
            problems.add(
                "spec.feedback.rates",
                format!("has no rate for the mix's service `{service}`"),
                Some(format!(
                    "add `{service}: {{ base: 60, floor: 3, exponent: 1 }}`"
                )),
            );
            continue;
        };
        let valid = [base, floor, exponent].iter().all(|v| v.is_finite())
            && base > 0.0
            && floor >= 0.0
            && exponent > 0.0;
        if !valid {
            problems.add(
                &format!("spec.feedback.rates.{service}"),
                format!(
                    "needs base > 0, floor >= 0, exponent > 0; got {base}, {floor}, {exponent}"
                ),
                None,
            );
        }
        rates.push(RateFormula {
            base,
            floor,
            exponent,
        });
    }
    rates
}

fn gauge_from_spec(
    f: &FeedbackSpec,
    spec: &InferenceSpec,
    problems: &mut Problems,
) -> Option<GaugeSource> {
    let g = &f.gauge;
    let given = [
        !g.command.is_empty(),
        g.url.is_some(),
        g.prometheus.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        problems.add(
            "spec.feedback.gauge",
            "needs exactly one of `command`, `url` and `prometheus`".into(),
            Some("e.g. `command: [nvidia-smi, --query-gpu=memory.used,memory.total, --format=csv,noheader,nounits]`".into()),
        );
        return None;
    }
    if let Some(p) = &g.prometheus {
        return Some(GaugeSource::Prometheus {
            url: p.url.trim_end_matches('/').to_owned(),
            query: p.query.clone(),
        });
    }
    match g.url.as_deref() {
        Some("embedded") if !spec.services.values().any(|s| s.url == "embedded") => {
            problems.add(
                "spec.feedback.gauge.url",
                "`embedded` reads the embedded simulator, and no service is `url: embedded`".into(),
                None,
            );
            None
        }
        Some("embedded") => Some(GaugeSource::Embedded),
        Some(url) => Some(GaugeSource::Url(url.to_owned())),
        None => Some(GaugeSource::Command(g.command.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_formulas() {
        let text = RateFormula {
            base: 120.0,
            floor: 5.0,
            exponent: 1.0,
        };
        let image = RateFormula {
            base: 40.0,
            floor: 2.0,
            exponent: 2.0,
        };
        let audio = RateFormula {
            base: 60.0,
            floor: 3.0,
            exponent: 1.5,
        };
        assert_eq!(
            [text.rate(0.0), image.rate(0.0), audio.rate(0.0)],
            [120.0, 40.0, 60.0]
        );
        // u = 0.5: 60, ⌊40 × 0.25⌋ = 10, ⌊60 × 0.354⌋ = 21.
        assert_eq!(
            [text.rate(0.5), image.rate(0.5), audio.rate(0.5)],
            [60.0, 10.0, 21.0]
        );
        assert_eq!(
            [text.rate(0.99), image.rate(0.99), audio.rate(1.5)],
            [5.0, 2.0, 3.0]
        );
    }
}
