//! One GPU's memory, shared by every modality the simulator serves: each request
//! holds its modality's footprint while it runs, mixing modalities fragments memory
//! (the source's +37 % when text, images and audio run together), and a request that
//! does not fit waits for memory and then fails with CUDA's out-of-memory error. Its
//! use is exported as DCGM's `DCGM_FI_DEV_FB_USED` / `DCGM_FI_DEV_FB_FREE` and served
//! as `nvidia-smi` prints it, so a controller has something real-looking to read.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// The modalities whose requests hold GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modality {
    Text,
    Image,
    Audio,
}

impl Modality {
    /// The modality a route's requests are, if it is one that holds memory.
    pub fn of_path(path: &str) -> Option<Modality> {
        match path {
            "/v1/chat/completions" | "/v1/completions" => Some(Modality::Text),
            "/v1/images/generations" => Some(Modality::Image),
            "/v1/audio/transcriptions" | "/v1/audio/speech" => Some(Modality::Audio),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A GPU's memory and what each modality's request takes of it (the `7b-multimodal`
/// profile's defaults are the source document's figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuSpec {
    /// Framebuffer memory, GiB (an 80 GB A100 or H100).
    pub total_gib: f64,
    /// Held whatever runs (weights, the runtime), GiB.
    pub resident_gib: f64,
    /// Per running text request (Llama-3-8B FP16), GiB.
    pub text_gib: f64,
    /// Per running image request (SDXL), GiB.
    pub image_gib: f64,
    /// Per running audio request (Whisper large-v3's peak), GiB.
    pub audio_gib: f64,
    /// Extra use, as a share of what requests hold, when all three modalities run at
    /// once; two at once take half of it.
    pub fragmentation: f64,
    /// How long a request that does not fit waits for memory before it fails, ms.
    pub wait_ms: u64,
}

impl Default for GpuSpec {
    fn default() -> Self {
        GpuSpec {
            total_gib: 80.0,
            resident_gib: 0.0,
            text_gib: 12.0,
            image_gib: 8.0,
            audio_gib: 6.0,
            fragmentation: 0.37,
            wait_ms: 2_000,
        }
    }
}

impl GpuSpec {
    fn footprint(&self, modality: Modality) -> f64 {
        match modality {
            Modality::Text => self.text_gib,
            Modality::Image => self.image_gib,
            Modality::Audio => self.audio_gib,
        }
    }

    /// Memory in use, GiB, with `running` requests of each modality.
    pub fn used_gib(&self, running: [u32; 3]) -> f64 {
        let modalities = [Modality::Text, Modality::Image, Modality::Audio];
        let held: f64 = modalities
            .iter()
            .map(|m| self.footprint(*m) * f64::from(running[m.index()]))
            .sum();
        let mixed = running.iter().filter(|n| **n > 0).count().saturating_sub(1);
        self.resident_gib + held * (1.0 + self.fragmentation * mixed as f64 / 2.0)
    }

    pub fn check(&self) -> Result<(), String> {
        let sizes = [
            self.resident_gib,
            self.text_gib,
            self.image_gib,
            self.audio_gib,
        ];
        if !self.total_gib.is_finite()
            || self.total_gib <= 0.0
            || sizes.iter().any(|s| !s.is_finite() || *s < 0.0)
        {
            return Err("gpu memory sizes must be finite, total_gib positive".into());
        }
        if !(0.0..=10.0).contains(&self.fragmentation) {
            return Err("gpu fragmentation must be between 0 and 10".into());
        }
        Ok(())
    }
}

const MIB_PER_GIB: f64 = 1024.0;

/// The GPU: what runs on it, and its gauges.
pub struct Gpu {
    spec: GpuSpec,
    running: Mutex<[u32; 3]>,
    freed: Notify,
    used_mib: Gauge,
    free_mib: Gauge,
    ooms: Counter,
    /// The most memory ever in use, MiB.
    peak_mib: AtomicI64,
    out_of_memory: AtomicU64,
}

/// A request's hold on its memory, given back when dropped.
pub struct Hold {
    gpu: Arc<Gpu>,
    modality: Modality,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut running = self.gpu.running.lock().expect("not poisoned");
        running[self.modality.index()] -= 1;
        self.gpu.publish(*running);
        drop(running);
        self.gpu.freed.notify_waiters();
    }
}

/// Why a request got no memory: what it asked for and what was free.
#[derive(Debug)]
pub struct OutOfMemory {
    /// The modality's footprint.
    pub asked_gib: f64,
    /// What it would add with fragmentation (mixing modalities takes more).
    pub needed_gib: f64,
    pub free_gib: f64,
    pub total_gib: f64,
}

impl Gpu {
    pub fn new(spec: GpuSpec) -> Arc<Gpu> {
        let gpu = Arc::new(Gpu {
            spec,
            running: Mutex::new([0; 3]),
            freed: Notify::new(),
            used_mib: Gauge::default(),
            free_mib: Gauge::default(),
            ooms: Counter::default(),
            peak_mib: AtomicI64::new(0),
            out_of_memory: AtomicU64::new(0),
        });
        gpu.publish([0; 3]);
        gpu
    }

    /// The gauges, for the simulator's `/metrics`: used and free MiB, out-of-memory
    /// failures.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let gpu = registry.sub_registry_with_labels(
            [
                ("gpu".into(), "0".into()),
                ("modelName".into(), "redline simulated GPU".into()),
            ]
            .into_iter(),
        );
        gpu.register(
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB)",
            self.used_mib.clone(),
        );
        gpu.register(
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB)",
            self.free_mib.clone(),
        );
        gpu.register(
            "redline_sim_gpu_out_of_memory",
            "Requests failed for want of GPU memory",
            self.ooms.clone(),
        );
    }

    /// Holds `modality`'s footprint until the hold is dropped, waiting up to
    /// `wait_ms` for memory to be freed.
    pub async fn hold(self: &Arc<Gpu>, modality: Modality) -> Result<Hold, OutOfMemory> {
        let deadline = Instant::now() + Duration::from_millis(self.spec.wait_ms);
        loop {
            let freed = self.freed.notified();
            if let Some(hold) = self.try_hold(modality) {
                return Ok(hold);
            }
            if tokio::time::timeout_at(deadline.into(), freed)
                .await
                .is_err()
            {
                return self.try_hold(modality).ok_or_else(|| self.refuse(modality));
            }
        }
    }

    fn try_hold(self: &Arc<Gpu>, modality: Modality) -> Option<Hold> {
        let mut running = self.running.lock().expect("not poisoned");
        let mut after = *running;
        after[modality.index()] += 1;
        if self.spec.used_gib(after) > self.spec.total_gib {
            return None;
        }
        *running = after;
        self.publish(after);
        Some(Hold {
            gpu: self.clone(),
            modality,
        })
    }

    fn refuse(&self, modality: Modality) -> OutOfMemory {
        self.ooms.inc();
        self.out_of_memory.fetch_add(1, Ordering::Relaxed);
        let running = *self.running.lock().expect("not poisoned");
        let mut after = running;
        after[modality.index()] += 1;
        let used = self.spec.used_gib(running);
        OutOfMemory {
            asked_gib: self.spec.footprint(modality),
            needed_gib: self.spec.used_gib(after) - used,
            free_gib: (self.spec.total_gib - used).max(0.0),
            total_gib: self.spec.total_gib,
        }
    }

    fn publish(&self, running: [u32; 3]) {
        let used = (self.spec.used_gib(running) * MIB_PER_GIB).round() as i64;
        let total = (self.spec.total_gib * MIB_PER_GIB).round() as i64;
        self.used_mib.set(used);
        self.free_mib.set(total - used);
        self.peak_mib.fetch_max(used, Ordering::Relaxed);
    }

    /// `memory.used, memory.total` in MiB, as `nvidia-smi --query-gpu=memory.used,
    /// memory.total --format=csv,noheader,nounits` prints them.
    pub fn nvidia_smi(&self) -> String {
        let total = (self.spec.total_gib * MIB_PER_GIB).round() as i64;
        format!("{}, {total}\n", self.used_mib.get())
    }

    /// The most memory in use so far and the requests refused for want of it.
    pub fn peak_and_refusals(&self) -> (i64, u64) {
        (
            self.peak_mib.load(Ordering::Relaxed),
            self.out_of_memory.load(Ordering::Relaxed),
        )
    }
}

/// Middleware in front of the model's routes: a text, image or audio request holds
/// its memory from arrival until its answer's last byte has gone (or the client left);
/// one that gets none is answered 500 with CUDA's message, as vLLM passes it on.
pub async fn gate(State(gpu): State<Arc<Gpu>>, request: Request, next: Next) -> Response {
    let Some(modality) = Modality::of_path(request.uri().path()) else {
        return next.run(request).await;
    };
    let hold = match gpu.hold(modality).await {
        Ok(hold) => hold,
        Err(refused) => {
            let message = format!(
                "CUDA out of memory. Tried to allocate {:.2} GiB ({:.2} GiB with fragmentation). GPU 0 has a total capacity of {:.2} GiB of which {:.2} GiB is free.",
                refused.asked_gib, refused.needed_gib, refused.total_gib, refused.free_gib
            );
            let body = serde_json::json!({"error": {
                "message": message, "type": "InternalServerError", "param": null, "code": 500,
            }});
            return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
        }
    };
    let (parts, body) = next.run(request).await.into_parts();
    let held = body.into_data_stream().map(move |chunk| {
        let _holding = &hold;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(held))
}

/// `GET /redline/nvidia-smi`: what `nvidia-smi --query-gpu=memory.used,memory.total
/// --format=csv,noheader,nounits` would print.
pub async fn nvidia_smi(State(gpu): State<Arc<Gpu>>) -> String {
    gpu.nvidia_smi()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixing_modalities_fragments_memory_as_the_source_says() {
        let spec = GpuSpec::default();
        assert_eq!(spec.used_gib([2, 0, 0]), 24.0);
        assert!((spec.used_gib([1, 1, 1]) - 26.0 * 1.37).abs() < 1e-9);
        assert!((spec.used_gib([1, 1, 0]) - 20.0 * 1.185).abs() < 1e-9);
    }

    #[tokio::test]
    async fn a_request_that_does_not_fit_waits_then_fails() {
        let gpu = Gpu::new(GpuSpec {
            total_gib: 30.0,
            wait_ms: 50,
            ..GpuSpec::default()
        });
        let a = gpu.hold(Modality::Text).await.unwrap();
        let _b = gpu.hold(Modality::Text).await.unwrap();
        assert_eq!(gpu.nvidia_smi(), "24576, 30720\n");
        let started = Instant::now();
        let Err(refused) = gpu.hold(Modality::Text).await else {
            panic!("a third 12 GiB request does not fit in 30 GiB")
        };
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!((refused.free_gib - 6.0).abs() < 1e-9);
        let waiter = tokio::spawn({
            let gpu = gpu.clone();
            async move { gpu.hold(Modality::Text).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(a);
        assert!(waiter.await.unwrap(), "a freed hold lets a waiter in");
        assert_eq!(gpu.peak_and_refusals(), (24576, 1));
    }
}
