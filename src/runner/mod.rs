//! Carries out a scenario: schedules requests on their intended times, sends them,
//! and streams one record per scheduled request to the recorder, which hands each to
//! the run's sinks as it completes (`records.jsonl`, the statistics, live metrics,
//! spans, the coordinator, streaming SLOs, the abort gate, availability: see
//! `sinks/`). A run has three phases (`phases.rs`): prepare, execute, finish.
//!
//! Open-loop stages sleep until each absolute intended time (never chained sleeps), so
//! a slow server cannot slow the schedule; latency is reported from the intended start
//! as well as from the send. A request whose time comes while the client is at its
//! in-flight limit is recorded as `dropped`; a stage's `max_concurrency` instead makes
//! it wait, and the wait shows as send lag. On stop (Ctrl-C, SIGTERM), scheduling ends,
//! in-flight requests get `drain_timeout` to finish, and whatever is left is recorded
//! as `cancelled`.

mod recorder;
pub mod availability;
mod beside;
mod breaker;
mod closed;
pub mod disrupt;
pub mod feedback;
mod flow;
mod phases;
mod progress;
mod services;
mod sinks;
mod threads;
mod tokens;
mod target;
mod wiring;

pub use progress::{Progress, ProgressSnapshot, StageStatus};
pub use sinks::OnDrift;

use closed::run_closed;
use phases::Run;
use recorder::*;
pub use services::new_run_id;
use services::*;
use target::{Target, build_target};
use wiring::{ObserverOptions, Observers, Servers};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::chaos::{FaultLog, ProxyConfig, Rule, RunningProxy, upstream_uri};
use crate::client::openai::{self, LlmTarget};
use crate::client::{HttpClient, RunClock};
use crate::client::{http, mcp};
use crate::metrics::Aggregator;
use crate::prometheus::live::LiveMetrics;
use crate::record::{FailStage, Outcome, Phase, Record, SessionMark, TokenSource};
use crate::results::{Header, RunResult};
use crate::scenario::{Endpoint, Scenario, Service, SessionPlan};
use crate::schedule::pacer::Pacer;
use crate::schedule::{
    ClosedStage, ExecutedStage, OpenArrivals, OpenStage, ReplayStage, Stage, SweepRole, SweepStage,
    sweep_rates,
};
use crate::seed::mix_seed;
use crate::slo::Aborted;
use crate::spec::TraceIds;
use crate::trace::context::{new_trace_id, request_traceparent, traceparent};
use crate::workload::PromptSource;
use crate::workload::payload::{Payload, PromptBody};
use crate::workload::tool_ast::MadeCall;
use hyper::header::{AUTHORIZATION, HeaderValue};

/// What to do once a run's services are up: print its header, say.
pub type OnStart = Box<dyn FnOnce(&Header) + Send>;

/// How a run is carried out, beyond the scenario.
pub struct RunOptions {
    /// Where `records.jsonl` goes.
    pub records_path: PathBuf,
    /// Counters for a progress display, bumped as the run goes (else the run keeps
    /// its own).
    pub progress: Option<Arc<Progress>>,
    /// Called once the services are up, just before the first request: what the run
    /// is about to do, to print before it starts.
    pub on_start: Option<OnStart>,
    /// Serve the run's live metrics (`/metrics`) on this listener while it runs.
    pub metrics_listener: Option<tokio::net::TcpListener>,
    /// Export the run's own spans to this OTLP/HTTP traces endpoint (`…/v1/traces`).
    pub otlp_endpoint: Option<hyper::Uri>,
    /// Certificates for an https OTLP endpoint (none: the system's roots).
    pub otlp_tls: Option<crate::client::tls::TlsSettings>,
    /// Receive the services' traces during the run.
    pub collect: Option<CollectOptions>,
    /// Told of each streaming-SLO episode as it opens, escalates and closes.
    pub on_drift: Option<OnDrift>,
    /// The run's ID (in trace IDs and baggage), when the caller sets it: the workers
    /// of one segmented run share theirs. Else a new one.
    pub run_id: Option<u64>,
    /// A coordinator to join before the first request and to push deltas to: it
    /// gives the run ID and the start, and judges `abort_on_fail` on the whole run.
    pub coordinator: Option<crate::coordinator::worker::Link>,
}

impl RunOptions {
    /// A run that writes its records to `records_path` and stands up nothing else.
    pub fn records_to(records_path: PathBuf) -> RunOptions {
        RunOptions {
            records_path,
            progress: None,
            on_start: None,
            metrics_listener: None,
            otlp_endpoint: None,
            otlp_tls: None,
            collect: None,
            on_drift: None,
            run_id: None,
            coordinator: None,
        }
    }
}

/// Where to receive traces during a run, and how long to wait for stragglers.
#[derive(Debug)]
pub struct CollectOptions {
    pub listener: tokio::net::TcpListener,
    /// Where `spans.jsonl` goes.
    pub dir: PathBuf,
    pub grace: Duration,
}

/// What one arrival of a stage starts.
enum Work {
    Request,
    Session(Sessions),
}

/// Sessions: each arrival is a run of requests that follow one another.
#[derive(Clone)]
enum Sessions {
    Chat(Conversations),
    /// Sessions through the flow's steps.
    Flow(Arc<flow::FlowRuntime>),
}

/// Multi-turn conversations, their user turns drawn from the prompts.
#[derive(Clone)]
struct Conversations {
    plan: SessionPlan,
    prompts: Arc<PromptSource>,
}

/// How a session starts: its stage, its intended start, the stage's place it holds
/// (a capped stage counts sessions), the closed loop's budget, the run's stop.
struct SessionStart<'a> {
    stage: u32,
    first: Duration,
    stage_permit: Option<OwnedSemaphorePermit>,
    budget: Option<&'a Budget>,
    stop: &'a CancellationToken,
}

impl Sessions {
    async fn run(&self, shared: &Arc<Shared>, start: SessionStart<'_>) -> SessionRun {
        match self {
            Sessions::Chat(chat) => run_session(shared, chat, start).await,
            Sessions::Flow(runtime) => flow::run_flow(shared, runtime, start).await,
        }
    }
}

/// Sessions and flows draw their prompts from the chat workload's prompt source.
async fn work_of(
    scenario: &Scenario,
    servers: &Servers,
    baggage: hyper::header::HeaderValue,
    target: &Target,
) -> Result<Work> {
    let prompts = match target {
        Target::Llm { prompts, .. } => Some(prompts.clone()),
        Target::Http(_) | Target::Media { .. } | Target::Mcp { .. } | Target::Mix(_) => None,
    };
    Ok(match (&scenario.flow, scenario.session, prompts) {
        (None, None, _) => Work::Request,
        (Some(plan), _, Some(prompts)) => {
            let runtime = servers
                .flow_runtime(plan, scenario, baggage, prompts)
                .await?;
            Work::Session(Sessions::Flow(Arc::new(runtime)))
        }
        (None, Some(plan), Some(prompts)) => {
            Work::Session(Sessions::Chat(Conversations { plan, prompts }))
        }
        (_, _, None) => {
            anyhow::bail!("sessions and flows need prompts, and this workload sends plain HTTP")
        }
    })
}

/// Shared by every request task.
struct Shared {
    http: HttpClient,
    target: Target,
    /// The mix's live rates, when a feedback controller sets them.
    rates: Option<Arc<feedback::LiveRates>>,
    /// What each arrival of a stage starts.
    work: Work,
    scenario: Scenario,
    clock: RunClock,
    records: mpsc::UnboundedSender<Inbox>,
    in_flight: Arc<Semaphore>,
    abort: CancellationToken,
    progress: Arc<Progress>,
    planned_end: Option<Duration>,
    /// The next request's `seq`: requests are numbered as they are scheduled, across
    /// stages and sessions.
    next_seq: AtomicU64,
    /// Added to the `seq` of requests numbered as they happen (closed loops, sessions,
    /// flows): zero for a whole run; in a segment, a base of the segment's own, so no
    /// two segments give one `seq` (and so one trace ID) to different requests.
    /// Open-loop and replay arrivals are numbered by their place in the schedule.
    dynamic_seq_base: u64,
    /// The next session's id.
    next_session: AtomicU64,
    /// Mixed into trace IDs: the run's ID, or zero for `trace_ids: seeded`.
    trace_key: u64,
}

impl Shared {
    fn take_seq(&self) -> u64 {
        self.dynamic_seq_base + self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    fn phase(&self, intended: Duration) -> Phase {
        if intended < self.scenario.warmup {
            Phase::Warmup
        } else if self.planned_end.is_some_and(|end| {
            intended + self.scenario.cooldown > end && !self.scenario.cooldown.is_zero()
        }) {
            Phase::Cooldown
        } else {
            Phase::Measure
        }
    }

    fn emit(&self, record: impl Into<Box<Record>>) {
        let record = record.into();
        self.progress.ended(record.outcome == Outcome::Ok);
        // The recorder runs until the runner closes its inbox, after every request
        // task has ended; a send error would mean it failed, and the run reports that.
        let _ = self.records.send(Inbox::Record(record));
    }
}

/// Runs the scenario until its stages end or `stop` fires.
pub async fn run(
    scenario: Scenario,
    options: RunOptions,
    stop: CancellationToken,
) -> Result<RunResult> {
    let mut run = Run::prepare(scenario, options, &stop).await?;
    let (executed, elapsed) = run.execute(&stop).await;
    run.finish(executed, elapsed, &stop).await
}

/// Runs the stages in order until they end or `stop` fires, then waits for every
/// request. One drain serves every wait (open-loop tasks, closed-loop slots, sweep
/// points, sessions): a stop gives in-flight requests the drain timeout, then the
/// abort token ends them (each task records that).
async fn run_stages(shared: &Arc<Shared>, stop: &CancellationToken) -> Result<Vec<ExecutedStage>> {
    let drain_watch = tokio::spawn(drain_watch(
        stop.clone(),
        shared.abort.clone(),
        shared.scenario.drain_timeout,
    ));
    let mut tasks = JoinSet::new();
    let mut stage_start = Duration::ZERO;
    let mut executed = Vec::new();
    for stage in &shared.scenario.stages {
        if stop.is_cancelled() {
            break;
        }
        let stage_end = match stage {
            Stage::Open(open) => {
                let index = begin_stage(shared, &mut executed, stage, None);
                run_open(shared, open, index, stage_start, &mut tasks, stop).await?
            }
            Stage::Closed(closed) => {
                let index = begin_stage(shared, &mut executed, stage, None);
                run_closed(shared, closed, index, stage_start, stop)
                    .await
                    .end
            }
            Stage::Replay(replay) => {
                let index = begin_stage(shared, &mut executed, stage, None);
                run_replay(shared, replay, index, stage_start, &mut tasks, stop).await?
            }
            Stage::Sweep(sweep) => {
                run_sweep(shared, sweep, &mut executed, stage_start, &mut tasks, stop).await?
            }
        };
        stage_start = stage_end;
    }
    while tasks.join_next().await.is_some() {}
    drain_watch.abort();
    Ok(executed)
}

/// The drain watchdog: once `stop` fires, in-flight requests get `drain` to finish,
/// then `abort` ends them.
async fn drain_watch(stop: CancellationToken, abort: CancellationToken, drain: Duration) {
    stop.cancelled().await;
    tokio::time::sleep(drain).await;
    abort.cancel();
}

/// Notes a stage as run (its index is the records' `stage`) and tells the progress.
fn begin_stage(
    shared: &Shared,
    executed: &mut Vec<ExecutedStage>,
    stage: &Stage,
    role: Option<SweepRole>,
) -> u32 {
    let index = executed.len() as u32;
    let ran = ExecutedStage::of(stage, role, shared.scenario.unit());
    shared
        .progress
        .enter_stage(index, stage.duration(), stage.requests(), ran.offered_rate);
    executed.push(ran);
    index
}

/// Schedules an open-loop stage; returns its end (offset from the run start).
async fn run_open(
    shared: &Arc<Shared>,
    stage: &OpenStage,
    index: u32,
    stage_start: Duration,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Result<Duration> {
    let stage_cap = stage
        .max_concurrency
        .map(|c| Arc::new(Semaphore::new(c as usize)));
    let seed = crate::seed::mix_seed(&[shared.scenario.seed, 0x5343_4845, u64::from(index)]);
    let segment = shared.scenario.segment;
    // A request's `seq` is its place in the whole schedule, whichever segment sends
    // it, so its prompt and trace ID are those one process would have sent.
    let base = shared.next_seq.load(Ordering::Relaxed);
    let mut last = stage_start;
    let offsets: Box<dyn Iterator<Item = Duration> + Send> = match &shared.rates {
        Some(live) => {
            let end = stage.duration.unwrap_or(Duration::MAX);
            Box::new(feedback::FeedbackArrivals::new(live.clone(), end, seed))
        }
        None => Box::new(OpenArrivals::new(stage, seed)),
    };
    let mut pacer = Pacer::start(
        shared.clock.start() + stage_start,
        (0u64..).zip(offsets).filter(move |(i, _)| segment.owns(*i)),
    )
    .context("cannot start the pacer thread")?;
    let mut scheduled = 0;
    loop {
        let Some((arrival, offset)) = pacer.next_unless(stop).await else {
            break;
        };
        scheduled = arrival + 1;
        let intended = stage_start + offset;
        last = intended;
        let stage_permit = match &stage_cap {
            Some(cap) => tokio::select! {
                permit = cap.clone().acquire_owned() => Some(permit.expect("never closed")),
                _ = stop.cancelled() => return Ok(intended),
            },
            None => None,
        };
        match &shared.work {
            Work::Session(sessions) => {
                // Each arrival is a session; its requests follow their own answers.
                let (shared, stop, sessions) = (shared.clone(), stop.clone(), sessions.clone());
                tasks.spawn(async move {
                    let start = SessionStart {
                        stage: index,
                        first: intended,
                        stage_permit,
                        budget: None,
                        stop: &stop,
                    };
                    sessions.run(&shared, start).await;
                });
            }
            Work::Request => {
                let seq = base + arrival;
                launch(shared, index, intended, seq, stage_permit, None, tasks);
            }
        }
        // A JoinSet keeps each finished task until it is joined: reap them as we go,
        // or memory grows with the length of the run instead of what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    if matches!(shared.work, Work::Request) {
        // The next stage numbers on from the whole schedule's end, not this share's.
        if !segment.is_whole() && !stop.is_cancelled() {
            scheduled = OpenArrivals::new(stage, seed).count() as u64;
        }
        shared.next_seq.store(base + scheduled, Ordering::Relaxed);
    }
    if stop.is_cancelled() {
        return Ok(last);
    }
    Ok(stage.duration.map_or(last, |d| stage_start + d))
}

/// Replays a trace: each entry at its own time (divided by the speed), with the prompt
/// its lengths and hash ids describe. Returns the stage's end.
async fn run_replay(
    shared: &Arc<Shared>,
    stage: &ReplayStage,
    index: u32,
    stage_start: Duration,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Result<Duration> {
    let prompts = &shared.scenario.traces[stage.trace];
    let offsets: Vec<Duration> = stage
        .offsets
        .iter()
        .map(|at| at.div_f64(stage.speed))
        .collect();
    let segment = shared.scenario.segment;
    let base = shared.next_seq.load(Ordering::Relaxed);
    let mut pacer = Pacer::start(
        shared.clock.start() + stage_start,
        (0u64..).zip(offsets).filter(move |(i, _)| segment.owns(*i)),
    )
    .context("cannot start the pacer thread")?;
    let mut last = stage_start;
    while let Some((n, offset)) = pacer.next_unless(stop).await {
        let intended = stage_start + offset;
        last = intended;
        // Numbered by its place in the trace, whichever segment sends it.
        let seq = base + n;
        let payload = prompts.payload(n as usize, shared.scenario.seed, seq);
        launch(shared, index, intended, seq, None, Some(payload), tasks);
        while tasks.try_join_next().is_some() {}
    }
    shared
        .next_seq
        .store(base + stage.offsets.len() as u64, Ordering::Relaxed);
    Ok(last)
}

/// A request that got a place in flight: its record, and the permits it holds.
struct Admitted {
    /// Boxed from the start: a record is ~700 bytes, and a request's futures moved it
    /// by value four times on its way to the recorder (memcpy, 1,700 instructions).
    record: Box<Record>,
    seq: u64,
    /// What to send, when the stage says (a trace entry); else the prompt source's.
    payload: Option<Payload>,
    _permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
}

/// Counts the request as scheduled and gives it a place in flight; at the in-flight
/// limit it is recorded as `dropped` instead and `None` is returned.
fn admit(
    shared: &Shared,
    stage: u32,
    intended: Duration,
    seq: u64,
    stage_permit: Option<OwnedSemaphorePermit>,
) -> Option<Admitted> {
    shared.progress.scheduled();
    let mut record = Box::new(Record::unsent(
        seq,
        stage,
        shared.phase(intended),
        intended.as_micros() as u64,
    ));
    let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
        record.fail(
            Outcome::Dropped,
            FailStage::Client,
            "in_flight_limit",
            format!(
                "{} requests already in flight",
                shared.scenario.max_in_flight
            ),
        );
        shared.emit(record);
        return None;
    };
    Some(Admitted {
        record,
        seq,
        payload: None,
        _permits: (permit, stage_permit),
    })
}

/// How a request ended, for whoever waits on it (a closed loop's slot, a session).
struct Ended {
    outcome: Outcome,
    done_us: u64,
    /// A successful LLM request's answer.
    answer: Option<Answered>,
}

/// What a session's next turn needs of an answer.
struct Answered {
    text: String,
    /// Its length in tokens, when known.
    tokens: Option<u32>,
    /// The Responses API's id of it, which a next turn may continue.
    response_id: Option<String>,
}

/// Sends an admitted request on `http` and emits its record, whatever happens.
/// `abort` is `shared.abort.cancelled()`, made by the caller: a closed loop's slot
/// makes it once for all its requests, as registering a waiter on the token and
/// removing it again cost 400 instructions a request.
async fn execute(
    shared: &Shared,
    http: &HttpClient,
    admitted: Admitted,
    abort: Pin<&mut WaitForCancellationFuture<'_>>,
) -> Ended {
    let Admitted {
        mut record,
        seq,
        payload,
        _permits,
    } = admitted;
    let (target, http) =
        shared
            .target
            .pick(http, shared.scenario.seed, seq, shared.rates.as_deref());
    let request = send_to(shared, http, target, seq, payload, &mut record);
    let answer = tokio::select! {
        // The request first, and no random choice of which to poll first: it is the
        // one that is ready.
        biased;
        answer = request => answer,
        _ = abort => {
            record.fail(Outcome::Cancelled, FailStage::Client, "cancelled", "still in flight when the drain timeout ran out");
            None
        }
    };
    drop(_permits);
    record.note_given_up(shared.clock.now_us());
    let ended = Ended {
        outcome: record.outcome,
        done_us: record.done_us(),
        answer: answer.map(|(text, response_id)| Answered {
            text,
            tokens: record.output_tokens,
            response_id,
        }),
    };
    shared.emit(record);
    ended
}

/// Sends request `seq` to `target`, filling `record`: the text and Responses id of an
/// LLM's answer (graded when its dataset line says how), none for other requests.
async fn send_to(
    shared: &Shared,
    http: &HttpClient,
    target: &Target,
    seq: u64,
    payload: Option<Payload>,
    record: &mut Record,
) -> Option<(String, Option<String>)> {
    let (seed, clock) = (shared.scenario.seed, shared.clock);
    match target {
        Target::Mix(_) => unreachable!("a mix picks one of its targets"),
        Target::Llm { target, prompts } => {
            let mut payload = payload.unwrap_or_else(|| prompts.payload(seed, seq));
            let traceparent = payload
                .traceparent
                .get_or_insert_with(|| request_traceparent(shared.trace_key, seed, seq));
            record.traceparent = Some(traceparent.clone());
            record.prefix = payload.prefix;
            let answer = openai::call(http, target, &payload, clock, record).await;
            if let (Some(task), Some(answer), Outcome::Ok) =
                (&payload.grade, &answer, record.outcome)
            {
                let calls: Vec<MadeCall> = answer
                    .tool_calls
                    .iter()
                    .map(|c| MadeCall {
                        name: &c.name,
                        arguments: &c.arguments,
                    })
                    .collect();
                record.grade = Some(task.grade(&answer.text, &calls));
            }
            answer.map(|answer| (answer.text, answer.response_id))
        }
        Target::Http(target) => {
            let traceparent = traced(shared, seq, record);
            http::call(http, target, &traceparent, clock, record).await;
            None
        }
        Target::Mcp { target, workload } => {
            let traceparent = traced(shared, seq, record);
            let call = workload.call(seed, seq);
            let end_session = workload.ends_session(seed, seq);
            mcp::call(
                http,
                target,
                &call,
                end_session,
                &traceparent,
                clock,
                record,
            )
            .await;
            None
        }
        Target::Media { target, input } => {
            let traceparent = traced(shared, seq, record);
            target::send_media(
                http,
                target,
                input,
                (seed, seq),
                &traceparent,
                clock,
                record,
            )
            .await;
            None
        }
    }
}

/// Request `seq`'s own trace, noted in its record.
fn traced(shared: &Shared, seq: u64, record: &mut Record) -> String {
    let traceparent = request_traceparent(shared.trace_key, shared.scenario.seed, seq);
    record.traceparent = Some(traceparent.clone());
    traceparent
}

/// Starts one request as a task of its own (open loop: the schedule does not wait).
fn launch(
    shared: &Arc<Shared>,
    stage: u32,
    intended: Duration,
    seq: u64,
    stage_permit: Option<OwnedSemaphorePermit>,
    payload: Option<Payload>,
    tasks: &mut JoinSet<()>,
) {
    if let Some(mut admitted) = admit(shared, stage, intended, seq, stage_permit) {
        admitted.payload = payload;
        let shared = shared.clone();
        tasks.spawn(async move {
            execute(
                &shared,
                &shared.http,
                admitted,
                pin!(shared.abort.cancelled()),
            )
            .await;
        });
    }
}

/// A stage's request budget (`requests:`), shared by its slots and sessions.
struct Budget {
    issued: AtomicU64,
    limit: Option<u64>,
}

impl Budget {
    /// Whether one more request fits.
    fn take(&self) -> bool {
        self.limit
            .is_none_or(|limit| self.issued.fetch_add(1, Ordering::Relaxed) < limit)
    }
}

/// What one session did: each request's (intended start, outcome, end), in µs.
#[derive(Default)]
struct SessionRun {
    requests: Vec<(u64, Outcome, u64)>,
    /// The stage's budget ran out before the session's last turn.
    out_of_budget: bool,
}

/// Runs one multi-turn conversation: each turn sends the history with the real
/// answers so far, after the session's think time; every request carries the
/// session's W3C trace. A failed turn ends the conversation, as a user would give up.
async fn run_session(
    shared: &Arc<Shared>,
    conversations: &Conversations,
    start: SessionStart<'_>,
) -> SessionRun {
    let Conversations { plan, prompts } = conversations;
    let SessionStart {
        stage,
        first,
        stage_permit: _held_for_the_conversation,
        budget,
        stop,
    } = start;
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let seed = shared.scenario.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x5345_5353, id]));
    let turns = plan.turns.sample(&mut rng);
    let trace_id = new_trace_id(&mut rng, shared.trace_key);
    let snapshot = format!("{}@seed={seed}", shared.scenario.name);
    let mut history: Vec<serde_json::Value> = Vec::new();
    let mut history_tokens = 0u32;
    // With the history on the server, the id of the answer the next turn continues.
    let mut continues: Option<String> = None;
    let mut intended = first;
    let mut run = SessionRun::default();
    for turn in 1..=turns {
        if stop.is_cancelled() {
            break;
        }
        if budget.is_some_and(|b| !b.take()) {
            run.out_of_budget = true;
            break;
        }
        let intended_us = intended.as_micros() as u64;
        let seq = shared.take_seq();
        let Some(mut admitted) = admit(shared, stage, intended, seq, None) else {
            run.requests
                .push((intended_us, Outcome::Dropped, intended_us));
            break;
        };
        let user = prompts.payload(seed, mix_seed(&[id, u64::from(turn)]));
        let text = user.prompt.user_text().to_owned();
        let said = serde_json::json!({"role": "user", "content": text});
        history.push(said.clone());
        history_tokens += user.input_tokens;
        let prompt = match &continues {
            Some(_) => PromptBody::Messages(vec![said]),
            None => PromptBody::Messages(history.clone()),
        };
        admitted.payload = Some(Payload {
            prompt,
            max_tokens: user.max_tokens,
            input_tokens: history_tokens,
            traceparent: Some(traceparent(&trace_id, rng.random())),
            prefix: None,
            previous_response_id: continues.take(),
            grade: user.grade.clone(),
            fields: user.fields.clone(),
        });
        admitted.record.session = Some(SessionMark {
            id,
            turn,
            trace_id: trace_id.clone(),
            snapshot: snapshot.clone(),
        });
        let ended = execute(
            shared,
            &shared.http,
            admitted,
            pin!(shared.abort.cancelled()),
        )
        .await;
        run.requests
            .push((intended_us, ended.outcome, ended.done_us));
        let Some(answer) = ended.answer else {
            break;
        };
        // The server's count (or the run's own); an answer too long to count adds
        // about a token per 4 bytes.
        history_tokens += answer.tokens.unwrap_or(answer.text.len() as u32 / 4);
        if plan.history == crate::spec::HistoryMode::Server {
            continues = answer.response_id;
        }
        history.push(serde_json::json!({"role": "assistant", "content": answer.text}));
        if turn < turns && !plan.think_time.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(plan.think_time) => {}
                _ = stop.cancelled() => break,
            }
        }
        intended = shared.clock.start().elapsed();
    }
    run
}

/// Runs a sweep: the synchronous and throughput points measure the lowest and highest
/// rate, then open-loop points between them. Each point's requests finish before the
/// next point starts, so each is judged on its own traffic. Returns where the sweep
/// ended.
async fn run_sweep(
    shared: &Arc<Shared>,
    stage: &SweepStage,
    executed: &mut Vec<ExecutedStage>,
    stage_start: Duration,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Result<Duration> {
    let SweepStage {
        arrival,
        rates,
        throughput_concurrency,
        duration,
        requests,
    } = *stage;
    let mut start = stage_start;
    let mut achieved = [0.0; 2];
    let closed_points = [
        (SweepRole::Synchronous, 1),
        (SweepRole::Throughput, throughput_concurrency),
    ];
    for (point, (role, concurrency)) in closed_points.into_iter().enumerate() {
        if stop.is_cancelled() {
            return Ok(start);
        }
        let closed = ClosedStage {
            concurrency,
            think_time: Duration::ZERO,
            duration,
            requests,
        };
        let as_stage = Stage::Closed(closed.clone());
        let index = begin_stage(shared, executed, &as_stage, Some(role));
        let ran = run_closed(shared, &closed, index, start, stop).await;
        achieved[point] = ran.achieved_rate;
        // The next point starts when this one's last request is done, not before.
        start = ran.end.max(shared.clock.start().elapsed());
    }
    // A point with no successes has no rate to sweep to; the report shows why.
    for rate in sweep_rates(achieved[0], achieved[1], rates) {
        if stop.is_cancelled() || rate <= 0.0 {
            break;
        }
        let open = OpenStage {
            arrival,
            rate,
            ramp_to: None,
            duration,
            requests,
            max_concurrency: None,
        };
        let as_stage = Stage::Open(open.clone());
        let index = begin_stage(shared, executed, &as_stage, Some(SweepRole::Rate));
        run_open(shared, &open, index, start, tasks, stop).await?;
        tokio::select! {
            _ = async { while tasks.join_next().await.is_some() {} } => {}
            _ = stop.cancelled() => break,
        }
        start = shared.clock.start().elapsed();
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stop_gives_in_flight_requests_the_drain_timeout_then_ends_them() {
        let (stop, abort) = (CancellationToken::new(), CancellationToken::new());
        let start = tokio::time::Instant::now();
        let watch = tokio::spawn(drain_watch(
            stop.clone(),
            abort.clone(),
            Duration::from_millis(1500),
        ));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!abort.is_cancelled(), "nothing ends before the stop");
        stop.cancel();
        abort.cancelled().await;
        assert_eq!(start.elapsed(), Duration::from_millis(5500));
        watch.await.unwrap();
    }
}
