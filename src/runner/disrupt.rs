//! Replicas redline starts for a `url: balanced` service, and the disruptions of a
//! run: every `every`, the next replica is stopped and started again (never two down
//! at once), or a command of yours runs. Each step is timed on the run's clock, so the
//! records that failed during it can be put down to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::chaos::balance::Pool;
use crate::client::{HttpClient, RunClock};
use crate::launch::process::Server;
use crate::results::DisruptionStep;
use crate::scenario::{Disruption, Replica};

/// A replica and its process, when redline runs it.
struct Member {
    replica: Replica,
    server: Option<Server>,
    log: PathBuf,
}

/// The replicas of one balanced service.
pub(super) struct ReplicaSet {
    pub(super) service: String,
    members: Vec<Member>,
    pool: Option<Arc<Pool>>,
}

impl ReplicaSet {
    /// Starts the replicas that have a command (logs in `dir`) and waits until each is
    /// ready, within `ready_within`.
    pub(super) async fn start(
        service: &str,
        replicas: &[Replica],
        dir: &Path,
        http: &HttpClient,
        ready_within: Duration,
    ) -> Result<ReplicaSet> {
        let mut members = Vec::new();
        for (i, replica) in replicas.iter().enumerate() {
            let log = dir.join(format!("replica-{service}-{i}.log"));
            let mut member = Member {
                replica: replica.clone(),
                server: None,
                log,
            };
            if !replica.command.is_empty() {
                member
                    .start(http, ready_within)
                    .await
                    .map_err(|e| anyhow!("replica {i} of `{service}` ({}): {e}", replica.url))?;
            }
            members.push(member);
        }
        Ok(ReplicaSet {
            service: service.to_owned(),
            members,
            pool: None,
        })
    }

    /// The balancer in front of these replicas, told when one restarts.
    pub(super) fn attach(&mut self, pool: Arc<Pool>) {
        self.pool = Some(pool);
    }

    /// Stops every replica redline started.
    pub(super) async fn stop(&mut self) {
        for member in &mut self.members {
            if let Some(server) = member.server.take() {
                server.stop().await;
            }
        }
    }

    /// Stops replica `i` and starts it again; the step's times on `clock`.
    async fn restart(
        &mut self,
        i: usize,
        step: u32,
        clock: RunClock,
        http: &HttpClient,
        ready_within: Duration,
    ) -> DisruptionStep {
        let s = |at: Instant| clock.us(at) as f64 / 1e6;
        let member = &mut self.members[i];
        let mut done = DisruptionStep {
            step,
            kind: "restart".into(),
            target: format!("{}[{i}] {}", self.service, member.replica.url),
            replica: Some(i),
            started_s: s(Instant::now()),
            down_s: None,
            ended_s: None,
            error: None,
        };
        if let Some(pool) = &self.pool {
            pool.set_restarting(i, true);
        }
        if let Some(server) = member.server.take() {
            server.stop().await;
        }
        done.down_s = Some(s(Instant::now()));
        match member.start(http, ready_within).await {
            Ok(()) => done.ended_s = Some(s(Instant::now())),
            Err(e) => done.error = Some(e),
        }
        if let Some(pool) = &self.pool {
            pool.set_restarting(i, false);
        }
        done
    }
}

impl Member {
    async fn start(&mut self, http: &HttpClient, within: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut server = Server::start(&self.replica.command, &self.log)?;
        let ready: hyper::Uri = format!("{}{}", self.replica.url, self.replica.ready)
            .parse()
            .map_err(|e| format!("the ready URL is not a URL: {e}"))?;
        let waited =
            crate::launch::ready::ready(http, &ready, &mut server, start, start + within).await;
        // Kept even when not ready: a slow replica is stopped with the rest.
        self.server = Some(server);
        waited.map(|_| ())
    }
}

/// Runs the disruptions until `until` (the schedule's planned end, if it has one) or
/// `stop`; their steps.
pub(super) async fn run(
    disruptions: Vec<Disruption>,
    sets: BTreeMap<String, Arc<Mutex<ReplicaSet>>>,
    clock: RunClock,
    until: Option<Duration>,
    stop: CancellationToken,
) -> Vec<DisruptionStep> {
    if disruptions.is_empty() {
        return Vec::new();
    }
    let http = crate::client::http_client(&crate::client::Timeouts::default(), false);
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let next_step = Arc::new(std::sync::atomic::AtomicU32::new(1));
    let tasks: Vec<_> = disruptions
        .into_iter()
        .map(|disruption| {
            let set = match &disruption {
                Disruption::Restart { service, .. } => sets.get(service).cloned(),
                Disruption::Hook { .. } => None,
            };
            let (steps, next_step, http, stop) =
                (steps.clone(), next_step.clone(), http.clone(), stop.clone());
            tokio::spawn(async move {
                let mut turn = 0usize;
                let every = disruption.every();
                let mut due = clock.start() + every;
                while until.is_none_or(|until| due < clock.start() + until) {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due.into()) => {}
                        _ = stop.cancelled() => return,
                    }
                    let step = next_step.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let done = match &disruption {
                        Disruption::Restart { ready_within, .. } => {
                            let set = set.as_ref().expect("validated: a restart names a set");
                            let mut set = set.lock().await;
                            let i = turn % set.members.len();
                            turn += 1;
                            set.restart(i, step, clock, &http, *ready_within).await
                        }
                        Disruption::Hook {
                            command, timeout, ..
                        } => hook(command, step, *timeout, clock).await,
                    };
                    steps.lock().expect("steps are pushed whole").push(done);
                    // Never two at once: the next is due a period after this one ended.
                    due = (due + every).max(Instant::now());
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let mut steps = std::mem::take(&mut *steps.lock().expect("steps are pushed whole"));
    steps.sort_by_key(|s| s.step);
    steps
}

/// Runs a hook's command once (no shell), bounded by `timeout`.
async fn hook(command: &[String], step: u32, timeout: Duration, clock: RunClock) -> DisruptionStep {
    let argv: Vec<String> = command
        .iter()
        .map(|a| a.replace("{step}", &step.to_string()))
        .collect();
    let started = Instant::now();
    let mut done = DisruptionStep {
        step,
        kind: "hook".into(),
        target: argv.join(" "),
        replica: None,
        started_s: clock.us(started) as f64 / 1e6,
        down_s: None,
        ended_s: None,
        error: None,
    };
    let mut child = tokio::process::Command::new(&argv[0]);
    child
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let outcome = match child.spawn() {
        Ok(child) => match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "exited with {}: {}",
                out.status,
                crate::record::cut_to(String::from_utf8_lossy(&out.stderr).trim(), 300)
            )),
            Ok(Err(e)) => Err(format!("could not be waited for: {e}")),
            Err(_) => Err(format!(
                "still running after {:.0} s; stopped",
                timeout.as_secs_f64()
            )),
        },
        Err(e) => Err(format!("cannot start `{}`: {e}", argv[0])),
    };
    done.ended_s = Some(clock.us(Instant::now()) as f64 / 1e6);
    done.error = outcome.err();
    done
}
