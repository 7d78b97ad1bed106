//! The simulator's HTTP server: vLLM's OpenAI-compatible API over the engine.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use futures_util::StreamExt;
use hyper::body::Frame;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;

use super::embed::embed;
use super::engine::{Clock, Engine, Event};
use super::gpu::{self, Gpu};
use super::media;
use super::metrics::SimMetrics;
use super::native;
use super::openai::{self, ApiError, Context, Plan};
use super::profile::Profile;
use super::scheduler::Timeline;
use super::script::Script;
use super::startup::{self, Startup, StartupModel};
use super::text::FinishReason;
use super::tiers::{self, TierConfig, Tiers};
use crate::tokenizer::sim as sim_tokenizer;

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

/// Largest request body accepted: long prompts are megabytes at most.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Shared by all handlers.
pub struct SimState {
    profile: Arc<Profile>,
    model: String,
    seed: u64,
    engine: Engine,
    metrics: Arc<SimMetrics>,
    /// The GPU's memory, when the profile models one.
    gpu: Option<Arc<Gpu>>,
    nonce: AtomicU64,
    clock: Clock,
    tiers: Arc<Tiers>,
    script: Option<Arc<Script>>,
    startup: Option<Arc<Startup>>,
    /// The gRPC listeners' ports, once [`serve`] has them.
    qdrant_grpc_port: std::sync::OnceLock<u16>,
    kserve_grpc_port: std::sync::OnceLock<u16>,
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
        }
    }
}

/// The router, for tests that call it without a socket.
pub fn app(state: Arc<SimState>) -> Router {
    let tiers = Router::new()
        .route(
            "/collections/{collection}/points/{verb}",
            post(tiers::search),
        )
        .route("/tools/{name}", post(tiers::tool))
        .route("/redline/tiers", get(tiers::counts).put(tiers::configure))
        .with_state(state.tiers.clone());
    let llamacpp = state.profile.server == super::profile::ServerKind::Llamacpp;
    let router = Router::new();
    // llama.cpp's server and llama-cpp-python's: the server's own tokenizer.
    let router = if llamacpp {
        router
            .route("/tokenize", post(tokenize))
            .route("/extras/tokenize", post(tokenize))
    } else {
        router
    };
    let model = router
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/images/generations", post(media::images))
        .route("/v1/audio/transcriptions", post(media::transcriptions))
        .route("/v1/audio/speech", post(media::speech))
        .route("/redline/images/{size}/{file}", get(media::image_file))
        .route("/v1/models", get(models))
        .route("/", post(native::tgi_compat))
        .route("/generate", post(native::tgi_generate))
        .route("/generate_stream", post(native::tgi_generate_stream))
        .route("/info", get(native::tgi_info))
        .route("/api/chat", post(native::ollama_chat))
        .route("/api/generate", post(native::ollama_generate))
        .route("/api/tags", get(native::ollama_tags))
        .route("/api/version", get(native::ollama_version))
        .route("/v2/models/{model}/generate", post(native::kserve_generate))
        .route(
            "/v2/models/{model}/generate_stream",
            post(native::kserve_generate_stream),
        )
        .route("/v2/models/{model}", get(native::kserve_model))
        .route("/v2/models/{model}/ready", get(native::kserve_model))
        .route("/v2/health/ready", get(native::kserve_health))
        .route("/v2/health/live", get(native::kserve_health));
    let model = match &state.profile.planted {
        Some(planted) => model.route_layer(axum::middleware::from_fn_with_state(
            Arc::new(planted.clone()),
            super::planted::plant,
        )),
        None => model,
    };
    let (model, gpu) = match &state.gpu {
        Some(g) => (
            model.route_layer(axum::middleware::from_fn_with_state(g.clone(), gpu::gate)),
            Router::new()
                .route("/redline/nvidia-smi", get(gpu::nvidia_smi))
                .with_state(g.clone()),
        ),
        None => (model, Router::new()),
    };
    let (model, health) = match &state.startup {
        Some(startup) => (
            model.route_layer(axum::middleware::from_fn_with_state(
                startup.clone(),
                startup::gate,
            )),
            startup::routes(startup.clone()),
        ),
        None => (
            model,
            Router::new().route("/health", get(|| async { StatusCode::OK })),
        ),
    };
    model
        .route("/metrics", get(metrics))
        .route("/redline/stall", post(stall))
        .route("/redline/truth", get(truth).delete(reset_truth))
        .route("/redline/script", get(script_requests))
        .route("/redline/endpoints", get(endpoints))
        .with_state(state)
        .merge(tiers)
        .merge(health)
        .merge(gpu)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// Most HTTP/2 streams one connection may carry: enough for a whole benchmark's
/// streams over one connection, still a bound.
const MAX_STREAMS_PER_CONNECTION: u32 = 16_384;

/// The simulator's gRPC listeners, each on a port of its own as the real servers'
/// are (Qdrant's 6334, Triton's 8001).
#[derive(Default)]
pub struct GrpcListeners {
    pub qdrant: Option<TcpListener>,
    pub kserve: Option<TcpListener>,
}

/// Serves HTTP/1.1 and HTTP/2 (prior knowledge, or ALPN over TLS) on a bound listener,
/// and the gRPC APIs on theirs, until `shutdown` completes, then lets open connections
/// finish.
pub async fn serve(
    listener: TcpListener,
    grpc: GrpcListeners,
    tls: Option<crate::net::ServerTls>,
    config: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = SimState::new(config);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut served = Vec::new();
    let routers = [
        (
            grpc.qdrant,
            &state.qdrant_grpc_port,
            super::grpc::router(state.tiers.clone()),
        ),
        (
            grpc.kserve,
            &state.kserve_grpc_port,
            super::kserve_grpc::router(state.clone()),
        ),
    ];
    for (listener, port, router) in routers {
        let Some(listener) = listener else { continue };
        let _ = port.set(listener.local_addr()?.port());
        let done = stop.clone().cancelled_owned();
        served.push(tokio::spawn(serve_router(
            listener,
            tls.clone(),
            router,
            done,
        )));
    }
    let stopping = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopping.cancel();
    });
    serve_router(listener, tls, app(state), stop.cancelled_owned()).await;
    for grpc in served {
        let _ = grpc.await;
    }
    Ok(())
}

async fn serve_router(
    listener: TcpListener,
    tls: Option<crate::net::ServerTls>,
    router: Router,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = ConnectionBuilder::new(TokioExecutor::new());
    // hyper's default of 200 streams per connection would queue a large benchmark's
    // streams behind each other on one HTTP/2 connection.
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    crate::net::accept_loop(
        listener,
        tls,
        builder,
        || TowerToHyperService::new(router.clone()),
        shutdown,
        None,
    )
    .await;
}

/// A simulator running in this process on an ephemeral loopback port (a spec's
/// `url: embedded`). Stops when dropped.
pub struct EmbeddedSim {
    pub addr: std::net::SocketAddr,
    /// Qdrant's gRPC API.
    pub qdrant_grpc_addr: std::net::SocketAddr,
    /// KServe v2's gRPC API (Triton's).
    pub kserve_grpc_addr: std::net::SocketAddr,
    https: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl EmbeddedSim {
    pub async fn start(config: SimConfig) -> std::io::Result<EmbeddedSim> {
        EmbeddedSim::start_with(config, None).await
    }

    /// Served over TLS when `tls` is given (`base_url` is then https).
    pub async fn start_with(
        config: SimConfig,
        tls: Option<crate::net::ServerTls>,
    ) -> std::io::Result<EmbeddedSim> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let qdrant = TcpListener::bind(("127.0.0.1", 0)).await?;
        let kserve = TcpListener::bind(("127.0.0.1", 0)).await?;
        let (qdrant_grpc_addr, kserve_grpc_addr) = (qdrant.local_addr()?, kserve.local_addr()?);
        let grpc = GrpcListeners {
            qdrant: Some(qdrant),
            kserve: Some(kserve),
        };
        let https = tls.is_some();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(serve(listener, grpc, tls, config, async {
            let _ = stopped.await;
        }));
        Ok(EmbeddedSim {
            addr,
            qdrant_grpc_addr,
            kserve_grpc_addr,
            https,
            stop: Some(stop),
        })
    }

    pub fn base_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Where Qdrant's gRPC clients connect.
    pub fn qdrant_grpc_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.qdrant_grpc_addr)
    }

    /// Where KServe v2's gRPC clients (Triton's) connect.
    pub fn kserve_grpc_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.kserve_grpc_addr)
    }
}

impl Drop for EmbeddedSim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub(super) fn error_response(error: ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, &error.body())
}

pub(super) fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        serde_json::to_string(body).expect("response bodies serialize"),
    )
        .into_response()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn chat_completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    if let Some(script) = &state.script {
        let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, body) = script.answer(request, &state.model);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, body).into_response();
    }
    let arrival_ns = state.clock.now_ns();
    let plan =
        openai::parse(&body).and_then(|request| openai::plan_chat(request, &state.context()));
    openai_answer(
        state,
        plan,
        OpenAiApi::Chat,
        arrival_ns,
        request_hash(&body),
    )
    .await
}

/// `POST /tokenize {"content": …}` (llama.cpp) or `/extras/tokenize {"input": …}`
/// (llama-cpp-python): `{"tokens": [ids]}` by the simulator's tokenizer.
async fn tokenize(body: Bytes) -> Response {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({"error": "not JSON"}),
        );
    };
    let Some(text) = value["content"].as_str().or(value["input"].as_str()) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({"error": "needs `content` (or `input`)"}),
        );
    };
    let tokens: Vec<u32> = crate::tokenizer::sim::Pieces::new(text)
        .map(crate::tokenizer::sim::piece_id)
        .collect();
    json_response(StatusCode::OK, &serde_json::json!({ "tokens": tokens }))
}

/// FNV-1a of a request body: ground truth of exactly what arrived, so two runs can be
/// shown to have sent the same bytes.
fn request_hash(body: &[u8]) -> u64 {
    crate::seed::fnv64(body)
}

async fn completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let arrival_ns = state.clock.now_ns();
    let plan =
        openai::parse(&body).and_then(|request| openai::plan_completion(request, &state.context()));
    openai_answer(
        state,
        plan,
        OpenAiApi::Completions,
        arrival_ns,
        request_hash(&body),
    )
    .await
}

/// The OpenAI APIs the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenAiApi {
    Chat,
    Completions,
}

async fn openai_answer(
    state: Arc<SimState>,
    plan: Result<Plan, ApiError>,
    api: OpenAiApi,
    arrival_ns: u64,
    request_hash: u64,
) -> Response {
    let plan = match plan {
        Ok(plan) => plan,
        Err(error) => return error_response(error),
    };
    let id = state.nonce.fetch_add(1, Ordering::Relaxed);
    let chunks = Chunks::new(api, &state.model, id, &plan);
    answer(&state, plan, chunks, arrival_ns, request_hash).await
}

/// How an API writes an answer: event by event as it streams, or whole.
pub(super) trait Format: Send + 'static {
    /// The `Content-Type` of a streamed answer.
    fn stream_type(&self) -> &'static str;
    /// The event carrying one token; `None` when the API holds tokens back (Ollama's
    /// tool calls come whole).
    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes>;
    /// The last events: finish reason, counts, and the ground truth `truth`.
    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes;
    /// An in-band error for an engine that stopped mid-stream.
    fn broken(&self) -> Bytes;
    /// A whole (non-streamed) answer.
    fn whole(&self, text: &str, reason: FinishReason, timeline: &Timeline) -> Response;
    /// Trailers after a streamed answer (gRPC's status).
    fn trailers(&self) -> Option<HeaderMap> {
        None
    }
}

/// Runs a planned request on the engine and answers it in `format`, streamed when the
/// plan says so.
pub(super) async fn answer(
    state: &SimState,
    plan: Plan,
    format: impl Format,
    arrival_ns: u64,
    request_hash: u64,
) -> Response {
    if plan.stream {
        let (content_type, trailers) = (format.stream_type(), format.trailers());
        let events = stream_events(state, plan, format, arrival_ns, request_hash);
        let body = match trailers {
            None => Body::from_stream(events),
            Some(trailers) => {
                let data = events.map(|bytes| bytes.map(Frame::data));
                let end = futures_util::stream::once(async { Ok(Frame::trailers(trailers)) });
                Body::new(http_body_util::StreamBody::new(data.chain(end)))
            }
        };
        return Response::builder()
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CACHE_CONTROL, "no-cache")
            .body(body)
            .expect("static headers are valid");
    }
    let events = state.engine.submit(plan.prompt, plan.generator, arrival_ns);
    collect_answer(events, format, request_hash).await
}

/// A planned, streamed request's events on the engine, in `format`.
pub(super) fn stream_events<F: Format>(
    state: &SimState,
    plan: Plan,
    format: F,
    arrival_ns: u64,
    request_hash: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + use<F> {
    let events = state.engine.submit(plan.prompt, plan.generator, arrival_ns);
    stream_answer(events, format, request_hash, state.clock)
}

/// What the final answer of a non-streaming request needs.
async fn collect_answer(
    mut events: UnboundedReceiver<Event>,
    format: impl Format,
    request_hash: u64,
) -> Response {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Token { delta, .. } => text.push_str(&delta),
            Event::Finished { reason, timeline } => {
                let mut response = format.whole(&text, reason, &timeline);
                truth_headers(response.headers_mut(), &timeline);
                response
                    .headers_mut()
                    .insert("x-redline-request-hash", HeaderValue::from(request_hash));
                return response;
            }
        }
    }
    error_response(engine_gone())
}

pub(super) fn engine_gone() -> ApiError {
    ApiError {
        status: 500,
        kind: "InternalServerError",
        message: "the engine stopped before the request finished".into(),
    }
}

fn truth_headers(headers: &mut HeaderMap, t: &Timeline) {
    let us = |ns: u64| HeaderValue::from(ns / 1_000);
    headers.insert("x-redline-arrival-us", us(t.arrival_ns));
    headers.insert("x-redline-scheduled-us", us(t.scheduled_ns));
    headers.insert("x-redline-first-token-us", us(t.first_token_ns));
    headers.insert("x-redline-finish-us", us(t.finish_ns));
    headers.insert("x-redline-preemptions", HeaderValue::from(t.preemptions));
    headers.insert(
        "x-redline-cached-tokens",
        HeaderValue::from(t.cached_prompt_tokens),
    );
    headers.insert(
        "x-redline-prompt-tokens",
        HeaderValue::from(t.prompt_tokens),
    );
    headers.insert(
        "x-redline-completion-tokens",
        HeaderValue::from(t.completion_tokens),
    );
}

/// The ground truth object carried by the final event, with when the first token's
/// event was handed to the connection (engine ns) when there was one.
fn truth_json(t: &Timeline, request_hash: u64, first_token_sent_ns: Option<u64>) -> Value {
    let mut truth = json!({
        "request_hash": request_hash,
        "arrival_us": t.arrival_ns / 1_000,
        "scheduled_us": t.scheduled_ns / 1_000,
        "first_token_us": t.first_token_ns / 1_000,
        "finish_us": t.finish_ns / 1_000,
        "preempted": t.preemptions > 0,
        "preemptions": t.preemptions,
        "cached_prompt_tokens": t.cached_prompt_tokens,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
    });
    if let Some(ns) = first_token_sent_ns {
        truth["first_token_sent_us"] = json!(ns / 1_000);
    }
    truth
}

fn usage_json(t: &Timeline) -> Value {
    json!({
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "total_tokens": t.prompt_tokens + t.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": t.cached_prompt_tokens},
    })
}

fn stream_answer<F: Format>(
    events: UnboundedReceiver<Event>,
    format: F,
    request_hash: u64,
    clock: Clock,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let start: Option<(UnboundedReceiver<Event>, F, Option<u64>)> = Some((events, format, None));
    futures_util::stream::unfold(start, move |state| async move {
        let (mut events, mut format, mut first_token_sent_ns) = state?;
        loop {
            match events.recv().await {
                Some(Event::Token { index, delta }) => {
                    let Some(bytes) = format.token(index, &delta) else {
                        continue;
                    };
                    // The connection writes what this stream yields when it polls it:
                    // the first token's event leaves the server about now.
                    first_token_sent_ns.get_or_insert_with(|| clock.now_ns());
                    return Some((Ok(bytes), Some((events, format, first_token_sent_ns))));
                }
                Some(Event::Finished { reason, timeline }) => {
                    let truth = truth_json(&timeline, request_hash, first_token_sent_ns);
                    return Some((Ok(format.finish(reason, &timeline, truth)), None));
                }
                None => return Some((Ok(format.broken()), None)),
            }
        }
    })
}

/// `text` as a JSON string literal, escaped, without building a `Value`.
pub(super) fn json_string(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    serde_json::to_writer(&mut out, text).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Formats the chunks of one answer. The constant head of every chunk is rendered
/// once, so a token costs one escape of its text.
struct Chunks {
    api: OpenAiApi,
    id: String,
    created: u64,
    model: String,
    head: String,
    tool_call: Option<super::text::ToolCall>,
    include_usage: bool,
}

impl Chunks {
    fn new(api: OpenAiApi, model: &str, n: u64, plan: &Plan) -> Chunks {
        let (id, object) = match api {
            OpenAiApi::Chat => (format!("chatcmpl-{n:016x}"), "chat.completion.chunk"),
            OpenAiApi::Completions => (format!("cmpl-{n:016x}"), "text_completion"),
        };
        let created = unix_now();
        let head = format!(
            "data: {{\"id\":{},\"object\":\"{object}\",\"created\":{created},\"model\":{},\"choices\":[{{\"index\":0,",
            Value::from(id.as_str()),
            Value::from(model)
        );
        Chunks {
            api,
            id,
            created,
            model: model.to_owned(),
            head,
            tool_call: plan.tool_call.clone(),
            include_usage: plan.include_usage,
        }
    }

    fn envelope(&self, choices: Vec<Value>) -> Value {
        let object = match self.api {
            OpenAiApi::Chat => "chat.completion.chunk",
            OpenAiApi::Completions => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }

    /// A non-streaming response body.
    fn full_body(&self, text: &str, reason: FinishReason, timeline: &Timeline) -> Value {
        let choice = match (self.api, &self.tool_call) {
            (OpenAiApi::Chat, Some(call)) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": text}}
                ]},
                "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null
            }),
            (OpenAiApi::Chat, None) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null
            }),
            (OpenAiApi::Completions, _) => json!({
                "index": 0, "text": text, "logprobs": null,
                "finish_reason": reason.as_str(), "stop_reason": null
            }),
        };
        let object = match self.api {
            OpenAiApi::Chat => "chat.completion",
            OpenAiApi::Completions => "text_completion",
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice], "usage": usage_json(timeline),
        })
    }
}

impl Format for Chunks {
    fn stream_type(&self) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        let escaped = json_string(delta);
        let mut out = String::with_capacity(self.head.len() + escaped.len() + 160);
        if index == 0 && self.api == OpenAiApi::Chat {
            // vLLM sends the role with the first output, not before it.
            out.push_str(&self.head);
            out.push_str("\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
        }
        out.push_str(&self.head);
        match (self.api, &self.tool_call) {
            (OpenAiApi::Chat, Some(call)) if index == 0 => {
                out.push_str(&format!(
                    "\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{escaped}}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    Value::from(call.id.as_str()),
                    Value::from(call.name.as_str())
                ));
            }
            (OpenAiApi::Chat, Some(_)) => {
                out.push_str(
                    "\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":",
                );
                out.push_str(&escaped);
                out.push_str("}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            (OpenAiApi::Chat, None) => {
                out.push_str("\"delta\":{\"content\":");
                out.push_str(&escaped);
                out.push_str("},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
            (OpenAiApi::Completions, _) => {
                out.push_str("\"text\":");
                out.push_str(&escaped);
                out.push_str(
                    ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n",
                );
            }
        }
        Some(Bytes::from(out))
    }

    /// The finishing chunk, the usage chunk when asked for, ground truth on the last
    /// of them, then `[DONE]`.
    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let choice = match self.api {
            OpenAiApi::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason.as_str()})
            }
            OpenAiApi::Completions => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null})
            }
        };
        let mut finishing = self.envelope(vec![choice]);
        let mut out = String::new();
        if self.include_usage {
            let mut usage = self.envelope(Vec::new());
            usage["usage"] = usage_json(timeline);
            usage["redline"] = truth;
            out.push_str(&format!("data: {finishing}\n\ndata: {usage}\n\n"));
        } else {
            finishing["redline"] = truth;
            out.push_str(&format!("data: {finishing}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        Bytes::from(out)
    }

    fn broken(&self) -> Bytes {
        // The engine stopped mid-stream: say so in-band, as vLLM does.
        Bytes::from(format!("data: {}\n\n", engine_gone().body()))
    }

    fn whole(&self, text: &str, reason: FinishReason, timeline: &Timeline) -> Response {
        json_response(StatusCode::OK, &self.full_body(text, reason, timeline))
    }
}

async fn embeddings(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let request: openai::EmbeddingRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    if let Err(e) = openai::check_model(request.model.as_deref(), &state.model) {
        return error_response(e);
    }
    let texts = request.input.into_texts();
    if texts.is_empty() || texts.iter().any(String::is_empty) {
        return error_response(ApiError::bad_request("input must not be empty"));
    }
    let dim = request.dimensions.unwrap_or(state.profile.embedding_dim) as usize;
    if !(1..=8192).contains(&dim) {
        return error_response(ApiError::bad_request(format!(
            "dimensions must be between 1 and 8192, got {dim}"
        )));
    }
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return error_response(ApiError::bad_request(format!(
                "invalid encoding_format `{other}`: choose from float, base64"
            )));
        }
    };
    let tokens: usize = texts.iter().map(|t| sim_tokenizer::count(t)).sum();
    tokio::time::sleep(Duration::from_nanos(state.profile.embedding_nanos(tokens))).await;
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = embed(text, dim);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::from(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Value::from(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list", "data": data, "model": state.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}

/// `POST /redline/stall {"ms": N}`: the engine stops stepping for N ms, as a stalled
/// GPU would; streams in flight pause and new requests queue. For rehearsing what a
/// load test shows when the server hangs.
async fn stall(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct StallRequest {
        ms: u64,
    }
    let request: StallRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    if !(1..=600_000).contains(&request.ms) {
        return error_response(ApiError::bad_request(format!(
            "ms must be between 1 and 600000, got {}",
            request.ms
        )));
    }
    state.engine.stall(Duration::from_millis(request.ms));
    json_response(StatusCode::OK, &json!({"stalled_ms": request.ms}))
}

/// `GET /redline/truth`: exact distributions of the engine's own TTFT, inter-token
/// gaps and E2E since start or the last `DELETE /redline/truth` (which answers the
/// same and starts afresh). The ground truth for any client measuring this server.
/// What a scripted simulator was asked, in order (empty without a script).
async fn script_requests(State(state): State<Arc<SimState>>) -> Response {
    let requests = state
        .script
        .as_ref()
        .map(|s| s.requests())
        .unwrap_or_default();
    json_response(StatusCode::OK, &requests)
}

/// `GET /redline/endpoints`: what a client needs to know to call this server by each
/// API it speaks, without guessing.
async fn endpoints(State(state): State<Arc<SimState>>) -> Response {
    let model = &state.model;
    json_response(
        StatusCode::OK,
        &json!({
            "model": model,
            "embedding_dim": state.profile.embedding_dim,
            "max_model_len": state.profile.max_model_len,
            "apis": {
                "openai": ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"],
                "tgi": ["/generate", "/generate_stream", "/", "/info"],
                "ollama": ["/api/chat", "/api/generate", "/api/tags", "/api/version"],
                "kserve": [
                    format!("/v2/models/{model}/generate"),
                    format!("/v2/models/{model}/generate_stream"),
                    "/v2/health/ready".to_owned(),
                ],
                "qdrant": ["/collections/{collection}/points/search", "/collections/{collection}/points/query"],
                "tools": ["/tools/{name}"],
            },
            // Every collection name answers from the same corpus.
            "search": {"any_collection": true, "documents": state.tiers.config.corpus_size},
            "qdrant_grpc_port": state.qdrant_grpc_port.get(),
            "kserve_grpc_port": state.kserve_grpc_port.get(),
            "grpc": {
                "qdrant": [crate::grpc::qdrant::SEARCH, crate::grpc::qdrant::QUERY, crate::grpc::qdrant::HEALTH_CHECK],
                "kserve": [crate::grpc::kserve::MODEL_STREAM_INFER, crate::grpc::kserve::MODEL_INFER, crate::grpc::kserve::SERVER_LIVE, crate::grpc::kserve::SERVER_READY, crate::grpc::kserve::MODEL_READY, crate::grpc::kserve::SERVER_METADATA, crate::grpc::kserve::MODEL_METADATA],
            },
            "ground_truth": ["/redline/truth", "/metrics"],
        }),
    )
}

async fn truth(State(state): State<Arc<SimState>>) -> Response {
    json_response(StatusCode::OK, &state.metrics.truth_report(false))
}

async fn reset_truth(State(state): State<Arc<SimState>>) -> Response {
    json_response(StatusCode::OK, &state.metrics.truth_report(true))
}

async fn models(State(state): State<Arc<SimState>>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [{
            "id": state.model, "object": "model", "created": unix_now(), "owned_by": "redline",
            "root": state.model, "max_model_len": state.profile.max_model_len,
        }]}),
    )
}

async fn metrics(State(state): State<Arc<SimState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
