//! Graded datasets: each line's expected answer, and the grader that says whether an
//! answer is correct, wrong or could not be read at all (unparsed). The checks are
//! semantic, not byte-equal, because a model's output is not deterministic: a number
//! is the last number said, a choice the letter the answer settles on (as lm-eval's
//! multiple-choice filters extract it), structured output valid against its schema.
//!
//! Grading is bounded whatever the server sends: an answer is looked at only up to
//! [`MAX_GRADED_BYTES`] (a longer one is unparsed), and every pattern runs in linear
//! time (the `regex` crate).

use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde_json::Value;

use crate::record::{Grade, GradeBucket, GradeVerdict};
use crate::spec::GraderSpec;
use crate::workload::tool_ast::{self, ExpectedCalls, MadeCall, ToolSchema, tool_schemas};

/// The most of an answer a grader reads: past it the answer is unparsed.
pub const MAX_GRADED_BYTES: usize = 1 << 20;

/// A grader, checked when the spec is read.
#[derive(Debug)]
pub enum Grader {
    /// The answer equals the expected text, after trimming and (unless asked)
    /// ignoring case; `ignore_punctuation` drops ASCII punctuation from both.
    Exact {
        case_sensitive: bool,
        ignore_punctuation: bool,
    },
    /// The expected value is a pattern the answer must contain a match of.
    Regex,
    /// The last number in the answer is within `tolerance` of the expected one.
    Numeric { tolerance: f64 },
    /// The letter the answer settles on is the expected one.
    Choice,
    /// The answer is JSON valid against the schema (the grader's, or the line's
    /// `schema`).
    JsonSchema {
        schema: Option<Arc<jsonschema::Validator>>,
    },
    /// The answer's tool calls by BFCL's AST rule ([`tool_ast`]).
    ToolAst,
}

/// What a line expects: its answer, and for `json_schema` its own schema.
#[derive(Debug)]
pub struct Expected {
    pub answer: Value,
    /// A pattern (`regex`), compiled when the dataset was read.
    pub pattern: Option<Regex>,
    pub schema: Option<Arc<jsonschema::Validator>>,
    /// `tool_ast`: the calls expected, and the tools the line offers.
    pub calls: Option<ExpectedCalls>,
    pub tools: Vec<ToolSchema>,
}

/// One request's grading: the run's grader and its line's expectation.
#[derive(Debug, Clone)]
pub struct GradeTask {
    pub grader: Arc<Grader>,
    pub expected: Arc<Expected>,
}

/// The same line's task (a payload's equality: the same grading, not equal values).
impl PartialEq for GradeTask {
    fn eq(&self, other: &GradeTask) -> bool {
        Arc::ptr_eq(&self.grader, &other.grader) && Arc::ptr_eq(&self.expected, &other.expected)
    }
}

impl Grader {
    pub fn from_spec(spec: &GraderSpec) -> Result<Grader, String> {
        Ok(match spec {
            GraderSpec::Exact {
                case_sensitive,
                ignore_punctuation,
            } => Grader::Exact {
                case_sensitive: *case_sensitive,
                ignore_punctuation: *ignore_punctuation,
            },
            GraderSpec::Regex => Grader::Regex,
            GraderSpec::Numeric { tolerance } => {
                if !(tolerance.is_finite() && *tolerance >= 0.0) {
                    return Err(format!("tolerance must be a number >= 0, got {tolerance}"));
                }
                Grader::Numeric {
                    tolerance: *tolerance,
                }
            }
            GraderSpec::Choice => Grader::Choice,
            GraderSpec::JsonSchema { schema } => Grader::JsonSchema {
                schema: schema.as_ref().map(compile_schema).transpose()?,
            },
            GraderSpec::ToolAst => Grader::ToolAst,
        })
    }

    /// A dataset line's expectation, checked: what this grader needs of it.
    pub fn expected(&self, line: &Value) -> Result<Expected, String> {
        let answer = line.get("expected").cloned().unwrap_or(Value::Null);
        let schema = line.get("schema").map(compile_schema).transpose()?;
        let mut expected = Expected {
            answer,
            pattern: None,
            schema,
            calls: None,
            tools: Vec::new(),
        };
        let text = expected.answer.as_str();
        match self {
            Grader::Exact { .. } | Grader::Regex if text.is_none() => {
                return Err("needs an \"expected\" string for its grader".into());
            }
            Grader::Regex => {
                let pattern = text.unwrap_or_default();
                expected.pattern = Some(
                    Regex::new(pattern)
                        .map_err(|e| format!("\"expected\" is not a valid pattern: {e}"))?,
                );
            }
            Grader::Numeric { .. } if expected_number(&expected.answer).is_none() => {
                return Err("needs an \"expected\" number for the numeric grader".into());
            }
            Grader::Choice if choice_letter(&expected.answer).is_none() => {
                return Err("needs an \"expected\" letter (A to Z) for the choice grader".into());
            }
            Grader::ToolAst => {
                let calls = ExpectedCalls::from_line(&expected.answer)?;
                expected.tools = line.get("tools").map(tool_schemas).unwrap_or_default();
                if let ExpectedCalls::Calls(calls) = &calls
                    && let Some(call) = calls
                        .iter()
                        .find(|c| !expected.tools.iter().any(|t| t.name == c.name))
                {
                    return Err(format!(
                        "expects a call to {}, which is not among the line's \"tools\" (their parameters' types are what the call is checked against)",
                        call.name
                    ));
                }
                expected.calls = Some(calls);
            }
            Grader::JsonSchema { schema: None } if expected.schema.is_none() => {
                return Err(
                    "needs a \"schema\", or the grader's `schema`, for the json_schema grader"
                        .into(),
                );
            }
            _ => {}
        }
        Ok(expected)
    }
}

fn compile_schema(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    jsonschema::validator_for(schema)
        .map(Arc::new)
        .map_err(|e| format!("the schema is not a valid JSON Schema: {e}"))
}

fn expected_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().replace(',', "").parse().ok(),
        _ => None,
    }
    .filter(|n: &f64| n.is_finite())
}

fn choice_letter(value: &Value) -> Option<char> {
    let text = value.as_str()?.trim();
    let mut chars = text.chars();
    let letter = chars.next()?.to_ascii_uppercase();
    (chars.next().is_none() && letter.is_ascii_uppercase()).then_some(letter)
}

impl GradeTask {
    /// Grades a successful request's answer: its text, and the tool calls it made.
    pub fn grade(&self, answer: &str, calls: &[MadeCall<'_>]) -> Grade {
        if answer.len() > MAX_GRADED_BYTES {
            let why = format!("over {MAX_GRADED_BYTES} bytes: not graded");
            return unparsed(why);
        }
        let expected = &self.expected;
        match self.grader.as_ref() {
            Grader::Exact {
                case_sensitive,
                ignore_punctuation,
            } => {
                let norm = |s: &str| normalize(s, *case_sensitive, *ignore_punctuation);
                let want = expected.answer.as_str().unwrap_or_default();
                verdict(
                    norm(answer) == norm(want),
                    "the answer is not the expected text",
                )
            }
            Grader::Regex => {
                let matched = expected
                    .pattern
                    .as_ref()
                    .is_some_and(|p| p.is_match(answer));
                verdict(matched, "the answer does not match the expected pattern")
            }
            Grader::Numeric { tolerance } => {
                let want = expected_number(&expected.answer).unwrap_or(f64::NAN);
                match last_number(answer) {
                    None => unparsed("no number in the answer".into()),
                    Some(got) => verdict(
                        (got - want).abs() <= *tolerance,
                        &format!("the last number {got} is not {want} ± {tolerance}"),
                    ),
                }
            }
            Grader::Choice => {
                let want = choice_letter(&expected.answer).unwrap_or('?');
                match extract_choice(answer) {
                    None => unparsed("no choice letter in the answer".into()),
                    Some(got) => verdict(got == want, &format!("chose {got}, not {want}")),
                }
            }
            Grader::JsonSchema { schema } => {
                let schema = expected.schema.as_ref().or(schema.as_ref());
                grade_json(answer, schema.expect("checked when the line was read"))
            }
            Grader::ToolAst => {
                let want = expected
                    .calls
                    .as_ref()
                    .expect("checked when the line was read");
                grade_calls(want, &expected.tools, calls)
            }
        }
    }
}

fn verdict(correct: bool, why: &str) -> Grade {
    match correct {
        true => Grade {
            verdict: GradeVerdict::Correct,
            bucket: None,
            note: None,
        },
        false => Grade {
            verdict: GradeVerdict::Wrong,
            bucket: None,
            note: Some(why.to_owned()),
        },
    }
}

fn unparsed(why: String) -> Grade {
    Grade {
        verdict: GradeVerdict::Unparsed,
        bucket: None,
        note: Some(why),
    }
}

/// Tool calls: correct, or wrong (unparsed when no call could be read) with the
/// bucket of the miss. A huge answer's arguments are unparsed without being read.
fn grade_calls(want: &ExpectedCalls, tools: &[ToolSchema], calls: &[MadeCall<'_>]) -> Grade {
    let size: usize = calls.iter().map(|c| c.arguments.len()).sum();
    let checked = match size > MAX_GRADED_BYTES {
        true => Err((
            GradeBucket::Unparsed,
            format!("arguments over {MAX_GRADED_BYTES} bytes: not graded"),
        )),
        false => tool_ast::check(want, tools, calls),
    };
    match checked {
        Ok(()) => verdict(true, ""),
        Err((bucket, why)) => Grade {
            verdict: match bucket {
                GradeBucket::Unparsed => GradeVerdict::Unparsed,
                _ => GradeVerdict::Wrong,
            },
            bucket: Some(bucket),
            note: Some(why),
        },
    }
}

fn normalize(text: &str, case_sensitive: bool, ignore_punctuation: bool) -> String {
    let kept: String = text
        .chars()
        .filter(|c| !(ignore_punctuation && c.is_ascii_punctuation()))
        .collect();
    let words: Vec<&str> = kept.split_whitespace().collect();
    let joined = words.join(" ");
    match case_sensitive {
        true => joined,
        false => joined.to_lowercase(),
    }
}

/// Numbers as answers write them: a sign, thousands separators, decimals.
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?").expect("a valid pattern")
});

/// The last number in `text` (GSM8K's "flexible extract": the final number said).
fn last_number(text: &str) -> Option<f64> {
    NUMBER
        .find_iter(text)
        .filter_map(|m| m.as_str().replace(',', "").parse::<f64>().ok())
        .last()
}

/// The letter the answer settles on, tried as lm-eval's multiple-choice filters do:
/// an "answer is (X)" statement, else the first letter in parentheses, else a line
/// that starts with the letter, else an answer that is only the letter.
fn extract_choice(text: &str) -> Option<char> {
    static PATTERNS: LazyLock<[Regex; 3]> = LazyLock::new(|| {
        [
            r"(?i)answer\s*(?:is|:)?\s*:?\s*\(?([A-Z])\b\)?",
            r"\(([A-Z])\)",
            r"(?m)^\s*([A-Z])[\.\):]",
        ]
        .map(|p| Regex::new(p).expect("a valid pattern"))
    });
    PATTERNS
        .iter()
        .find_map(|p| p.captures(text).and_then(|c| c[1].chars().next()))
        .map(|c| c.to_ascii_uppercase())
        .or_else(|| choice_letter(&Value::String(text.to_owned())))
}

/// Structured output: JSON (inside one Markdown fence at most), valid against the
/// schema.
fn grade_json(answer: &str, schema: &jsonschema::Validator) -> Grade {
    let trimmed = answer.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    let value: Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(e) => return unparsed(format!("not JSON: {e}")),
    };
    match schema.iter_errors(&value).next() {
        None => verdict(true, ""),
        Some(error) => {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            let why = format!("invalid at {at}: {error}");
            verdict(false, &crate::record::cut_to(&why, 200))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn task(grader: Grader, line: Value) -> GradeTask {
        let expected = grader.expected(&line).unwrap();
        GradeTask {
            grader: Arc::new(grader),
            expected: Arc::new(expected),
        }
    }

    fn verdicts(task: &GradeTask, answers: &[&str]) -> Vec<GradeVerdict> {
        answers.iter().map(|a| task.grade(a, &[]).verdict).collect()
    }

    use GradeVerdict::{Correct, Unparsed, Wrong};

    #[test]
    fn numbers_are_the_last_one_said_within_the_tolerance() {
        let t = task(
            Grader::Numeric { tolerance: 0.01 },
            json!({"expected": "1,234.5"}),
        );
        assert_eq!(
            verdicts(
                &t,
                &[
                    "So 12 apples... the answer is 1,234.5",
                    "1234.504",
                    "It is 1234",
                    "none"
                ]
            ),
            [Correct, Correct, Wrong, Unparsed]
        );
        assert_eq!(
            t.grade("-3", &[]).note.unwrap(),
            "the last number -3 is not 1234.5 ± 0.01"
        );
    }

    #[test]
    fn choices_are_extracted_as_lm_eval_does() {
        let t = task(Grader::Choice, json!({"expected": "b"}));
        assert_eq!(
            verdicts(
                &t,
                &[
                    "The answer is (B).",
                    "I think (B) is right",
                    "B. Because it is",
                    "b",
                    "Answer: C",
                    "I cannot tell",
                ]
            ),
            [Correct, Correct, Correct, Correct, Wrong, Unparsed]
        );
    }

    #[test]
    fn exact_and_regex_compare_the_text() {
        let t = task(
            Grader::Exact {
                case_sensitive: false,
                ignore_punctuation: true,
            },
            json!({"expected": "Paris"}),
        );
        assert_eq!(verdicts(&t, &["  paris. ", "Lyon"]), [Correct, Wrong]);
        let t = task(Grader::Regex, json!({"expected": r"\bParis\b"}));
        assert_eq!(
            verdicts(&t, &["It is Paris.", "Parisian"]),
            [Correct, Wrong]
        );
    }

    #[test]
    fn structured_output_is_validated_not_only_parsed() {
        let schema = json!({"type": "object", "required": ["city"],
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}});
        let t = task(
            Grader::JsonSchema { schema: None },
            json!({"schema": schema}),
        );
        assert_eq!(
            verdicts(
                &t,
                &[
                    r#"{"city": "Oslo", "days": 3}"#,
                    "```json\n{\"city\": \"Oslo\"}\n```",
                    r#"{"city": "Oslo", "days": 0}"#,
                    r#"{"days": 2}"#,
                    r#"{"city": "Os"#,
                ]
            ),
            [Correct, Correct, Wrong, Wrong, Unparsed]
        );
        assert!(
            t.grade(r#"{"days": 0, "city": "x"}"#, &[])
                .note
                .unwrap()
                .contains("/days")
        );
    }

    #[test]
    fn lines_without_what_their_grader_needs_are_refused() {
        let exact = Grader::Exact {
            case_sensitive: false,
            ignore_punctuation: false,
        };
        assert!(
            exact
                .expected(&json!({"prompt": "x"}))
                .unwrap_err()
                .contains("expected")
        );
        let bad = Grader::Regex
            .expected(&json!({"expected": "(unclosed"}))
            .unwrap_err();
        assert!(bad.contains("not a valid pattern"), "{bad}");
        assert!(Grader::Choice.expected(&json!({"expected": "AB"})).is_err());
        let no_schema = Grader::JsonSchema { schema: None };
        assert!(
            no_schema
                .expected(&json!({}))
                .unwrap_err()
                .contains("schema")
        );
        let bad = no_schema
            .expected(&json!({"schema": {"type": 7}}))
            .unwrap_err();
        assert!(bad.contains("not a valid JSON Schema"), "{bad}");
    }

    #[test]
    fn a_tool_call_line_names_its_tools() {
        let grader = Grader::ToolAst;
        let line = json!({"prompt": "p", "expected": [{"f": {"x": [1]}}]});
        let err = grader.expected(&line).unwrap_err();
        assert!(err.contains("expects a call to f"), "{err}");
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]);
        let line = json!({"prompt": "p", "tools": tools, "expected": [{"f": {"x": [1]}}]});
        assert!(grader.expected(&line).is_ok());
        let none = json!({"prompt": "p", "expected": []});
        assert!(
            grader.expected(&none).is_ok(),
            "no call due: no tools needed"
        );
        let bad = json!({"prompt": "p", "tools": tools, "expected": {"f": {}}});
        assert!(grader.expected(&bad).unwrap_err().contains("ground_truth"));
    }

    #[test]
    fn a_huge_answer_is_unparsed_at_once() {
        let t = task(Grader::Numeric { tolerance: 0.0 }, json!({"expected": 1}));
        let huge = "9".repeat(10 << 20);
        let grade = t.grade(&huge, &[]);
        assert_eq!(grade.verdict, Unparsed);
        assert!(grade.note.unwrap().contains("not graded"));
    }
}
