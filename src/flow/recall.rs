//! Recall@k against a ground truth: for each query, the share of its relevant
//! documents among the top k results. A query answered with nothing has recall 0: an
//! empty answer is the failure recall exists to catch, never a sample to skip.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::client::search::id_text;

/// Query text → relevant document IDs (as text, so numeric and string IDs compare).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroundTruth {
    relevant: HashMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct Line {
    #[serde(alias = "query")]
    prompt: String,
    relevant: Vec<Value>,
}

impl GroundTruth {
    /// Reads JSONL lines of `{"prompt": …, "relevant": [ids]}` (`query` is accepted
    /// for `prompt`).
    pub fn load(path: &Path) -> Result<GroundTruth, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the ground truth {}: {e}", path.display()))?;
        let mut relevant = HashMap::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let line: Line = serde_json::from_str(line).map_err(|e| {
                format!(
                    "{}:{}: not a ground-truth line ({e}); write {{\"prompt\": \"…\", \"relevant\": [ids]}}",
                    path.display(),
                    n + 1
                )
            })?;
            relevant.insert(line.prompt, line.relevant.iter().map(id_text).collect());
        }
        if relevant.is_empty() {
            return Err(format!("{} holds no queries", path.display()));
        }
        Ok(GroundTruth { relevant })
    }

    pub fn from_pairs(pairs: &[(&str, &[&str])]) -> GroundTruth {
        GroundTruth {
            relevant: pairs
                .iter()
                .map(|(q, ids)| (q.to_string(), ids.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    /// Recall@k of the results for `query`, or `None` when the query is not in the
    /// ground truth (or lists nothing relevant).
    pub fn recall(&self, query: &str, results: &[String], k: usize) -> Option<f64> {
        let relevant = self.relevant.get(query).filter(|r| !r.is_empty())?;
        let top = &results[..results.len().min(k)];
        let found = relevant.iter().filter(|id| top.contains(id)).count();
        Some(found as f64 / relevant.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn recall_counts_relevant_hits_in_the_top_k_and_empty_answers_as_zero() {
        let truth = GroundTruth::from_pairs(&[("q1", &["3", "9"]), ("q2", &["5"])]);
        assert_eq!(truth.recall("q1", &ids(&["3", "4", "9"]), 3), Some(1.0));
        assert_eq!(truth.recall("q1", &ids(&["3", "4", "9"]), 2), Some(0.5));
        assert_eq!(truth.recall("q2", &ids(&["1", "2"]), 5), Some(0.0));
        assert_eq!(truth.recall("q2", &[], 5), Some(0.0), "empty is recall 0");
        assert_eq!(truth.recall("unknown", &ids(&["5"]), 5), None);
    }

    #[test]
    fn numeric_and_string_ids_are_the_same_document() {
        assert_eq!(id_text(&serde_json::json!(7)), "7");
        assert_eq!(id_text(&serde_json::json!("7")), "7");
        let dir = std::env::temp_dir().join(format!("redline-truth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("truth.jsonl");
        std::fs::write(&file, "{\"prompt\": \"a\", \"relevant\": [1, \"b\"]}\n\n{\"query\": \"c\", \"relevant\": []}\n").unwrap();
        let truth = GroundTruth::load(&file).unwrap();
        assert_eq!(truth.recall("a", &ids(&["b", "1"]), 5), Some(1.0));
        assert_eq!(truth.recall("c", &ids(&["x"]), 5), None);
        std::fs::write(&file, "{\"prompt\": 1}\n").unwrap();
        assert!(
            GroundTruth::load(&file)
                .unwrap_err()
                .contains("truth.jsonl:1: not a ground-truth line")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
