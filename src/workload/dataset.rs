//! Prompt datasets: JSONL (`{"prompt": …}` or `{"messages": […]}`, optional
//! `max_tokens`), ShareGPT JSON (the first human turn is the prompt, the length of the
//! first answer its `max_tokens`, as vLLM's benchmark does) and CSV with a column
//! mapping. Read once and checked: a bad record stops the run naming file and line,
//! or is counted and skipped with `skip_invalid` — never dropped silently. Length
//! filters apply, and the order is sequential, shuffled (without replacement, per
//! pass) or random (with replacement), seeded.

use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::seed::mix_seed;
use crate::spec::{DatasetFormat, DatasetOrder};
use crate::tokenizer::LocalTokenizer;
use crate::workload::grade::{GradeTask, Grader};
use crate::workload::payload::{Payload, PromptBody};

/// How to read a dataset.
#[derive(Debug, Clone)]
pub struct Options {
    pub format: DatasetFormat,
    /// CSV: the prompt's column, and the column of `max_tokens` if any.
    pub prompt_column: String,
    pub max_tokens_column: Option<String>,
    /// Keep prompts of this many tokens (by the service's tokenizer).
    pub min_input_tokens: u32,
    pub max_input_tokens: u32,
    pub skip_invalid: bool,
    pub tokenizer: LocalTokenizer,
    /// The answer budget of records that carry no `max_tokens` of their own.
    pub default_max_tokens: Option<crate::workload::Length>,
    /// Grade each answer against its line's `expected` (JSONL only).
    pub grader: Option<Arc<Grader>>,
}

/// What was read, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DatasetInfo {
    pub file: String,
    /// Records in the file.
    pub records: u64,
    /// Records sent (within the length bounds).
    pub used: u64,
    pub skipped_invalid: u64,
    pub outside_length: u64,
    /// Records sent without a `max_tokens` (none of their own, and no `output_tokens`
    /// given): the server decides how long those answers are.
    #[serde(default)]
    pub without_max_tokens: u64,
}

/// A loaded dataset and the order to send it in.
#[derive(Debug, Clone)]
pub struct Dataset {
    entries: Vec<Payload>,
    order: DatasetOrder,
    default_max_tokens: Option<crate::workload::Length>,
    pub info: DatasetInfo,
}

impl Dataset {
    /// The payload of request `index`.
    pub fn payload(&self, seed: u64, index: u64) -> Payload {
        let n = self.entries.len() as u64;
        let position = match self.order {
            DatasetOrder::Sequential => index % n,
            DatasetOrder::Random => {
                ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x4453_524e, index])).random_range(0..n)
            }
            DatasetOrder::Shuffle => {
                // A seeded affine permutation of each pass: every record once per pass,
                // in an order that changes from pass to pass.
                let pass = index / n;
                let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x4453_5348, pass]));
                let mut a = rng.random_range(1..n.max(2));
                while gcd(a, n) != 1 {
                    a = a % n + 1;
                }
                let b = rng.random_range(0..n);
                (a * (index % n) + b) % n
            }
        };
        let mut payload = self.entries[position as usize].clone();
        if payload.max_tokens.is_none()
            && let Some(length) = &self.default_max_tokens
        {
            let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x4453_4d54, index]));
            payload.max_tokens = Some(length.sample(&mut rng));
        }
        payload
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A prompt and its answer budget, before the length filter.
struct Entry {
    prompt: PromptBody,
    max_tokens: Option<u32>,
    grade: Option<GradeTask>,
    fields: Option<Arc<Map<String, Value>>>,
}

/// Reads a dataset.
pub fn load(path: &Path, order: DatasetOrder, options: &Options) -> Result<Dataset, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(path, &text, order, options)
}

/// Reads a dataset's text; `path` names it in errors.
pub fn parse(
    path: &Path,
    text: &str,
    order: DatasetOrder,
    options: &Options,
) -> Result<Dataset, String> {
    let mut records = Records {
        path,
        skip_invalid: options.skip_invalid,
        seen: 0,
        skipped: 0,
        entries: Vec::new(),
    };
    match options.format {
        DatasetFormat::Jsonl => read_jsonl(text, &mut records, options.grader.as_ref())?,
        DatasetFormat::Sharegpt => read_sharegpt(text, &mut records, &options.tokenizer)?,
        DatasetFormat::Csv => read_csv(text, &mut records, options)?,
        DatasetFormat::Bfcl => {
            for (line, question) in super::bfcl::lines(path, text)? {
                let entry = question.and_then(|q| entry_of(&q, options.grader.as_ref()));
                records.take(line, entry)?;
            }
        }
    }
    let (kept, outside) = within_length(std::mem::take(&mut records.entries), options);
    if kept.is_empty() {
        return Err(format!(
            "{}: no usable prompts ({} records, {} invalid, {outside} outside {}–{} tokens)",
            path.display(),
            records.seen,
            records.skipped,
            options.min_input_tokens,
            options.max_input_tokens
        ));
    }
    let without_max_tokens = if options.default_max_tokens.is_some() {
        0
    } else {
        kept.iter().filter(|p| p.max_tokens.is_none()).count() as u64
    };
    Ok(Dataset {
        info: DatasetInfo {
            file: path.display().to_string(),
            records: records.seen,
            used: kept.len() as u64,
            skipped_invalid: records.skipped,
            outside_length: outside,
            without_max_tokens,
        },
        entries: kept,
        order,
        default_max_tokens: options.default_max_tokens,
    })
}

/// The records read so far: each one is kept, or counted and skipped, or stops the
/// read naming its line.
struct Records<'a> {
    path: &'a Path,
    skip_invalid: bool,
    seen: u64,
    skipped: u64,
    entries: Vec<Entry>,
}

impl Records<'_> {
    fn take(&mut self, line: usize, parsed: Result<Entry, String>) -> Result<(), String> {
        self.seen += 1;
        match parsed {
            Ok(entry) => self.entries.push(entry),
            Err(_) if self.skip_invalid => self.skipped += 1,
            Err(e) => {
                return Err(format!(
                    "{}:{line}: {e} (set `skip_invalid: true` to count and skip such records)",
                    self.path.display()
                ));
            }
        }
        Ok(())
    }
}

fn read_jsonl(
    text: &str,
    records: &mut Records,
    grader: Option<&Arc<Grader>>,
) -> Result<(), String> {
    for (n, line) in text.lines().enumerate() {
        if !line.trim().is_empty() {
            records.take(n + 1, jsonl_entry(line, grader))?;
        }
    }
    Ok(())
}

fn read_sharegpt(
    text: &str,
    records: &mut Records,
    tokenizer: &LocalTokenizer,
) -> Result<(), String> {
    let path = records.path.display();
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("{path}: not valid JSON: {e}"))?;
    let Value::Array(conversations) = value else {
        return Err(format!(
            "{path}: a ShareGPT file is a JSON list of conversations"
        ));
    };
    for (n, conversation) in conversations.iter().enumerate() {
        // Records of a JSON list are numbered by position, from 1.
        records.take(n + 1, sharegpt_entry(conversation, tokenizer))?;
    }
    Ok(())
}

fn read_csv(text: &str, records: &mut Records, options: &Options) -> Result<(), String> {
    let path = records.path.display().to_string();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| format!("{path}: {e}"))?
        .clone();
    let column = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            format!(
                "{path}: no column `{name}`; the header has: {}",
                headers.iter().collect::<Vec<_>>().join(", ")
            )
        })
    };
    let prompt_at = column(&options.prompt_column)?;
    let max_at = options
        .max_tokens_column
        .as_deref()
        .map(column)
        .transpose()?;
    for row in reader.records() {
        let line = row
            .as_ref()
            .ok()
            .and_then(|r| r.position())
            .map_or(0, |p| p.line() as usize);
        let parsed = row
            .map_err(|e| e.to_string())
            .and_then(|row| csv_entry(&row, prompt_at, max_at, &options.prompt_column));
        records.take(line, parsed)?;
    }
    Ok(())
}

fn csv_entry(
    row: &csv::StringRecord,
    prompt_at: usize,
    max_at: Option<usize>,
    prompt_column: &str,
) -> Result<Entry, String> {
    let prompt = row.get(prompt_at).unwrap_or("").to_owned();
    if prompt.trim().is_empty() {
        return Err(format!("empty `{prompt_column}`"));
    }
    let max_tokens = max_at
        .map(|i| {
            row.get(i)
                .unwrap_or("")
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| "max_tokens must be a positive integer".to_owned())
        })
        .transpose()?;
    Ok(Entry {
        prompt: PromptBody::Text(prompt),
        max_tokens,
        grade: None,
        fields: None,
    })
}

/// The entries within the length bounds, as payloads, and how many fell outside.
fn within_length(entries: Vec<Entry>, options: &Options) -> (Vec<Payload>, u64) {
    let mut outside = 0u64;
    let mut kept = Vec::new();
    for entry in entries {
        let tokens = match &entry.prompt {
            PromptBody::Text(t) => options.tokenizer.count(t),
            PromptBody::Messages(messages) => messages
                .iter()
                .map(|m| {
                    m["content"]
                        .as_str()
                        .map_or(0, |c| options.tokenizer.count(c))
                })
                .sum(),
        } as u32;
        if (options.min_input_tokens..=options.max_input_tokens).contains(&tokens) {
            kept.push(Payload {
                prompt: entry.prompt,
                max_tokens: entry.max_tokens,
                input_tokens: tokens,
                traceparent: None,
                prefix: None,
                previous_response_id: None,
                grade: entry.grade,
                fields: entry.fields,
            });
        } else {
            outside += 1;
        }
    }
    (kept, outside)
}

fn jsonl_entry(line: &str, grader: Option<&Arc<Grader>>) -> Result<Entry, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    entry_of(&value, grader)
}

fn entry_of(value: &Value, grader: Option<&Arc<Grader>>) -> Result<Entry, String> {
    let grade = match grader {
        None => None,
        Some(grader) => Some(GradeTask {
            grader: grader.clone(),
            expected: Arc::new(grader.expected(value)?),
        }),
    };
    let max_tokens = match value.get("max_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
                .ok_or_else(|| format!("max_tokens must be a positive integer, got {v}"))?
                as u32,
        ),
    };
    let prompt = match (value.get("prompt"), value.get("messages")) {
        (Some(Value::String(p)), _) => PromptBody::Text(p.clone()),
        (_, Some(Value::Array(messages))) if !messages.is_empty() => {
            PromptBody::Messages(messages.clone())
        }
        _ => {
            return Err(
                "each line needs a \"prompt\" string or a non-empty \"messages\" list".into(),
            );
        }
    };
    Ok(Entry {
        prompt,
        max_tokens,
        grade,
        fields: request_fields(value)?,
    })
}

/// The request fields a line may carry of its own: the tools it offers, the choice
/// of tool and the structured output it asks for.
const LINE_FIELDS: [&str; 3] = ["tools", "tool_choice", "response_format"];

fn request_fields(line: &Value) -> Result<Option<Arc<Map<String, Value>>>, String> {
    let mut fields = Map::new();
    for name in LINE_FIELDS {
        match line.get(name) {
            None | Some(Value::Null) => {}
            Some(tools) if name == "tools" && !tools.is_array() => {
                return Err("\"tools\" must be a list of tools".into());
            }
            Some(format) if name == "response_format" && !format.is_object() => {
                return Err("\"response_format\" must be an object".into());
            }
            Some(value) => {
                fields.insert(name.to_owned(), value.clone());
            }
        }
    }
    Ok((!fields.is_empty()).then(|| Arc::new(fields)))
}

fn sharegpt_entry(conversation: &Value, tokenizer: &LocalTokenizer) -> Result<Entry, String> {
    let turns = conversation
        .get("conversations")
        .and_then(Value::as_array)
        .ok_or("no \"conversations\" list")?;
    let text = |role: &[&str]| {
        turns.iter().find_map(|t| {
            let from = t.get("from").and_then(Value::as_str)?;
            role.contains(&from)
                .then(|| t.get("value").and_then(Value::as_str))
                .flatten()
        })
    };
    let prompt = text(&["human", "user"])
        .filter(|p| !p.trim().is_empty())
        .ok_or("no human turn with text")?;
    // The first answer's length is the request's budget, as vLLM's benchmark takes it.
    let max_tokens = text(&["gpt", "assistant", "chatgpt"])
        .map(|answer| (tokenizer.count(answer) as u32).max(1));
    Ok(Entry {
        prompt: PromptBody::Text(prompt.to_owned()),
        max_tokens,
        grade: None,
        fields: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(format: DatasetFormat) -> Options {
        Options {
            format,
            prompt_column: "question".into(),
            max_tokens_column: Some("budget".into()),
            min_input_tokens: 1,
            max_input_tokens: 1_000,
            skip_invalid: false,
            tokenizer: LocalTokenizer::Sim,
            default_max_tokens: None,
            grader: None,
        }
    }

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("redline-dataset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn jsonl_errors_name_the_line_and_skipping_counts_them() {
        let path = file(
            "p.jsonl",
            "{\"prompt\": \"hi there\", \"max_tokens\": 8}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n{\"prompt\": 5}\n{oops\n",
        );
        let err = load(
            &path,
            DatasetOrder::Sequential,
            &options(DatasetFormat::Jsonl),
        )
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                "{}:4: each line needs a \"prompt\" string or a non-empty \"messages\" list (set `skip_invalid: true` to count and skip such records)",
                path.display()
            )
        );
        let skipping = Options {
            skip_invalid: true,
            ..options(DatasetFormat::Jsonl)
        };
        let d = load(&path, DatasetOrder::Sequential, &skipping).unwrap();
        assert_eq!(
            (d.info.records, d.info.used, d.info.skipped_invalid),
            (4, 2, 2)
        );
        assert_eq!(d.payload(0, 0).max_tokens, Some(8));
        assert_eq!(d.payload(0, 0).input_tokens, 2);
    }

    #[test]
    fn sharegpt_takes_the_first_human_turn_and_the_answer_length() {
        let path = file(
            "s.json",
            r#"[{"id": "a", "conversations": [{"from": "human", "value": "hello there friend"}, {"from": "gpt", "value": "hi how are you today"}]},
                {"id": "b", "conversations": [{"from": "gpt", "value": "no question"}]}]"#,
        );
        let err = load(
            &path,
            DatasetOrder::Sequential,
            &options(DatasetFormat::Sharegpt),
        )
        .unwrap_err();
        assert!(err.contains("s.json:2: no human turn with text"), "{err}");
        let skipping = Options {
            skip_invalid: true,
            ..options(DatasetFormat::Sharegpt)
        };
        let d = load(&path, DatasetOrder::Sequential, &skipping).unwrap();
        assert_eq!(
            d.payload(0, 0).prompt,
            PromptBody::Text("hello there friend".into())
        );
        assert_eq!(d.payload(0, 0).max_tokens, Some(5));
    }

    #[test]
    fn csv_maps_columns_and_filters_lengths() {
        let path = file(
            "q.csv",
            "id,question,budget\n1,\"what is a kv cache, briefly\",32\n2,hi,16\n3,a much longer question than the others by far,x\n",
        );
        let err = load(
            &path,
            DatasetOrder::Sequential,
            &options(DatasetFormat::Csv),
        )
        .unwrap_err();
        assert!(
            err.contains("q.csv:4: max_tokens must be a positive integer"),
            "{err}"
        );
        let bounded = Options {
            min_input_tokens: 3,
            skip_invalid: true,
            ..options(DatasetFormat::Csv)
        };
        let d = load(&path, DatasetOrder::Sequential, &bounded).unwrap();
        assert_eq!(
            (d.info.used, d.info.outside_length, d.info.skipped_invalid),
            (1, 1, 1)
        );
        assert_eq!(d.payload(0, 5).max_tokens, Some(32));
        let missing = Options {
            prompt_column: "prompt".into(),
            ..options(DatasetFormat::Csv)
        };
        let err = load(&path, DatasetOrder::Sequential, &missing).unwrap_err();
        assert!(
            err.ends_with("no column `prompt`; the header has: id, question, budget"),
            "{err}"
        );
    }

    #[test]
    fn shuffle_sends_every_record_once_per_pass_in_a_seeded_order() {
        let lines: String = (0..10)
            .map(|i| format!("{{\"prompt\": \"p{i}\"}}\n"))
            .collect();
        let path = file("ten.jsonl", &lines);
        let d = load(&path, DatasetOrder::Shuffle, &options(DatasetFormat::Jsonl)).unwrap();
        let pass = |seed, p: u64| {
            let mut seen: Vec<String> = (p * 10..p * 10 + 10)
                .map(|i| format!("{:?}", d.payload(seed, i).prompt))
                .collect();
            let order = seen.clone();
            seen.sort();
            seen.dedup();
            (seen.len(), order)
        };
        let (distinct, first) = pass(1, 0);
        assert_eq!(distinct, 10, "without replacement");
        assert_eq!(pass(1, 0).1, first, "seeded");
        assert_ne!(pass(2, 0).1, first);
    }
}
