//! `abort_on_fail`: once a second after the SLOs' `delay`, judge them on the records
//! so far, and stop the run (as Ctrl-C would) once a breach is certain.

use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Every, Findings, Pending, RecordSink, SoFar};
use crate::record::Record;
use crate::slo::{Aborted, SloSet};

const JUDGE_EVERY: Duration = Duration::from_secs(1);

pub(in crate::runner) struct AbortGate {
    slos: SloSet,
    stop: CancellationToken,
    /// The run's start, on tokio's clock (so a test can pause it).
    start: Instant,
    every: Every,
}

impl AbortGate {
    /// The gate, when the SLOs ask for one.
    pub(in crate::runner) fn of(
        slos: Option<&SloSet>,
        stop: &CancellationToken,
        start: std::time::Instant,
    ) -> Option<AbortGate> {
        let slos = slos.filter(|slos| slos.abort_on_fail)?.clone();
        Some(AbortGate {
            slos,
            stop: stop.clone(),
            start: Instant::from_std(start),
            every: Every::new(JUDGE_EVERY),
        })
    }
}

impl RecordSink for AbortGate {
    fn observe(&mut self, _record: &Record) -> Result<()> {
        Ok(())
    }

    fn next_tick(&self) -> Option<Instant> {
        Some(self.every.due())
    }

    fn tick<'a>(&'a mut self, so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        self.every.taken();
        let at = self.start.elapsed();
        if so_far.aborted.is_none() && at >= self.slos.delay {
            let breaches = self.slos.certain_breaches(so_far.aggregator);
            if !breaches.is_empty() {
                *so_far.aborted = Some(Aborted {
                    at_s: at.as_secs_f64(),
                    breaches,
                    episode: None,
                });
                self.stop.cancel();
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn finish<'a>(self: Box<Self>, _findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Aggregator;
    use crate::record::{Outcome, Phase};

    fn slos(yaml: &str) -> SloSet {
        let mapping = yaml_serde::from_str(yaml).unwrap();
        let mut problems = crate::spec::Problems::new();
        let set = SloSet::from_spec(&mapping, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        set.unwrap()
    }

    fn failed(seq: u64) -> Record {
        let mut r = Record::unsent(seq, 0, Phase::Measure, 0);
        r.outcome = Outcome::Error;
        r.sent_us = Some(0);
        r.last_byte_us = Some(1_000);
        r
    }

    /// Ticks the gate on its beat until it stops the run, or for `most` ticks.
    async fn judge(gate: &mut AbortGate, aggregator: &Aggregator, most: u32) -> Option<Aborted> {
        let mut aborted = None;
        for _ in 0..most {
            tokio::time::sleep_until(gate.next_tick().unwrap()).await;
            let so_far = SoFar {
                aggregator,
                aborted: &mut aborted,
            };
            gate.tick(so_far).await.unwrap();
            if aborted.is_some() {
                break;
            }
        }
        aborted
    }

    #[tokio::test(start_paused = true)]
    async fn a_certain_breach_stops_the_run_at_the_first_judgement_after_the_delay() {
        let set = slos("error_rate: \"< 1%\"\nabort_on_fail: true\ndelay: 2500ms\n");
        let stop = CancellationToken::new();
        let start = Instant::now();
        let mut gate = AbortGate::of(Some(&set), &stop, start.into_std()).unwrap();
        let mut aggregator = Aggregator::new(None);
        (0..200).for_each(|seq| aggregator.add(&failed(seq)));
        let aborted = judge(&mut gate, &aggregator, 10).await.unwrap();
        // Certain from the first second; judged once a second; the delay skips 1 s
        // and 2 s.
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert_eq!(aborted.at_s, 3.0);
        assert_eq!(aborted.breaches.len(), 1);
        assert!(stop.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_breach_that_is_not_yet_certain_does_not_stop_the_run() {
        let set = slos("error_rate: \"< 40%\"\nabort_on_fail: true\n");
        let stop = CancellationToken::new();
        let mut gate = AbortGate::of(Some(&set), &stop, Instant::now().into_std()).unwrap();
        let mut aggregator = Aggregator::new(None);
        // One failure in two requests: 50 %, but its 95 % lower bound is 2.5 %: not yet
        // certain to breach 40 %.
        aggregator.add(&failed(0));
        let mut ok = Record::unsent(1, 0, Phase::Measure, 0);
        ok.sent_us = Some(0);
        ok.last_byte_us = Some(1_000);
        aggregator.add(&ok);
        assert!(judge(&mut gate, &aggregator, 5).await.is_none());
        assert!(!stop.is_cancelled());
    }

    #[test]
    fn no_gate_unless_the_slos_ask_for_one() {
        let set = slos("error_rate: \"< 1%\"\n");
        let stop = CancellationToken::new();
        let start = std::time::Instant::now();
        assert!(AbortGate::of(Some(&set), &stop, start).is_none());
        assert!(AbortGate::of(None, &stop, start).is_none());
    }
}
