//! The metrics an SLO can name: one enum, so judging matches on variants and a new
//! metric cannot fall into another's catch-all arm.

/// What a metric measures, which decides its statistics and units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A latency distribution: judged per percentile.
    Latency,
    /// A share of good events (pass rate, availability): higher is better.
    GoodShare,
    /// A share of bad events (error rate): lower is better.
    BadShare,
    /// Output tokens per second.
    Throughput,
}

/// A metric of `sloThresholds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    TtftFromIntended,
    TimeToSecondToken,
    Itl,
    Tpot,
    E2e,
    E2eFromIntended,
    PassRate,
    Availability,
    ErrorRate,
    Goodput,
    OutputThroughput,
    KvCacheHitRate,
    ToolSuccess,
    RecallAtK,
}

impl Metric {
    /// Every metric, in the order the docs list them.
    pub const ALL: [Metric; 15] = [
        Metric::Ttft,
        Metric::TtftFromIntended,
        Metric::TimeToSecondToken,
        Metric::Itl,
        Metric::Tpot,
        Metric::E2e,
        Metric::E2eFromIntended,
        Metric::PassRate,
        Metric::Availability,
        Metric::ErrorRate,
        Metric::Goodput,
        Metric::OutputThroughput,
        Metric::KvCacheHitRate,
        Metric::ToolSuccess,
        Metric::RecallAtK,
    ];

    /// The name a spec writes.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::TtftFromIntended => "ttft_from_intended",
            Metric::TimeToSecondToken => "time_to_second_token",
            Metric::Itl => "itl",
            Metric::Tpot => "tpot",
            Metric::E2e => "e2e",
            Metric::E2eFromIntended => "e2e_from_intended",
            Metric::PassRate => "pass_rate",
            Metric::Availability => "availability",
            Metric::ErrorRate => "error_rate",
            Metric::Goodput => "goodput",
            Metric::OutputThroughput => "output_throughput",
            Metric::KvCacheHitRate => "kv_cache_hit_rate",
            Metric::ToolSuccess => "tool_success",
            Metric::RecallAtK => "recall_at_k",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    pub const fn kind(self) -> Kind {
        match self {
            Metric::Ttft
            | Metric::TtftFromIntended
            | Metric::TimeToSecondToken
            | Metric::Itl
            | Metric::Tpot
            | Metric::E2e
            | Metric::E2eFromIntended => Kind::Latency,
            Metric::ErrorRate => Kind::BadShare,
            Metric::OutputThroughput => Kind::Throughput,
            Metric::PassRate
            | Metric::Availability
            | Metric::Goodput
            | Metric::KvCacheHitRate
            | Metric::ToolSuccess
            | Metric::RecallAtK => Kind::GoodShare,
        }
    }

    /// The per-request quantity a windowed SLO of this metric watches; none for the
    /// metrics that are judged over the whole run only.
    pub fn windowed_quantity(self) -> Option<super::streaming::series::Quantity> {
        use super::streaming::series::Quantity;
        match self {
            Metric::Ttft => Some(Quantity::Ttft),
            Metric::Itl => Some(Quantity::Itl),
            Metric::Tpot => Some(Quantity::Tpot),
            Metric::E2e => Some(Quantity::E2e),
            _ => None,
        }
    }

    /// Whether its figure is made of output token counts (which may be estimates).
    pub const fn counts_tokens(self) -> bool {
        matches!(self, Metric::Tpot | Metric::OutputThroughput)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_metric() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Metric::from_name("ttft.p99"), None);
    }
}
