//! Graded answers of the measured phase: how many were correct, wrong or unparsed
//! (docs/metrics.md, "Graded answers").

use serde::{Deserialize, Serialize};

use crate::record::{GradeBucket, GradeVerdict, Phase, Record};

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QualityTally {
    pub correct: u64,
    pub wrong: u64,
    pub unparsed: u64,
    /// Graded tool calls that were not correct, by [`GradeBucket::ALL`]'s order.
    #[serde(default)]
    pub buckets: [u64; GradeBucket::ALL.len()],
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
        if let Some(bucket) = grade.bucket {
            self.buckets[bucket as usize] += 1;
        }
    }

    /// The buckets that hold any answer, by name.
    pub fn bucket_counts(&self) -> impl Iterator<Item = (GradeBucket, u64)> + '_ {
        GradeBucket::ALL
            .into_iter()
            .zip(self.buckets)
            .filter(|(_, n)| *n > 0)
    }

    pub fn merge(&mut self, other: &QualityTally) {
        self.correct += other.correct;
        self.wrong += other.wrong;
        self.unparsed += other.unparsed;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }

    /// Answers graded.
    pub fn graded(&self) -> u64 {
        self.correct + self.wrong + self.unparsed
    }
}
