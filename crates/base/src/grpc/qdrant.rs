//! Qdrant's gRPC messages (package `qdrant`), the fields redline sends and reads,
//! written from the published protos (`points.proto`, `collections.proto`,
//! `qdrant_common.proto`, `json_with_int.proto`). Tags are the protos'; a field not listed here is skipped
//! on decode, as protobuf allows, so a client's filters or search params cost nothing.

use std::collections::HashMap;

/// `qdrant.Points/Search`.
pub const SEARCH: &str = "/qdrant.Points/Search";
/// `qdrant.Points/Query`.
pub const QUERY: &str = "/qdrant.Points/Query";
/// `qdrant.Qdrant/HealthCheck`.
pub const HEALTH_CHECK: &str = "/qdrant.Qdrant/HealthCheck";
/// `qdrant.Collections/List`: what a client asks first (`get_collections`).
pub const LIST_COLLECTIONS: &str = "/qdrant.Collections/List";
/// `qdrant.Collections/Get`.
pub const GET_COLLECTION: &str = "/qdrant.Collections/Get";
/// The field of `SearchResponse` and `QueryResponse` that holds the points.
pub const RESULT_FIELD: u32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct SearchPoints {
    #[prost(string, tag = "1")]
    pub collection_name: String,
    #[prost(float, repeated, tag = "2")]
    pub vector: Vec<f32>,
    #[prost(uint64, tag = "4")]
    pub limit: u64,
    #[prost(message, optional, tag = "6")]
    pub with_payload: Option<WithPayloadSelector>,
    #[prost(float, optional, tag = "8")]
    pub score_threshold: Option<f32>,
    #[prost(uint64, optional, tag = "9")]
    pub offset: Option<u64>,
    #[prost(string, optional, tag = "10")]
    pub vector_name: Option<String>,
    /// Seconds the server may take.
    #[prost(uint64, optional, tag = "13")]
    pub timeout: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryPoints {
    #[prost(string, tag = "1")]
    pub collection_name: String,
    #[prost(message, optional, tag = "3")]
    pub query: Option<Query>,
    #[prost(string, optional, tag = "4")]
    pub using: Option<String>,
    #[prost(float, optional, tag = "7")]
    pub score_threshold: Option<f32>,
    #[prost(uint64, optional, tag = "8")]
    pub limit: Option<u64>,
    #[prost(uint64, optional, tag = "9")]
    pub offset: Option<u64>,
    #[prost(message, optional, tag = "11")]
    pub with_payload: Option<WithPayloadSelector>,
    #[prost(uint64, optional, tag = "15")]
    pub timeout: Option<u64>,
}

/// `Query { oneof variant { VectorInput nearest = 1; … } }`: only `nearest` is read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Query {
    #[prost(message, optional, tag = "1")]
    pub nearest: Option<VectorInput>,
}

/// `VectorInput { oneof variant { PointId id = 1; DenseVector dense = 2; … } }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VectorInput {
    #[prost(message, optional, tag = "1")]
    pub id: Option<PointId>,
    #[prost(message, optional, tag = "2")]
    pub dense: Option<DenseVector>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DenseVector {
    #[prost(float, repeated, tag = "1")]
    pub data: Vec<f32>,
}

/// `WithPayloadSelector { oneof selector_options { bool enable = 1; … } }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WithPayloadSelector {
    #[prost(bool, optional, tag = "1")]
    pub enable: Option<bool>,
}

/// `SearchResponse` and `QueryResponse` have the same fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PointsResponse {
    #[prost(message, repeated, tag = "1")]
    pub result: Vec<ScoredPoint>,
    /// Seconds the server spent.
    #[prost(double, tag = "2")]
    pub time: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScoredPoint {
    #[prost(message, optional, tag = "1")]
    pub id: Option<PointId>,
    #[prost(map = "string, message", tag = "2")]
    pub payload: HashMap<String, Value>,
    #[prost(float, tag = "3")]
    pub score: f32,
    #[prost(uint64, tag = "5")]
    pub version: u64,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct PointId {
    #[prost(oneof = "point_id::Options", tags = "1, 2")]
    pub options: Option<point_id::Options>,
}

pub mod point_id {
    #[derive(Clone, PartialEq, Eq, prost::Oneof)]
    pub enum Options {
        #[prost(uint64, tag = "1")]
        Num(u64),
        #[prost(string, tag = "2")]
        Uuid(String),
    }
}

impl PointId {
    pub fn num(n: u64) -> PointId {
        PointId {
            options: Some(point_id::Options::Num(n)),
        }
    }

    /// The id as the REST API writes it (a number, or the UUID's text).
    pub fn text(&self) -> String {
        match &self.options {
            Some(point_id::Options::Num(n)) => n.to_string(),
            Some(point_id::Options::Uuid(uuid)) => uuid.clone(),
            None => String::new(),
        }
    }
}

/// A payload value (`json_with_int.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(oneof = "value::Kind", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub kind: Option<value::Kind>,
}

pub mod value {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(int32, tag = "1")]
        NullValue(i32),
        #[prost(double, tag = "2")]
        DoubleValue(f64),
        #[prost(int64, tag = "3")]
        IntegerValue(i64),
        #[prost(string, tag = "4")]
        StringValue(String),
        #[prost(bool, tag = "5")]
        BoolValue(bool),
        #[prost(message, tag = "6")]
        StructValue(super::Struct),
        #[prost(message, tag = "7")]
        ListValue(super::ListValue),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Struct {
    #[prost(map = "string, message", tag = "1")]
    pub fields: HashMap<String, Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<Value>,
}

impl Value {
    pub fn string(text: String) -> Value {
        Value {
            kind: Some(value::Kind::StringValue(text)),
        }
    }

    /// The value as JSON (how the REST API shows a payload).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as Json;
        match &self.kind {
            None | Some(value::Kind::NullValue(_)) => Json::Null,
            Some(value::Kind::DoubleValue(x)) => serde_json::json!(x),
            Some(value::Kind::IntegerValue(n)) => Json::from(*n),
            Some(value::Kind::StringValue(s)) => Json::from(s.as_str()),
            Some(value::Kind::BoolValue(b)) => Json::from(*b),
            Some(value::Kind::StructValue(s)) => Json::Object(
                s.fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            Some(value::Kind::ListValue(l)) => {
                Json::Array(l.values.iter().map(Value::to_json).collect())
            }
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckReply {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

impl QueryPoints {
    /// The dense vector of a `nearest` query, if that is what it asks.
    pub fn nearest_vector(&self) -> Option<&[f32]> {
        let nearest = self.query.as_ref()?.nearest.as_ref()?;
        nearest.dense.as_ref().map(|d| d.data.as_slice())
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListCollectionsRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CollectionDescription {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListCollectionsResponse {
    #[prost(message, repeated, tag = "1")]
    pub collections: Vec<CollectionDescription>,
    #[prost(double, tag = "2")]
    pub time: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetCollectionInfoRequest {
    #[prost(string, tag = "1")]
    pub collection_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetCollectionInfoResponse {
    #[prost(message, optional, tag = "1")]
    pub result: Option<CollectionInfo>,
    #[prost(double, tag = "2")]
    pub time: f64,
}

/// `CollectionStatus.Green`: every point indexed.
pub const STATUS_GREEN: i32 = 1;
/// `Distance.Cosine`.
pub const DISTANCE_COSINE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct CollectionInfo {
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(message, optional, tag = "2")]
    pub optimizer_status: Option<OptimizerStatus>,
    #[prost(uint64, tag = "4")]
    pub segments_count: u64,
    #[prost(message, optional, tag = "7")]
    pub config: Option<CollectionConfig>,
    #[prost(uint64, optional, tag = "9")]
    pub points_count: Option<u64>,
    #[prost(uint64, optional, tag = "10")]
    pub indexed_vectors_count: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OptimizerStatus {
    #[prost(bool, tag = "1")]
    pub ok: bool,
    #[prost(string, tag = "2")]
    pub error: String,
}

/// A collection's configuration: its parameters, and the HNSW, optimizer and WAL
/// settings a client requires to be there.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CollectionConfig {
    #[prost(message, optional, tag = "1")]
    pub params: Option<CollectionParams>,
    #[prost(message, optional, tag = "2")]
    pub hnsw_config: Option<HnswConfigDiff>,
    #[prost(message, optional, tag = "3")]
    pub optimizer_config: Option<OptimizersConfigDiff>,
    #[prost(message, optional, tag = "4")]
    pub wal_config: Option<WalConfigDiff>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HnswConfigDiff {
    #[prost(uint64, optional, tag = "1")]
    pub m: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub ef_construct: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub full_scan_threshold: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OptimizersConfigDiff {
    #[prost(double, optional, tag = "1")]
    pub deleted_threshold: Option<f64>,
    #[prost(uint64, optional, tag = "2")]
    pub vacuum_min_vector_number: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub default_segment_number: Option<u64>,
    #[prost(uint64, optional, tag = "6")]
    pub indexing_threshold: Option<u64>,
    #[prost(uint64, optional, tag = "7")]
    pub flush_interval_sec: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WalConfigDiff {
    #[prost(uint64, optional, tag = "1")]
    pub wal_capacity_mb: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub wal_segments_ahead: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CollectionParams {
    #[prost(uint32, tag = "3")]
    pub shard_number: u32,
    #[prost(bool, tag = "4")]
    pub on_disk_payload: bool,
    #[prost(message, optional, tag = "5")]
    pub vectors_config: Option<VectorsConfig>,
    #[prost(uint32, optional, tag = "6")]
    pub replication_factor: Option<u32>,
}

/// `VectorsConfig`'s `params` arm: one unnamed dense vector.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VectorsConfig {
    #[prost(message, optional, tag = "1")]
    pub params: Option<VectorParams>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VectorParams {
    #[prost(uint64, tag = "1")]
    pub size: u64,
    #[prost(int32, tag = "2")]
    pub distance: i32,
}
