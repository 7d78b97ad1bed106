//! A cluster's template: the skeleton its prompts share, with the spans that vary
//! turned into slots filled from the values seen.
//!
//! The skeleton is taken from the cluster's medoid (its prompt nearest the centre): a
//! word of the medoid is fixed when most of the cluster's prompts contain it. Each
//! prompt is then matched against the fixed words in order; what lies between two
//! fixed words is that prompt's value for the slot there.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

/// A word is part of the skeleton when at least this share of prompts contain it.
const FIXED_SHARE: f64 = 0.9;
/// Distinct values kept per slot.
const MAX_VALUES: usize = 64;

/// A learned prompt template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    /// Share of the log's prompts in this cluster.
    pub weight: f64,
    /// The skeleton, with `{slot_N}` where prompts differ.
    pub template: String,
    /// Values seen for each slot, in the order of the slots.
    pub slots: Vec<Vec<String>>,
    /// Token-length statistics of the cluster's prompts.
    pub length: LengthStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LengthStats {
    pub mean: f64,
    pub stddev: f64,
    pub min: u32,
    pub max: u32,
}

impl Template {
    /// A prompt of this template with slot values chosen by `pick(slot, values)`.
    pub fn fill(&self, mut pick: impl FnMut(usize, &[String]) -> usize) -> String {
        let mut out = self.template.clone();
        for (i, values) in self.slots.iter().enumerate() {
            let value = values.get(pick(i, values)).map_or("", String::as_str);
            out = out.replacen(&format!("{{slot_{i}}}"), value, 1);
        }
        out
    }
}

/// Learns the skeleton of `prompts` (the medoid first).
pub fn extract(medoid: &str, prompts: &[&str]) -> (String, Vec<Vec<String>>) {
    let medoid_words: Vec<&str> = medoid.split_whitespace().collect();
    // Word counts per prompt: the m-th `the` of the medoid is fixed only when most
    // prompts have at least m of them (the skeleton may hold a `the` of its own).
    let counts: Vec<HashMap<&str, usize>> = prompts
        .iter()
        .map(|p| {
            let mut c = HashMap::new();
            for w in p.split_whitespace() {
                *c.entry(w).or_insert(0) += 1;
            }
            c
        })
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let fixed: Vec<bool> = medoid_words
        .iter()
        .map(|w| {
            let nth = {
                let n = seen.entry(w).or_insert(0);
                *n += 1;
                *n
            };
            let with = counts
                .iter()
                .filter(|c| c.get(w).is_some_and(|&n| n >= nth))
                .count();
            with as f64 >= FIXED_SHARE * counts.len() as f64
        })
        .collect();
    // The skeleton: runs of fixed words, and one slot for each run of varying words
    // (a slot also goes between two fixed runs when prompts put something there).
    let mut pieces: Vec<Piece> = Vec::new();
    for (word, is_fixed) in medoid_words.iter().zip(&fixed) {
        match (is_fixed, pieces.last_mut()) {
            (true, Some(Piece::Fixed(run))) => run.push(word),
            (true, _) => pieces.push(Piece::Fixed(vec![word])),
            (false, Some(Piece::Slot)) => {}
            (false, _) => pieces.push(Piece::Slot),
        }
    }
    let slot_count = pieces.iter().filter(|p| matches!(p, Piece::Slot)).count();
    let mut values: Vec<BTreeSet<String>> = vec![BTreeSet::new(); slot_count];
    for prompt in prompts {
        if let Some(found) = slot_values(&pieces, prompt) {
            for (set, value) in values.iter_mut().zip(found) {
                if set.len() < MAX_VALUES && !value.is_empty() {
                    set.insert(value);
                }
            }
        }
    }
    let mut template = String::new();
    let mut slot = 0;
    for piece in &pieces {
        if !template.is_empty() {
            template.push(' ');
        }
        match piece {
            Piece::Fixed(run) => template.push_str(&run.join(" ")),
            Piece::Slot => {
                template.push_str(&format!("{{slot_{slot}}}"));
                slot += 1;
            }
        }
    }
    (
        template,
        values
            .into_iter()
            .map(|v| v.into_iter().collect())
            .collect(),
    )
}

enum Piece<'a> {
    Fixed(Vec<&'a str>),
    Slot,
}

/// The words of `prompt` that fall in each slot, when its words follow the fixed runs
/// in order; `None` when they do not.
fn slot_values(pieces: &[Piece], prompt: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let mut at = 0;
    let mut values = Vec::new();
    let mut open: Option<usize> = None;
    for piece in pieces {
        match piece {
            Piece::Slot => open = Some(at),
            Piece::Fixed(run) => {
                let found = (at..=words.len().saturating_sub(run.len()))
                    .find(|&i| words[i..].starts_with(run))?;
                if let Some(start) = open.take() {
                    values.push(words[start..found].join(" "));
                } else if found != at {
                    return None;
                }
                at = found + run.len();
            }
        }
    }
    if let Some(start) = open {
        values.push(words[start..].join(" "));
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skeleton_keeps_shared_words_and_slots_the_rest() {
        let prompts = [
            "Write a SQL query that counts users in table orders",
            "Write a SQL query that lists products in table items",
            "Write a SQL query that sums revenue in table sales",
        ];
        let (template, slots) = extract(prompts[0], &prompts);
        assert_eq!(
            template,
            "Write a SQL query that {slot_0} in table {slot_1}"
        );
        assert_eq!(slots[0], ["counts users", "lists products", "sums revenue"]);
        assert_eq!(slots[1], ["items", "orders", "sales"]);
        let t = Template {
            weight: 1.0,
            template,
            slots,
            length: LengthStats::default(),
        };
        assert_eq!(
            t.fill(|slot, _| slot),
            "Write a SQL query that counts users in table orders"
        );
    }
}
