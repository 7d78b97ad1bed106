//! Where a pgvector service keeps its documents (`services.NAME.pgvector`).

use serde::{Deserialize, Serialize};

/// Where a pgvector service keeps its documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PgvectorSpec {
    pub table: String,
    #[serde(default = "id_column")]
    pub id_column: String,
    #[serde(default = "text_column")]
    pub text_column: String,
    #[serde(default = "vector_column")]
    pub vector_column: String,
    /// `cosine` (`<=>`, default) or `l2` (`<->`).
    #[serde(default)]
    pub distance: Distance,
    /// Connections in the pool (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u32>,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    #[default]
    Cosine,
    L2,
}

fn id_column() -> String {
    "id".into()
}

fn text_column() -> String {
    "text".into()
}

fn vector_column() -> String {
    "embedding".into()
}
