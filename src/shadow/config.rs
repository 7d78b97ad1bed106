//! What the diff is told (`redline replay --diff-config FILE`): fields to ignore, how
//! arrays compare, numeric tolerances, which fields are free text, the margins a
//! difference must clear, and which module owns which field.
//!
//! Field patterns are JSON Pointers where `*` stands for one segment and `**` for any
//! rest; one may start with an endpoint (`POST /v1/embeddings /data/*/embedding`) to
//! hold for that endpoint alone. Timing and outcome are the fields `@ttft`, `@itl`,
//! `@e2e`, `@output_tokens` and `@outcome`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::spec::error::{SpecError, SpecErrors};

/// How an array's elements are paired.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrayMode {
    /// By position (the default).
    Ordered,
    /// As a set: order does not count.
    Set,
    /// By the value of a field of each element.
    Key(String),
}

/// The margins a difference must clear to be flagged.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Margins {
    /// The candidate's difference rate must exceed the noise's by this much…
    pub absolute: f64,
    /// …and by this share of the noise's rate…
    pub relative: f64,
    /// …with this one-sided significance.
    pub alpha: f64,
    /// A timing's median ratio to the primary must be further from 1 than the
    /// noise's by this much.
    pub timing: f64,
}

impl Default for Margins {
    fn default() -> Self {
        Margins {
            absolute: 0.02,
            relative: 0.2,
            alpha: 0.001,
            timing: 0.1,
        }
    }
}

/// The diff's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiffConfig {
    pub ignore: Vec<String>,
    pub arrays: BTreeMap<String, ArrayMode>,
    /// Absolute tolerance of numbers, by pattern.
    pub tolerance: BTreeMap<String, f64>,
    /// Fields compared as text by similarity, not as values.
    pub text_fields: Vec<String>,
    pub margins: Margins,
    /// Module owning each pattern's fields; the most specific pattern wins.
    pub attribution: BTreeMap<String, String>,
}

impl Default for DiffConfig {
    fn default() -> Self {
        DiffConfig {
            ignore: Vec::new(),
            arrays: BTreeMap::new(),
            tolerance: BTreeMap::new(),
            text_fields: vec![
                "/choices/*/message/content".into(),
                "/choices/*/message/reasoning_content".into(),
                "/choices/*/text".into(),
            ],
            margins: Margins::default(),
            attribution: BTreeMap::new(),
        }
    }
}

impl DiffConfig {
    /// Reads a config file: every problem with file, line and field.
    pub fn load(path: &str) -> Result<DiffConfig, SpecErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SpecErrors::unreadable(path, "diff config", &e))?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &str, text: &str) -> Result<DiffConfig, SpecErrors> {
        let config: DiffConfig = yaml_serde::from_str(text)
            .map_err(|e| SpecErrors(vec![SpecError::from_yaml(path, &e, 0)]))?;
        let m = &config.margins;
        let shares = [
            ("absolute", m.absolute),
            ("relative", m.relative),
            ("timing", m.timing),
        ];
        for (name, value) in shares {
            if !(value.is_finite() && value >= 0.0) {
                return Err(invalid(
                    path,
                    &format!("margins.{name}"),
                    "must be 0 or more",
                ));
            }
        }
        if !(m.alpha > 0.0 && m.alpha < 0.5) {
            return Err(invalid(path, "margins.alpha", "must be within (0, 0.5)"));
        }
        Ok(config)
    }

    pub fn ignored(&self, endpoint: &str, pointer: &str) -> bool {
        self.ignore.iter().any(|p| matches(p, endpoint, pointer))
    }

    pub fn is_text(&self, endpoint: &str, pointer: &str) -> bool {
        self.text_fields
            .iter()
            .any(|p| matches(p, endpoint, pointer))
    }

    pub fn array_mode(&self, endpoint: &str, pointer: &str) -> ArrayMode {
        most_specific(&self.arrays, endpoint, pointer)
            .cloned()
            .unwrap_or(ArrayMode::Ordered)
    }

    pub fn tolerance(&self, endpoint: &str, pointer: &str) -> f64 {
        most_specific(&self.tolerance, endpoint, pointer)
            .copied()
            .unwrap_or(0.0)
    }

    /// The module a field belongs to, if the attribution names one.
    pub fn module(&self, endpoint: &str, pointer: &str) -> Option<&str> {
        most_specific(&self.attribution, endpoint, pointer).map(String::as_str)
    }
}

fn invalid(path: &str, field: &str, message: &str) -> SpecErrors {
    SpecErrors(vec![SpecError {
        file: path.to_owned(),
        line: 0,
        column: 0,
        path: field.to_owned(),
        message: message.to_owned(),
        fix: None,
    }])
}

/// The value of the pattern that matches and names the most literal segments.
fn most_specific<'a, T>(
    patterns: &'a BTreeMap<String, T>,
    endpoint: &str,
    pointer: &str,
) -> Option<&'a T> {
    patterns
        .iter()
        .filter(|(p, _)| matches(p, endpoint, pointer))
        .max_by_key(|(p, _)| specificity(p))
        .map(|(_, v)| v)
}

fn specificity(pattern: &str) -> (usize, usize) {
    let literal = pattern
        .split('/')
        .filter(|s| *s != "*" && *s != "**")
        .count();
    (literal, pattern.len())
}

/// Whether `pattern` (maybe led by `METHOD /path `) covers `pointer` at `endpoint`.
pub fn matches(pattern: &str, endpoint: &str, pointer: &str) -> bool {
    let pattern = pattern.trim();
    let field = match pattern.rsplit_once(' ') {
        Some((scope, field)) => {
            if scope.trim() != endpoint && !endpoint.ends_with(&format!(" {}", scope.trim())) {
                return false;
            }
            field
        }
        None => pattern,
    };
    segments_match(
        &field.split('/').collect::<Vec<_>>(),
        &pointer.split('/').collect::<Vec<_>>(),
    )
}

fn segments_match(pattern: &[&str], pointer: &[&str]) -> bool {
    match (pattern.split_first(), pointer.split_first()) {
        (None, None) => true,
        (Some((&"**", _)), _) => true,
        (Some((p, rest)), Some((s, more))) => (*p == "*" || p == s) && segments_match(rest, more),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_segments_and_endpoints() {
        let chat = "POST /v1/chat/completions";
        assert!(matches("/usage/*", chat, "/usage/total_tokens"));
        assert!(!matches("/usage/*", chat, "/usage/details/cached"));
        assert!(matches("/usage/**", chat, "/usage/details/cached"));
        assert!(matches(
            "/choices/*/message/content",
            chat,
            "/choices/0/message/content"
        ));
        assert!(matches("POST /v1/chat/completions /id", chat, "/id"));
        assert!(matches("/v1/chat/completions /id", chat, "/id"));
        assert!(!matches("POST /v1/embeddings /id", chat, "/id"));
        assert!(matches("@ttft", chat, "@ttft"));
    }

    #[test]
    fn the_most_specific_pattern_names_the_module() {
        let config = DiffConfig::parse(
            "d.yaml",
            "attribution:\n  /usage/**: billing\n  /usage/total_tokens: totals\n",
        )
        .unwrap();
        let chat = "POST /v1/chat/completions";
        assert_eq!(config.module(chat, "/usage/total_tokens"), Some("totals"));
        assert_eq!(config.module(chat, "/usage/prompt_tokens"), Some("billing"));
        assert_eq!(config.module(chat, "/id"), None);
    }

    #[test]
    fn a_misspelt_key_is_located() {
        let error = DiffConfig::parse("d.yaml", "ignore: []\natribution: {}\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("d.yaml:2"), "{error}");
        assert!(error.contains("atribution"), "{error}");
    }
}
