//! The simulator's shared state: its configuration, the engine, the tiers, the
//! script and the start-up model every handler reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::conversations::Conversations;
use super::engine::{Clock, Engine};
use super::gpu::Gpu;
use super::metrics::SimMetrics;
use super::openai::Context;
use super::profile::Profile;
use super::script::Script;
use super::startup::{Startup, StartupModel};
use super::tiers::{TierConfig, Tiers};

/// How a simulator is set up.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub profile: Profile,
    /// Model name to serve; the profile's when `None`.
    pub model: Option<String>,
    /// Seed of every answer (with the prompt).
    pub seed: u64,
    /// The vector-search and tool tiers.
    pub tiers: TierConfig,
    /// Answer chat requests from this script instead of the engine.
    pub script: Option<Arc<Script>>,
    /// Model start-up (503 until loaded, sleep mode, fragmentation); ready at once
    /// when `None`.
    pub startup: Option<StartupModel>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            profile: Profile::tiny(),
            model: None,
            seed: 0,
            tiers: TierConfig::default(),
            script: None,
            startup: None,
        }
    }
}

/// Shared by all handlers.
pub struct SimState {
    pub(super) profile: Arc<Profile>,
    pub(super) model: String,
    pub(super) seed: u64,
    pub(super) engine: Engine,
    pub(super) metrics: Arc<SimMetrics>,
    /// The GPU's memory, when the profile models one.
    pub(super) gpu: Option<Arc<Gpu>>,
    pub(super) nonce: AtomicU64,
    pub(super) clock: Clock,
    pub(super) tiers: Arc<Tiers>,
    pub(super) script: Option<Arc<Script>>,
    pub(super) startup: Option<Arc<Startup>>,
    /// The gRPC listeners' ports, once [`serve`] has them.
    pub(super) qdrant_grpc_port: std::sync::OnceLock<u16>,
    pub(super) kserve_grpc_port: std::sync::OnceLock<u16>,
    /// The Responses API's stored answers, for `previous_response_id`.
    pub(super) conversations: Conversations,
}

impl SimState {
    /// Starts the engine thread (it stops when the state is dropped) and, with a
    /// start-up model, begins loading.
    pub fn new(config: SimConfig) -> Arc<SimState> {
        let model = config.model.unwrap_or_else(|| config.profile.model.clone());
        let profile = Arc::new(config.profile);
        let gpu = profile.gpu.clone().map(Gpu::new);
        let mut metrics = SimMetrics::new(&model);
        if let Some(gpu) = &gpu {
            metrics.register_gpu(gpu);
        }
        let metrics = Arc::new(metrics);
        let clock = Clock::new();
        let tiers = Arc::new(Tiers::new(
            config.tiers,
            config.seed,
            profile.embedding_dim as usize,
        ));
        // Embed the search corpus in the background, so the first search does not
        // pay for it; a simulator no one will search never builds it.
        if tiers.config.warm_corpus {
            let warm = tiers.clone();
            std::thread::spawn(move || {
                warm.corpus();
            });
        }
        Arc::new(SimState {
            tiers,
            engine: Engine::start(profile.clone(), metrics.clone(), clock),
            profile,
            model,
            seed: config.seed,
            metrics,
            gpu,
            // Random per instance, as real servers sample: two simulators (a primary
            // and its shadow) must not give the same answers at temperature > 0.
            nonce: AtomicU64::new(rand::random::<u64>() >> 1),
            clock,
            script: config.script,
            startup: config
                .startup
                .map(|model| Startup::begin(model, config.seed)),
            qdrant_grpc_port: std::sync::OnceLock::new(),
            kserve_grpc_port: std::sync::OnceLock::new(),
            conversations: Conversations::default(),
        })
    }

    pub(super) fn model(&self) -> &str {
        &self.model
    }

    pub(super) fn profile(&self) -> &Profile {
        &self.profile
    }

    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    pub(super) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(super) fn context(&self) -> Context<'_> {
        Context {
            profile: &self.profile,
            served_model: &self.model,
            server_seed: self.seed,
            request_nonce: self.nonce.fetch_add(1, Ordering::Relaxed),
            load: self.metrics.load(),
        }
    }
}
