//! Problems found while checking a spec that parsed: each names its field by path
//! (`spec.load[1].rate`), says what is wrong and, where it can, how to fix it. They are
//! collected rather than returned at the first, so a user fixes a spec in one pass,
//! and located in the file's text only at the end, as [`SpecErrors`] in file order.

use super::error::{SpecError, SpecErrors, locate};

/// One problem at a field path.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub path: String,
    pub message: String,
    pub fix: Option<String>,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: String, fix: Option<String>) -> Self {
        Problem {
            path: path.into(),
            message,
            fix,
        }
    }

    /// The problem with its path under `prefix`: a check of a part of the spec names
    /// fields relative to that part (`.requests` under `spec.load[2]`).
    pub fn under(mut self, prefix: &str) -> Problem {
        self.path.insert_str(0, prefix);
        self
    }
}

/// The problems found so far.
#[derive(Debug, Default)]
pub struct Problems {
    found: Vec<Problem>,
}

impl Problems {
    pub fn new() -> Problems {
        Problems::default()
    }

    pub fn add(&mut self, path: &str, message: String, fix: Option<String>) {
        self.found.push(Problem::new(path, message, fix));
    }

    pub fn push(&mut self, problem: Problem) {
        self.found.push(problem);
    }

    pub fn extend(&mut self, problems: Problems) {
        self.found.extend(problems.found);
    }

    /// How many were found: a check that must know whether it found any compares the
    /// count before and after.
    pub fn count(&self) -> usize {
        self.found.len()
    }

    pub fn len(&self) -> usize {
        self.found.len()
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.found.iter()
    }

    pub fn into_vec(self) -> Vec<Problem> {
        self.found
    }

    /// Each problem located in the file's text, in file order, as a reader goes
    /// through the file to fix them.
    pub fn located(self, file: &str, text: &str) -> SpecErrors {
        let mut errors: Vec<SpecError> = self
            .found
            .into_iter()
            .map(|p| {
                let (line, column) = locate(text, &p.path);
                SpecError {
                    file: file.to_owned(),
                    line,
                    column,
                    path: p.path,
                    message: p.message,
                    fix: p.fix,
                }
            })
            .collect();
        errors.sort_by_key(|e| (e.line, e.column));
        SpecErrors(errors)
    }
}

impl std::ops::Index<usize> for Problems {
    type Output = Problem;

    fn index(&self, index: usize) -> &Problem {
        &self.found[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_located_in_file_order() {
        let text = "spec:\n  load:\n    - rate: 0\n  seed: x\n";
        let mut problems = Problems::new();
        problems.add("spec.seed", "not a number".into(), None);
        problems.push(
            Problem::new(
                ".rate",
                "must be above 0".into(),
                Some("write `rate: 5`".into()),
            )
            .under("spec.load[0]"),
        );
        let errors = problems.located("a.yaml", text).to_string();
        assert_eq!(
            errors,
            "2 problems in the spec:\n\
             a.yaml:3:7: spec.load[0].rate: must be above 0\n  fix: write `rate: 5`\n\
             a.yaml:4:3: spec.seed: not a number\n"
        );
    }
}
