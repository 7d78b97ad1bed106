//! The simulator's gRPC listener: Qdrant's `Points/Search`, `Points/Query`,
//! `Collections/List` and `Collections/Get` (what a client asks before it searches)
//! and `Qdrant/HealthCheck` (the port Qdrant's clients reach with `prefer_grpc`), over the
//! same corpus, latency and search count as the REST routes, so both protocols share
//! one ground truth. tonic does the gRPC framing, statuses and trailers; axum routes by
//! method path, and an unknown method is `UNIMPLEMENTED`, as gRPC servers answer.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tonic::server::Grpc;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use super::tiers::Tiers;
use redline_base::grpc::qdrant::{
    self, CollectionConfig, CollectionDescription, CollectionInfo, CollectionParams,
    GetCollectionInfoRequest, GetCollectionInfoResponse, HealthCheckReply, HealthCheckRequest,
    HnswConfigDiff, ListCollectionsRequest, ListCollectionsResponse, OptimizerStatus,
    OptimizersConfigDiff, PointId, PointsResponse, QueryPoints, ScoredPoint, SearchPoints, Value,
    VectorParams, VectorsConfig, WalConfigDiff,
};

/// The collection the simulator lists: it searches its one corpus by any name.
pub const COLLECTION: &str = "docs";

/// Qdrant's default `limit`.
const DEFAULT_LIMIT: u64 = 10;

/// The routes of the gRPC listener.
pub fn router(tiers: Arc<Tiers>) -> Router {
    Router::new()
        .route(qdrant::SEARCH, post(search))
        .route(qdrant::QUERY, post(query))
        .route(qdrant::HEALTH_CHECK, post(health_check))
        .route(qdrant::LIST_COLLECTIONS, post(list_collections))
        .route(qdrant::GET_COLLECTION, post(get_collection))
        .fallback(unimplemented)
        .with_state(tiers)
}

/// What a search asks, from either method.
struct Asked {
    vector: Vec<f32>,
    limit: u64,
    offset: u64,
    with_payload: bool,
    score_threshold: Option<f32>,
}

async fn search(State(tiers): State<Arc<Tiers>>, request: Request) -> Response {
    let service = tower::service_fn(move |request: tonic::Request<SearchPoints>| {
        let tiers = tiers.clone();
        async move {
            let started = Instant::now();
            let s = request.into_inner();
            let asked = Asked {
                vector: s.vector,
                limit: s.limit,
                offset: s.offset.unwrap_or(0),
                with_payload: s.with_payload.and_then(|w| w.enable).unwrap_or(false),
                score_threshold: s.score_threshold,
            };
            answer(&tiers, asked, started).await
        }
    });
    let mut grpc = Grpc::new(ProstCodec::<PointsResponse, SearchPoints>::default());
    grpc.unary(service, request).await.into_response()
}

async fn query(State(tiers): State<Arc<Tiers>>, request: Request) -> Response {
    let service = tower::service_fn(move |request: tonic::Request<QueryPoints>| {
        let tiers = tiers.clone();
        async move {
            let started = Instant::now();
            let q = request.into_inner();
            let vector = q.nearest_vector().map(<[f32]>::to_vec).ok_or_else(|| {
                Status::invalid_argument(
                    "the simulator answers `nearest` queries with a dense vector only",
                )
            })?;
            let asked = Asked {
                vector,
                limit: q.limit.unwrap_or(DEFAULT_LIMIT),
                offset: q.offset.unwrap_or(0),
                with_payload: q.with_payload.and_then(|w| w.enable).unwrap_or(false),
                score_threshold: q.score_threshold,
            };
            answer(&tiers, asked, started).await
        }
    });
    let mut grpc = Grpc::new(ProstCodec::<PointsResponse, QueryPoints>::default());
    grpc.unary(service, request).await.into_response()
}

/// The nearest points, as Qdrant shapes them; a vector of the wrong size is
/// `INVALID_ARGUMENT`, as Qdrant says it.
async fn answer(
    tiers: &Tiers,
    asked: Asked,
    started: Instant,
) -> Result<tonic::Response<PointsResponse>, Status> {
    if asked.vector.len() != tiers.dim() {
        return Err(Status::new(
            Code::InvalidArgument,
            format!(
                "Wrong input: Vector dimension error: expected dim: {}, got {}",
                tiers.dim(),
                asked.vector.len()
            ),
        ));
    }
    let wanted = (asked.limit + asked.offset) as usize;
    let hits = tiers.nearest(&asked.vector, wanted, started).await;
    let corpus = tiers.corpus();
    let result = hits
        .into_iter()
        .skip(asked.offset as usize)
        .filter(|(_, score)| asked.score_threshold.is_none_or(|t| *score >= t))
        .map(|(id, score)| ScoredPoint {
            id: Some(PointId::num(id)),
            payload: if asked.with_payload {
                let text = corpus.documents[id as usize].text.clone();
                [("text".to_owned(), Value::string(text))].into()
            } else {
                Default::default()
            },
            score,
            version: 0,
        })
        .collect();
    Ok(tonic::Response::new(PointsResponse {
        result,
        time: started.elapsed().as_secs_f64(),
    }))
}

async fn health_check(request: Request) -> Response {
    let service = tower::service_fn(|_: tonic::Request<HealthCheckRequest>| async {
        Ok::<_, Status>(tonic::Response::new(HealthCheckReply {
            title: "redline sim (qdrant gRPC)".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }))
    });
    let mut grpc = Grpc::new(ProstCodec::<HealthCheckReply, HealthCheckRequest>::default());
    grpc.unary(service, request).await.into_response()
}

async fn list_collections(request: Request) -> Response {
    let service = tower::service_fn(|_: tonic::Request<ListCollectionsRequest>| async {
        Ok::<_, Status>(tonic::Response::new(ListCollectionsResponse {
            collections: vec![CollectionDescription {
                name: COLLECTION.into(),
            }],
            time: 0.0,
        }))
    });
    let mut grpc =
        Grpc::new(ProstCodec::<ListCollectionsResponse, ListCollectionsRequest>::default());
    grpc.unary(service, request).await.into_response()
}

/// Any collection's information: the corpus, its size, its vectors' size (the
/// simulator searches its one corpus by any name).
async fn get_collection(State(tiers): State<Arc<Tiers>>, request: Request) -> Response {
    let service = tower::service_fn(move |_: tonic::Request<GetCollectionInfoRequest>| {
        let tiers = tiers.clone();
        async move {
            let points = tiers.config.corpus_size as u64;
            let vectors = VectorsConfig {
                params: Some(VectorParams {
                    size: tiers.dim() as u64,
                    distance: qdrant::DISTANCE_COSINE,
                }),
            };
            let info = CollectionInfo {
                status: qdrant::STATUS_GREEN,
                optimizer_status: Some(OptimizerStatus {
                    ok: true,
                    error: String::new(),
                }),
                segments_count: 1,
                config: Some(CollectionConfig {
                    params: Some(CollectionParams {
                        shard_number: 1,
                        on_disk_payload: false,
                        vectors_config: Some(vectors),
                        replication_factor: Some(1),
                    }),
                    // Qdrant's defaults.
                    hnsw_config: Some(HnswConfigDiff {
                        m: Some(16),
                        ef_construct: Some(100),
                        full_scan_threshold: Some(10_000),
                    }),
                    optimizer_config: Some(OptimizersConfigDiff {
                        deleted_threshold: Some(0.2),
                        vacuum_min_vector_number: Some(1_000),
                        default_segment_number: Some(0),
                        indexing_threshold: Some(10_000),
                        flush_interval_sec: Some(5),
                    }),
                    wal_config: Some(WalConfigDiff {
                        wal_capacity_mb: Some(32),
                        wal_segments_ahead: Some(0),
                    }),
                }),
                points_count: Some(points),
                indexed_vectors_count: Some(points),
            };
            Ok::<_, Status>(tonic::Response::new(GetCollectionInfoResponse {
                result: Some(info),
                time: 0.0,
            }))
        }
    });
    let mut grpc = Grpc::new(ProstCodec::<
        GetCollectionInfoResponse,
        GetCollectionInfoRequest,
    >::default());
    grpc.unary(service, request).await.into_response()
}

pub(super) async fn unimplemented(request: Request) -> Response {
    Status::unimplemented(format!("no method {}", request.uri().path()))
        .into_http::<axum::body::Body>()
}
