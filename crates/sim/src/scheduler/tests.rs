//! Scheduler tests in virtual time: exact, fast, and independent of the machine.

use std::collections::HashMap;

use super::*;
use crate::text::{AnswerGenerator, AnswerLimits};

/// A finished request as seen in virtual time.
#[derive(Debug, Clone)]
struct Done {
    timeline: Timeline,
    token_times: Vec<u64>,
    text: String,
    reason: FinishReason,
}

fn request(id: u64, prompt: Vec<u32>, max_tokens: u32, arrival_ns: u64) -> NewRequest {
    let limits = AnswerLimits {
        max_tokens: Some(max_tokens),
        room: 1 << 20,
        natural_length: [1, 1],
        stop: Vec::new(),
    };
    NewRequest {
        id,
        generator: AnswerGenerator::text(crate::text::prompt_seed(&prompt, 0), &limits),
        prompt,
        arrival_ns,
    }
}

/// A prompt of `len` tokens that shares nothing with other seeds' prompts.
fn unique_prompt(seed: u64, len: usize) -> Vec<u32> {
    (0..len as u64)
        .map(|i| redline_base::seed::mix_seed(&[seed, i]) as u32)
        .collect()
}

/// Drives a scheduler in virtual time until every request has finished.
struct Virtual {
    scheduler: Scheduler,
    now: u64,
    done: HashMap<u64, Done>,
    partial: HashMap<u64, (Vec<u64>, String)>,
    max_waiting: usize,
}

impl Virtual {
    fn new(profile: Profile) -> Self {
        Virtual {
            scheduler: Scheduler::new(Arc::new(profile)),
            now: 0,
            done: HashMap::new(),
            partial: HashMap::new(),
            max_waiting: 0,
        }
    }

    fn step(&mut self) -> bool {
        self.max_waiting = self.max_waiting.max(self.scheduler.waiting());
        let Some(duration) = self.scheduler.plan_step(self.now) else {
            return false;
        };
        self.now += duration;
        for emission in self.scheduler.finish_step(self.now) {
            match emission {
                Emission::Token { id, delta, .. } => {
                    let entry = self.partial.entry(id).or_default();
                    entry.0.push(self.now);
                    entry.1.push_str(&delta);
                }
                Emission::Finished {
                    id,
                    reason,
                    timeline,
                } => {
                    let (token_times, text) = self.partial.remove(&id).unwrap_or_default();
                    self.done.insert(
                        id,
                        Done {
                            timeline,
                            token_times,
                            text,
                            reason,
                        },
                    );
                }
            }
        }
        true
    }

    fn run_to_completion(&mut self) {
        while self.step() {}
        assert!(self.scheduler.is_idle(), "stalled with work left");
    }
}

struct LoadPoint {
    mean_ttft_ms: f64,
    mean_tpot_ms: f64,
    output_tok_per_s: f64,
}

/// Waves of `concurrency` simultaneous requests, each starting when the previous wave
/// has finished: the load point of the source's table.
fn waves(
    profile: Profile,
    concurrency: u64,
    prompt_len: usize,
    output: u32,
    n_waves: u64,
) -> LoadPoint {
    let mut sim = Virtual::new(profile);
    let start = sim.now;
    for wave in 0..n_waves {
        for i in 0..concurrency {
            let id = wave * concurrency + i;
            sim.scheduler
                .add(request(id, unique_prompt(id, prompt_len), output, sim.now));
        }
        sim.run_to_completion();
    }
    let n = sim.done.len() as f64;
    let ttft: f64 = sim
        .done
        .values()
        .map(|d| (d.timeline.first_token_ns - d.timeline.arrival_ns) as f64 / 1e6)
        .sum();
    let tpot: f64 = sim
        .done
        .values()
        .map(|d| {
            (d.timeline.finish_ns - d.timeline.first_token_ns) as f64
                / 1e6
                / f64::from(d.timeline.completion_tokens - 1)
        })
        .sum();
    LoadPoint {
        mean_ttft_ms: ttft / n,
        mean_tpot_ms: tpot / n,
        output_tok_per_s: n * f64::from(output) / ((sim.now - start) as f64 / 1e9),
    }
}

fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= expected * tolerance
}

#[test]
fn seven_b_reproduces_the_source_table_in_virtual_time() {
    // Tighter than the 10 % the HTTP test allows, so that test measures the server's
    // overheads and not the model's fit.
    let p1 = waves(Profile::seven_b(), 8, 128, 256, 2);
    assert!(
        within(p1.mean_ttft_ms, 48.2, 0.03),
        "prefill {}",
        p1.mean_ttft_ms
    );
    assert!(
        within(p1.mean_tpot_ms, 12.7, 0.03),
        "decode {}",
        p1.mean_tpot_ms
    );

    let p2 = waves(Profile::seven_b(), 16, 2048, 256, 2);
    assert!(
        within(p2.mean_ttft_ms, 312.5, 0.03),
        "prefill {}",
        p2.mean_ttft_ms
    );
    assert!(
        within(p2.mean_tpot_ms, 15.3, 0.03),
        "decode {}",
        p2.mean_tpot_ms
    );
    assert!(
        within(p2.output_tok_per_s, 940.0, 0.03),
        "throughput {}",
        p2.output_tok_per_s
    );
}

#[test]
fn tokens_come_one_per_step_and_lengths_are_exact() {
    let mut sim = Virtual::new(Profile::tiny());
    sim.scheduler.add(request(1, unique_prompt(1, 40), 25, 0));
    sim.run_to_completion();
    let done = &sim.done[&1];
    assert_eq!(done.token_times.len(), 25);
    assert_eq!(done.timeline.completion_tokens, 25);
    assert_eq!(done.reason, FinishReason::Length);
    assert!(done.token_times.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(done.timeline.first_token_ns, done.token_times[0]);
    assert_eq!(done.timeline.finish_ns, *done.token_times.last().unwrap());
    assert_eq!(sim.scheduler.counters().generation_tokens, 25);
    assert_eq!(sim.scheduler.kv_usage(), 0.0, "blocks freed at the end");
}

#[test]
fn long_prompts_are_prefilled_in_chunks_within_the_token_budget() {
    let mut profile = Profile::tiny();
    profile.max_num_batched_tokens = 256;
    let mut sim = Virtual::new(profile);
    sim.scheduler.add(request(1, unique_prompt(1, 1000), 2, 0));
    let mut steps_before_first_token = 0;
    while sim.partial.is_empty() && sim.done.is_empty() {
        assert!(sim.step());
        steps_before_first_token += 1;
    }
    assert_eq!(steps_before_first_token, 4, "1000 tokens in chunks of 256");
}

#[test]
fn shared_prefix_hits_the_cache_and_cuts_ttft() {
    let prefix = unique_prompt(7, 1024);
    let with_suffix = |seed| {
        let mut p = prefix.clone();
        p.extend(unique_prompt(seed, 50));
        p
    };
    let mut sim = Virtual::new(Profile::seven_b());
    sim.scheduler.add(request(1, with_suffix(1), 4, 0));
    sim.run_to_completion();
    let arrival = sim.now + 1_000_000;
    sim.now = arrival;
    sim.scheduler.add(request(2, with_suffix(2), 4, arrival));
    sim.run_to_completion();

    let (first, second) = (&sim.done[&1].timeline, &sim.done[&2].timeline);
    assert_eq!(first.cached_prompt_tokens, 0);
    assert_eq!(second.cached_prompt_tokens, 1024);
    let ttft = |t: &Timeline| t.first_token_ns - t.arrival_ns;
    assert!(ttft(second) < ttft(first), "{second:?} vs {first:?}");
    let counters = sim.scheduler.counters();
    assert_eq!(counters.prefix_hits, 1024);
    assert_eq!(counters.prefix_queries, 2 * 1074);
}

#[test]
fn a_whole_cached_prompt_still_computes_its_last_block() {
    let prompt = unique_prompt(3, 64); // exactly four blocks
    let mut sim = Virtual::new(Profile::tiny());
    sim.scheduler.add(request(1, prompt.clone(), 2, 0));
    sim.run_to_completion();
    sim.scheduler.add(request(2, prompt, 2, sim.now));
    sim.run_to_completion();
    assert_eq!(sim.done[&2].timeline.cached_prompt_tokens, 48);
    assert_eq!(
        sim.done[&1].text, sim.done[&2].text,
        "same prompt, same answer"
    );
}

#[test]
fn kv_exhaustion_queues_requests_and_drops_none() {
    let mut profile = Profile::tiny();
    profile.num_blocks = 64; // 1,024 tokens of KV
    profile.max_model_len = 1_024;
    let mut sim = Virtual::new(profile);
    for id in 0..20 {
        sim.scheduler
            .add(request(id, unique_prompt(id, 200), 20, 0));
    }
    sim.run_to_completion();
    assert_eq!(sim.done.len(), 20, "every request finished");
    assert!(
        sim.max_waiting >= 15,
        "most requests had to wait: {}",
        sim.max_waiting
    );
    assert!(
        sim.done
            .values()
            .all(|d| d.timeline.completion_tokens == 20)
    );
    let mut ttfts: Vec<u64> = sim
        .done
        .values()
        .map(|d| d.timeline.first_token_ns - d.timeline.arrival_ns)
        .collect();
    ttfts.sort_unstable();
    assert!(ttfts[19] > 4 * ttfts[0], "queueing raises TTFT: {ttfts:?}");
}

#[test]
fn preemption_recomputes_and_the_answer_is_unchanged() {
    let mut profile = Profile::tiny();
    profile.num_blocks = 20; // 320 tokens: four sequences of 60 + 40 cannot all grow
    profile.max_model_len = 320;
    let mut reference = Virtual::new(Profile::tiny());
    let mut sim = Virtual::new(profile);
    for id in 0..4 {
        sim.scheduler.add(request(id, unique_prompt(id, 60), 40, 0));
        reference
            .scheduler
            .add(request(id, unique_prompt(id, 60), 40, 0));
    }
    sim.run_to_completion();
    reference.run_to_completion();
    let preempted: Vec<_> = sim
        .done
        .values()
        .filter(|d| d.timeline.preemptions > 0)
        .collect();
    assert!(!preempted.is_empty(), "the pool was too small for all four");
    assert!(sim.scheduler.counters().preemptions >= preempted.len() as u64);
    for (id, done) in &sim.done {
        assert_eq!(done.timeline.completion_tokens, 40);
        assert_eq!(done.text, reference.done[id].text, "request {id}");
    }
}

#[test]
fn max_num_seqs_caps_the_batch() {
    let mut profile = Profile::tiny();
    profile.max_num_seqs = 3;
    let mut sim = Virtual::new(profile);
    for id in 0..7 {
        sim.scheduler.add(request(id, unique_prompt(id, 10), 5, 0));
    }
    let mut max_running = 0;
    while sim.step() {
        max_running = max_running.max(sim.scheduler.running());
    }
    assert_eq!(max_running, 3);
    assert_eq!(sim.done.len(), 7);
}

#[test]
fn abort_frees_the_blocks_of_running_and_waiting_requests() {
    let mut sim = Virtual::new(Profile::tiny());
    sim.scheduler.add(request(1, unique_prompt(1, 100), 50, 0));
    sim.scheduler.add(request(2, unique_prompt(2, 100), 50, 0));
    assert!(sim.step());
    assert!(sim.scheduler.kv_usage() > 0.0);
    assert!(sim.scheduler.abort(1));
    assert!(sim.scheduler.abort(2));
    assert!(!sim.scheduler.abort(3));
    assert!(sim.scheduler.is_idle());
    assert_eq!(sim.scheduler.kv_usage(), 0.0);
    assert_eq!(sim.scheduler.counters().aborted, 2);
}
