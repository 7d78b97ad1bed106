//! The units figures are judged and watched in, one name each, written as
//! `summary.json` has always written them.

use serde::{Deserialize, Serialize};

/// What a verdict's, a window's or an episode's value is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ValueUnit {
    #[serde(rename = "ms")]
    Ms,
    /// Milliseconds per output token (e2e over the answer's length).
    #[serde(rename = "ms/token")]
    MsPerToken,
    /// Milliseconds per thousand prompt tokens (TTFT over the prompt's length).
    #[serde(rename = "ms/1k tokens")]
    MsPer1kTokens,
    /// Percent (a verdict's shares: 99.5 is 99.5 %).
    #[serde(rename = "%")]
    Percent,
    /// A fraction of one (a window's error share: 0.005 is 0.5 %).
    #[serde(rename = "share")]
    Share,
    #[serde(rename = "tok/s")]
    TokensPerSecond,
    /// Tokens (a per-request count).
    #[serde(rename = "tokens")]
    Tokens,
    /// Whatever a Prometheus query's values are in: the query says, not redline.
    #[serde(rename = "")]
    OfQuery,
}

impl ValueUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            ValueUnit::Ms => "ms",
            ValueUnit::MsPerToken => "ms/token",
            ValueUnit::MsPer1kTokens => "ms/1k tokens",
            ValueUnit::Percent => "%",
            ValueUnit::Share => "share",
            ValueUnit::TokensPerSecond => "tok/s",
            ValueUnit::Tokens => "tokens",
            ValueUnit::OfQuery => "",
        }
    }

    /// `x` for a reader: a share as a percentage, a query's value as it came.
    pub fn show(self, x: f64) -> String {
        match self {
            ValueUnit::Share => format!("{:.2}%", x * 100.0),
            ValueUnit::OfQuery => format!("{x:.4}"),
            unit => format!("{x:.1} {unit}"),
        }
    }

    /// A limit as a spec writes it: a share as a percentage.
    pub fn limit(self, x: f64) -> String {
        match self {
            ValueUnit::Share => format!("{}%", x * 100.0),
            unit => format!("{x} {unit}"),
        }
    }
}

impl std::fmt::Display for ValueUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_written_as_before() {
        let all = [
            ValueUnit::Ms,
            ValueUnit::MsPerToken,
            ValueUnit::MsPer1kTokens,
            ValueUnit::Percent,
            ValueUnit::Share,
            ValueUnit::TokensPerSecond,
            ValueUnit::Tokens,
            ValueUnit::OfQuery,
        ];
        for unit in all {
            let json = serde_json::to_value(unit).unwrap();
            assert_eq!(json, unit.as_str());
            assert_eq!(serde_json::from_value::<ValueUnit>(json).unwrap(), unit);
        }
        assert_eq!(ValueUnit::Share.show(0.0125), "1.25%");
        assert_eq!(ValueUnit::Ms.show(812.34), "812.3 ms");
        assert_eq!(ValueUnit::OfQuery.show(0.5), "0.5000");
        assert_eq!(ValueUnit::Share.limit(0.005), "0.5%");
    }
}
