//! Closed-loop stages: `concurrency` slots, each sending its next request (or
//! session) when the last one ended, after its think time.

use super::*;

/// How a closed-loop stage went.
pub(super) struct ClosedRun {
    /// Where the next stage starts (offset from the run start).
    pub(super) end: Duration,
    /// Successes per second from the first intended start to the last completion,
    /// as the summary computes it for every stage.
    pub(super) achieved_rate: f64,
}

/// What a closed loop's slots tally as they go.
struct ClosedTally {
    ok: AtomicU64,
    first_intended_us: AtomicU64,
    last_done_us: AtomicU64,
}

impl ClosedTally {
    fn note(&self, intended_us: u64, outcome: Outcome, done_us: u64) {
        self.first_intended_us
            .fetch_min(intended_us, Ordering::Relaxed);
        if outcome == Outcome::Ok {
            self.ok.fetch_add(1, Ordering::Relaxed);
        }
        self.last_done_us.fetch_max(done_us, Ordering::Relaxed);
    }
}

/// Runs a closed-loop stage: `concurrency` sessions back to back.
pub(super) async fn run_closed(
    shared: &Arc<Shared>,
    stage: &ClosedStage,
    index: u32,
    stage_start: Duration,
    stop: &CancellationToken,
) -> ClosedRun {
    let ClosedStage {
        concurrency,
        think_time,
        duration,
        requests,
    } = stage;
    // A segment runs its share of the slots and of the budget (k6's split of VUs).
    let segment = shared.scenario.segment;
    let slot_range = segment.share(u64::from(*concurrency));
    let budget = Arc::new(Budget {
        issued: AtomicU64::new(0),
        limit: requests.map(|n| segment.share(n).count() as u64),
    });
    let end = duration.map(|d| shared.clock.start() + stage_start + d);
    let begin = shared.clock.start() + stage_start;
    tokio::time::sleep_until(begin.into()).await;
    let mut slots = JoinSet::new();
    let tally = Arc::new(ClosedTally {
        ok: AtomicU64::new(0),
        first_intended_us: AtomicU64::new(u64::MAX),
        last_done_us: AtomicU64::new(0),
    });
    // Slots that each keep a connection of their own run on threads of their own.
    let threads = match &shared.work {
        Work::Session(_) => None,
        _ if !shared.http.sends_on_lanes() => None,
        _ => threads::SlotThreads::start(slot_range.clone().count()).ok(),
    };
    for slot in slot_range {
        let run = run_slot(
            shared.clone(),
            Slot {
                stage: index,
                end,
                think: *think_time,
            },
            budget.clone(),
            stop.clone(),
            tally.clone(),
        );
        match &threads {
            Some(threads) => slots.spawn_on(run, threads.for_slot(slot as usize)),
            None => slots.spawn(run),
        };
    }
    while slots.join_next().await.is_some() {}
    drop(threads);
    let window_us = tally
        .last_done_us
        .load(Ordering::Relaxed)
        .saturating_sub(tally.first_intended_us.load(Ordering::Relaxed));
    ClosedRun {
        end: duration.map_or_else(|| shared.clock.start().elapsed(), |d| stage_start + d),
        achieved_rate: crate::metrics::rate_per_s(tally.ok.load(Ordering::Relaxed), window_us),
    }
}

/// What a slot of a closed-loop stage needs to know of its stage.
#[derive(Clone, Copy)]
struct Slot {
    stage: u32,
    /// When the stage's `duration` runs out, if it has one.
    end: Option<Instant>,
    think: Duration,
}

/// One slot: a request (or a session) at a time, back to back, until the stage's
/// time or budget runs out or the run stops.
async fn run_slot(
    shared: Arc<Shared>,
    slot: Slot,
    budget: Arc<Budget>,
    stop: CancellationToken,
    tally: Arc<ClosedTally>,
) {
    let Slot {
        stage: index,
        end,
        think,
    } = slot;
    // One request at a time: a connection of the slot's own, not the pool.
    let lane = shared.http.for_one_at_a_time();
    let mut abort = pin!(shared.abort.cancelled());
    loop {
        let now = Instant::now();
        if stop.is_cancelled() || end.is_some_and(|end| now >= end) {
            break;
        }
        let intended = now.saturating_duration_since(shared.clock.start());
        if let Work::Session(sessions) = &shared.work {
            // One session at a time per slot.
            let start = SessionStart {
                stage: index,
                first: intended,
                stage_permit: None,
                budget: Some(&budget),
                stop: &stop,
            };
            let session = sessions.run(&shared, start).await;
            for (intended_us, outcome, done_us) in session.requests {
                tally.note(intended_us, outcome, done_us);
            }
            if session.out_of_budget {
                break;
            }
        } else {
            if !budget.take() {
                break;
            }
            // One request at a time per slot, run in the slot's own task.
            let intended_us = intended.as_micros() as u64;
            let seq = shared.take_seq();
            let (outcome, done_us) = match admit(&shared, index, intended, seq, None) {
                Some(admitted) => {
                    let ended = execute(&shared, &lane, admitted, abort.as_mut()).await;
                    (ended.outcome, ended.done_us)
                }
                None => (Outcome::Dropped, intended_us),
            };
            tally.note(intended_us, outcome, done_us);
        }
        if !think.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(think) => {}
                _ = stop.cancelled() => break,
            }
        }
    }
}
