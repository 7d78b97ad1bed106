//! Arrival schedules, pure and seeded: when each request of a stage is meant to start.
//!
//! Open-loop stages draw arrivals of a unit-rate process (constant spacing, Poisson,
//! or gamma with a burstiness factor as vLLM's benchmark has it) and map them through
//! the inverse of the stage's cumulative rate Λ(t), so a linear ramp is an exact
//! non-homogeneous process rather than a rate that jumps now and then. Closed-loop
//! stages have no schedule: each session starts its next request when the previous
//! one ends (plus think time), and the runner records that time as intended.
//!
//! # Layout
//! - [`pacer`] — releases open-loop arrivals on time, from a thread of its own
//! - [`segment`] — a process's share of the run (`--segment K/N`)

pub mod pacer;
pub mod segment;

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Gamma};

/// The unit-rate arrival process of an open stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArrivalProcess {
    Constant,
    Poisson,
    /// Gamma inter-arrivals of shape `burstiness` (1 = Poisson, < 1 burstier).
    Gamma {
        burstiness: f64,
    },
}

/// What the load is counted in: requests, or sessions (flows and conversations, where
/// a stage's rate and concurrency count sessions and each sends several requests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unit {
    #[default]
    Requests,
    Sessions,
}

impl Unit {
    /// The rate unit as reports print it.
    pub fn per_second(self) -> &'static str {
        match self {
            Unit::Requests => "req/s",
            Unit::Sessions => "sessions/s",
        }
    }
}

/// One validated stage of the load.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    Open(OpenStage),
    Closed(ClosedStage),
    Sweep(SweepStage),
    Replay(ReplayStage),
}

/// Arrivals on their own schedule, whatever the server does.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenStage {
    pub arrival: ArrivalProcess,
    /// Requests per second at the stage start.
    pub rate: f64,
    /// Rate at the stage end, for a linear ramp.
    pub ramp_to: Option<f64>,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    /// In-flight cap of this stage: requests wait for a slot.
    pub max_concurrency: Option<u32>,
}

/// `concurrency` sessions, each sending its next request when the last one ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedStage {
    pub concurrency: u32,
    pub think_time: Duration,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
}

/// A synchronous point, a throughput point, then `rates` open-loop points between
/// the two achieved rates; `duration`/`requests` bound each point. The runner expands
/// it as it goes, since the rates depend on what the first two achieved.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepStage {
    pub arrival: ArrivalProcess,
    pub rates: u32,
    pub throughput_concurrency: u32,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
}

/// A trace's requests at its own times (divided by `speed`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayStage {
    /// When each request of the trace arrives, from its first, at the trace's speed.
    pub offsets: std::sync::Arc<Vec<Duration>>,
    /// How much faster than recorded (the offsets are divided by it).
    pub speed: f64,
    /// Which of the scenario's traces holds the requests' prompts.
    pub trace: usize,
    /// Shown in reports.
    pub file: String,
}

/// A stage as it ran: a sweep runs as several, with rates found on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutedStage {
    pub description: String,
    /// The open-loop rate it was meant to send at (none for closed loops and ramps).
    pub offered_rate: Option<f64>,
    pub sweep: Option<SweepRole>,
    /// What its rate and concurrency count.
    pub unit: Unit,
}

impl ExecutedStage {
    pub fn of(stage: &Stage, sweep: Option<SweepRole>, unit: Unit) -> ExecutedStage {
        let offered_rate = match stage {
            Stage::Open(OpenStage {
                rate,
                ramp_to: None,
                ..
            }) => Some(*rate),
            _ => None,
        };
        ExecutedStage {
            description: stage.describe(unit),
            offered_rate,
            sweep,
            unit,
        }
    }
}

/// What part a stage plays in a sweep.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SweepRole {
    /// One request at a time: the latency floor and the lowest rate.
    Synchronous,
    /// As many sessions as allowed, back to back: the most the service completes.
    Throughput,
    /// An open-loop rate between the two.
    Rate,
}

/// A throughput point that completes less than this many times the synchronous
/// point's rate shows a server that does not scale with concurrency. A serial server
/// still gains the client's turnaround between requests (a few percent, up to ~15 %
/// seen on a loaded two-core machine), so 1.1 flipped on noise; a server that batches
/// gains several times at any throughput concurrency worth the name.
pub const SCALING_FACTOR: f64 = 1.5;

/// The `rates` open-loop rates of a sweep, in ascending order: evenly spaced strictly
/// between the synchronous and the throughput point's achieved rates. When the
/// server does not scale with concurrency (it serves one request at a time, as
/// llama.cpp does, or one already saturates it), the two are about equal and their
/// order is luck: the rates then span half to all of the higher one, where the knee
/// of such a server lies.
pub fn sweep_rates(synchronous: f64, throughput: f64, rates: u32) -> Vec<f64> {
    let (low, high) = (synchronous.min(throughput), synchronous.max(throughput));
    if high < low * SCALING_FACTOR {
        return (1..=rates)
            .map(|k| high * (0.5 + 0.5 * f64::from(k) / f64::from(rates)))
            .collect();
    }
    let step = (high - low) / f64::from(rates + 1);
    (1..=rates).map(|k| low + step * f64::from(k)).collect()
}

impl Stage {
    /// How long the stage schedules requests (a sweep: all its points).
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Stage::Open(OpenStage { duration, .. })
            | Stage::Closed(ClosedStage { duration, .. }) => *duration,
            Stage::Sweep(SweepStage {
                duration, rates, ..
            }) => duration.map(|d| d * (rates + 2)),
            Stage::Replay(ReplayStage { offsets, speed, .. }) => {
                offsets.last().map(|at| at.div_f64(*speed))
            }
        }
    }

    /// The request budget (a sweep: of each point).
    pub fn requests(&self) -> Option<u64> {
        match self {
            Stage::Open(OpenStage { requests, .. })
            | Stage::Closed(ClosedStage { requests, .. })
            | Stage::Sweep(SweepStage { requests, .. }) => *requests,
            Stage::Replay(ReplayStage { offsets, .. }) => Some(offsets.len() as u64),
        }
    }

    /// One line describing the stage, for reports; rates and concurrency in `unit`.
    pub fn describe(&self, unit: Unit) -> String {
        let per_s = unit.per_second();
        let bound = bound_text(self.duration(), self.requests());
        let process = |arrival: &ArrivalProcess| match arrival {
            ArrivalProcess::Constant => "constant".to_owned(),
            ArrivalProcess::Poisson => "poisson".to_owned(),
            ArrivalProcess::Gamma { burstiness } => format!("gamma(burstiness {burstiness})"),
        };
        match self {
            Stage::Open(OpenStage {
                arrival,
                rate,
                ramp_to,
                max_concurrency,
                ..
            }) => {
                let process = process(arrival);
                let rate = match ramp_to {
                    Some(to) => format!("{}→{} {per_s}", rate_text(*rate), rate_text(*to)),
                    None => format!("{} {per_s}", rate_text(*rate)),
                };
                let cap = max_concurrency
                    .map(|c| format!(", at most {c} in flight"))
                    .unwrap_or_default();
                format!("open loop, {process} {rate}{cap}, {bound}")
            }
            Stage::Closed(ClosedStage {
                concurrency,
                think_time,
                ..
            }) => {
                let think = if think_time.is_zero() {
                    String::new()
                } else {
                    format!(", think {think_time:?}")
                };
                format!("closed loop, {concurrency} sessions{think}, {bound}")
            }
            Stage::Replay(ReplayStage { file, speed, .. }) => {
                format!("replay of {file} at {speed}× speed, {bound}")
            }
            Stage::Sweep(SweepStage {
                arrival,
                rates,
                throughput_concurrency,
                duration,
                requests,
            }) => {
                format!(
                    "sweep: synchronous, throughput ({throughput_concurrency} sessions), then {rates} {} rates; {} each",
                    process(arrival),
                    bound_text(*duration, *requests)
                )
            }
        }
    }
}

/// A rate as people write it: `20`, `11.78` (a sweep's found rates have many digits).
fn rate_text(rate: f64) -> String {
    let text = format!("{rate:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// "30.0s or 100 requests": how a stage is bounded.
fn bound_text(duration: Option<Duration>, requests: Option<u64>) -> String {
    match (duration, requests) {
        (Some(d), Some(n)) => format!("{:.1}s or {n} requests", d.as_secs_f64()),
        (Some(d), None) => format!("{:.1}s", d.as_secs_f64()),
        (None, Some(n)) => format!("{n} requests"),
        (None, None) => "unbounded".into(),
    }
}

/// Intended start times of an open stage, as offsets from the stage start.
pub struct OpenArrivals {
    rng: ChaCha8Rng,
    arrival: ArrivalProcess,
    gamma: Option<Gamma<f64>>,
    rate: f64,
    ramp_to: Option<f64>,
    duration: Option<Duration>,
    requests: Option<u64>,
    /// Position in the unit-rate process.
    unit_time: f64,
    produced: u64,
}

impl OpenArrivals {
    /// Seeded per stage, so stages are independent.
    pub fn new(stage: &OpenStage, seed: u64) -> OpenArrivals {
        let OpenStage {
            arrival,
            rate,
            ramp_to,
            duration,
            requests,
            ..
        } = stage;
        let gamma = match arrival {
            ArrivalProcess::Gamma { burstiness } => {
                Some(Gamma::new(*burstiness, 1.0 / burstiness).expect("burstiness is positive"))
            }
            _ => None,
        };
        OpenArrivals {
            rng: ChaCha8Rng::seed_from_u64(seed),
            arrival: *arrival,
            gamma,
            rate: *rate,
            ramp_to: *ramp_to,
            duration: *duration,
            requests: *requests,
            unit_time: 0.0,
            produced: 0,
        }
    }

    /// The time t at which the cumulative rate Λ(t) reaches `s`, if it ever does.
    fn inverse_cumulative(&self, s: f64) -> Option<f64> {
        let from = self.rate;
        match (self.ramp_to, self.duration) {
            (Some(to), Some(d)) if (to - from).abs() > f64::EPSILON => {
                let a = (to - from) / (2.0 * d.as_secs_f64());
                let discriminant = from * from + 4.0 * a * s;
                (discriminant >= 0.0).then(|| (-from + discriminant.sqrt()) / (2.0 * a))
            }
            _ => Some(s / from),
        }
    }
}

impl Iterator for OpenArrivals {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.requests.is_some_and(|n| self.produced >= n) {
            return None;
        }
        if self.produced > 0 {
            self.unit_time += match self.arrival {
                ArrivalProcess::Constant => 1.0,
                ArrivalProcess::Poisson => Exp1.sample(&mut self.rng),
                ArrivalProcess::Gamma { .. } => {
                    self.gamma.expect("set for gamma").sample(&mut self.rng)
                }
            };
        }
        let t = self.inverse_cumulative(self.unit_time)?;
        if !t.is_finite() || t < 0.0 || self.duration.is_some_and(|d| t >= d.as_secs_f64()) {
            return None;
        }
        self.produced += 1;
        Some(Duration::from_secs_f64(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(arrival: ArrivalProcess, rate: f64, ramp_to: Option<f64>, secs: u64) -> OpenStage {
        OpenStage {
            arrival,
            rate,
            ramp_to,
            duration: Some(Duration::from_secs(secs)),
            requests: None,
            max_concurrency: None,
        }
    }

    fn times(stage: &OpenStage, seed: u64) -> Vec<f64> {
        OpenArrivals::new(stage, seed)
            .map(|d| d.as_secs_f64())
            .collect()
    }

    #[test]
    fn sweep_rates_are_evenly_spaced_strictly_between_the_bounds() {
        assert_eq!(sweep_rates(2.0, 10.0, 3), [4.0, 6.0, 8.0]);
        assert_eq!(sweep_rates(1.0, 4.0, 2), [2.0, 3.0]);
        // A serial server: the throughput point below the synchronous one. Ascending,
        // from half the higher rate to all of it.
        assert_eq!(sweep_rates(0.72, 0.70, 2), [0.54, 0.72]);
        let near: Vec<f64> = sweep_rates(2.0, 2.1, 4)
            .iter()
            .map(|r| (r * 1e4).round() / 1e4)
            .collect();
        assert_eq!(near, [1.3125, 1.575, 1.8375, 2.1]);
        // The gain a serial server shows from the client's turnaround alone (seen: 1.13×
        // on a loaded machine) is not scaling.
        assert_eq!(sweep_rates(26.0, 30.0, 2), [22.5, 30.0]);
        assert_eq!(sweep_rates(10.0, 16.0, 2), [12.0, 14.0]);
    }

    #[test]
    fn constant_rate_is_evenly_spaced_from_zero() {
        let t = times(&open(ArrivalProcess::Constant, 4.0, None, 2), 0);
        assert_eq!(t, [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]);
    }

    #[test]
    fn poisson_count_and_dispersion_match_the_rate() {
        // 200 req/s for 100 s: count within 3σ of 20,000; inter-arrival CV ≈ 1.
        let t = times(&open(ArrivalProcess::Poisson, 200.0, None, 100), 7);
        assert!(
            (t.len() as f64 - 20_000.0).abs() < 3.0 * 20_000f64.sqrt(),
            "{}",
            t.len()
        );
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((sd / mean - 1.0).abs() < 0.05, "cv {}", sd / mean);
    }

    #[test]
    fn gamma_burstiness_raises_dispersion_at_the_same_rate() {
        let t = times(
            &open(ArrivalProcess::Gamma { burstiness: 0.25 }, 200.0, None, 100),
            7,
        );
        assert!(
            (t.len() as f64 - 20_000.0).abs() < 0.05 * 20_000.0,
            "{}",
            t.len()
        );
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let cv = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt()
            / mean;
        assert!(
            (cv - 2.0).abs() < 0.15,
            "cv of gamma(0.25) is 1/sqrt(0.25) = 2, got {cv}"
        );
    }

    #[test]
    fn a_linear_ramp_schedules_the_integral_of_its_rate() {
        // 0 → 100 req/s over 10 s: 500 requests, a quarter of them in the first half.
        let t = times(&open(ArrivalProcess::Constant, 1e-9, Some(100.0), 10), 0);
        assert!((t.len() as i64 - 500).abs() <= 1, "{}", t.len());
        let first_half = t.iter().filter(|x| **x < 5.0).count();
        assert!((first_half as i64 - 125).abs() <= 1, "{first_half}");
    }

    #[test]
    fn request_budget_and_seed_reproducibility() {
        let stage = OpenStage {
            arrival: ArrivalProcess::Poisson,
            rate: 50.0,
            ramp_to: None,
            duration: None,
            requests: Some(10),
            max_concurrency: None,
        };
        assert_eq!(times(&stage, 3).len(), 10);
        assert_eq!(times(&stage, 3), times(&stage, 3));
        assert_ne!(times(&stage, 3), times(&stage, 4));
    }
}
