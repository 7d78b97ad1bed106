//! The flow's circuit breaker: after `breaker` tool calls in a row time out, the
//! session stops calling tools and falls back (its remaining steps are skipped, and
//! its end says why). A call that answers, or fails fast, closes it again.

use crate::record::{FallbackReason, Outcome};

/// What one tool call's outcome means for the session.
#[derive(Debug, PartialEq)]
pub(super) enum Heed {
    /// Go on.
    On,
    /// Go on, but the session has failed.
    Failed,
    /// The breaker opened: fall back.
    Open(FallbackReason),
    /// The run is stopping: the call never went.
    Refused,
}

#[derive(Debug)]
pub(super) struct Breaker {
    limit: u32,
    in_a_row: u32,
}

impl Breaker {
    pub(super) fn new(limit: u32) -> Breaker {
        Breaker { limit, in_a_row: 0 }
    }

    /// Hears the outcome of a call to `tool`.
    pub(super) fn heed(&mut self, outcome: Outcome, tool: &str) -> Heed {
        match outcome {
            Outcome::Timeout => {
                self.in_a_row += 1;
                if self.in_a_row < self.limit {
                    return Heed::On;
                }
                Heed::Open(FallbackReason {
                    rule: "consecutive_tool_timeouts".into(),
                    tool: tool.to_owned(),
                    timeouts: self.in_a_row,
                    skipped: Vec::new(),
                })
            }
            Outcome::Ok => {
                self.in_a_row = 0;
                Heed::On
            }
            Outcome::Error => {
                self.in_a_row = 0;
                Heed::Failed
            }
            Outcome::Cancelled | Outcome::Dropped => Heed::Refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A tool call that answers after `takes`, or times out at `timeout`.
    async fn call(takes: Duration, timeout: Duration) -> Outcome {
        match tokio::time::timeout(timeout, tokio::time::sleep(takes)).await {
            Ok(()) => Outcome::Ok,
            Err(_) => Outcome::Timeout,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn three_timeouts_in_a_row_open_the_breaker_at_the_third_deadline() {
        let (timeout, slow, fast) = (
            Duration::from_secs(2),
            Duration::from_secs(60),
            Duration::from_millis(300),
        );
        let start = tokio::time::Instant::now();
        let mut breaker = Breaker::new(3);
        // Two timeouts, an answer that closes it, then three timeouts.
        let mut heard = Vec::new();
        for takes in [slow, slow, fast, slow, slow, slow] {
            let heed = breaker.heed(call(takes, timeout).await, "search");
            let open = matches!(heed, Heed::Open(_));
            heard.push(heed);
            if open {
                break;
            }
        }
        assert_eq!(start.elapsed(), timeout * 5 + fast);
        assert_eq!(
            heard[..5],
            [Heed::On, Heed::On, Heed::On, Heed::On, Heed::On]
        );
        let Heed::Open(reason) = &heard[5] else {
            panic!("{heard:?}");
        };
        assert_eq!((reason.tool.as_str(), reason.timeouts), ("search", 3));
    }

    #[test]
    fn a_fast_failure_closes_it_and_fails_the_session_and_a_stop_refuses() {
        let mut breaker = Breaker::new(2);
        assert_eq!(breaker.heed(Outcome::Timeout, "t"), Heed::On);
        assert_eq!(breaker.heed(Outcome::Error, "t"), Heed::Failed);
        assert_eq!(breaker.heed(Outcome::Timeout, "t"), Heed::On);
        assert!(matches!(breaker.heed(Outcome::Timeout, "t"), Heed::Open(_)));
        assert_eq!(breaker.heed(Outcome::Cancelled, "t"), Heed::Refused);
    }
}
