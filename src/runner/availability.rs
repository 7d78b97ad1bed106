//! Availability through a run's disruptions, measured rather than asserted: the share
//! of sent requests that succeeded, its exact (Clopper–Pearson) lower bound, how many
//! requests it would take to show a target such as 99.999 %, and per step the failures
//! it caused and how long the service kept failing.

use crate::record::{Outcome, Record};
use crate::slo::stats;

use crate::results::DisruptionStep;
use crate::results::{Availability, StepAvailability};

/// Confidence of the bounds.
const CONFIDENCE: f64 = 0.95;
/// The source's target (§3.3).
const TARGET: f64 = 0.99999;
/// A failure up to this long after a step ended is still the step's: the balancer's
/// view of a replica lags its restart by a request or two.
const SETTLE_S: f64 = 1.0;

impl Availability {
    /// Nothing counted yet, for these steps.
    pub fn new(steps: Vec<DisruptionStep>) -> Availability {
        Availability {
            requests: 0,
            succeeded: 0,
            failed: 0,
            dropped: 0,
            availability: 0.0,
            lower_bound: 0.0,
            confidence: CONFIDENCE,
            target: TARGET,
            requests_to_show_target: None,
            unattributed_failures: 0,
            steps: steps
                .into_iter()
                .map(|step| StepAvailability {
                    step,
                    requests: 0,
                    failed: 0,
                    failing_for_ms: 0.0,
                    retried: 0,
                    failover_ms: 0.0,
                })
                .collect(),
        }
    }

    /// Counts one sent request.
    pub(in crate::runner) fn count(&mut self, ended: &Ended) {
        self.requests += 1;
        if ended.failed {
            self.failed += 1;
        } else {
            self.succeeded += 1;
        }
        let Some(step) = step_of(&mut self.steps, ended) else {
            if ended.failed {
                self.unattributed_failures += 1;
            }
            return;
        };
        step.requests += 1;
        if ended.failed {
            step.failed += 1;
            let failing = (ended.done_s() - step.step.started_s).max(0.0) * 1e3;
            step.failing_for_ms = step.failing_for_ms.max(failing);
            step.failover_ms = step.failover_ms.max(failing);
        }
        step.count_retry(ended);
    }

    /// The share, its bound and what the target would take, from the counts.
    pub fn finish(mut self) -> Availability {
        if self.requests > 0 {
            self.availability = self.succeeded as f64 / self.requests as f64;
            self.lower_bound = 1.0 - stats::upper_bound(self.failed, self.requests, CONFIDENCE);
            let allowed = 1.0 - TARGET;
            if (self.failed as f64) / (self.requests as f64) < allowed {
                self.requests_to_show_target =
                    stats::trials_to_decide(self.failed, self.requests, allowed, true, CONFIDENCE);
            }
        }
        self
    }
}

/// What availability needs of a sent request: kept for each as the run goes (the
/// steps it may belong to are known only at the end), in 24 bytes rather than the
/// record.
#[derive(Debug, Clone, Copy)]
pub(in crate::runner) struct Ended {
    done_us: u64,
    /// The replica whose restart its faults name.
    restarted: Option<u32>,
    failed: bool,
    /// The balancer resent it because a replica was restarting.
    retried: bool,
}

impl Ended {
    /// None for a request never sent (dropped or cancelled before it went).
    pub(in crate::runner) fn of(record: &Record) -> Option<Ended> {
        let failed = match record.outcome {
            Outcome::Ok => false,
            Outcome::Error | Outcome::Timeout => true,
            Outcome::Dropped | Outcome::Cancelled => return None,
        };
        let restarted = record
            .faults
            .iter()
            .find_map(|f| f.rule.strip_prefix("restart:")?.parse().ok());
        Some(Ended {
            done_us: record.done_us(),
            restarted,
            failed,
            retried: record
                .faults
                .iter()
                .any(|f| f.fault == "replica_restart_retried"),
        })
    }

    fn done_s(&self) -> f64 {
        self.done_us as f64 / 1e6
    }
}

impl StepAvailability {
    /// A record the balancer resent because of this step: counted, and the failover
    /// lasted at least until it ended.
    fn count_retry(&mut self, ended: &Ended) {
        if ended.retried {
            self.retried += 1;
            let at_ms = (ended.done_s() - self.step.started_s).max(0.0) * 1e3;
            self.failover_ms = self.failover_ms.max(at_ms);
        }
    }
}

/// The step a record belongs to: the restart its faults name, else the step it
/// ended in (or within a second after).
fn step_of<'a>(
    steps: &'a mut [StepAvailability],
    ended: &Ended,
) -> Option<&'a mut StepAvailability> {
    let done_s = ended.done_s();
    let named = ended.restarted.and_then(|replica| {
        steps.iter().rposition(|s| {
            s.step.replica == Some(replica as usize) && s.step.started_s <= done_s + SETTLE_S
        })
    });
    let at = named.or_else(|| {
        steps.iter().rposition(|s| {
            let end = s.step.ended_s.unwrap_or(f64::INFINITY) + SETTLE_S;
            s.step.started_s <= done_s && done_s <= end
        })
    })?;
    steps.get_mut(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_failure_in_a_few_thousand_is_far_from_five_nines_and_says_how_far() {
        let a = measure(&records(3000, &[]), Vec::new());
        assert_eq!((a.requests, a.failed), (3000, 0));
        assert_eq!(a.availability, 1.0);
        // (1 - lower)ⁿ... the exact bound with no failures: 0.05^(1/n).
        let exact = 0.05f64.powf(1.0 / 3000.0);
        assert!((a.lower_bound - exact).abs() < 1e-9, "{}", a.lower_bound);
        // The rule of three: about 3 / 10⁻⁵ requests, all of them good.
        let needed = a.requests_to_show_target.unwrap();
        assert!((299_000..=300_000).contains(&needed), "{needed}");
    }

    #[test]
    fn failures_are_put_down_to_the_step_they_ended_in_or_the_restart_they_name() {
        let step = |n: u32, replica: usize, from: f64, to: f64| DisruptionStep {
            step: n,
            kind: "restart".into(),
            target: format!("llm[{replica}]"),
            replica: Some(replica),
            started_s: from,
            down_s: Some(from + 0.1),
            ended_s: Some(to),
            error: None,
        };
        let mut all = records(
            100,
            &[(10.3, None), (10.9, None), (25.0, None), (13.5, Some(0))],
        );
        all.sort_by_key(Record::done_us);
        let a = measure(&all, vec![step(1, 0, 10.0, 12.0), step(2, 1, 20.0, 21.0)]);
        assert_eq!(a.failed, 4);
        assert_eq!(
            a.steps[0].failed, 3,
            "two in the window, one naming replica 0 after it"
        );
        assert!(
            (a.steps[0].failing_for_ms - 3500.0).abs() < 1.0,
            "{}",
            a.steps[0].failing_for_ms
        );
        assert_eq!(a.steps[1].failed, 0);
        assert_eq!(a.unattributed_failures, 1);
        assert!(a.availability < 1.0 && a.lower_bound < a.availability);
        assert_eq!(
            a.requests_to_show_target, None,
            "4 % failed: five nines cannot be shown"
        );
    }

    #[test]
    fn a_request_sent_before_a_restart_and_broken_by_it_is_the_restart_s() {
        let step = DisruptionStep {
            step: 1,
            kind: "restart".into(),
            target: "llm[0]".into(),
            replica: Some(0),
            started_s: 60.005,
            down_s: Some(60.006),
            ended_s: Some(61.5),
            error: None,
        };
        // Sent 5 ms before the restart began, on a connection the stop then closed:
        // no byte came back, and it was given up at 60.007 s.
        let mut broken = Record::unsent(0, 0, crate::record::Phase::Measure, 60_000_000);
        broken.sent_us = Some(60_000_700);
        broken.fail(
            Outcome::Error,
            crate::record::FailStage::Send,
            "reset",
            "closed",
        );
        broken.note_given_up(60_007_000);
        let a = measure(&[broken], vec![step]);
        assert_eq!((a.steps[0].failed, a.unattributed_failures), (1, 0));
    }

    /// As a run measures them: through its tally sink, as the records arrive.
    fn measure(records: &[Record], steps: Vec<DisruptionStep>) -> Availability {
        use crate::runner::sinks::{AvailabilityTally, Findings, RecordSink};
        use futures_util::FutureExt;
        let mut tally = AvailabilityTally::default();
        records.iter().for_each(|r| tally.observe(r).unwrap());
        let mut findings = Findings {
            steps,
            ..Findings::default()
        };
        let finished = Box::new(tally).finish(&mut findings).now_or_never();
        finished.expect("no wait").unwrap();
        findings.availability.unwrap()
    }

    /// `ok` good records ending 0.1 s apart, and failures ending at the given seconds,
    /// naming a restarted replica or not.
    fn records(ok: u64, failures: &[(f64, Option<usize>)]) -> Vec<Record> {
        let mut out: Vec<Record> = (0..ok)
            .map(|i| {
                let mut r = Record::unsent(i, 0, crate::record::Phase::Measure, 0);
                r.last_byte_us = Some(i * 100_000);
                r
            })
            .collect();
        for (k, (at, replica)) in failures.iter().enumerate() {
            let mut r = Record::unsent(ok + k as u64, 0, crate::record::Phase::Measure, 0);
            r.outcome = Outcome::Error;
            r.last_byte_us = Some((at * 1e6) as u64);
            if let Some(i) = replica {
                r.faults.push(crate::record::InjectedFault {
                    rule: format!("restart:{i}"),
                    fault: "replica_restart_failed".into(),
                    added_ms: None,
                });
            }
            out.push(r);
        }
        out
    }
}
