//! The simulator's HTTP server: the router over every API it serves (OpenAI's, the
//! native ones, media, search and tool tiers, truth and metrics), and the listeners.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::answer::{error_response, json_response, unix_now};
use super::chunks::{chat_completions, completions};
use super::embed::embed;
use super::gpu;
use super::mcp::{self, McpServer};
use super::media;
use super::native;
use super::openai::{self, ApiError};
use super::startup;
use super::state::{SimConfig, SimState};
use super::tiers;
use redline_base::sim_tokenizer;
/// Largest request body accepted: long prompts are megabytes at most.
const MAX_BODY_BYTES: usize = 64 << 20;

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
    let mcp_server = Arc::new(McpServer::new(state.tiers.clone(), state.seed));
    let mcp = Router::new()
        .route("/mcp", post(mcp::post).get(mcp::get).delete(mcp::delete))
        .route("/redline/mcp", get(mcp::truth))
        .with_state(mcp_server);
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
        .route("/v1/responses", post(super::responses::create))
        .route("/v1/messages", post(super::messages::create))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/images/generations", post(media::images))
        .route("/v1/audio/transcriptions", post(media::transcriptions))
        .route("/v1/audio/speech", post(media::speech))
        .route("/v1/realtime", get(super::realtime::connect))
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
        .merge(mcp)
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
    tls: Option<redline_base::net::ServerTls>,
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
    tls: Option<redline_base::net::ServerTls>,
    router: Router,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = ConnectionBuilder::new(TokioExecutor::new());
    // hyper's default of 200 streams per connection would queue a large benchmark's
    // streams behind each other on one HTTP/2 connection.
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    redline_base::net::accept_loop(
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
        tls: Option<redline_base::net::ServerTls>,
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
    let tokens: Vec<u32> = redline_base::sim_tokenizer::Pieces::new(text)
        .map(redline_base::sim_tokenizer::piece_id)
        .collect();
    json_response(StatusCode::OK, &serde_json::json!({ "tokens": tokens }))
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
                "openai": ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/models"],
                "anthropic": ["/v1/messages"],
                "tgi": ["/generate", "/generate_stream", "/", "/info"],
                "ollama": ["/api/chat", "/api/generate", "/api/tags", "/api/version"],
                "kserve": [
                    format!("/v2/models/{model}/generate"),
                    format!("/v2/models/{model}/generate_stream"),
                    "/v2/health/ready".to_owned(),
                ],
                "qdrant": ["/collections/{collection}/points/search", "/collections/{collection}/points/query"],
                "tools": ["/tools/{name}"],
                "mcp": ["/mcp"],
            },
            // Every collection name answers from the same corpus.
            "search": {"any_collection": true, "documents": state.tiers.config.corpus_size},
            "qdrant_grpc_port": state.qdrant_grpc_port.get(),
            "kserve_grpc_port": state.kserve_grpc_port.get(),
            "grpc": {
                "qdrant": [redline_base::grpc::qdrant::SEARCH, redline_base::grpc::qdrant::QUERY, redline_base::grpc::qdrant::LIST_COLLECTIONS, redline_base::grpc::qdrant::GET_COLLECTION, redline_base::grpc::qdrant::HEALTH_CHECK],
                "kserve": [redline_base::grpc::kserve::MODEL_STREAM_INFER, redline_base::grpc::kserve::MODEL_INFER, redline_base::grpc::kserve::SERVER_LIVE, redline_base::grpc::kserve::SERVER_READY, redline_base::grpc::kserve::MODEL_READY, redline_base::grpc::kserve::SERVER_METADATA, redline_base::grpc::kserve::MODEL_METADATA],
            },
            "ground_truth": ["/redline/truth", "/redline/tiers", "/redline/mcp", "/metrics"],
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
