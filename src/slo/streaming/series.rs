//! The series a streaming SLO watches: a per-request quantity (TTFT, E2E per output
//! token, …) summarised per window by a statistic (p95, mean), or the error share.

use crate::slo::ValueUnit;
use std::fmt;

use crate::record::{Outcome, Record};

/// A per-request quantity, in milliseconds (or milliseconds per token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Quantity {
    Ttft,
    /// Each request's mean gap between content events.
    Itl,
    Tpot,
    E2e,
    /// E2E per output token: a longer answer is not a slower server.
    E2ePerToken,
    /// TTFT per 1,000 prompt tokens: a longer prompt is not a slower server.
    TtftPer1kInput,
    /// Send to the first answer token, after any reasoning.
    TimeToFirstAnswer,
}

impl Quantity {
    const ALL: [(Quantity, &'static str); 7] = [
        (Quantity::Ttft, "ttft"),
        (Quantity::Itl, "itl"),
        (Quantity::Tpot, "tpot"),
        (Quantity::E2e, "e2e"),
        (Quantity::E2ePerToken, "e2e_per_token"),
        (Quantity::TtftPer1kInput, "ttft_per_1k_input"),
        (Quantity::TimeToFirstAnswer, "time_to_first_answer"),
    ];

    /// `ttft`, `e2e_per_token`.
    pub fn from_name(name: &str) -> Option<Quantity> {
        Quantity::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(q, _)| *q)
    }

    pub fn name(self) -> &'static str {
        Quantity::ALL
            .iter()
            .find(|(q, _)| *q == self)
            .map(|(_, name)| *name)
            .expect("every quantity is listed")
    }

    /// The request's value in microseconds (per token, per 1k tokens), when it has one.
    pub fn of(self, r: &Record) -> Option<f64> {
        if r.outcome != Outcome::Ok {
            return None;
        }
        let per = |value: Option<u64>, tokens: Option<u32>, scale: f64| {
            let tokens = f64::from(tokens.filter(|t| *t > 0)?);
            Some(value? as f64 * scale / tokens)
        };
        match self {
            Quantity::Ttft => r.ttft_us().map(|v| v as f64),
            Quantity::Itl => r.itl_mean_us.map(|v| v as f64),
            Quantity::Tpot => r.tpot_us(),
            Quantity::E2e => r.e2e_us().map(|v| v as f64),
            Quantity::E2ePerToken => per(r.e2e_us(), r.output_tokens, 1.0),
            Quantity::TtftPer1kInput => per(r.ttft_us(), r.input_tokens, 1_000.0),
            Quantity::TimeToFirstAnswer => r.time_to_first_answer_us().map(|v| v as f64),
        }
    }
}

/// How a window of a quantity is summarised.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub enum Stat {
    /// A percentile, as written (95.0, 99.9).
    Percentile(f64),
    Mean,
}

/// One watched series.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub enum Series {
    Latency(Quantity, Stat),
    /// Failed (error or timeout) over completed requests.
    ErrorRate,
}

/// What the spec may name, for error messages.
pub const CHOICES: &str = "ttft, itl, tpot, e2e, e2e_per_token, ttft_per_1k_input with .p50, .p95, .p99 or .mean; or error_rate";

/// The series a spec watches when it names none.
pub const DEFAULT_WATCH: [&str; 4] = [
    "ttft.p95",
    "ttft_per_1k_input.p95",
    "e2e.p95",
    "e2e_per_token.p95",
];

impl Series {
    /// `ttft.p95`, `e2e_per_token.mean`, `error_rate`.
    pub fn parse(text: &str) -> Option<Series> {
        if text == "error_rate" {
            return Some(Series::ErrorRate);
        }
        let (quantity, stat) = text.split_once('.')?;
        let quantity = Quantity::ALL.iter().find(|(_, name)| *name == quantity)?.0;
        let stat = match stat {
            "mean" => Stat::Mean,
            p => Stat::Percentile(
                p.strip_prefix('p')?
                    .parse::<f64>()
                    .ok()
                    .filter(|p| *p > 0.0 && *p < 100.0)?,
            ),
        };
        Some(Series::Latency(quantity, stat))
    }

    /// The smallest baseline σ a detector of this series uses: 0.2 percentage points
    /// for the error share, so that on a clean baseline μ + 2.5σ is 0.5 % errors and a
    /// single failed request in a window of hundreds is not a drift.
    pub fn sigma_floor(self) -> f64 {
        match self {
            Series::ErrorRate => 0.002,
            Series::Latency(..) => 0.0,
        }
    }

    /// The unit of the series' values.
    pub fn unit(self) -> ValueUnit {
        match self {
            Series::Latency(Quantity::E2ePerToken, _) => ValueUnit::MsPerToken,
            Series::Latency(Quantity::TtftPer1kInput, _) => ValueUnit::MsPer1kTokens,
            Series::Latency(..) => ValueUnit::Ms,
            Series::ErrorRate => ValueUnit::Share,
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Series::ErrorRate => f.write_str("error_rate"),
            Series::Latency(q, Stat::Mean) => write!(f, "{}.mean", q.name()),
            Series::Latency(q, Stat::Percentile(p)) => write!(f, "{}.p{p}", q.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_written() {
        for name in DEFAULT_WATCH
            .iter()
            .chain(&["itl.mean", "tpot.p99.9", "error_rate"])
        {
            assert_eq!(Series::parse(name).unwrap().to_string(), *name);
        }
        for bad in ["ttft", "ttft.p100", "latency.p95", "ttft.max", "ttft.p"] {
            assert_eq!(Series::parse(bad), None, "{bad}");
        }
    }
}
