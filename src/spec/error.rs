//! Spec errors a user can act on: file, line, column, field path, what is wrong and how
//! to fix it (the nearest valid key for a typo).

use std::fmt;

/// One problem in a spec file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: String,
    /// 1-based; 0 when the problem has no single place (e.g. the file is empty).
    pub line: usize,
    pub column: usize,
    /// Dotted path of the field, e.g. `spec.load[0].rate`; empty when unknown.
    pub path: String,
    pub message: String,
    pub fix: Option<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        write!(f, ": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

/// Every problem found, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.of("spec"))
    }
}

impl SpecErrors {
    /// A file (`what`: "spec file", "runbook") that could not be read at all.
    pub fn unreadable(file: &str, what: &str, error: &std::io::Error) -> SpecErrors {
        SpecErrors(vec![SpecError {
            file: file.to_owned(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the {what}: {error}"),
            fix: None,
        }])
    }

    /// Every problem, under a heading that names what kind of file has them.
    pub fn of(&self, what: &str) -> String {
        let n = self.0.len();
        let mut text = format!(
            "{n} problem{} in the {what}:\n",
            if n == 1 { "" } else { "s" }
        );
        for error in &self.0 {
            text.push_str(&format!("{error}\n"));
        }
        text
    }
}

impl SpecError {
    /// From a yaml_serde error: splits its `path: message at line L column C` apart and
    /// adds a fix for unknown fields and variants.
    pub fn from_yaml(file: &str, error: &yaml_serde::Error, line_offset: usize) -> SpecError {
        let (line, column) = error
            .location()
            .map_or((0, 0), |l| (l.line() + line_offset, l.column()));
        let mut text = error.to_string();
        if let Some(at) = text.rfind(" at line ") {
            text.truncate(at);
        }
        // yaml_serde prefixes the message with the field path, `spec.load[0]: …`.
        let (path, message) = match text.split_once(": ") {
            Some((path, message)) if !path.contains(' ') => (path.to_owned(), message.to_owned()),
            _ => (String::new(), text),
        };
        let fix = unknown_name_fix(&message);
        let message = match message.split_once(", expected") {
            Some((head, _)) if fix.is_some() => head.to_owned(),
            _ => message,
        };
        SpecError {
            file: file.to_owned(),
            line,
            column,
            path,
            message,
            fix,
        }
    }
}

/// For `unknown field `x`, expected one of `a`, `b`` (and variants): names the nearest
/// valid choice and lists them all.
fn unknown_name_fix(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    let (bad, expected) = rest.split_once('`')?;
    let choices: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    if choices.is_empty() {
        return Some(format!("remove `{bad}`: this mapping takes no other keys"));
    }
    let list = choices.join(", ");
    Some(match nearest(bad, &choices) {
        Some(near) => format!("did you mean `{near}`? Choose from: {list}"),
        None => format!("choose from: {list}"),
    })
}

/// The choice closest to `word` by edit distance, if it is close enough to be a typo.
pub fn nearest<'a>(word: &str, choices: &[&'a str]) -> Option<&'a str> {
    choices
        .iter()
        .map(|c| (edit_distance(&word.to_lowercase(), &c.to_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Line and column of a dotted field path (`spec.load[1].rate`) in YAML text: the
/// best place to point at for a problem found after parsing. Falls back to the
/// deepest part of the path that was found.
pub fn locate(text: &str, path: &str) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut line, mut column) = (0usize, 0usize);
    let mut found = (0, 0);
    for segment in path.split('.') {
        let (key, index) = match segment.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let pattern = format!("{key}:");
        let Some((l, c)) = lines.iter().enumerate().skip(line).find_map(|(l, text)| {
            let c = text.find(&pattern)?;
            let before = text[..c].chars().last();
            (before.is_none_or(|b| b == ' ' || b == '{' || b == ',' || b == '-')
                && (l > line || c >= column))
                .then_some((l, c))
        }) else {
            break;
        };
        (line, column) = (l, c);
        found = (l + 1, c + 1);
        if let Some(index) = index {
            let items: Vec<(usize, usize)> = lines
                .iter()
                .enumerate()
                .skip(l + 1)
                .take_while(|(_, t)| {
                    t.trim().is_empty()
                        || t.len() - t.trim_start().len() > c
                        || t.trim_start().starts_with('-')
                })
                .filter(|(_, t)| t.trim_start().starts_with('-'))
                .map(|(n, t)| (n, t.len() - t.trim_start().len()))
                .collect();
            match items.get(index) {
                Some(&(n, indent)) => {
                    (line, column) = (n, indent);
                    found = (n + 1, indent + 1);
                }
                None => break,
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_finds_nested_and_indexed_fields() {
        let text = "spec:\n  services:\n    llm: { url: embedded }\n  load:\n    - { rate: 5, duration: 10s }\n    - rate: 7\n      duration: 5s\n";
        assert_eq!(locate(text, "spec.services.llm"), (3, 5));
        assert_eq!(locate(text, "spec.load[1]"), (6, 5));
        assert_eq!(locate(text, "spec.load[1].duration"), (7, 7));
        assert_eq!(locate(text, "spec.load[0].rate"), (5, 9));
        assert_eq!(locate(text, "spec.nothing"), (1, 1));
    }

    #[test]
    fn nearest_finds_typos_only() {
        let keys = ["arrival", "rate", "duration", "concurrency"];
        assert_eq!(nearest("rat", &keys), Some("rate"));
        assert_eq!(nearest("duraton", &keys), Some("duration"));
        assert_eq!(nearest("Concurency", &keys), Some("concurrency"));
        assert_eq!(nearest("zebra", &keys), None);
    }
}
