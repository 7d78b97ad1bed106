//! The flow sessions a report draws: each session's steps as spans, kept for the
//! first sessions of a run, and the typical and the slowest of them.

use std::collections::BTreeMap;

use crate::record::{Outcome, Record};

/// Sessions kept for the waterfalls and the step graph; a larger run draws them from
/// its first sessions (the page says so).
pub const FLOW_SESSIONS: usize = 20_000;

/// One step of a session, µs from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpan {
    pub seq_in_session: u32,
    pub name: String,
    pub start_us: u64,
    pub end_us: u64,
    pub failed: Option<String>,
}

/// A session drawn as a waterfall.
#[derive(Debug, Clone, PartialEq)]
pub struct Waterfall {
    /// `typical` or `slowest`, and why.
    pub label: String,
    pub session: u64,
    pub e2e_us: u64,
    pub steps: Vec<StepSpan>,
}

/// Sessions' steps as the records come, in no order, until [`FlowSessions::finish`].
#[derive(Debug, Default)]
pub struct FlowSessions {
    steps: BTreeMap<u64, Vec<StepSpan>>,
    ended: BTreeMap<u64, u64>,
    /// Sessions seen past [`FLOW_SESSIONS`], not kept.
    pub left_out: u64,
    pub waterfalls: Vec<Waterfall>,
    /// (from, to) → (times a session went so, summed latency of `to`, µs).
    pub transitions: BTreeMap<(String, String), (u64, u64)>,
    /// Sessions the graph and waterfalls were drawn from.
    pub sessions: u64,
}

impl FlowSessions {
    pub fn add(&mut self, record: &Record) {
        let (Some(step), Some(session)) = (&record.step, &record.session) else {
            return;
        };
        if !self.steps.contains_key(&session.id) && self.steps.len() >= FLOW_SESSIONS {
            self.left_out += u64::from(step.agent_step_seq == 1);
            return;
        }
        let failed = (record.outcome != Outcome::Ok).then(|| {
            record
                .error
                .as_ref()
                .map_or_else(|| format!("{:?}", record.outcome), |e| e.kind.clone())
        });
        self.steps.entry(session.id).or_default().push(StepSpan {
            seq_in_session: step.agent_step_seq,
            name: step.name.clone(),
            start_us: record.sent_us.unwrap_or(record.intended_us),
            end_us: record.done_us(),
            failed,
        });
        if let Some(end) = &record.session_end {
            self.ended.insert(session.id, end.e2e_us);
        }
    }

    /// Orders each session's steps, picks the sessions to draw and counts the
    /// transitions; the sessions themselves are then let go.
    pub fn finish(&mut self) {
        let mut steps = std::mem::take(&mut self.steps);
        for session in steps.values_mut() {
            session.sort_by_key(|s| s.seq_in_session);
            for pair in session.windows(2) {
                let [from, to] = pair else { continue };
                let edge = self
                    .transitions
                    .entry((from.name.clone(), to.name.clone()))
                    .or_default();
                edge.0 += 1;
                edge.1 += to.end_us.saturating_sub(to.start_us);
            }
        }
        self.sessions = steps.len() as u64;
        let mut by_e2e: Vec<(u64, u64)> = self.ended.iter().map(|(id, e2e)| (*e2e, *id)).collect();
        by_e2e.sort_unstable();
        let picks = [
            (
                by_e2e.get(by_e2e.len() / 2),
                "typical: the median session E2E",
            ),
            (by_e2e.last(), "slowest session"),
        ];
        for (pick, why) in picks {
            let Some(&(e2e_us, id)) = pick else { continue };
            if self.waterfalls.iter().any(|w| w.session == id) {
                continue;
            }
            if let Some(steps) = steps.remove(&id) {
                self.waterfalls.push(Waterfall {
                    label: why.to_owned(),
                    session: id,
                    e2e_us,
                    steps,
                });
            }
        }
        self.ended.clear();
    }
}
