//! `redline coldstart`: how long a model server takes from being started to serving
//! its first token, cold (a fresh process, the weights' pages dropped from the page
//! cache) and warm (a restart with the cache warm, or a wake from vLLM-style sleep
//! mode), timed from outside, with the memory it took.

pub mod phases;
pub mod summary;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::Uri;
use serde::Serialize;

use self::phases::{Probe, ProbeTimes};
use crate::client::{HttpClient, RunClock};
pub use crate::launch::StartKind;
use crate::launch::process::{self, Server};
use crate::launch::ready;

/// Between two drops, for pages the kernel still held (written back just now).
const DROP_RETRY: Duration = Duration::from_millis(100);
/// Drops tried before a cold start, and the share of pages that may stay.
const DROP_TRIES: u32 = 5;
const DROPPED: f64 = 0.01;

/// How warm starts are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WarmMode {
    /// Stop the server and start it again, its weights still in the page cache.
    Restart,
    /// Keep one server and put it to sleep and wake it (vLLM's `POST /sleep?level=1`
    /// and `POST /wake_up`).
    Wake,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The server's command line (no shell).
    pub command: Vec<String>,
    /// Answers 2xx when the server is ready (503 while loading).
    pub ready: Uri,
    /// The first-token probe; none for a server that is not an LLM.
    pub probe: Option<ProbeTarget>,
    /// The weights file whose pages are dropped before each cold start.
    pub weights: Option<PathBuf>,
    pub cold: u32,
    pub warm: u32,
    pub warm_mode: WarmMode,
    /// Longest a start may take, to its first token.
    pub timeout: Duration,
    /// Where each start's server log goes.
    pub logs: PathBuf,
}

/// The probe before the model is known (it may be asked of the server).
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    pub uri: Uri,
    pub model: Option<String>,
    pub max_tokens: u32,
}

/// One measured start. Times are milliseconds from the spawn (for a wake, from the
/// `POST /wake_up`).
#[derive(Debug, Clone, Serialize)]
pub struct StartRun {
    pub kind: StartKind,
    /// Share of the weights file in the page cache just before the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resident_before: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_open_ms: Option<f64>,
    /// When `POST /wake_up` answered (wakes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_ms: Option<f64>,
    pub ready_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_token_ms: Option<f64>,
    /// The probe's own time to first token, from its send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_tokens_per_s: Option<f64>,
    /// Most resident memory of the server's process group, sampled every 20 ms and
    /// with the leader's high-water mark.
    pub peak_rss_bytes: u64,
    /// Resident memory after the probe.
    pub steady_rss_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
}

/// Everything a `coldstart` measured: the runs in order, and why it stopped early.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub runs: Vec<StartRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Why GPU memory is absent, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
}

/// Runs the plan: cold and warm restarts alternate (so drift over time falls on both
/// alike); wakes come after the cold starts, on one server. Stops at the first start
/// that fails, keeping the runs before it.
pub async fn measure(plan: &Plan, mut progress: impl FnMut(&StartRun)) -> Measured {
    let http = crate::client::http_client(&crate::client::Timeouts::default(), false);
    let mut session = Session {
        plan,
        http,
        probe: None,
        measured: Measured {
            runs: Vec::new(),
            failure: None,
            gpu_note: None,
        },
        logs: 0,
    };
    let restarts = if plan.warm_mode == WarmMode::Restart {
        plan.warm
    } else {
        0
    };
    for i in 0..plan.cold.max(restarts) {
        for kind in [StartKind::Cold, StartKind::Warm] {
            let wanted = if kind == StartKind::Cold {
                plan.cold
            } else {
                restarts
            };
            if i >= wanted {
                continue;
            }
            match session.process_start(kind).await {
                Ok(run) => session.keep(run, &mut progress),
                Err(e) => return session.failed(e),
            }
        }
    }
    if plan.warm_mode == WarmMode::Wake && plan.warm > 0 {
        if let Err(e) = session.wakes(&mut progress).await {
            return session.failed(e);
        }
    }
    session.measured
}

struct Session<'a> {
    plan: &'a Plan,
    http: HttpClient,
    /// The probe, once its model is known.
    probe: Option<Probe>,
    measured: Measured,
    logs: u32,
}

impl Session<'_> {
    fn keep(&mut self, run: StartRun, progress: &mut impl FnMut(&StartRun)) {
        progress(&run);
        self.measured.runs.push(run);
    }

    fn failed(mut self, why: String) -> Measured {
        self.measured.failure = Some(why);
        self.measured
    }

    fn next_log(&mut self) -> PathBuf {
        self.logs += 1;
        self.plan.logs.join(format!("server-{}.log", self.logs))
    }

    /// A fresh process, after dropping the weights' pages for a cold start.
    async fn process_start(&mut self, kind: StartKind) -> Result<StartRun, String> {
        let resident_before = self.prepare_cache(kind).await?;
        let log = self.next_log();
        let start = Instant::now();
        let mut server = Server::start(&self.plan.command, &log)?;
        let sampler = Sampler::start(server.pid());
        let result = self.serve_first_token(&mut server, start).await;
        let peak = sampler.stop();
        let run = result.map(|(port, ready, probe)| {
            let mut run = self.run_of(kind, ready, probe, &server, peak);
            run.port_open_ms = Some(port);
            run.resident_before = resident_before;
            run
        });
        server.stop().await;
        run
    }

    /// Drops the weights' pages before a cold start; the share resident before the
    /// start either way. Pages just written or just read may survive one drop (the
    /// kernel keeps pages it is still handing around), so a cold start drops until
    /// the reading says the pages are gone, a few times at most. Reading what is
    /// resident sends the kernel for each page found missing, so a cold start's
    /// reading waits for those reads to end and the pages are dropped once more.
    async fn prepare_cache(&self, kind: StartKind) -> Result<Option<f64>, String> {
        let Some(weights) = &self.plan.weights else {
            return Ok(None);
        };
        let drop = || {
            crate::launch::pagecache::drop_pages(weights)
                .map_err(|e| format!("cannot drop {} from the page cache: {e}", weights.display()))
        };
        let resident = || {
            crate::launch::pagecache::settled_resident_fraction(weights)
                .map_err(|e| format!("cannot read {}: {e}", weights.display()))
        };
        if kind != StartKind::Cold {
            return resident();
        }
        let mut left = None;
        for _ in 0..DROP_TRIES {
            drop()?;
            left = resident()?;
            if left.is_none_or(|share| share <= DROPPED) {
                break;
            }
            tokio::time::sleep(DROP_RETRY).await;
        }
        drop()?;
        Ok(left)
    }

    async fn serve_first_token(
        &mut self,
        server: &mut Server,
        start: Instant,
    ) -> Result<(f64, f64, Option<ProbeTimes>), String> {
        let deadline = start + self.plan.timeout;
        let addr = ready_addr(&self.plan.ready).await?;
        let port = ready::port_open(addr, server, start, deadline).await?;
        let ready = ready::ready(&self.http, &self.plan.ready, server, start, deadline).await?;
        let probe = self.probe_once(start, deadline).await?;
        Ok((port, ready, probe))
    }

    async fn probe_once(
        &mut self,
        start: Instant,
        deadline: Instant,
    ) -> Result<Option<ProbeTimes>, String> {
        let Some(target) = &self.plan.probe else {
            return Ok(None);
        };
        if self.probe.is_none() {
            let model = match &target.model {
                Some(model) => model.clone(),
                None => phases::first_model(&self.http, &models_uri(&target.uri)?).await?,
            };
            self.probe = Some(Probe {
                uri: target.uri.clone(),
                model,
                max_tokens: target.max_tokens,
            });
        }
        let probe = self.probe.as_ref().expect("set above");
        let left = deadline.saturating_duration_since(Instant::now());
        let times = phases::probe(&self.http, probe, RunClock::new(start), left).await?;
        Ok(Some(times))
    }

    fn run_of(
        &mut self,
        kind: StartKind,
        ready_ms: f64,
        probe: Option<ProbeTimes>,
        server: &Server,
        sampled_peak: u64,
    ) -> StartRun {
        let memory = process::memory_of(server.pid());
        let gpu = match process::gpu_memory(&server.members()) {
            Ok(bytes) => Some(bytes),
            Err(why) => {
                self.measured.gpu_note = Some(why);
                None
            }
        };
        StartRun {
            kind,
            resident_before: None,
            port_open_ms: None,
            wake_ms: None,
            ready_ms,
            first_token_ms: probe.map(|p| p.first_token_ms),
            probe_ttft_ms: probe.map(|p| p.ttft_ms),
            decode_tokens_per_s: probe.and_then(|p| p.decode_tokens_per_s),
            peak_rss_bytes: sampled_peak.max(memory.leader_peak).max(memory.resident),
            steady_rss_bytes: memory.resident,
            gpu_memory_bytes: gpu,
        }
    }

    /// One server, put to sleep and woken `warm` times; each wake measured.
    async fn wakes(&mut self, progress: &mut impl FnMut(&StartRun)) -> Result<(), String> {
        let log = self.next_log();
        let start = Instant::now();
        let mut server = Server::start(&self.plan.command, &log)?;
        let result = self.wake_series(&mut server, start, progress).await;
        server.stop().await;
        result
    }

    async fn wake_series(
        &mut self,
        server: &mut Server,
        start: Instant,
        progress: &mut impl FnMut(&StartRun),
    ) -> Result<(), String> {
        self.serve_first_token(server, start).await?;
        let sleep = with_path(&self.plan.ready, "/sleep?level=1")?;
        let wake_up = with_path(&self.plan.ready, "/wake_up")?;
        for _ in 0..self.plan.warm {
            phases::post(&self.http, &sleep, Instant::now() + self.plan.timeout).await?;
            let sampler = Sampler::start(server.pid());
            let start = Instant::now();
            let deadline = start + self.plan.timeout;
            phases::post(&self.http, &wake_up, deadline).await?;
            let wake_ms = start.elapsed().as_secs_f64() * 1e3;
            let ready = ready::ready(&self.http, &self.plan.ready, server, start, deadline).await?;
            let probe = self.probe_once(start, deadline).await?;
            let mut run = self.run_of(StartKind::Wake, ready, probe, server, sampler.stop());
            run.wake_ms = Some(wake_ms);
            self.keep(run, progress);
        }
        Ok(())
    }
}

/// The address the ready URL names (where the port is watched).
async fn ready_addr(ready: &Uri) -> Result<std::net::SocketAddr, String> {
    let host = ready
        .host()
        .ok_or_else(|| format!("{ready} names no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = ready.port_u16().unwrap_or(match ready.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    let mut found = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    found
        .next()
        .ok_or_else(|| format!("{host} resolves to nothing"))
}

/// `uri` with its path (and query) replaced.
pub fn with_path(uri: &Uri, path: &str) -> Result<Uri, String> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path.parse().map_err(|e| format!("{path}: {e}"))?);
    Uri::from_parts(parts).map_err(|e| format!("{uri}{path}: {e}"))
}

/// `…/v1/models` beside `…/v1/chat/completions`.
fn models_uri(chat: &Uri) -> Result<Uri, String> {
    let path = chat.path();
    let base = path.strip_suffix("/chat/completions").unwrap_or("/v1");
    with_path(chat, &format!("{base}/models"))
}

/// Samples a process group's resident memory every 20 ms on a thread of its own (the
/// reads are blocking), keeping the most.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    const EVERY: Duration = Duration::from_millis(20);

    fn start(group: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (stopped, most) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                most.fetch_max(process::memory_of(group).resident, Ordering::Relaxed);
                std::thread::sleep(Sampler::EVERY);
            }
        });
        Sampler { stop, peak, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak.load(Ordering::Relaxed)
    }
}
