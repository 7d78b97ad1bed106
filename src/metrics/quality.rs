//! Graded answers of the measured phase: how many were correct, wrong or unparsed
//! (docs/metrics.md, "Graded answers").

use serde::{Deserialize, Serialize};

use crate::record::{GradeVerdict, Phase, Record};

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QualityTally {
    pub correct: u64,
    pub wrong: u64,
    pub unparsed: u64,
}

impl QualityTally {
    /// A measured record's grade.
    pub fn add(&mut self, r: &Record) {
        if r.phase == Phase::Measure {
            self.count(r);
        }
    }

    /// A record's grade, whatever its phase (a sweep point is judged whole).
    pub fn count(&mut self, r: &Record) {
        let Some(grade) = &r.grade else {
            return;
        };
        *match grade.verdict {
            GradeVerdict::Correct => &mut self.correct,
            GradeVerdict::Wrong => &mut self.wrong,
            GradeVerdict::Unparsed => &mut self.unparsed,
        } += 1;
    }

    pub fn merge(&mut self, other: &QualityTally) {
        self.correct += other.correct;
        self.wrong += other.wrong;
        self.unparsed += other.unparsed;
    }

    /// Answers graded.
    pub fn graded(&self) -> u64 {
        self.correct + self.wrong + self.unparsed
    }
}
