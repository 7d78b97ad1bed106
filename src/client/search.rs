//! Vector search backends: Qdrant's REST API (`points/search`) and gRPC API
//! (`qdrant.Points/Search`), and PostgreSQL with pgvector over a pooled connection
//! (`<=>` cosine distance or `<->` L2).

use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::{Value, json};

use crate::client::RunClock;
use crate::grpc::qdrant;
use crate::record::{FailStage, Outcome, Record};
use crate::spec::{Distance, PgvectorSpec};

/// An ID as text: `7` and `"7"` are the same document.
pub fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    pub id: String,
    pub score: f64,
    pub text: String,
}

/// Qdrant's `points/search` body.
pub fn qdrant_body(vector: &[f32], top_k: u32) -> Value {
    json!({"vector": vector, "limit": top_k, "with_payload": true})
}

/// The hits of a Qdrant answer (`points/search`'s `result: [...]` or `points/query`'s
/// `result: {points: [...]}`); the text is the payload's `text`, `content` or
/// `document`, else the payload itself.
pub fn qdrant_hits(answer: &Value) -> Result<Vec<Hit>, String> {
    let result = &answer["result"];
    let points = result
        .as_array()
        .or_else(|| result["points"].as_array())
        .ok_or("the answer has no `result` list")?;
    points
        .iter()
        .map(|point| {
            let id = point.get("id").ok_or("a point has no `id`")?;
            let payload = &point["payload"];
            let text = ["text", "content", "document"]
                .iter()
                .find_map(|k| payload[k].as_str())
                .map_or_else(|| payload.to_string(), str::to_owned);
            Ok(Hit {
                id: id_text(id),
                score: point["score"].as_f64().unwrap_or(f64::NAN),
                text,
            })
        })
        .collect()
}

/// Qdrant's gRPC `Search` request, payloads asked for (the passages a flow passes on).
pub fn qdrant_grpc_request(collection: &str, vector: &[f32], top_k: u32) -> qdrant::SearchPoints {
    qdrant::SearchPoints {
        collection_name: collection.to_owned(),
        vector: vector.to_vec(),
        limit: u64::from(top_k),
        with_payload: Some(qdrant::WithPayloadSelector { enable: Some(true) }),
        ..qdrant::SearchPoints::default()
    }
}

/// The hits of a gRPC answer, read as [`qdrant_hits`] reads a REST one.
pub fn qdrant_grpc_hits(answer: &qdrant::PointsResponse) -> Vec<Hit> {
    answer
        .result
        .iter()
        .map(|point| {
            let text = ["text", "content", "document"]
                .iter()
                .find_map(|k| match &point.payload.get(*k)?.kind {
                    Some(qdrant::value::Kind::StringValue(text)) => Some(text.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    let payload: serde_json::Map<String, Value> = point
                        .payload
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_json()))
                        .collect();
                    Value::Object(payload).to_string()
                });
            Hit {
                id: point
                    .id
                    .as_ref()
                    .map(qdrant::PointId::text)
                    .unwrap_or_default(),
                score: f64::from(point.score),
                text,
            }
        })
        .collect()
}

/// A pool of connections to the database at `dsn`.
pub fn pg_pool(dsn: &str, size: usize) -> Result<Pool, String> {
    let config: tokio_postgres::Config = dsn
        .parse()
        .map_err(|e| format!("`{dsn}` is not a PostgreSQL connection URL: {e}"))?;
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .build()
        .map_err(|e| format!("cannot build the connection pool: {e}"))
}

/// An SQL identifier, quoted (`docs`, `public.docs`); `None` if it is not a plain name.
fn quoted(name: &str) -> Option<String> {
    let plain = |part: &str| {
        !part.is_empty()
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit())
    };
    name.split('.').all(plain).then(|| {
        name.split('.')
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(".")
    })
}

/// The nearest-neighbour query for a table, or why its names are unusable.
pub fn pg_query(spec: &PgvectorSpec) -> Result<String, String> {
    let name = |n: &str| quoted(n).ok_or_else(|| format!("`{n}` is not a plain SQL name"));
    let (table, id, text, vector) = (
        name(&spec.table)?,
        name(&spec.id_column)?,
        name(&spec.text_column)?,
        name(&spec.vector_column)?,
    );
    let op = match spec.distance {
        Distance::Cosine => "<=>",
        Distance::L2 => "<->",
    };
    Ok(format!(
        "SELECT {id}::text, {text}::text, ({vector} {op} $1::text::vector)::float8 \
         FROM {table} ORDER BY {vector} {op} $1::text::vector LIMIT $2"
    ))
}

/// A pgvector table and the pool that reaches it.
pub struct PgTable {
    pub pool: Pool,
    pub distance: Distance,
    /// From [`pg_query`].
    pub query: String,
}

impl PgTable {
    pub fn new(dsn: &str, spec: &PgvectorSpec) -> Result<PgTable, String> {
        Ok(PgTable {
            pool: pg_pool(dsn, spec.pool_size.unwrap_or(8).max(1) as usize)?,
            distance: spec.distance,
            query: pg_query(spec)?,
        })
    }

    /// Runs the query with the vector; fills the record's marks and, on failure, its
    /// outcome. Scores are similarities: 1 − cosine distance, or −L2 distance.
    pub async fn search(
        &self,
        vector: &[f32],
        top_k: u32,
        timeout: Duration,
        clock: RunClock,
        record: &mut Record,
    ) -> Option<Vec<Hit>> {
        pg_search(self, vector, top_k, timeout, clock, record).await
    }
}

async fn pg_search(
    table: &PgTable,
    vector: &[f32],
    top_k: u32,
    timeout: Duration,
    clock: RunClock,
    record: &mut Record,
) -> Option<Vec<Hit>> {
    let (pool, query) = (&table.pool, table.query.as_str());
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let literal = format!(
        "[{}]",
        vector
            .iter()
            .map(f32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let run = async {
        let client = pool
            .get()
            .await
            .map_err(|e| (FailStage::Connect, "connect_error", e.to_string()))?;
        record.headers_us = Some(clock.now_us());
        client
            .query(query, &[&literal, &i64::from(top_k)])
            .await
            .map_err(|e| (FailStage::FirstByte, "db_error", e.to_string()))
    };
    let rows = match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            record.fail(
                Outcome::Timeout,
                FailStage::FirstByte,
                "timeout",
                format!("no rows within {timeout:?}"),
            );
            return None;
        }
        Ok(Err((stage, kind, message))) => {
            record.fail(Outcome::Error, stage, kind, message);
            return None;
        }
        Ok(Ok(rows)) => rows,
    };
    let now = clock.now_us();
    record.first_byte_us = Some(now);
    record.last_byte_us = Some(now);
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        let (id, text, distance): (Option<String>, Option<String>, Option<f64>) =
            match (row.try_get(0), row.try_get(1), row.try_get(2)) {
                (Ok(id), Ok(text), Ok(distance)) => (id, text, distance),
                _ => {
                    record.fail(
                        Outcome::Error,
                        FailStage::Decode,
                        "db_decode",
                        "a row is not (id, text, distance)",
                    );
                    return None;
                }
            };
        let distance = distance.unwrap_or(f64::NAN);
        hits.push(Hit {
            id: id.unwrap_or_default(),
            text: text.unwrap_or_default(),
            score: match table.distance {
                Distance::Cosine => 1.0 - distance,
                Distance::L2 => -distance,
            },
        });
    }
    Some(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qdrant_answers_of_both_shapes_give_hits() {
        let search = json!({"result": [{"id": 3, "score": 0.9, "payload": {"text": "a"}},
                                        {"id": "u-1", "score": 0.5, "payload": {"title": "b"}}],
                            "status": "ok"});
        let hits = qdrant_hits(&search).unwrap();
        assert_eq!(
            hits[0],
            Hit {
                id: "3".into(),
                score: 0.9,
                text: "a".into()
            }
        );
        assert_eq!(hits[1].id, "u-1");
        assert_eq!(hits[1].text, r#"{"title":"b"}"#);
        let query = json!({"result": {"points": []}});
        assert!(qdrant_hits(&query).unwrap().is_empty());
        assert!(qdrant_hits(&json!({"status": "ok"})).is_err());
    }

    #[test]
    fn the_query_quotes_names_and_refuses_anything_else() {
        let spec = PgvectorSpec {
            table: "public.docs".into(),
            id_column: "id".into(),
            text_column: "body".into(),
            vector_column: "embedding".into(),
            distance: Distance::Cosine,
            pool_size: None,
        };
        assert_eq!(
            pg_query(&spec).unwrap(),
            "SELECT \"id\"::text, \"body\"::text, (\"embedding\" <=> $1::text::vector)::float8 FROM \"public\".\"docs\" ORDER BY \"embedding\" <=> $1::text::vector LIMIT $2"
        );
        let evil = PgvectorSpec {
            table: "docs; DROP TABLE docs".into(),
            ..spec
        };
        assert!(
            pg_query(&evil)
                .unwrap_err()
                .contains("not a plain SQL name")
        );
    }
}
