//! Merging aggregators of disjoint parts of one run (workers, segments, halves) into
//! the aggregator of the whole. Counts, sums and HDR histograms add exactly, so every
//! count is the whole run's and every percentile equals the one the whole run's
//! histogram gives (at the histograms' three significant digits, as always).
//!
//! Three figures depend on which request came first, and use completion time to
//! decide it: the one example message kept per failure class, the order flow steps
//! are listed in, and which request of a shared prefix was its first (the others are
//! repeats a prefix cache could serve). Where
//! the whole run took records in completion order — as its collector does — the merge
//! decides as it did.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::flow::{FlowTally, StepTally};
use super::{
    Aggregator, Counts, Distributions, FailureClass, FaultTally, StageStats, TurnStats, Window,
};

impl Aggregator {
    /// Adds `other`, an aggregator of another part of the same run, into this one.
    pub fn merge(&mut self, other: &Aggregator) {
        self.good += other.good;
        merge_map(&mut self.stages, &other.stages, StageStats::merge);
        merge_map(&mut self.turns, &other.turns, TurnStats::merge);
        self.merge_prefixes(other);
        self.counts.merge(&other.counts);
        self.measured.merge(&other.measured);
        self.unavailable += other.unavailable;
        self.dist.merge(&other.dist);
        merge_map(&mut self.failures, &other.failures, FailureClass::merge);
        merge_map(&mut self.windows, &other.windows, Window::merge);
        self.output_tokens += other.output_tokens;
        self.input_tokens += other.input_tokens;
        for (source, n) in &other.token_sources {
            *self.token_sources.entry(*source).or_default() += n;
        }
        self.preempted += other.preempted;
        self.cached_prompt_tokens += other.cached_prompt_tokens;
        self.truth_prompt_tokens += other.truth_prompt_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.window_start_us = min_some(self.window_start_us, other.window_start_us);
        self.window_end_us = self.window_end_us.max(other.window_end_us);
        self.faults.merge(&other.faults);
        self.flow.merge(&other.flow);
        self.media.merge(&other.media);
        self.mcp.merge(&other.mcp);
        self.quality.merge(&other.quality);
    }

    /// A prefix both parts sent was first sent by whichever finished it first; the
    /// other part's first becomes a repeat (counted when it was measured).
    fn merge_prefixes(&mut self, other: &Aggregator) {
        self.prefix_prompt_tokens += other.prefix_prompt_tokens;
        self.repeated_prefix_tokens += other.repeated_prefix_tokens;
        for (id, theirs) in &other.seen_prefixes {
            let Some(ours) = self.seen_prefixes.get_mut(id) else {
                self.seen_prefixes.insert(*id, *theirs);
                continue;
            };
            let later = if theirs.done_us < ours.done_us {
                std::mem::replace(ours, *theirs)
            } else {
                *theirs
            };
            if later.measured {
                self.repeated_prefix_tokens += u64::from(later.tokens);
            }
        }
    }
}

/// Merges `theirs` into `ours` key by key; keys only they have are copied.
fn merge_map<K: Ord + Clone, V: Clone>(
    ours: &mut BTreeMap<K, V>,
    theirs: &BTreeMap<K, V>,
    merge: fn(&mut V, &V),
) {
    for (key, value) in theirs {
        match ours.get_mut(key) {
            Some(mine) => merge(mine, value),
            None => {
                ours.insert(key.clone(), value.clone());
            }
        }
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn add(ours: &mut Histogram<u64>, theirs: &Histogram<u64>) {
    // Both come from `histogram()`: same bounds, so adding cannot fail.
    ours.add(theirs)
        .expect("histograms of one run share their bounds");
}

impl Counts {
    pub(super) fn merge(&mut self, other: &Counts) {
        self.scheduled += other.scheduled;
        self.ok += other.ok;
        self.error += other.error;
        self.timeout += other.timeout;
        self.cancelled += other.cancelled;
        self.dropped += other.dropped;
    }
}

impl Distributions {
    fn merge(&mut self, o: &Distributions) {
        add(&mut self.ttft, &o.ttft);
        add(&mut self.ttft_intended, &o.ttft_intended);
        add(&mut self.time_to_second_token, &o.time_to_second_token);
        add(&mut self.itl, &o.itl);
        add(&mut self.itl_request_mean, &o.itl_request_mean);
        add(&mut self.tpot, &o.tpot);
        add(&mut self.e2e, &o.e2e);
        add(&mut self.e2e_intended, &o.e2e_intended);
        add(&mut self.send_lag, &o.send_lag);
        add(&mut self.input_tokens, &o.input_tokens);
        add(&mut self.output_tokens, &o.output_tokens);
        add(&mut self.ttft_client_overhead, &o.ttft_client_overhead);
        add(&mut self.server_total, &o.server_total);
        add(&mut self.e2e_beyond_server, &o.e2e_beyond_server);
        add(
            &mut self.time_to_first_reasoning,
            &o.time_to_first_reasoning,
        );
        add(&mut self.time_to_first_answer, &o.time_to_first_answer);
        add(&mut self.reasoning, &o.reasoning);
        add(&mut self.reasoning_tokens, &o.reasoning_tokens);
        add(&mut self.answer_tokens, &o.answer_tokens);
        add(&mut self.reasoning_share, &o.reasoning_share);
    }
}

impl StageStats {
    fn merge(&mut self, o: &StageStats) {
        self.counts.merge(&o.counts);
        self.good += o.good;
        self.output_tokens += o.output_tokens;
        self.first_intended_us = self.first_intended_us.min(o.first_intended_us);
        self.last_done_us = self.last_done_us.max(o.last_done_us);
        add(&mut self.ttft, &o.ttft);
        add(&mut self.ttft_intended, &o.ttft_intended);
        add(&mut self.itl, &o.itl);
        add(&mut self.tpot, &o.tpot);
        add(&mut self.e2e, &o.e2e);
        add(&mut self.e2e_intended, &o.e2e_intended);
        add(&mut self.send_lag, &o.send_lag);
        self.quality.merge(&o.quality);
    }
}

impl TurnStats {
    fn merge(&mut self, o: &TurnStats) {
        self.requests += o.requests;
        self.ok += o.ok;
        add(&mut self.ttft, &o.ttft);
        self.prompt_tokens += o.prompt_tokens;
        self.cached_prompt_tokens += o.cached_prompt_tokens;
    }
}

impl FailureClass {
    fn merge(&mut self, o: &FailureClass) {
        self.count += o.count;
        if o.first_done_us < self.first_done_us {
            self.example.clone_from(&o.example);
            self.first_done_us = o.first_done_us;
        }
    }
}

impl Window {
    fn merge(&mut self, o: &Window) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.output_tokens += o.output_tokens;
        self.ttft_sum_us += o.ttft_sum_us;
        self.ttft_count += o.ttft_count;
    }
}

impl FaultTally {
    fn merge(&mut self, o: &FaultTally) {
        self.requests_with_faults += o.requests_with_faults;
        self.failed_with_faults += o.failed_with_faults;
        self.failed_without_faults += o.failed_without_faults;
        merge_map(&mut self.rules, &o.rules, |ours, theirs| {
            ours.requests += theirs.requests;
            ours.failed += theirs.failed;
            for (key, n) in &theirs.failures {
                *ours.failures.entry(key.clone()).or_default() += n;
            }
            match (&mut ours.added, &theirs.added) {
                (Some(mine), Some(added)) => add(mine, added),
                (mine @ None, Some(added)) => *mine = Some(added.clone()),
                (_, None) => {}
            }
        });
    }
}

impl FlowTally {
    fn merge(&mut self, o: &FlowTally) {
        merge_map(&mut self.steps, &o.steps, StepTally::merge);
        for (outcome, n) in &o.sessions {
            *self.sessions.entry(*outcome).or_default() += n;
        }
        add(&mut self.session_e2e, &o.session_e2e);
        for (key, n) in &o.fallbacks {
            *self.fallbacks.entry(key.clone()).or_default() += n;
        }
        add(&mut self.embedding_latency, &o.embedding_latency);
        self.recall_queries += o.recall_queries;
        self.recall_sum += o.recall_sum;
        self.recall_below += o.recall_below;
        self.tool_calls += o.tool_calls;
        self.tool_ok += o.tool_ok;
    }
}

impl StepTally {
    fn merge(&mut self, o: &StepTally) {
        self.counts.merge(&o.counts);
        add(&mut self.latency, &o.latency);
        add(&mut self.ttft, &o.ttft);
        for (key, n) in &o.failures {
            *self.failures.entry(key.clone()).or_default() += n;
        }
        self.first_done_us = self.first_done_us.min(o.first_done_us);
    }
}
