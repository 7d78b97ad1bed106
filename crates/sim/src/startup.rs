//! Start-up of a simulated server (`redline sim --startup`), with its own times as
//! ground truth for `redline coldstart`.
//!
//! Like llama.cpp's server, the port opens at once and `/health` answers 503 until the
//! model is loaded. Loading takes, in order:
//! - **weights**: `weights_size` at the disk's bandwidth, or at the page cache's for
//!   the share of the weights file (`--weights FILE`) already resident: a restart after
//!   a run is warm, one after `redline coldstart` dropped the file's pages is cold;
//! - **context**: three allocations (weights, KV cache, scratch buffers), 12 ms each
//!   when cold and 2 ms when warm (the source's cudaMalloc figures, §2.4);
//! - **warm-up**: a fixed time (CUDA graph capture, a first forward pass).
//!
//! vLLM's sleep mode is served too: `POST /sleep?level=1` offloads the weights to host
//! memory, `POST /wake_up` brings them back over the host link with warm allocations.
//! Each wake is a hot restart within the process, and hot restarts fragment device
//! memory: the largest free block shrinks from 38.9 GiB to 12.4 GiB over 50 of them,
//! and the share of requests whose KV allocation fails grows to 18 % (the source's
//! table), each answered 500 with "CUDA out of memory".

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

pub use redline_base::launch::StartKind;
use serde_json::json;

/// How a simulated server starts.
#[derive(Debug, Clone, PartialEq)]
pub struct StartupModel {
    /// Bytes of weights loaded at each start.
    pub weights_bytes: u64,
    /// Read bandwidth of the disk, bytes per second.
    pub disk_bytes_per_s: f64,
    /// Bandwidth from the page cache to the device, bytes per second.
    pub cache_bytes_per_s: f64,
    /// Bandwidth from host memory to the device (waking from sleep), bytes per second.
    pub host_bytes_per_s: f64,
    /// The file whose page-cache residency says whether a start is cold or warm.
    pub weights_file: Option<PathBuf>,
    /// Device allocations made at each start (weights, KV cache, scratch).
    pub allocations: u32,
    pub allocation_cold_ms: f64,
    pub allocation_warm_ms: f64,
    /// Warm-up after loading a fresh process, milliseconds.
    pub warmup_ms: f64,
    pub fragmentation: Fragmentation,
}

impl Default for StartupModel {
    /// A 7B model in fp16 on an NVMe disk and a PCIe 4 link.
    fn default() -> Self {
        StartupModel {
            weights_bytes: 14_000_000_000,
            disk_bytes_per_s: 2e9,
            cache_bytes_per_s: 12e9,
            host_bytes_per_s: 24e9,
            weights_file: None,
            allocations: 3,
            allocation_cold_ms: 12.0,
            allocation_warm_ms: 2.0,
            warmup_ms: 1000.0,
            fragmentation: Fragmentation::default(),
        }
    }
}

/// Device memory after hot restarts: the source's table (§2.4) as a geometric shrink
/// of the largest free block, and allocation failures in proportion to the loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragmentation {
    /// Largest free block after a fresh load, GiB.
    pub initial_largest_gib: f64,
    /// Largest free block after `restarts` hot restarts, GiB.
    pub largest_gib_after: f64,
    pub restarts: u32,
    /// Share of allocations that fail after `restarts` hot restarts.
    pub failure_rate_after: f64,
}

impl Default for Fragmentation {
    fn default() -> Self {
        Fragmentation {
            initial_largest_gib: 38.9,
            largest_gib_after: 12.4,
            restarts: 50,
            failure_rate_after: 0.18,
        }
    }
}

impl Fragmentation {
    /// The largest free block after `n` hot restarts, GiB.
    pub fn largest_free_gib(&self, n: u32) -> f64 {
        let shrink = self.largest_gib_after / self.initial_largest_gib;
        self.initial_largest_gib * shrink.powf(f64::from(n) / f64::from(self.restarts))
    }

    /// Share of KV allocations that fail after `n` hot restarts.
    pub fn failure_rate(&self, n: u32) -> f64 {
        let lost = self.initial_largest_gib - self.largest_free_gib(n);
        let lost_at_table = self.initial_largest_gib - self.largest_gib_after;
        (self.failure_rate_after * lost / lost_at_table).clamp(0.0, 1.0)
    }
}

/// The modelled times of one start, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phases {
    pub weights_ms: f64,
    pub context_ms: f64,
    pub warmup_ms: f64,
}

impl Phases {
    pub fn total_ms(&self) -> f64 {
        self.weights_ms + self.context_ms + self.warmup_ms
    }
}

impl StartupModel {
    /// A fresh process's start with `resident` of the weights in the page cache.
    pub fn process_start(&self, resident: f64) -> (StartKind, Phases) {
        let bytes = self.weights_bytes as f64;
        let weights_s =
            bytes * (resident / self.cache_bytes_per_s + (1.0 - resident) / self.disk_bytes_per_s);
        let (kind, allocation_ms) = if resident >= 0.5 {
            (StartKind::Warm, self.allocation_warm_ms)
        } else {
            (StartKind::Cold, self.allocation_cold_ms)
        };
        let phases = Phases {
            weights_ms: weights_s * 1e3,
            context_ms: f64::from(self.allocations) * allocation_ms,
            warmup_ms: self.warmup_ms,
        };
        (kind, phases)
    }

    /// Waking from sleep mode: weights back from host memory, warm allocations.
    pub fn wake(&self) -> Phases {
        Phases {
            weights_ms: self.weights_bytes as f64 / self.host_bytes_per_s * 1e3,
            context_ms: f64::from(self.allocations) * self.allocation_warm_ms,
            warmup_ms: 0.0,
        }
    }
}

/// One start as it happened: the simulator's ground truth.
#[derive(Debug, Clone, Serialize)]
pub struct StartTruth {
    pub kind: StartKind,
    /// Share of the weights file resident when the start began (absent without a file,
    /// or when the file system cannot say).
    pub resident_fraction: Option<f64>,
    #[serde(flatten)]
    pub phases: Phases,
    pub began_unix_us: u64,
    pub ready_unix_us: Option<u64>,
}

impl StartTruth {
    /// `ready after a cold start (0.0 % of the weights resident): weights 200.0 ms +
    /// context 36.0 ms + warm-up 100.0 ms = 336.0 ms modelled`
    fn ready_line(&self) -> String {
        let resident = match self.resident_fraction {
            Some(share) => format!(" ({:.1} % of the weights resident)", share * 100.0),
            None => String::new(),
        };
        let Phases {
            weights_ms,
            context_ms,
            warmup_ms,
        } = self.phases;
        format!(
            "ready after a {} start{resident}: weights {weights_ms:.1} ms + context {context_ms:.1} ms + warm-up {warmup_ms:.1} ms = {:.1} ms modelled",
            self.kind.as_str(),
            self.phases.total_ms()
        )
    }
}

const LOADING: u8 = 0;
const READY: u8 = 1;
const SLEEPING: u8 = 2;
const WAKING: u8 = 3;

/// A simulator's start-up state, shared by its handlers.
pub struct Startup {
    model: StartupModel,
    seed: u64,
    state: AtomicU8,
    hot_restarts: AtomicU32,
    admitted: AtomicU64,
    allocation_failures: AtomicU64,
    starts: Mutex<Vec<StartTruth>>,
    /// Serialises sleep and wake, as vLLM does.
    transition: tokio::sync::Mutex<()>,
}

impl Startup {
    /// Begins loading at once, in the background; the server answers meanwhile.
    pub fn begin(model: StartupModel, seed: u64) -> Arc<Startup> {
        let startup = Arc::new(Startup {
            model,
            seed,
            state: AtomicU8::new(LOADING),
            hot_restarts: AtomicU32::new(0),
            admitted: AtomicU64::new(0),
            allocation_failures: AtomicU64::new(0),
            starts: Mutex::new(Vec::new()),
            transition: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(startup.clone().load());
        startup
    }

    async fn load(self: Arc<Self>) {
        let began = unix_us();
        let resident = self.model.weights_file.as_deref().and_then(|path| {
            redline_base::launch::pagecache::resident_fraction(path)
                .map_err(|e| eprintln!("redline sim: cannot read {}: {e}", path.display()))
                .ok()
                .flatten()
        });
        let (kind, phases) = self.model.process_start(resident.unwrap_or(0.0));
        let index = self.note_start(kind, resident, phases, began);
        if let Some(path) = self.model.weights_file.clone() {
            // Reading the file is what makes the next start warm.
            let read = tokio::task::spawn_blocking(move || {
                redline_base::launch::pagecache::read_through(&path)
            });
            let _ = read.await;
        }
        sleep_until_ms(began, phases.total_ms()).await;
        self.finish_start(index, READY);
    }

    fn note_start(
        &self,
        kind: StartKind,
        resident: Option<f64>,
        phases: Phases,
        began: u64,
    ) -> usize {
        let mut starts = self.starts.lock().expect("start log lock");
        starts.push(StartTruth {
            kind,
            resident_fraction: resident,
            phases,
            began_unix_us: began,
            ready_unix_us: None,
        });
        starts.len() - 1
    }

    /// Marks a start done, and says on stderr what it modelled: a server's log is the
    /// ground truth a reader of `redline coldstart`'s logs compares its runs with.
    fn finish_start(&self, index: usize, state: u8) {
        let mut starts = self.starts.lock().expect("start log lock");
        let start = &mut starts[index];
        start.ready_unix_us = Some(unix_us());
        eprintln!("redline sim: {}", start.ready_line());
        self.state.store(state, Ordering::Release);
    }

    fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Acquire) {
            LOADING => "loading",
            READY => "ready",
            SLEEPING => "sleeping",
            _ => "waking",
        }
    }

    /// Whether a request to the model is answered, and if not, the answer instead.
    fn refusal(&self) -> Option<Response> {
        let message = match self.state.load(Ordering::Acquire) {
            READY => return self.allocation_failure(),
            LOADING | WAKING => "Loading model",
            _ => "the model is sleeping: POST /wake_up first",
        };
        Some(unavailable(message))
    }

    /// A request's KV allocation, failing at the fragmentation's rate (seeded, so a
    /// run's failures are the same each time).
    fn allocation_failure(&self) -> Option<Response> {
        let n = self.hot_restarts.load(Ordering::Relaxed);
        let rate = self.model.fragmentation.failure_rate(n);
        let index = self.admitted.fetch_add(1, Ordering::Relaxed);
        let draw =
            redline_base::seed::mix_seed(&[self.seed, 0xa110c, index]) as f64 / u64::MAX as f64;
        if draw >= rate {
            return None;
        }
        self.allocation_failures.fetch_add(1, Ordering::Relaxed);
        let message = format!(
            "CUDA out of memory: the KV cache allocation found no free block large enough \
             (largest free block {:.1} GiB after {n} hot restarts: fragmentation)",
            self.model.fragmentation.largest_free_gib(n)
        );
        let body =
            json!({"error": {"message": message, "type": "InternalServerError", "code": 500}});
        Some((StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response())
    }

    fn truth(&self) -> serde_json::Value {
        let n = self.hot_restarts.load(Ordering::Relaxed);
        let fragmentation = &self.model.fragmentation;
        json!({
            "state": self.state_name(),
            "starts": *self.starts.lock().expect("start log lock"),
            "hot_restarts": n,
            "largest_free_gib": fragmentation.largest_free_gib(n),
            "allocation_failure_rate": fragmentation.failure_rate(n),
            "requests_admitted": self.admitted.load(Ordering::Relaxed),
            "allocation_failures": self.allocation_failures.load(Ordering::Relaxed),
        })
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Sleeps until `ms` after `began` (Unix µs): the phases are timed from the start, so
/// reading the weights file overlaps the modelled weight load instead of adding to it.
async fn sleep_until_ms(began: u64, ms: f64) {
    let target = began + (ms * 1e3) as u64;
    let now = unix_us();
    if target > now {
        tokio::time::sleep(Duration::from_micros(target - now)).await;
    }
}

fn unavailable(message: &str) -> Response {
    let body = json!({"error": {"code": 503, "message": message, "type": "unavailable_error"}});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// Middleware in front of the model's routes: 503 until loaded and while asleep, and
/// allocation failures once fragmented.
pub async fn gate(State(startup): State<Arc<Startup>>, request: Request, next: Next) -> Response {
    match startup.refusal() {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// `/health`, `/sleep`, `/wake_up`, `/is_sleeping` and `GET /redline/startup`.
pub fn routes(startup: Arc<Startup>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/sleep", post(sleep))
        .route("/wake_up", post(wake_up))
        .route("/is_sleeping", get(is_sleeping))
        .route("/redline/startup", get(truth))
        .with_state(startup)
}

async fn health(State(startup): State<Arc<Startup>>) -> Response {
    match startup.state.load(Ordering::Acquire) {
        READY => axum::Json(json!({"status": "ok"})).into_response(),
        LOADING | WAKING => unavailable("Loading model"),
        _ => unavailable("the model is sleeping"),
    }
}

/// The `level` of `POST /sleep?level=N`, when given (vLLM's default is 1).
fn sleep_level(uri: &Uri) -> Option<String> {
    let query = uri.query().unwrap_or("");
    let level = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("level="));
    level.map(str::to_owned)
}

/// `POST /sleep?level=1`: weights offloaded to host memory, KV cache discarded.
async fn sleep(State(startup): State<Arc<Startup>>, uri: Uri) -> Response {
    let level = sleep_level(&uri);
    if level.as_deref().is_some_and(|l| l != "1") {
        let level = level.unwrap_or_default();
        let message = format!(
            "sleep level {level} is not simulated: only level 1 (weights kept in host memory)"
        );
        let body = json!({"error": {"message": message, "code": 400}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let _one = startup.transition.lock().await;
    match startup.state.load(Ordering::Acquire) {
        READY | SLEEPING => {
            startup.state.store(SLEEPING, Ordering::Release);
            StatusCode::OK.into_response()
        }
        _ => unavailable("Loading model"),
    }
}

/// `POST /wake_up`: answers when the weights are back (as vLLM's does); a hot restart.
async fn wake_up(State(startup): State<Arc<Startup>>) -> Response {
    let _one = startup.transition.lock().await;
    if startup.state.load(Ordering::Acquire) != SLEEPING {
        return StatusCode::OK.into_response();
    }
    startup.state.store(WAKING, Ordering::Release);
    let began = unix_us();
    let phases = startup.model.wake();
    let index = startup.note_start(StartKind::Wake, None, phases, began);
    sleep_until_ms(began, phases.total_ms()).await;
    startup.hot_restarts.fetch_add(1, Ordering::Relaxed);
    startup.finish_start(index, READY);
    StatusCode::OK.into_response()
}

async fn is_sleeping(State(startup): State<Arc<Startup>>) -> Response {
    let sleeping = startup.state.load(Ordering::Acquire) == SLEEPING;
    axum::Json(json!({"is_sleeping": sleeping})).into_response()
}

/// `GET /redline/startup`: every start's modelled phases and when it was ready, the
/// hot restarts so far and what they did to device memory.
async fn truth(State(startup): State<Arc<Startup>>) -> Response {
    axum::Json(startup.truth()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fragmentation_model_reproduces_the_source_table() {
        let f = Fragmentation::default();
        assert!((f.largest_free_gib(0) - 38.9).abs() < 1e-9);
        assert!((f.largest_free_gib(50) - 12.4).abs() < 1e-9);
        assert_eq!(f.failure_rate(0), 0.0);
        assert!((f.failure_rate(50) - 0.18).abs() < 1e-9);
        let rates: Vec<f64> = (0..=60).map(|n| f.failure_rate(n)).collect();
        assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
    }

    #[test]
    fn cold_warm_and_wake_phases_follow_the_bandwidths() {
        let model = StartupModel {
            weights_bytes: 1_000_000_000,
            ..StartupModel::default()
        };
        let (kind, cold) = model.process_start(0.0);
        assert_eq!(kind, StartKind::Cold);
        assert!((cold.weights_ms - 500.0).abs() < 1e-6);
        assert!((cold.context_ms - 36.0).abs() < 1e-9);
        let (kind, warm) = model.process_start(1.0);
        assert_eq!(kind, StartKind::Warm);
        assert!((warm.weights_ms - 1e3 / 12.0).abs() < 1e-6);
        assert!((warm.context_ms - 6.0).abs() < 1e-9);
        let wake = model.wake();
        assert!((wake.weights_ms - 1e3 / 24.0).abs() < 1e-6);
        assert_eq!(wake.warmup_ms, 0.0);
    }
}
