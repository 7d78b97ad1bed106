//! A latency drawn per call: what a spec's tool and search tiers of the simulator wait.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A latency drawn per call, in milliseconds: fixed, uniform or normal.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev_ms: Option<f64>,
}

impl LatencySpec {
    /// The shape, or why it is not one.
    pub fn check(&self) -> Result<(), String> {
        let ok = |v: f64| v >= 0.0 && v.is_finite();
        match (self.ms, self.min_ms, self.max_ms, self.mean_ms, self.stddev_ms) {
            (None, None, None, None, None) => Ok(()),
            (Some(ms), None, None, None, None) if ok(ms) => Ok(()),
            (None, Some(a), Some(b), None, None) if ok(a) && ok(b) && a <= b => Ok(()),
            (None, None, None, Some(m), Some(s)) if ok(m) && ok(s) => Ok(()),
            _ => Err("write `ms: 20`, `min_ms: 10, max_ms: 30` or `mean_ms: 20, stddev_ms: 5` (0 or more, min <= max)".into()),
        }
    }

    pub fn sample(&self, rng: &mut impl rand::Rng) -> Duration {
        let ms = match (
            self.ms,
            self.min_ms,
            self.max_ms,
            self.mean_ms,
            self.stddev_ms,
        ) {
            (Some(ms), ..) => ms,
            (None, Some(a), Some(b), ..) if a < b => rng.random_range(a..=b),
            (None, Some(a), ..) => a,
            (None, None, None, Some(m), Some(s)) => rand_distr::Normal::new(m, s)
                .map_or(m, |n| rand_distr::Distribution::sample(&n, rng)),
            _ => 0.0,
        };
        Duration::from_secs_f64(ms.max(0.0) / 1e3)
    }

    /// The mean, in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        match (self.ms, self.min_ms, self.max_ms, self.mean_ms) {
            (Some(ms), ..) => ms,
            (None, Some(a), Some(b), _) => (a + b) / 2.0,
            (None, None, None, Some(m)) => m,
            _ => 0.0,
        }
    }
}

/// Waits `delay`, and not at all when it is zero: tokio's timer fires on its next
/// millisecond tick, so a zero-length sleep would add up to a millisecond that no
/// latency setting asked for.
pub async fn hold(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod hold_tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn ready_at_once(future: impl Future<Output = ()>) -> bool {
        let mut future = std::pin::pin!(future);
        let mut context = Context::from_waker(Waker::noop());
        future.as_mut().poll(&mut context) == Poll::Ready(())
    }

    /// A zero hold is done at its first poll; tokio's zero sleep is not (it waits for
    /// the timer's next tick), which is why `hold` exists.
    #[tokio::test]
    async fn a_zero_hold_does_not_wait_for_the_timer() {
        assert!(ready_at_once(hold(Duration::ZERO)));
        assert!(!ready_at_once(tokio::time::sleep(Duration::ZERO)));
        assert!(!ready_at_once(hold(Duration::from_millis(1))));
    }
}
