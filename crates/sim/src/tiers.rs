//! The other tiers of a RAG or agent chain, so the whole chain runs embedded: a
//! Qdrant-compatible vector search over a seeded corpus (embedded with the simulator's
//! own embeddings), and tool endpoints with configured latency and failure rates.
//!
//! The corpus comes with its ground truth: each query is made from one document's
//! keywords, and that document is the one relevant answer.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::embed::embed;
pub use redline_base::latency::LatencySpec;
use redline_base::seed::mix_seed;
use redline_base::sim_tokenizer::WORDS;
use redline_base::vector::cosine;

/// How the non-LLM tiers behave.
#[derive(Debug, Clone, PartialEq)]
pub struct TierConfig {
    /// Documents in the search corpus.
    pub corpus_size: usize,
    pub search_latency: LatencySpec,
    pub tool_latency: LatencySpec,
    /// Share of tool calls answered 500.
    pub tool_failure_rate: f64,
    /// Embed the corpus at start (in the background) rather than on the first search:
    /// for simulators that will be searched.
    pub warm_corpus: bool,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            corpus_size: 1000,
            search_latency: LatencySpec::default(),
            tool_latency: LatencySpec::default(),
            tool_failure_rate: 0.0,
            warm_corpus: false,
        }
    }
}

/// One document of the corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub id: u64,
    pub text: String,
}

/// A query with its relevant documents: one line of a ground-truth file, and a
/// prompt a dataset can send (`prompt` is the query).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Query {
    pub prompt: String,
    pub relevant: Vec<u64>,
}

/// The seeded corpus and its embeddings.
pub struct Corpus {
    pub documents: Vec<Document>,
    vectors: Vec<Vec<f32>>,
    keywords: Vec<[String; 3]>,
}

/// Made-up words: each document's own keywords, so a query can point at it.
fn keyword(rng: &mut ChaCha8Rng) -> String {
    const SYLLABLES: &[&str] = &[
        "ka", "lo", "mi", "ven", "tar", "su", "qui", "dor", "pel", "zan", "ri", "bo", "nex", "fa",
        "gul", "ti", "mor", "sa", "wen", "ix", "yu", "hep", "cro", "dax", "ume", "jol", "vra",
        "sto", "kwe", "plin",
    ];
    (0..4)
        .map(|_| *SYLLABLES.choose(rng).expect("not empty"))
        .collect()
}

impl Corpus {
    pub fn generate(seed: u64, size: usize, dim: usize) -> Corpus {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x636f_7270]));
        let mut documents = Vec::with_capacity(size);
        let mut keywords = Vec::with_capacity(size);
        for id in 0..size as u64 {
            let words: [String; 3] = std::array::from_fn(|_| keyword(&mut rng));
            let filler: Vec<&str> = (0..24)
                .map(|_| *WORDS.choose(&mut rng).expect("not empty"))
                .collect();
            let text = format!(
                "{} {} {} {}. {} {}.",
                words[0],
                filler[..8].join(" "),
                words[1],
                filler[8..16].join(" "),
                words[2],
                filler[16..].join(" ")
            );
            documents.push(Document { id, text });
            keywords.push(words);
        }
        let vectors = documents.iter().map(|d| embed(&d.text, dim)).collect();
        Corpus {
            documents,
            vectors,
            keywords,
        }
    }

    /// `n` queries, each a rewording of one document: its keywords in another order,
    /// a few of its words and some of no document in particular; that document is
    /// relevant.
    pub fn queries(&self, seed: u64, n: usize) -> Vec<Query> {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x7175_6572]));
        (0..n)
            .map(|_| {
                let id = rng.random_range(0..self.documents.len());
                let k = &self.keywords[id];
                let own: Vec<&str> = self.documents[id]
                    .text
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() > 3 && !k.contains(&w.to_string()))
                    .collect();
                let picked: Vec<&str> = own.choose_multiple(&mut rng, 3).copied().collect();
                let filler = WORDS.choose(&mut rng).expect("not empty");
                Query {
                    prompt: format!(
                        "what do {} and {} say about {} {} {filler}",
                        k[2],
                        k[0],
                        k[1],
                        picked.join(" ")
                    ),
                    relevant: vec![id as u64],
                }
            })
            .collect()
    }

    /// The `k` documents nearest the vector by cosine similarity, best first.
    pub fn search(&self, vector: &[f32], k: usize) -> Vec<(u64, f32)> {
        let mut scored: Vec<(u64, f32)> = self
            .vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, cosine(v, vector)))
            .collect();
        let k = k.min(scored.len());
        if k == 0 {
            return Vec::new();
        }
        scored.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
        scored.truncate(k);
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored
    }

    pub fn embedding(&self, id: u64) -> Option<&[f32]> {
        self.vectors.get(id as usize).map(Vec::as_slice)
    }
}

/// What the tier handlers share.
pub struct Tiers {
    pub config: TierConfig,
    /// Ground truth of what reached the tiers: searches, and calls by tool name.
    pub searches: std::sync::atomic::AtomicU64,
    pub tool_calls: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Built on the first search: runs without one pay nothing for it.
    corpus: std::sync::OnceLock<Corpus>,
    dim: usize,
    seed: u64,
    calls: std::sync::atomic::AtomicU64,
    /// The share of tool calls failed, as f64 bits: the admin API changes it live.
    tool_failure_rate: std::sync::atomic::AtomicU64,
}

impl Tiers {
    pub fn new(config: TierConfig, seed: u64, dim: usize) -> Tiers {
        Tiers {
            corpus: std::sync::OnceLock::new(),
            searches: std::sync::atomic::AtomicU64::new(0),
            tool_calls: std::sync::Mutex::new(std::collections::BTreeMap::new()),
            tool_failure_rate: std::sync::atomic::AtomicU64::new(
                config.tool_failure_rate.clamp(0.0, 1.0).to_bits(),
            ),
            config,
            dim,
            seed,
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The share of tool calls answered 500 now.
    pub fn tool_failure_rate(&self) -> f64 {
        f64::from_bits(
            self.tool_failure_rate
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    pub fn corpus(&self) -> &Corpus {
        self.corpus
            .get_or_init(|| Corpus::generate(self.seed, self.config.corpus_size, self.dim))
    }

    /// A search as every protocol answers it: counted, the `limit` nearest documents,
    /// ready no sooner than the configured latency after `started`.
    pub async fn nearest(
        &self,
        vector: &[f32],
        limit: usize,
        started: std::time::Instant,
    ) -> Vec<(u64, f32)> {
        self.searches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let hits = self.corpus().search(vector, limit);
        let delay = self.config.search_latency.sample(&mut self.rng());
        redline_base::latency::hold(delay.saturating_sub(started.elapsed())).await;
        hits
    }

    /// One call of tool `name`, as every protocol serves it (REST and MCP): counted,
    /// held for the configured latency; whether it is to fail, drawn at the configured
    /// rate.
    pub async fn tool_call(&self, name: &str) -> bool {
        *self
            .tool_calls
            .lock()
            .expect("a counter map holds no invariant")
            .entry(name.to_owned())
            .or_default() += 1;
        let mut rng = self.rng();
        let delay = self.config.tool_latency.sample(&mut rng);
        let fails = rng.random_bool(self.tool_failure_rate());
        redline_base::latency::hold(delay).await;
        fails
    }

    /// The embedding dimension of the corpus's vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    fn rng(&self) -> ChaCha8Rng {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ChaCha8Rng::seed_from_u64(mix_seed(&[self.seed, 0x7469_6572, n]))
    }
}

#[derive(Deserialize)]
struct SearchRequest {
    /// `points/search`'s vector.
    #[serde(default)]
    vector: Option<Vec<f32>>,
    /// `points/query`'s.
    #[serde(default)]
    query: Option<Vec<f32>>,
    #[serde(default = "ten")]
    limit: usize,
}

fn ten() -> usize {
    10
}

fn qdrant_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"status": {"error": message}, "time": 0.0})),
    )
        .into_response()
}

/// `POST /collections/{name}/points/search` and `/points/query`, in Qdrant's shapes.
pub async fn search(
    State(tiers): State<Arc<Tiers>>,
    Path((_collection, verb)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let started = std::time::Instant::now();
    let request: SearchRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return qdrant_error(
                StatusCode::BAD_REQUEST,
                &format!("Format error in JSON body: {e}"),
            );
        }
    };
    let Some(vector) = request.vector.or(request.query) else {
        return qdrant_error(
            StatusCode::BAD_REQUEST,
            "no `vector` (search) or `query` (query)",
        );
    };
    let hits = tiers.nearest(&vector, request.limit, started).await;
    let points: Vec<Value> = hits
        .iter()
        .map(|(id, score)| {
            json!({"id": id, "version": 0, "score": score,
                   "payload": {"text": tiers.corpus().documents[*id as usize].text}})
        })
        .collect();
    let time = started.elapsed().as_secs_f64();
    let result = match verb.as_str() {
        "query" => json!({"points": points}),
        _ => Value::from(points),
    };
    Json(json!({"result": result, "status": "ok", "time": time})).into_response()
}

/// `GET /redline/tiers`: what reached the search and tool tiers.
pub async fn counts(State(tiers): State<Arc<Tiers>>) -> Json<Value> {
    let tools = tiers
        .tool_calls
        .lock()
        .expect("a counter map holds no invariant")
        .clone();
    Json(json!({
        "searches": tiers.searches.load(std::sync::atomic::Ordering::Relaxed),
        "tool_calls": tools,
        "tool_failure_rate": tiers.tool_failure_rate(),
    }))
}

/// What the admin API may change while the simulator runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSettings {
    /// Share of tool calls answered 500, 0 to 1.
    pub tool_failure_rate: Option<f64>,
}

/// `PUT /redline/tiers {"tool_failure_rate": 0.0}`: the simulator's admin API, for
/// what a remediation would change on a real service.
pub async fn configure(State(tiers): State<Arc<Tiers>>, body: Bytes) -> Response {
    let settings: TierSettings = match serde_json::from_slice(&body) {
        Ok(settings) => settings,
        Err(e) => return bad_request(&format!("settings: {e}")),
    };
    if let Some(rate) = settings.tool_failure_rate {
        if !(0.0..=1.0).contains(&rate) {
            return bad_request(&format!("tool_failure_rate {rate} is not within 0..1"));
        }
        tiers
            .tool_failure_rate
            .store(rate.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }
    Json(json!({"tool_failure_rate": tiers.tool_failure_rate()})).into_response()
}

fn bad_request(message: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": message}))).into_response()
}

/// `POST /tools/{name}`: the arguments back, with an answer made from them, after the
/// configured latency; a configured share fails with 500.
pub async fn tool(
    State(tiers): State<Arc<Tiers>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let fails = tiers.tool_call(&name).await;
    let arguments: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": format!("arguments are not JSON: {e}")})),
            )
                .into_response();
        }
    };
    if fails {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": format!("tool `{name}` failed (simulated)")})),
        )
            .into_response();
    }
    let summary: String = arguments
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    Json(json!({"tool": name, "arguments": arguments, "result": format!("{name} done: {summary}")}))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_find_their_document() {
        let corpus = Corpus::generate(1, 500, 384);
        let queries = corpus.queries(2, 200);
        let found = queries
            .iter()
            .filter(|q| {
                let hits = corpus.search(&embed(&q.prompt, 384), 5);
                hits.iter().any(|(id, _)| q.relevant.contains(id))
            })
            .count();
        assert!(
            found >= 190,
            "{found} of 200 queries find their document in the top 5"
        );
        assert_eq!(corpus.documents, Corpus::generate(1, 500, 384).documents);
    }

    #[test]
    fn latency_shapes_are_checked_and_drawn() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let uniform = LatencySpec {
            min_ms: Some(10.0),
            max_ms: Some(20.0),
            ..LatencySpec::default()
        };
        assert!(uniform.check().is_ok());
        for _ in 0..100 {
            let d = uniform.sample(&mut rng);
            assert!((10..=20).contains(&d.as_millis()));
        }
        assert_eq!(uniform.mean_ms(), 15.0);
        let bad = LatencySpec {
            min_ms: Some(30.0),
            max_ms: Some(20.0),
            ..LatencySpec::default()
        };
        assert!(bad.check().is_err());
    }
}
