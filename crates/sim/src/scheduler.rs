//! The continuous-batching scheduler: pure state, no clock, no IO.
//!
//! Each step (after vLLM's V1 scheduler) first gives every running sequence the tokens
//! it needs — one for a decoding sequence, a chunk of the prompt for one still in
//! prefill — within the step's token budget, preempting the newest running sequences
//! (recompute) when the KV cache cannot grow; then, if nothing was preempted, admits
//! waiting requests first come first served while the budget, `max_num_seqs` and free
//! KV blocks allow, skipping the prompt blocks already in the prefix cache. The caller
//! asks [`Scheduler::plan_step`] for the step's duration from the profile, lets that
//! time pass (really or virtually), then calls [`Scheduler::finish_step`] with the time
//! it ended, which produces the tokens. Timing is therefore the driver's business, and
//! tests can run the same scheduler in virtual time.

use std::collections::VecDeque;
use std::sync::Arc;

use super::kv::{BlockId, BlockPool, block_hash};
use super::profile::{Profile, StepShape};
use super::text::{AnswerGenerator, FinishReason};

/// A request as the engine receives it.
#[derive(Debug)]
pub struct NewRequest {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub generator: AnswerGenerator,
    /// When the server received it, nanoseconds since server start.
    pub arrival_ns: u64,
}

/// The engine's own account of one request: its ground truth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeline {
    pub arrival_ns: u64,
    /// Start of the step that first admitted it.
    pub scheduled_ns: u64,
    pub first_token_ns: u64,
    /// The first answer token, after any reasoning (0: the answer never began).
    pub first_answer_ns: u64,
    pub finish_ns: u64,
    pub preemptions: u32,
    /// Prompt tokens found in the prefix cache at first admission.
    pub cached_prompt_tokens: u32,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Of the completion tokens, those the model reasoned.
    pub reasoning_tokens: u32,
}

/// What a finished step produced for one request.
#[derive(Debug)]
pub enum Emission {
    Token {
        id: u64,
        /// Index of this token in the answer, from 0.
        index: u32,
        delta: String,
        /// Prompt tokens the prefix cache served (an API that reports it as the
        /// answer begins, Anthropic's, reads it from the first token).
        cached: u32,
    },
    Finished {
        id: u64,
        reason: FinishReason,
        timeline: Timeline,
    },
}

/// Counters since start, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub preemptions: u64,
    pub finished_stop: u64,
    pub finished_length: u64,
    pub finished_tool_calls: u64,
    pub aborted: u64,
    pub steps: u64,
}

impl Counters {
    /// What was added since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            prompt_tokens: self.prompt_tokens - earlier.prompt_tokens,
            generation_tokens: self.generation_tokens - earlier.generation_tokens,
            prefix_queries: self.prefix_queries - earlier.prefix_queries,
            prefix_hits: self.prefix_hits - earlier.prefix_hits,
            preemptions: self.preemptions - earlier.preemptions,
            finished_stop: self.finished_stop - earlier.finished_stop,
            finished_length: self.finished_length - earlier.finished_length,
            finished_tool_calls: self.finished_tool_calls - earlier.finished_tool_calls,
            aborted: self.aborted - earlier.aborted,
            steps: self.steps - earlier.steps,
        }
    }
}

#[derive(Debug)]
struct Sequence {
    id: u64,
    /// Prompt then generated tokens.
    tokens: Vec<u32>,
    prompt_len: u32,
    generator: AnswerGenerator,
    /// Tokens whose KV is computed.
    computed: u32,
    blocks: Vec<BlockId>,
    /// Hashes of the full blocks of `tokens`, computed as blocks fill.
    hashes: Vec<u64>,
    /// How many of `blocks` are registered in the prefix cache.
    registered: usize,
    /// Tokens to compute in the step being run.
    scheduled: u32,
    admitted_once: bool,
    timeline: Timeline,
}

impl Sequence {
    fn len(&self) -> u32 {
        self.tokens.len() as u32
    }

    fn generated(&self) -> u32 {
        self.len() - self.prompt_len
    }

    fn extend_hashes(&mut self, block_size: usize) {
        while (self.hashes.len() + 1) * block_size <= self.tokens.len() {
            let start = self.hashes.len() * block_size;
            let parent = self.hashes.last().copied();
            self.hashes
                .push(block_hash(parent, &self.tokens[start..start + block_size]));
        }
    }
}

/// The scheduler's state.
#[derive(Debug)]
pub struct Scheduler {
    profile: Arc<Profile>,
    pool: BlockPool,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    counters: Counters,
    step_start_ns: u64,
}

impl Scheduler {
    pub fn new(profile: Arc<Profile>) -> Self {
        Scheduler {
            pool: BlockPool::new(profile.num_blocks),
            profile,
            waiting: VecDeque::new(),
            running: Vec::new(),
            counters: Counters::default(),
            step_start_ns: 0,
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn add(&mut self, request: NewRequest) {
        let prompt_len = request.prompt.len() as u32;
        self.waiting.push_back(Sequence {
            id: request.id,
            tokens: request.prompt,
            prompt_len,
            generator: request.generator,
            computed: 0,
            blocks: Vec::new(),
            hashes: Vec::new(),
            registered: 0,
            scheduled: 0,
            admitted_once: false,
            timeline: Timeline {
                arrival_ns: request.arrival_ns,
                prompt_tokens: prompt_len,
                ..Timeline::default()
            },
        });
    }

    /// Drops a request (its client went away), freeing its blocks. Returns whether it
    /// was known.
    pub fn abort(&mut self, id: u64) -> bool {
        if let Some(at) = self.running.iter().position(|s| s.id == id) {
            let seq = self.running.remove(at);
            self.pool.release(&seq.blocks);
        } else if let Some(at) = self.waiting.iter().position(|s| s.id == id) {
            let seq = self.waiting.remove(at).expect("position is in range");
            self.pool.release(&seq.blocks);
        } else {
            return false;
        }
        self.counters.aborted += 1;
        true
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn kv_usage(&self) -> f64 {
        self.pool.usage()
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Ids of the requests still queued, oldest first.
    pub fn waiting_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|s| s.id)
    }

    /// Schedules the next step starting at `now_ns`; returns its duration in
    /// nanoseconds, or `None` when there is nothing to compute.
    pub fn plan_step(&mut self, now_ns: u64) -> Option<u64> {
        self.step_start_ns = now_ns;
        let mut budget = self.profile.max_num_batched_tokens;
        let mut shape = StepShape::default();
        let block_size = self.profile.block_size;
        let mut preempted = false;

        let mut i = 0;
        while i < self.running.len() {
            let need = self.running[i].len() - self.running[i].computed;
            let n = need.min(budget);
            if n == 0 {
                self.running[i].scheduled = 0;
                i += 1;
                continue;
            }
            let target_blocks = (self.running[i].computed + n).div_ceil(block_size) as usize;
            let missing = target_blocks.saturating_sub(self.running[i].blocks.len()) as u32;
            match self.pool.allocate(missing) {
                Some(blocks) => {
                    let seq = &mut self.running[i];
                    seq.blocks.extend(blocks);
                    seq.scheduled = n;
                    budget -= n;
                    add_to_shape(&mut shape, seq, n, false);
                    i += 1;
                }
                None => {
                    // Out of KV blocks: recompute-preempt the newest running sequence,
                    // which may be this one.
                    preempted = true;
                    let victim = self.running.pop().expect("running is not empty here");
                    self.preempt(victim);
                }
            }
        }

        if !preempted {
            while budget > 0 && (self.running.len() as u32) < self.profile.max_num_seqs {
                let Some(n) = self.try_admit(budget, &mut shape) else {
                    break;
                };
                budget -= n;
            }
        }

        if shape.is_empty() {
            return None;
        }
        Some(self.profile.step_nanos(&shape))
    }

    /// Admits the first waiting request if it fits; returns the tokens it was given.
    fn try_admit(&mut self, budget: u32, shape: &mut StepShape) -> Option<u32> {
        let block_size = self.profile.block_size;
        let seq = self.waiting.front_mut()?;
        seq.extend_hashes(block_size as usize);
        // At least one token must be computed to produce the next one, so a prompt that
        // is cached whole still recomputes its last block.
        let cacheable = ((seq.len() - 1) / block_size) as usize;
        let hits = self
            .pool
            .lookup_prefix(&seq.hashes[..cacheable.min(seq.hashes.len())]);
        let cached_tokens = hits.len() as u32 * block_size;
        let n = (seq.len() - cached_tokens).min(budget);
        let target_blocks = (cached_tokens + n).div_ceil(block_size) as usize;
        let fresh = (target_blocks - hits.len()) as u32;
        if self.pool.unreferenced(&hits) + fresh > self.pool.free() {
            return None; // wait for blocks; first come, first served
        }
        self.pool.touch(&hits);
        let fresh_blocks = self
            .pool
            .allocate(fresh)
            .expect("checked free blocks above");

        let mut seq = self.waiting.pop_front().expect("front exists");
        seq.blocks = hits;
        seq.blocks.extend(fresh_blocks);
        seq.registered = seq
            .blocks
            .len()
            .min(cached_tokens.div_ceil(block_size) as usize);
        seq.computed = cached_tokens;
        seq.scheduled = n;
        self.counters.prefix_queries += u64::from(seq.len());
        self.counters.prefix_hits += u64::from(cached_tokens);
        if !seq.admitted_once {
            seq.admitted_once = true;
            seq.timeline.scheduled_ns = self.step_start_ns;
            seq.timeline.cached_prompt_tokens = cached_tokens;
            self.counters.prompt_tokens += u64::from(seq.prompt_len);
        }
        add_to_shape(shape, &seq, n, true);
        self.running.push(seq);
        Some(n)
    }

    fn preempt(&mut self, mut seq: Sequence) {
        self.pool.release(&seq.blocks);
        seq.blocks.clear();
        seq.registered = 0;
        seq.computed = 0;
        seq.scheduled = 0;
        seq.timeline.preemptions += 1;
        self.counters.preemptions += 1;
        self.waiting.push_front(seq);
    }

    /// Completes the step planned last, which ended at `now_ns`: advances every
    /// scheduled sequence and returns the tokens and completions it produced.
    pub fn finish_step(&mut self, now_ns: u64) -> Vec<Emission> {
        self.counters.steps += 1;
        let block_size = self.profile.block_size as usize;
        let max_model_len = self.profile.max_model_len;
        let mut out = Vec::with_capacity(self.running.len() + 4);
        let mut i = 0;
        while i < self.running.len() {
            let seq = &mut self.running[i];
            if seq.scheduled == 0 {
                i += 1;
                continue;
            }
            seq.computed += seq.scheduled;
            seq.scheduled = 0;
            // Name the blocks that are now full and computed, for later prompts.
            seq.extend_hashes(block_size);
            let full_computed = (seq.computed as usize / block_size).min(seq.hashes.len());
            while seq.registered < full_computed {
                self.pool
                    .register(seq.blocks[seq.registered], seq.hashes[seq.registered]);
                seq.registered += 1;
            }
            if seq.computed < seq.len() {
                i += 1; // still in (chunked) prefill
                continue;
            }
            let token = seq.generator.next_token();
            let index = seq.generated();
            seq.tokens.push(token.id);
            self.counters.generation_tokens += 1;
            if index == 0 {
                seq.timeline.first_token_ns = now_ns;
            }
            if index == seq.generator.reasoning_length() {
                seq.timeline.first_answer_ns = now_ns;
            }
            out.push(Emission::Token {
                id: seq.id,
                index,
                delta: token.delta,
                cached: seq.timeline.cached_prompt_tokens,
            });
            let finish = token
                .finish
                .or_else(|| (seq.len() >= max_model_len).then_some(FinishReason::Length));
            match finish {
                Some(reason) => {
                    let mut seq = self.running.remove(i);
                    self.pool.release(&seq.blocks);
                    seq.timeline.finish_ns = now_ns;
                    seq.timeline.completion_tokens = seq.generated();
                    seq.timeline.reasoning_tokens =
                        seq.generated().min(seq.generator.reasoning_length());
                    match reason {
                        FinishReason::Stop => self.counters.finished_stop += 1,
                        FinishReason::Length => self.counters.finished_length += 1,
                        FinishReason::ToolCalls => self.counters.finished_tool_calls += 1,
                    }
                    out.push(Emission::Finished {
                        id: seq.id,
                        reason,
                        timeline: seq.timeline,
                    });
                }
                None => i += 1,
            }
        }
        out
    }
}

fn add_to_shape(shape: &mut StepShape, seq: &Sequence, n: u32, starting: bool) {
    let decoding = n == 1 && seq.generated() > 0 && seq.computed + 1 == seq.len();
    if decoding {
        shape.decode_seqs += 1;
        shape.decode_context_tokens += u64::from(seq.computed);
    } else {
        shape.prefill_tokens += u64::from(n);
        shape.prefill_seqs_started += u64::from(starting);
        shape.prefill_attention += f64::from(n) * (f64::from(seq.computed) + f64::from(n) / 2.0);
    }
}

#[cfg(test)]
mod tests;
