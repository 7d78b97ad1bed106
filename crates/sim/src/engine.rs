//! The engine clock: runs the [`Scheduler`] in real time on a thread of its own.
//!
//! A dedicated OS thread sleeps to each step's end with `std::thread::sleep`, whose
//! precision is tens of microseconds, where the async runtime's timer works in whole
//! milliseconds. Requests arrive over a channel and are admitted between steps, as in
//! vLLM's engine core; each request's tokens go back over its own channel. How late
//! the thread wakes against the model's step end is exported as
//! `redline_sim_step_lag_seconds`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::metrics::SimMetrics;
use super::profile::Profile;
use super::scheduler::{Emission, NewRequest, Scheduler, Timeline};
use super::text::{AnswerGenerator, FinishReason};

/// What a request's stream receives.
#[derive(Debug)]
pub enum Event {
    Token {
        index: u32,
        delta: String,
        /// Prompt tokens the prefix cache served.
        cached: u32,
    },
    Finished {
        reason: FinishReason,
        timeline: Timeline,
    },
}

/// Monotonic time since the server started.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn nanos_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos() as u64
    }

    pub fn now_ns(&self) -> u64 {
        self.nanos_at(Instant::now())
    }

    fn instant_at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// What the engine thread is told.
enum Command {
    Submit(Box<Submit>),
    /// Stop stepping for this long (a stalled GPU, a driver hiccup): running
    /// sequences make no progress and arrivals queue.
    Stall(Duration),
}

struct Submit {
    request: NewRequest,
    events: UnboundedSender<Event>,
}

/// Handle to the engine thread; the thread stops when the last handle is dropped.
pub struct Engine {
    commands: mpsc::Sender<Command>,
    clock: Clock,
    next_id: AtomicU64,
}

/// How often requests still waiting are checked for a client that went away.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// How far behind the model's timeline the thread may wake and still catch up.
const CATCH_UP: Duration = Duration::from_millis(5);

/// Where the next step starts. The simulated GPU computes step after step, so a step
/// that follows another starts where that one ended: the thread waking late on a busy
/// host delays that step's tokens but does not stretch the model's timeline (on two
/// busy cores the lag would otherwise add up to 5 % on every token). An engine that
/// went idle, stalled, or fell more than [`CATCH_UP`] behind starts at the present;
/// and no step starts before the newest request it admitted arrived.
#[derive(Default)]
struct StepStart {
    previous_end: Option<Instant>,
    newest_arrival_ns: u64,
}

impl StepStart {
    fn next(&self, now: Instant, clock: Clock) -> Instant {
        let start = match self.previous_end {
            Some(end) if now.saturating_duration_since(end) <= CATCH_UP => end,
            _ => now,
        };
        start.max(clock.instant_at(self.newest_arrival_ns)).min(now)
    }
}

impl Engine {
    pub fn start(profile: Arc<Profile>, metrics: Arc<SimMetrics>, clock: Clock) -> Engine {
        let (commands, inbox) = mpsc::channel();
        std::thread::Builder::new()
            .name("redline-sim-engine".into())
            .spawn(move || run(Scheduler::new(profile), inbox, metrics, clock))
            .expect("spawning the engine thread");
        Engine {
            commands,
            clock,
            next_id: AtomicU64::new(1),
        }
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Queues a request that arrived at `arrival_ns`; its tokens come on the receiver.
    /// Dropping the receiver aborts the request.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        generator: AnswerGenerator,
        arrival_ns: u64,
    ) -> UnboundedReceiver<Event> {
        let (events, receiver) = unbounded_channel();
        let request = NewRequest {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            prompt,
            generator,
            arrival_ns,
        };
        // A send error means the engine thread is gone; the dropped sender then closes
        // the receiver, which the caller reports as an engine failure.
        let _ = self
            .commands
            .send(Command::Submit(Box::new(Submit { request, events })));
        receiver
    }

    /// Stalls the engine for `duration`, starting at the next step boundary.
    pub fn stall(&self, duration: Duration) {
        let _ = self.commands.send(Command::Stall(duration));
    }
}

struct Route {
    events: UnboundedSender<Event>,
    last_token_ns: u64,
}

fn run(
    mut scheduler: Scheduler,
    inbox: mpsc::Receiver<Command>,
    metrics: Arc<SimMetrics>,
    clock: Clock,
) {
    let mut routes: HashMap<u64, Route> = HashMap::new();
    let mut last_sweep = Instant::now();
    // Counters as last reported to /metrics; each step reports what it added.
    let mut reported = scheduler.counters();
    let mut steps = StepStart::default();
    // Commands are applied between steps, as a real engine core takes new requests.
    let apply = |command: Command,
                 scheduler: &mut Scheduler,
                 routes: &mut HashMap<u64, Route>,
                 steps: &mut StepStart| {
        match command {
            Command::Submit(submit) => {
                steps.newest_arrival_ns = steps.newest_arrival_ns.max(submit.request.arrival_ns);
                routes.insert(
                    submit.request.id,
                    Route {
                        events: submit.events,
                        last_token_ns: 0,
                    },
                );
                scheduler.add(submit.request);
            }
            Command::Stall(duration) => {
                std::thread::sleep(duration);
                steps.previous_end = None;
            }
        }
    };
    loop {
        loop {
            match inbox.try_recv() {
                Ok(command) => apply(command, &mut scheduler, &mut routes, &mut steps),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return, // the server is gone
            }
        }
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            let gone: Vec<u64> = scheduler
                .waiting_ids()
                .filter(|id| routes.get(id).is_none_or(|r| r.events.is_closed()))
                .collect();
            for id in gone {
                scheduler.abort(id);
                routes.remove(&id);
            }
        }

        let start = steps.next(Instant::now(), clock);
        let Some(duration_ns) = scheduler.plan_step(clock.nanos_at(start)) else {
            steps.previous_end = None;
            // Nothing to compute: sleep until a request arrives (waking now and then to
            // sweep requests whose clients went away).
            match inbox.recv_timeout(SWEEP_EVERY) {
                Ok(command) => apply(command, &mut scheduler, &mut routes, &mut steps),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            continue;
        };
        let deadline = start + Duration::from_nanos(duration_ns);
        steps.previous_end = Some(deadline);
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        let woke = Instant::now();
        let now_ns = clock.nanos_at(woke);
        for emission in scheduler.finish_step(now_ns) {
            route(emission, now_ns, &mut routes, &mut scheduler, &metrics);
        }
        let lag_ns = woke.saturating_duration_since(deadline).as_nanos() as u64;
        let counters = scheduler.counters();
        metrics.after_step(
            scheduler.running(),
            scheduler.waiting(),
            scheduler.kv_usage(),
            counters.since(&reported),
            lag_ns,
        );
        reported = counters;
    }
}

fn route(
    emission: Emission,
    now_ns: u64,
    routes: &mut HashMap<u64, Route>,
    scheduler: &mut Scheduler,
    metrics: &SimMetrics,
) {
    match emission {
        Emission::Token {
            id,
            index,
            delta,
            cached,
        } => {
            let Some(route) = routes.get_mut(&id) else {
                return;
            };
            if index > 0 {
                metrics.inter_token(now_ns - route.last_token_ns);
            }
            route.last_token_ns = now_ns;
            if route
                .events
                .send(Event::Token {
                    index,
                    delta,
                    cached,
                })
                .is_err()
            {
                // The client went away: stop computing for it, as vLLM aborts.
                scheduler.abort(id);
                routes.remove(&id);
            }
        }
        Emission::Finished {
            id,
            reason,
            timeline,
        } => {
            metrics.finished(reason, &timeline);
            if let Some(route) = routes.remove(&id) {
                let _ = route.events.send(Event::Finished { reason, timeline });
            }
        }
    }
}
