//! Checks on what a step produced. A failed check fails the step with stage `assert`,
//! kind `assert`, and a message that carries the figure (`similarity 0.71 < 0.85`).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde_json::Value;

use crate::spec::flow::AssertSpec;
use crate::spec::{Problems, ServiceSpec};

/// "Means the same as": the expected text, the bar, and who judges.
#[derive(Debug, Clone)]
pub struct Similar {
    pub expected: String,
    pub threshold: f64,
    /// The service whose embeddings judge; `None` for the lexical fallback.
    pub embed_service: Option<String>,
}

/// A step's checks, validated.
#[derive(Debug, Clone, Default)]
pub struct Assertion {
    /// The JSON Pointer to check, for JSON outputs.
    pub field: Option<String>,
    pub similar: Option<Similar>,
    contains: Option<String>,
    regex: Option<Regex>,
    schema: Option<Arc<jsonschema::Validator>>,
    non_empty: bool,
    finite: bool,
    not_truncated: bool,
}

/// What a step produced, as the checks see it.
#[derive(Debug, Default)]
pub struct Output<'a> {
    pub text: &'a str,
    /// The JSON answer, for steps that answer JSON.
    pub json: Option<&'a Value>,
    /// Tool calls' arguments, for a chat answer that calls tools.
    pub tool_arguments: Vec<&'a str>,
    pub finish_reason: Option<&'a str>,
    /// Numbers the step returned (an embedding), checked by `finite`.
    pub numbers: &'a [f32],
    /// Results returned, for steps that return a list (search hits).
    pub items: Option<usize>,
}

static NON_FINITE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(^|[^a-z])([+-]?(nan|inf|infinity))([^a-z]|$)").expect("a valid pattern")
});

impl Assertion {
    pub fn from_spec(
        spec: &AssertSpec,
        services: &BTreeMap<String, ServiceSpec>,
        at: &str,
        problems: &mut Problems,
    ) -> Option<Assertion> {
        let mut ok = true;
        let threshold = spec.threshold.unwrap_or(0.85);
        if !(-1.0..=1.0).contains(&threshold) {
            problems.add(
                &format!("{at}.threshold"),
                format!("{threshold} is not a cosine similarity (-1 to 1)"),
                Some("write e.g. `threshold: 0.85`".into()),
            );
            ok = false;
        }
        if let Some(service) = &spec.embed_service
            && !services.contains_key(service)
        {
            problems.add(
                &format!("{at}.embed_service"),
                format!("names service `{service}`, which is not under spec.services"),
                None,
            );
            ok = false;
        }
        let regex = spec.regex.as_ref().and_then(|pattern| {
            Regex::new(pattern)
                .map_err(|e| {
                    problems.add(
                        &format!("{at}.regex"),
                        format!("is not a regular expression: {e}"),
                        None,
                    );
                    ok = false;
                })
                .ok()
        });
        let schema = spec.json_schema.as_ref().and_then(|schema| {
            jsonschema::validator_for(schema)
                .map_err(|e| {
                    problems.add(
                        &format!("{at}.json_schema"),
                        format!("is not a JSON Schema: {e}"),
                        None,
                    );
                    ok = false;
                })
                .ok()
                .map(Arc::new)
        });
        if let Some(field) = &spec.field
            && !(field.is_empty() || field.starts_with('/'))
        {
            problems.add(
                &format!("{at}.field"),
                format!("`{field}` is not a JSON Pointer"),
                Some("start it with `/`, e.g. `/answer` or `/data/0/text`".into()),
            );
            ok = false;
        }
        ok.then(|| Assertion {
            field: spec.field.clone(),
            similar: spec.similar_to.as_ref().map(|expected| Similar {
                expected: expected.clone(),
                threshold,
                embed_service: spec.embed_service.clone(),
            }),
            contains: spec.contains.clone(),
            regex,
            schema,
            non_empty: spec.non_empty,
            finite: spec.finite,
            not_truncated: spec.not_truncated,
        })
    }

    /// Every check but similarity (which needs embeddings): the first that fails.
    pub fn check(&self, out: &Output) -> Result<(), String> {
        if self.non_empty {
            let empty = match out.items {
                Some(n) => n == 0,
                None => out.text.trim().is_empty() && out.tool_arguments.is_empty(),
            };
            if empty {
                return Err(match out.items {
                    Some(_) => "empty result: no items returned".into(),
                    None => "empty output".into(),
                });
            }
        }
        if self.not_truncated && out.finish_reason == Some("length") {
            return Err("truncated: finish_reason is `length` (the answer hit max_tokens)".into());
        }
        if self.finite {
            if let Some(bad) = out.numbers.iter().find(|x| !x.is_finite()) {
                return Err(format!("non-finite number {bad} in the output"));
            }
            if let Some(found) = NON_FINITE.captures(out.text) {
                return Err(format!("non-finite number `{}` in the output", &found[2]));
            }
        }
        if let Some(needle) = &self.contains
            && !out.text.contains(needle.as_str())
        {
            return Err(format!("output does not contain `{needle}`"));
        }
        if let Some(regex) = &self.regex
            && !regex.is_match(out.text)
        {
            return Err(format!("output does not match /{}/", regex.as_str()));
        }
        if let Some(schema) = &self.schema {
            let parsed;
            let documents: Vec<(&str, &Value)> = if !out.tool_arguments.is_empty() {
                parsed = out
                    .tool_arguments
                    .iter()
                    .map(|a| serde_json::from_str::<Value>(a).map_err(|e| (a, e)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|(a, e)| format!("tool arguments are not JSON ({e}): {a}"))?;
                parsed.iter().map(|v| ("tool arguments", v)).collect()
            } else if let Some(json) = out.json {
                vec![("output", json)]
            } else {
                parsed = vec![
                    serde_json::from_str::<Value>(out.text)
                        .map_err(|e| format!("output is not JSON ({e})"))?,
                ];
                parsed.iter().map(|v| ("output", v)).collect()
            };
            for (what, document) in documents {
                if let Err(error) = schema.validate(document) {
                    return Err(format!(
                        "{what} do not match the schema: {error} at `{}`",
                        error.instance_path()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Word overlap (Jaccard over lowercased words): the labelled stand-in for semantic
/// similarity when no embeddings service is named.
pub fn lexical_similarity(a: &str, b: &str) -> f64 {
    let words = |t: &str| -> HashSet<String> {
        t.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// The failure message of a similarity below the bar.
pub fn similarity_verdict(similarity: f64, similar: &Similar) -> Result<(), String> {
    if similarity >= similar.threshold {
        return Ok(());
    }
    let how = match &similar.embed_service {
        Some(service) => format!("cosine of `{service}` embeddings"),
        None => "lexical word overlap: no embed_service named".to_owned(),
    };
    Err(format!(
        "similarity {similarity:.2} < {:.2} ({how})",
        similar.threshold
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assertion(spec: AssertSpec) -> Assertion {
        let mut problems = Problems::new();
        let a = Assertion::from_spec(&spec, &BTreeMap::new(), "a", &mut problems);
        a.unwrap_or_else(|| panic!("{problems:?}"))
    }

    #[test]
    fn each_check_fails_with_its_reason() {
        let a = assertion(AssertSpec {
            non_empty: true,
            finite: true,
            not_truncated: true,
            contains: Some("cache".into()),
            regex: Some(r"\d+ ms".into()),
            ..AssertSpec::default()
        });
        let out = |text| Output {
            text,
            ..Output::default()
        };
        assert_eq!(a.check(&out("cache warmed in 20 ms")), Ok(()));
        assert_eq!(a.check(&out("  ")).unwrap_err(), "empty output");
        assert_eq!(
            a.check(&out("cache at NaN ms")).unwrap_err(),
            "non-finite number `NaN` in the output"
        );
        assert!(
            a.check(&out("the infinite cache in 3 ms")).is_ok(),
            "a word, not inf"
        );
        assert_eq!(
            a.check(&out("warm in 20 ms")).unwrap_err(),
            "output does not contain `cache`"
        );
        assert_eq!(
            a.check(&out("cache warm")).unwrap_err(),
            r"output does not match /\d+ ms/"
        );
        let truncated = Output {
            text: "cache in 5 ms",
            finish_reason: Some("length"),
            ..Output::default()
        };
        assert!(a.check(&truncated).unwrap_err().starts_with("truncated"));
        let empty_hits = Output {
            items: Some(0),
            ..Output::default()
        };
        assert_eq!(
            a.check(&empty_hits).unwrap_err(),
            "empty result: no items returned"
        );
        let nan = Output {
            text: "cache 1 ms",
            numbers: &[0.5, f32::NAN],
            ..Output::default()
        };
        assert_eq!(
            a.check(&nan).unwrap_err(),
            "non-finite number NaN in the output"
        );
    }

    #[test]
    fn json_schema_checks_output_or_tool_arguments() {
        let a = assertion(AssertSpec {
            json_schema: Some(serde_json::json!({
                "type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}}
            })),
            ..AssertSpec::default()
        });
        let good = Output {
            tool_arguments: vec![r#"{"city": "Oslo"}"#],
            ..Output::default()
        };
        assert_eq!(a.check(&good), Ok(()));
        let bad = Output {
            tool_arguments: vec![r#"{"town": "Oslo"}"#],
            ..Output::default()
        };
        assert!(
            a.check(&bad)
                .unwrap_err()
                .starts_with("tool arguments do not match the schema")
        );
        let broken = Output {
            text: "{not json",
            ..Output::default()
        };
        assert!(
            a.check(&broken)
                .unwrap_err()
                .starts_with("output is not JSON")
        );
    }

    #[test]
    fn similarity_failures_name_the_figure_and_the_judge() {
        let lexical = Similar {
            expected: "x".into(),
            threshold: 0.85,
            embed_service: None,
        };
        assert_eq!(
            similarity_verdict(0.714, &lexical).unwrap_err(),
            "similarity 0.71 < 0.85 (lexical word overlap: no embed_service named)"
        );
        assert!(similarity_verdict(0.9, &lexical).is_ok());
        assert!(lexical_similarity("reset the password", "Reset the password!") > 0.99);
        assert!(lexical_similarity("reset the password", "quarterly revenue") < 0.01);
    }
}
