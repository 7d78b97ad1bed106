//! Trace replay: a timestamped request trace (Mooncake's JSONL format) sent on its own
//! schedule. Each line is `{"timestamp": ms, "input_length": n, "output_length": n,
//! "hash_ids": [...]}`; requests whose `hash_ids` share a prefix share the prompt
//! blocks those ids stand for, so the server's prefix cache sees what it saw in
//! production.

use std::path::Path;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::seed::mix_seed;
use crate::workload::payload::{Payload, PromptBody};
use crate::workload::words;

/// A trace as read: when each request arrives (for the schedule), and what it asks
/// (for the workload), in trace order.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Offsets from the trace's first request.
    pub offsets: Vec<Duration>,
    pub prompts: TracePrompts,
}

/// What each request of a trace asks.
#[derive(Debug, Clone, PartialEq)]
pub struct TracePrompts {
    requests: Vec<TraceRequest>,
    /// Tokens per hash id's block.
    block_tokens: u32,
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
struct TraceRequest {
    input_tokens: u32,
    output_tokens: u32,
    /// Ids of the prompt's blocks, in order; equal ids are equal text.
    hash_ids: Vec<u64>,
}

/// The longest prompt or answer a trace may ask for: each prompt is built as text, so
/// a length of 4 billion would be 20 GB of it.
const MAX_TRACE_TOKENS: f64 = 10_000_000.0;

/// Reads a trace; errors name the file and line.
pub fn read(path: &Path, block_tokens: u32) -> Result<Trace, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(path, &text, block_tokens)
}

/// Reads a trace's text; `path` names it in errors.
pub fn parse(path: &Path, text: &str, block_tokens: u32) -> Result<Trace, String> {
    let (offsets, requests) = parse_requests(path, text)?;
    Ok(Trace {
        offsets,
        prompts: TracePrompts {
            requests,
            block_tokens,
        },
    })
}

fn parse_requests(path: &Path, text: &str) -> Result<(Vec<Duration>, Vec<TraceRequest>), String> {
    let mut offsets = Vec::new();
    let mut requests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("{}: not valid JSON: {e}", at()))?;
        let number = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| value.get(*name))
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{}: needs `{}`, a number >= 0", at(), names.join("` or `")))
        };
        let timestamp_ms = number(&["timestamp", "arrival_ms"])?;
        let input = number(&["input_length", "input_tokens"])?;
        let output = number(&["output_length", "output_tokens"])?;
        if input < 1.0 || output < 1.0 {
            return Err(format!("{}: lengths must be at least 1 token", at()));
        }
        if input > MAX_TRACE_TOKENS || output > MAX_TRACE_TOKENS {
            return Err(format!(
                "{}: lengths must be at most {MAX_TRACE_TOKENS} tokens (no model reads or writes more at once)",
                at()
            ));
        }
        let offset = Duration::try_from_secs_f64(timestamp_ms / 1e3)
            .map_err(|_| format!("{}: timestamp {timestamp_ms:e} ms is out of range", at()))?;
        let hash_ids = match value.get("hash_ids") {
            None => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|id| {
                    id.as_u64()
                        .ok_or_else(|| format!("{}: hash_ids must be non-negative integers", at()))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("{}: hash_ids must be a list", at())),
        };
        offsets.push(offset);
        requests.push(TraceRequest {
            input_tokens: input as u32,
            output_tokens: output as u32,
            hash_ids,
        });
    }
    if offsets.is_empty() {
        return Err(format!("{}: the trace is empty", path.display()));
    }
    if offsets.windows(2).any(|w| w[1] < w[0]) {
        return Err(format!(
            "{}: timestamps must not decrease (sort the trace by timestamp)",
            path.display()
        ));
    }
    let first = offsets[0];
    for at in &mut offsets {
        *at -= first;
    }
    Ok((offsets, requests))
}

impl TracePrompts {
    /// The prompt of the trace's request `n`, sent as request `index`.
    pub fn payload(&self, n: usize, seed: u64, index: u64) -> Payload {
        payload(&self.requests[n], self.block_tokens, seed, index)
    }
}

/// The prompt of a trace request: one block of `block_tokens` words per hash id (the
/// last cut to the input length), then fresh words up to the input length. A block's
/// words depend only on its id and the seed, so shared ids give shared prefixes.
fn payload(entry: &TraceRequest, block_tokens: u32, seed: u64, index: u64) -> Payload {
    let mut text = String::new();
    let mut left = entry.input_tokens;
    for id in &entry.hash_ids {
        if left == 0 {
            break;
        }
        let n = block_tokens.min(left);
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x4841_5348, *id]));
        text.push_str(&words(&mut rng, n));
        left -= n;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x5452_4143, index]));
    text.push_str(&words(&mut rng, left));
    Payload {
        prompt: PromptBody::Text(text),
        max_tokens: Some(entry.output_tokens),
        input_tokens: entry.input_tokens,
        traceparent: None,
        prefix: None,
        previous_response_id: None,
        grade: None,
        fields: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(input: u32, ids: &[u64]) -> TraceRequest {
        TraceRequest {
            input_tokens: input,
            output_tokens: 4,
            hash_ids: ids.to_vec(),
        }
    }

    #[test]
    fn shared_hash_ids_share_their_prefix_and_lengths_are_exact() {
        let text = |p: Payload| match p.prompt {
            PromptBody::Text(t) => t,
            PromptBody::Messages(m) => panic!("replayed prompts are text, got messages {m:?}"),
        };
        let a = text(payload(&entry(40, &[7, 8]), 16, 1, 0));
        let b = text(payload(&entry(40, &[7, 9]), 16, 1, 1));
        assert_eq!(crate::tokenizer::sim::count(&a), 40);
        let prefix = |t: &str| t.split(' ').take(17).collect::<Vec<_>>().join(" ");
        assert_eq!(prefix(&a), prefix(&b), "block 7 is the same text");
        assert_ne!(a, b);
    }

    #[test]
    fn bad_lines_name_the_line_and_timestamps_are_made_relative() {
        let dir = std::env::temp_dir().join(format!("redline-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.jsonl");
        std::fs::write(
            &path,
            "{\"timestamp\": 1000, \"input_length\": 10, \"output_length\": 2}\n{\"timestamp\": 1250, \"input_length\": 10}\n",
        )
        .unwrap();
        let err = read(&path, 16).unwrap_err();
        assert!(
            err.ends_with("trace.jsonl:2: needs `output_length` or `output_tokens`, a number >= 0"),
            "{err}"
        );
        std::fs::write(
            &path,
            "{\"timestamp\": 1000, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n{\"timestamp\": 1250, \"input_length\": 10, \"output_length\": 2}\n",
        )
        .unwrap();
        let trace = read(&path, 16).unwrap();
        assert_eq!(trace.offsets[1], Duration::from_millis(250));
        assert_eq!(trace.prompts.requests[0].hash_ids, [1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Found by fuzzing: a timestamp of 4E94 ms panicked turning into a Duration.
    #[test]
    fn times_and_lengths_out_of_reach_are_errors_not_panics() {
        let path = Path::new("trace.jsonl");
        let err = parse(
            path,
            r#"{"timestamp": 4E94, "input_length": 5, "output_length": 2}"#,
            16,
        )
        .unwrap_err();
        assert_eq!(err, "trace.jsonl:1: timestamp 4e94 ms is out of range");
        let err = parse(
            path,
            r#"{"timestamp": 1, "input_length": 4E9, "output_length": 2}"#,
            16,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "trace.jsonl:1: lengths must be at most 10000000 tokens (no model reads or writes more at once)"
        );
    }
}
