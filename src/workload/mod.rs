//! Prompt sources: what request number `i` sends. A pure function of (seed, i), so the
//! same spec and seed produce the same request stream.
//!
//! # Layout
//! - [`payload`] — what one request sends
//! - [`dataset`] — prompt datasets (JSONL, ShareGPT, CSV), checked and ordered
//! - [`mooncake`] — timestamped request traces (Mooncake's format), replayed as load
//! - [`media`] — audio clips to transcribe, read or generated
//! - [`mcp`] — MCP calls: the operation mix and its argument templates
//! - [`grade`], [`tool_ast`] — graded answers: the graders, and BFCL's tool-call rule
//! - [`bfcl`] — BFCL's published questions and possible answers as a graded dataset
//! - [`datagen`] — synthetic corpora and prompts from templates

pub mod bfcl;
pub mod datagen;
pub mod grade;
pub mod tool_ast;
pub mod dataset;
pub mod mcp;
pub mod media;
pub mod payload;
pub mod mooncake;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::record::PrefixMark;
use crate::seed::mix_seed;
use crate::spec::LengthSpec;
use crate::tokenizer::LocalTokenizer;
use crate::tokenizer::sim::WORDS;
use crate::workload::datagen::TemplateSampler;
use crate::workload::dataset::Dataset;
use crate::workload::payload::{Payload, PromptBody};

/// A validated token-length distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    Fixed(u32),
    Normal {
        mean: f64,
        stddev: f64,
        min: u32,
        max: u32,
    },
    Uniform {
        min: u32,
        max: u32,
    },
}

impl Length {
    /// `4`, `2–6`, `normal(256, σ 64)`: for what `validate` prints.
    pub fn describe(&self) -> String {
        match *self {
            Length::Fixed(n) => n.to_string(),
            Length::Uniform { min, max } => format!("{min}–{max}"),
            Length::Normal { mean, stddev, .. } => format!("normal({mean}, σ {stddev})"),
        }
    }

    /// Validates a spec length; the error says what is wrong with it.
    pub fn from_spec(spec: &LengthSpec) -> Result<Length, String> {
        match *spec {
            LengthSpec::Fixed(0) => Err("a length must be at least 1 token".into()),
            LengthSpec::Fixed(n) => Ok(Length::Fixed(n)),
            LengthSpec::Uniform { min, max } if min == 0 || min > max => Err(format!(
                "uniform length needs 1 <= min <= max, got min {min}, max {max}"
            )),
            LengthSpec::Uniform { min, max } => Ok(Length::Uniform { min, max }),
            LengthSpec::Normal {
                mean,
                stddev,
                min,
                max,
            } => {
                let (min, max) = (min.unwrap_or(1).max(1), max.unwrap_or(u32::MAX));
                if !(mean.is_finite() && mean >= 1.0 && stddev.is_finite() && stddev >= 0.0)
                    || min > max
                {
                    return Err(format!(
                        "normal length needs mean >= 1, stddev >= 0 and min <= max, got mean {mean}, stddev {stddev}"
                    ));
                }
                Ok(Length::Normal {
                    mean,
                    stddev,
                    min,
                    max,
                })
            }
        }
    }

    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform { min, max } => rng.random_range(min..=max),
            Length::Normal {
                mean,
                stddev,
                min,
                max,
            } => {
                let draw = Normal::new(mean, stddev).expect("validated").sample(rng);
                (draw.round().max(1.0) as u32).clamp(min, max)
            }
        }
    }

    /// The largest value a draw can take.
    pub fn upper(&self) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform { max, .. } => max,
            Length::Normal {
                mean, stddev, max, ..
            } => max.min((mean + 6.0 * stddev).ceil() as u32),
        }
    }
}

/// Where prompts come from.
#[derive(Debug, Clone)]
pub enum PromptSource {
    Synthetic {
        input: Length,
        output: Length,
        /// Shared prefixes (system prompts), each `prefix_tokens` long.
        prefixes: Vec<String>,
        prefix_tokens: u32,
    },
    /// A dataset's records, in its order.
    Dataset(Dataset),
    /// Prompts drawn from learned templates.
    Templates {
        generator: TemplateSampler,
        output: Length,
        /// Counts each prompt's tokens, for when the server reports none.
        tokenizer: LocalTokenizer,
    },
}

impl PromptSource {
    pub fn synthetic(
        input: Length,
        output: Length,
        prefix_tokens: u32,
        prefixes: u32,
        seed: u64,
    ) -> PromptSource {
        let prefixes = (0..prefixes.max(1) * u32::from(prefix_tokens > 0))
            .map(|p| {
                words(
                    &mut ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x5052_4546, p.into()])),
                    prefix_tokens,
                )
            })
            .collect();
        PromptSource::Synthetic {
            input,
            output,
            prefixes,
            prefix_tokens,
        }
    }

    /// The payload of request `index`.
    pub fn payload(&self, seed: u64, index: u64) -> Payload {
        match self {
            PromptSource::Synthetic {
                input,
                output,
                prefixes,
                prefix_tokens,
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x5052_4f4d, index]));
                let total = input.sample(&mut rng).max(prefix_tokens + 1);
                let max_tokens = output.sample(&mut rng);
                let (mut text, prefix) = if prefixes.is_empty() {
                    (String::new(), None)
                } else {
                    let id = rng.random_range(0..prefixes.len());
                    let mark = PrefixMark {
                        id: id as u32,
                        tokens: *prefix_tokens,
                    };
                    (prefixes[id].clone(), Some(mark))
                };
                text.push_str(&words(&mut rng, total - prefix_tokens));
                Payload {
                    prompt: PromptBody::Text(text),
                    max_tokens: Some(max_tokens),
                    input_tokens: total,
                    traceparent: None,
                    prefix,
                    previous_response_id: None,
                    grade: None,
                    fields: None,
                }
            }
            PromptSource::Dataset(dataset) => dataset.payload(seed, index),
            PromptSource::Templates {
                generator,
                output,
                tokenizer,
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x5445_4d50, index]));
                let text = generator.prompt(&mut rng);
                Payload {
                    input_tokens: tokenizer.count(&text) as u32,
                    prompt: PromptBody::Text(text),
                    max_tokens: Some(output.sample(&mut rng)),
                    traceparent: None,
                    prefix: None,
                    previous_response_id: None,
                    grade: None,
                    fields: None,
                }
            }
        }
    }
}

/// `n` random words, one token each.
/// `n` words of the simulator's vocabulary, each with its leading space: exactly `n`
/// tokens in the simulator's tokenizer and in cl100k_base.
pub fn words(rng: &mut ChaCha8Rng, n: u32) -> String {
    let mut out = String::with_capacity(n as usize * 7);
    for _ in 0..n {
        out.push(' ');
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::sim as sim_tokenizer;

    #[test]
    fn synthetic_prompts_have_exact_lengths_and_are_reproducible() {
        let source = PromptSource::synthetic(
            Length::Normal {
                mean: 200.0,
                stddev: 50.0,
                min: 20,
                max: 400,
            },
            Length::Uniform { min: 10, max: 20 },
            64,
            3,
            42,
        );
        let mut prefixes = std::collections::HashSet::new();
        for i in 0..200 {
            let payload = source.payload(42, i);
            let PromptBody::Text(text) = &payload.prompt else {
                panic!()
            };
            assert_eq!(sim_tokenizer::count(text) as u32, payload.input_tokens);
            assert!((20..=400).contains(&payload.input_tokens));
            assert!((10..=20).contains(&payload.max_tokens.unwrap()));
            prefixes.insert(sim_tokenizer::encode(text)[..64].to_vec());
            assert_eq!(payload, source.payload(42, i));
        }
        assert_eq!(prefixes.len(), 3, "three shared prefixes in use");
        assert_ne!(source.payload(42, 0), source.payload(43, 0));
    }

    #[test]
    fn lengths_are_validated() {
        assert!(Length::from_spec(&LengthSpec::Fixed(0)).is_err());
        assert_eq!(
            Length::from_spec(&LengthSpec::Uniform { min: 9, max: 3 }).unwrap_err(),
            "uniform length needs 1 <= min <= max, got min 9, max 3"
        );
    }
}
