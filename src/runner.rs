//! Carries out a scenario: schedules requests on their intended times, sends them,
//! and streams one record per scheduled request to the collector, which writes
//! `records.jsonl` as they complete and keeps the statistics.
//!
//! Open-loop stages sleep until each absolute intended time (never chained sleeps), so
//! a slow server cannot slow the schedule; latency is reported from the intended start
//! as well as from the send. A request whose time comes while the client is at its
//! in-flight limit is recorded as `dropped`; a stage's `max_concurrency` instead makes
//! it wait, and the wait shows as send lag. On stop (Ctrl-C, SIGTERM), scheduling ends,
//! in-flight requests get `drain_timeout` to finish, and whatever is left is recorded
//! as `cancelled`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::http::{self, HttpTarget};
use crate::client::openai::{self, Api, LlmTarget};
use crate::client::{HttpClient, RunClock, http_client};
use crate::metrics::Aggregator;
use crate::record::{Outcome, Phase, Record, Stage as FailStage};
use crate::scenario::{Endpoint, Scenario, Workload};
use crate::schedule::{OpenArrivals, Stage};
use crate::sim::{EmbeddedSim, Profile, SimConfig};
use crate::workload::PromptSource;
use hyper::header::{AUTHORIZATION, HeaderValue};

/// How a run is carried out, beyond the scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where `records.jsonl` goes.
    pub records_path: PathBuf,
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

/// What a run leaves behind.
pub struct RunResult {
    pub aggregator: Aggregator,
    pub interrupted: bool,
    pub elapsed: Duration,
    pub target_url: String,
    pub model: String,
}

/// What a request is sent to, with everything it needs.
enum Target {
    Llm {
        target: LlmTarget,
        prompts: PromptSource,
    },
    Http(HttpTarget),
}

fn build_target(scenario: &Scenario, base_url: &str, model: &str) -> Result<Target> {
    let max_response_bytes = 64 << 20;
    Ok(match &scenario.workload {
        Workload::Llm {
            api,
            prompts,
            stream,
            include_usage,
            extra_body,
        } => {
            let path = match api {
                Api::Chat => "/v1/chat/completions",
                Api::Completions => "/v1/completions",
            };
            let target = LlmTarget {
                uri: format!("{base_url}{path}")
                    .parse()
                    .context("building the request URL")?,
                api: *api,
                model: model.to_owned(),
                stream: *stream,
                include_usage: *include_usage,
                api_key: scenario.service.api_key.clone(),
                headers: scenario.service.headers.clone(),
                extra_body: extra_body.clone(),
                timeouts: scenario.timeouts,
                max_response_bytes,
                tokenizer: scenario.service.tokenizer,
            };
            Target::Llm {
                target,
                prompts: prompts.clone(),
            }
        }
        Workload::Http(request) => {
            let mut headers = scenario.service.headers.clone();
            headers.extend(request.headers.iter().cloned());
            if let Some(key) = &scenario.service.api_key {
                let value = HeaderValue::try_from(format!("Bearer {key}"))
                    .context("the API key is not a valid header value")?;
                headers.push((AUTHORIZATION, value));
            }
            Target::Http(HttpTarget {
                uri: format!("{base_url}{}", request.path)
                    .parse()
                    .context("building the request URL")?,
                method: request.method.clone(),
                headers,
                body: request.body.clone(),
                expect_status: request.expect_status,
                timeouts: scenario.timeouts,
                max_response_bytes,
            })
        }
    })
}

/// Counters the progress line reads.
#[derive(Default)]
struct Live {
    scheduled: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
}

/// Shared by every request task.
struct Shared {
    http: HttpClient,
    target: Target,
    scenario: Scenario,
    clock: RunClock,
    records: mpsc::UnboundedSender<Record>,
    in_flight: Arc<Semaphore>,
    abort: CancellationToken,
    live: Live,
    planned_end: Option<Duration>,
}

impl Shared {
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

    fn emit(&self, record: Record) {
        self.live.done.fetch_add(1, Ordering::Relaxed);
        if record.outcome != Outcome::Ok {
            self.live.failed.fetch_add(1, Ordering::Relaxed);
        }
        // The collector outlives every sender; a send error would mean it panicked.
        let _ = self.records.send(record);
    }
}

/// Runs the scenario until its stages end or `stop` fires.
pub async fn run(
    scenario: Scenario,
    options: RunOptions,
    stop: CancellationToken,
) -> Result<RunResult> {
    let (embedded, base_url, model) = match &scenario.service.endpoint {
        Endpoint::Embedded { profile } => {
            let profile = Profile::load(profile)?;
            let model = scenario
                .service
                .model
                .clone()
                .unwrap_or_else(|| profile.model.clone());
            let sim = EmbeddedSim::start(SimConfig {
                profile,
                model: Some(model.clone()),
                seed: scenario.seed,
            })
            .await
            .context("cannot start the embedded simulator")?;
            let url = sim.base_url();
            (Some(sim), url, model)
        }
        Endpoint::Url(url) => (
            None,
            url.clone(),
            scenario.service.model.clone().unwrap_or_default(),
        ),
    };
    let target = build_target(&scenario, &base_url, &model)?;

    let file = std::fs::File::create(&options.records_path)
        .with_context(|| format!("cannot create {}", options.records_path.display()))?;
    let (records, inbox) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(inbox, std::io::BufWriter::new(file)));

    let clock = RunClock::new(Instant::now() + Duration::from_millis(20));
    let shared = Arc::new(Shared {
        http: http_client(&scenario.timeouts, scenario.service.http2),
        target,
        planned_end: scenario.planned_duration(),
        in_flight: Arc::new(Semaphore::new(scenario.max_in_flight as usize)),
        abort: CancellationToken::new(),
        live: Live::default(),
        clock,
        records,
        scenario,
    });
    let progress = options
        .progress
        .then(|| tokio::spawn(progress_line(shared.clone())));

    let mut tasks = JoinSet::new();
    let mut seq = 0u64;
    let mut stage_start = Duration::ZERO;
    for (index, stage) in shared.scenario.stages.iter().enumerate() {
        if stop.is_cancelled() {
            break;
        }
        let stage_end = match stage {
            Stage::Open { .. } => {
                run_open(
                    &shared,
                    stage,
                    index as u32,
                    stage_start,
                    &mut seq,
                    &mut tasks,
                    &stop,
                )
                .await
            }
            Stage::Closed { .. } => {
                run_closed(&shared, stage, index as u32, stage_start, &mut seq, &stop).await
            }
        };
        stage_start = stage_end;
    }

    // Drain: requests finish on their own unless a stop came; then they get the drain
    // timeout, and are cancelled (each task records that) when it runs out.
    let drained = async { while tasks.join_next().await.is_some() {} };
    tokio::pin!(drained);
    tokio::select! {
        _ = &mut drained => {}
        _ = async {
            stop.cancelled().await;
            tokio::time::sleep(shared.scenario.drain_timeout).await;
        } => {
            shared.abort.cancel();
            drained.await;
        }
    }
    let elapsed = clock.start().elapsed();
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }
    let shared = Arc::into_inner(shared).expect("every task has ended");
    drop(shared.records);
    let aggregator = collector.await.context("the record collector failed")??;
    drop(embedded);
    if !aggregator.counts.balanced() {
        anyhow::bail!(
            "internal error: outcomes do not add up to the scheduled requests: {:?}",
            aggregator.counts
        );
    }
    Ok(RunResult {
        aggregator,
        interrupted: stop.is_cancelled(),
        elapsed,
        target_url: base_url,
        model,
    })
}

/// Schedules an open-loop stage; returns its end (offset from the run start).
async fn run_open(
    shared: &Arc<Shared>,
    stage: &Stage,
    index: u32,
    stage_start: Duration,
    seq: &mut u64,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Duration {
    let Stage::Open {
        max_concurrency, ..
    } = stage
    else {
        unreachable!("called for open stages")
    };
    let stage_cap = max_concurrency.map(|c| Arc::new(Semaphore::new(c as usize)));
    let seed = crate::sim::text::mix_seed(&[shared.scenario.seed, 0x5343_4845, u64::from(index)]);
    let mut last = stage_start;
    for offset in OpenArrivals::new(stage, seed) {
        let intended = stage_start + offset;
        last = intended;
        tokio::select! {
            _ = tokio::time::sleep_until(shared.clock.start().checked_add(intended).expect("in range").into()) => {}
            _ = stop.cancelled() => return intended,
        }
        let stage_permit = match &stage_cap {
            Some(cap) => tokio::select! {
                permit = cap.clone().acquire_owned() => Some(permit.expect("never closed")),
                _ = stop.cancelled() => return intended,
            },
            None => None,
        };
        launch(shared, index, intended, *seq, stage_permit, tasks);
        *seq += 1;
        // A JoinSet keeps each finished task until it is joined: reap them as we go,
        // or memory grows with the length of the run instead of what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    stage.duration().map_or(last, |d| stage_start + d)
}

/// A request that got a place in flight: its record, and the permits it holds.
struct Admitted {
    record: Record,
    seq: u64,
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
    shared.live.scheduled.fetch_add(1, Ordering::Relaxed);
    let mut record = Record::unsent(
        seq,
        stage,
        shared.phase(intended),
        intended.as_micros() as u64,
    );
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
        _permits: (permit, stage_permit),
    })
}

/// Sends an admitted request and emits its record, whatever happens.
async fn execute(shared: &Shared, admitted: Admitted) {
    let Admitted {
        mut record,
        seq,
        _permits,
    } = admitted;
    let request = async {
        match &shared.target {
            Target::Llm { target, prompts } => {
                let payload = prompts.payload(shared.scenario.seed, seq);
                openai::call(&shared.http, target, &payload, shared.clock, &mut record).await;
            }
            Target::Http(target) => {
                http::call(&shared.http, target, shared.clock, &mut record).await
            }
        }
    };
    tokio::select! {
        _ = request => {}
        _ = shared.abort.cancelled() => {
            record.fail(Outcome::Cancelled, FailStage::Client, "cancelled", "still in flight when the drain timeout ran out");
        }
    }
    drop(_permits);
    shared.emit(record);
}

/// Starts one request as a task of its own (open loop: the schedule does not wait).
fn launch(
    shared: &Arc<Shared>,
    stage: u32,
    intended: Duration,
    seq: u64,
    stage_permit: Option<OwnedSemaphorePermit>,
    tasks: &mut JoinSet<()>,
) {
    if let Some(admitted) = admit(shared, stage, intended, seq, stage_permit) {
        let shared = shared.clone();
        tasks.spawn(async move { execute(&shared, admitted).await });
    }
}

/// Runs a closed-loop stage: `concurrency` sessions back to back.
async fn run_closed(
    shared: &Arc<Shared>,
    stage: &Stage,
    index: u32,
    stage_start: Duration,
    seq: &mut u64,
    stop: &CancellationToken,
) -> Duration {
    let Stage::Closed {
        concurrency,
        think_time,
        duration,
        requests,
    } = stage
    else {
        unreachable!("called for closed stages")
    };
    let next_seq = Arc::new(AtomicU64::new(*seq));
    let last_seq = requests.map(|n| *seq + n);
    let end = duration.map(|d| shared.clock.start() + stage_start + d);
    let begin = shared.clock.start() + stage_start;
    tokio::time::sleep_until(begin.into()).await;
    let mut sessions = JoinSet::new();
    for _ in 0..*concurrency {
        let (shared, next_seq, stop, think) =
            (shared.clone(), next_seq.clone(), stop.clone(), *think_time);
        sessions.spawn(async move {
            loop {
                let now = Instant::now();
                if stop.is_cancelled() || end.is_some_and(|end| now >= end) {
                    break;
                }
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                if last_seq.is_some_and(|last| seq >= last) {
                    break;
                }
                let intended = now.saturating_duration_since(shared.clock.start());
                // One request at a time per session, run in the session's own task.
                if let Some(admitted) = admit(&shared, index, intended, seq, None) {
                    execute(&shared, admitted).await;
                }
                if !think.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(think) => {}
                        _ = stop.cancelled() => break,
                    }
                }
            }
        });
    }
    while sessions.join_next().await.is_some() {}
    *seq = next_seq
        .load(Ordering::Relaxed)
        .min(last_seq.unwrap_or(u64::MAX));
    match (duration, requests) {
        (Some(d), _) => stage_start + *d,
        (None, _) => shared.clock.start().elapsed(),
    }
}

/// Receives records, writes them as JSON lines (flushed at least every 200 ms, so an
/// interrupted run keeps its data) and keeps the statistics.
async fn collect(
    mut inbox: mpsc::UnboundedReceiver<Record>,
    mut out: std::io::BufWriter<std::fs::File>,
) -> Result<Aggregator> {
    let mut aggregator = Aggregator::default();
    let mut flush = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            record = inbox.recv() => {
                let Some(record) = record else { break };
                serde_json::to_writer(&mut out, &record)?;
                out.write_all(b"\n")?;
                aggregator.add(&record);
            }
            _ = flush.tick() => out.flush()?,
        }
    }
    out.flush()?;
    Ok(aggregator)
}

async fn progress_line(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let live = &shared.live;
        let (scheduled, done, failed) = (
            live.scheduled.load(Ordering::Relaxed),
            live.done.load(Ordering::Relaxed),
            live.failed.load(Ordering::Relaxed),
        );
        let total = shared
            .planned_end
            .map(|d| format!("/{:.0}s", d.as_secs_f64()))
            .unwrap_or_default();
        eprint!(
            "\r  {:>6.1}s{total}  scheduled {scheduled}  done {done}  failed {failed}  in flight {}   ",
            shared.clock.start().elapsed().as_secs_f64(),
            scheduled.saturating_sub(done)
        );
    }
}
