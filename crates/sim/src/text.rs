//! Deterministic answers: what the simulated model says, token by token.
//!
//! An answer is a function of the prompt's tokens and a seed, so semantic checks have
//! ground truth. Text answers are words from a fixed vocabulary, each one token for
//! [`redline_base::sim_tokenizer`], so the requested length in tokens is exact. Stop strings are
//! matched on text, and the text that could still become a stop string is held back
//! until it cannot (as vLLM's detokenizer does), so a stop string never leaks out.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use redline_base::seed::mix_seed;
use redline_base::sim_tokenizer::{self as sim_tokenizer, WORDS};

/// Why an answer ended, as OpenAI's `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// A tool call the model decided to make.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The full arguments JSON; streamed in token-sized pieces.
    pub arguments: String,
    /// How the arguments were spoiled, when the load spoiled them (planted).
    pub spoiled: Option<super::planted::Spoil>,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub id: u32,
    /// Text now safe to send (may be empty while a possible stop string is held back).
    pub delta: String,
    /// Set on the answer's last token.
    pub finish: Option<FinishReason>,
}

/// Produces an answer one token at a time.
#[derive(Debug)]
pub struct AnswerGenerator {
    rng: ChaCha8Rng,
    /// Tokens this answer will have unless a stop string ends it first.
    length: u32,
    /// Reason given when `length` is reached.
    at_length: FinishReason,
    produced: u32,
    stop: Vec<String>,
    /// Text so far and how much of it was sent; kept only when stop strings are set.
    text: String,
    sent: usize,
    tool: Option<ToolPieces>,
    /// Reasoning tokens before the answer, and how many were produced: they come
    /// first, count toward `max_tokens`, and never end in a stop string.
    reasoning: u32,
    thought: u32,
}

#[derive(Debug)]
struct ToolPieces {
    pieces: Vec<String>,
}

/// How long an answer may be and what ends it.
#[derive(Debug, Clone)]
pub struct AnswerLimits {
    /// The request's `max_tokens`, if any.
    pub max_tokens: Option<u32>,
    /// Tokens left in the context window after the prompt.
    pub room: u32,
    /// Range of natural lengths when no `max_tokens` is set.
    pub natural_length: [u32; 2],
    pub stop: Vec<String>,
}

impl AnswerGenerator {
    /// A text answer, seeded by `seed` (already mixed with the prompt).
    pub fn text(seed: u64, limits: &AnswerLimits) -> AnswerGenerator {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let [low, high] = limits.natural_length;
        let natural = rng.random_range(low..=high.max(low));
        let (wanted, at_length) = match limits.max_tokens {
            Some(max) => (max, FinishReason::Length),
            None => (natural, FinishReason::Stop),
        };
        let (length, at_length) = if wanted > limits.room {
            (limits.room, FinishReason::Length)
        } else {
            (wanted, at_length)
        };
        AnswerGenerator {
            rng,
            length,
            at_length,
            produced: 0,
            stop: limits
                .stop
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            text: String::new(),
            sent: 0,
            tool: None,
            reasoning: 0,
            thought: 0,
        }
    }

    /// A tool call answer: the arguments streamed as tokens.
    pub fn tool_call(call: &ToolCall, limits: &AnswerLimits) -> AnswerGenerator {
        let pieces: Vec<String> = sim_tokenizer::Pieces::new(&call.arguments)
            .map(str::to_owned)
            .collect();
        let cap = limits.max_tokens.unwrap_or(u32::MAX).min(limits.room);
        let (length, at_length) = if pieces.len() as u32 > cap {
            (cap, FinishReason::Length)
        } else {
            (pieces.len() as u32, FinishReason::ToolCalls)
        };
        AnswerGenerator {
            rng: ChaCha8Rng::seed_from_u64(0),
            length: length.max(1),
            at_length,
            produced: 0,
            stop: Vec::new(),
            text: String::new(),
            sent: 0,
            tool: Some(ToolPieces { pieces }),
            reasoning: 0,
            thought: 0,
        }
    }

    /// The same answer after `reasoning` tokens of thought, all within `cap` tokens
    /// (the request's `max_tokens` and the context's room): a model that thinks past
    /// its budget is cut there, with no answer and `finish_reason: length`.
    pub fn with_reasoning(mut self, reasoning: u32, cap: u32) -> AnswerGenerator {
        if reasoning >= cap {
            self.reasoning = cap;
            self.length = 0;
            self.at_length = FinishReason::Length;
        } else {
            self.reasoning = reasoning;
            if self.length > cap - reasoning {
                self.length = cap - reasoning;
                self.at_length = FinishReason::Length;
            }
        }
        self
    }

    /// Tokens this answer has when no stop string fires, reasoning included.
    pub fn planned_length(&self) -> u32 {
        self.reasoning + self.length
    }

    /// Reasoning tokens before the answer: the answer's first token has this index.
    pub fn reasoning_length(&self) -> u32 {
        self.reasoning
    }

    /// Produces the next token. Must not be called after a token with `finish` set.
    pub fn next_token(&mut self) -> Token {
        if self.thought < self.reasoning {
            return self.thinking_token();
        }
        self.produced += 1;
        let last = self.produced >= self.length;
        let piece = match &self.tool {
            Some(tool) => tool
                .pieces
                .get(self.produced as usize - 1)
                .cloned()
                .unwrap_or_default(),
            None => self.word(),
        };
        let id = sim_tokenizer::piece_id(&piece);
        if self.stop.is_empty() {
            let finish = last.then_some(self.at_length);
            return Token {
                id,
                delta: piece,
                finish,
            };
        }
        self.text.push_str(&piece);
        if let Some(at) = self.find_stop() {
            let delta = self.text[self.sent..at].to_owned();
            self.text.truncate(at);
            self.sent = at;
            return Token {
                id,
                delta,
                finish: Some(FinishReason::Stop),
            };
        }
        let safe = if last {
            self.text.len()
        } else {
            self.text.len() - self.held_back()
        };
        let delta = self.text[self.sent..safe].to_owned();
        self.sent = safe;
        Token {
            id,
            delta,
            finish: last.then_some(self.at_length),
        }
    }

    /// A reasoning token: a word of its own sequence, so thinking first leaves the
    /// answer's words as they were.
    fn thinking_token(&mut self) -> Token {
        self.thought += 1;
        let seed = self.rng.get_seed();
        let seed = u64::from_le_bytes(seed[..8].try_into().expect("a ChaCha seed has 32 bytes"));
        let pick = mix_seed(&[seed, self.thought.into()]);
        let word = WORDS[(pick % WORDS.len() as u64) as usize];
        let piece = format!(" {word}");
        let last = self.thought == self.reasoning && self.length == 0;
        Token {
            id: sim_tokenizer::piece_id(&piece),
            delta: piece,
            finish: last.then_some(self.at_length),
        }
    }

    fn word(&mut self) -> String {
        // A full stop now and then, so the text reads as sentences.
        if self.produced > 1 && self.rng.random_ratio(1, 12) {
            return ".".into();
        }
        let word = WORDS[self.rng.random_range(0..WORDS.len())];
        let mut piece = String::with_capacity(word.len() + 1);
        piece.push(' ');
        piece.push_str(word);
        piece
    }

    /// Where the earliest stop string starts in the unsent text, if one is there.
    fn find_stop(&self) -> Option<usize> {
        let unsent = &self.text[self.sent..];
        self.stop
            .iter()
            .filter_map(|stop| unsent.find(stop.as_str()))
            .min()
            .map(|at| self.sent + at)
    }

    /// Length of the longest unsent suffix that could still grow into a stop string.
    fn held_back(&self) -> usize {
        let unsent = &self.text[self.sent..];
        self.stop
            .iter()
            .flat_map(|stop| {
                (1..stop.len().min(unsent.len() + 1))
                    .rev()
                    .filter(|n| stop.is_char_boundary(*n) && unsent.ends_with(&stop[..*n]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}

/// Seed of a prompt's answer: same prompt and seed, same answer.
pub fn prompt_seed(prompt: &[u32], seed: u64) -> u64 {
    let prompt_hash = crate::kv::block_hash(None, prompt);
    mix_seed(&[prompt_hash, seed])
}

/// Arguments for a call to a tool with the given JSON Schema `parameters`, filled
/// deterministically: string fields that look like a query get the user's words.
pub fn tool_arguments(parameters: Option<&Value>, user_text: &str, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let empty = Map::new();
    let properties = parameters
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = parameters
        .and_then(|p| p.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    for (name, schema) in properties {
        if !required.is_empty() && !required.contains(&name.as_str()) {
            continue;
        }
        out.insert(
            name.clone(),
            example_value(name, schema, user_text, &mut rng),
        );
    }
    Value::Object(out).to_string()
}

fn example_value(name: &str, schema: &Value, user_text: &str, rng: &mut ChaCha8Rng) -> Value {
    if let Some(choices) = schema.get("enum").and_then(Value::as_array)
        && !choices.is_empty()
    {
        return choices[rng.random_range(0..choices.len())].clone();
    }
    match schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string")
    {
        "integer" => Value::from(rng.random_range(1..=100)),
        "number" => Value::from(f64::from(rng.random_range(1..=1000)) / 10.0),
        "boolean" => Value::from(rng.random_bool(0.5)),
        "array" => Value::Array(Vec::new()),
        "object" => Value::Object(Map::new()),
        _ if ["query", "q", "text", "input", "question", "prompt"].contains(&name) => {
            Value::from(user_text.chars().take(64).collect::<String>().trim())
        }
        _ => {
            let a = WORDS[rng.random_range(0..WORDS.len())];
            let b = WORDS[rng.random_range(0..WORDS.len())];
            Value::from(format!("{a} {b}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_tokens: Option<u32>, stop: &[&str]) -> AnswerLimits {
        AnswerLimits {
            max_tokens,
            room: 4_096,
            natural_length: [16, 64],
            stop: stop.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn run(mut generator: AnswerGenerator) -> (String, Vec<u32>, FinishReason) {
        let (mut text, mut ids) = (String::new(), Vec::new());
        loop {
            let token = generator.next_token();
            text.push_str(&token.delta);
            ids.push(token.id);
            if let Some(reason) = token.finish {
                return (text, ids, reason);
            }
        }
    }

    #[test]
    fn every_vocabulary_word_is_one_token() {
        for word in WORDS {
            assert_eq!(sim_tokenizer::count(&format!(" {word}")), 1, "{word}");
        }
    }

    #[test]
    fn max_tokens_gives_exact_length_and_the_text_round_trips() {
        let (text, ids, reason) = run(AnswerGenerator::text(7, &limits(Some(100), &[])));
        assert_eq!(ids.len(), 100);
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(sim_tokenizer::encode(&text), ids);
    }

    #[test]
    fn same_seed_same_answer_other_seed_other_answer() {
        let a = run(AnswerGenerator::text(1, &limits(None, &[])));
        let b = run(AnswerGenerator::text(1, &limits(None, &[])));
        let c = run(AnswerGenerator::text(2, &limits(None, &[])));
        assert_eq!(a, b);
        assert_ne!(a.0, c.0);
        assert_eq!(a.2, FinishReason::Stop, "natural end without max_tokens");
        assert!((16..=64).contains(&a.1.len()));
    }

    #[test]
    fn the_context_window_caps_the_length() {
        let mut l = limits(Some(100), &[]);
        l.room = 10;
        let (_, ids, reason) = run(AnswerGenerator::text(3, &l));
        assert_eq!((ids.len(), reason), (10, FinishReason::Length));
    }

    #[test]
    fn stop_string_spanning_tokens_ends_the_answer_and_never_leaks() {
        let (full, _, _) = run(AnswerGenerator::text(9, &limits(Some(60), &[])));
        // A stop string made of the end of the 5th word and the start of the 6th.
        let words: Vec<&str> = sim_tokenizer::Pieces::new(&full).collect();
        let prefix: String = words[..5].concat();
        let stop = format!("{}{}", &words[4][words[4].len() - 2..], &words[5][..2]);
        let expected = &full[..full.find(&stop).unwrap()];
        assert!(expected.len() <= prefix.len());
        let (text, _, reason) = run(AnswerGenerator::text(9, &limits(Some(60), &[&stop])));
        assert_eq!(reason, FinishReason::Stop);
        assert_eq!(text, expected);
    }

    #[test]
    fn tool_arguments_follow_the_schema() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "verbose": {"type": "boolean"}
            },
            "required": ["query", "limit", "unit"]
        });
        let args = tool_arguments(Some(&schema), "weather in Paris", 5);
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(parsed["query"], "weather in Paris");
        assert!(parsed["limit"].as_i64().unwrap() >= 1);
        assert!(["c", "f"].contains(&parsed["unit"].as_str().unwrap()));
        assert!(parsed.get("verbose").is_none(), "only required fields");
        assert_eq!(args, tool_arguments(Some(&schema), "weather in Paris", 5));

        let call = ToolCall {
            id: "call_1".into(),
            name: "search".into(),
            arguments: args.clone(),
            spoiled: None,
        };
        let (text, _, reason) = run(AnswerGenerator::tool_call(&call, &limits(None, &[])));
        assert_eq!((text, reason), (args, FinishReason::ToolCalls));
    }
}
