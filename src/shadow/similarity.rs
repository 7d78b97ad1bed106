//! How alike two texts are, without a model: chrF (character n-gram F-score, n = 1…6,
//! β = 2, whitespace dropped, as sacreBLEU computes it), ROUGE-L (the F-measure of the
//! longest common subsequence of words) and a normalised word edit similarity
//! (1 − Levenshtein ÷ the longer length). Each is 1 for equal texts and near 0 for
//! unrelated ones. The texts are cut to [`MAX_CHARS`] and [`MAX_WORDS`] first, so a
//! huge answer costs the client a bounded amount of work.

use std::collections::HashMap;

/// Characters of each text that chrF looks at.
pub const MAX_CHARS: usize = 20_000;
/// Words of each text that ROUGE-L and the edit similarity look at (their cost is
/// the product of the two lengths).
pub const MAX_WORDS: usize = 2_000;

/// The three measures of one pair.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Similarity {
    pub chrf: f64,
    pub rouge_l: f64,
    pub edit: f64,
}

impl Similarity {
    pub fn of(a: &str, b: &str) -> Similarity {
        let (wa, wb) = (words(a), words(b));
        Similarity {
            chrf: chrf(a, b),
            rouge_l: rouge_l(&wa, &wb),
            edit: edit_similarity(&wa, &wb),
        }
    }
}

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().take(MAX_WORDS).collect()
}

/// chrF with β = 2 (recall weighs twice precision), averaged over n = 1…6.
pub fn chrf(a: &str, b: &str) -> f64 {
    let chars = |t: &str| -> Vec<char> {
        t.chars()
            .filter(|c| !c.is_whitespace())
            .take(MAX_CHARS)
            .collect()
    };
    let (ca, cb) = (chars(a), chars(b));
    if ca.is_empty() && cb.is_empty() {
        return 1.0;
    }
    let (mut precision, mut recall, mut orders) = (0.0, 0.0, 0.0);
    for n in 1..=6 {
        let (ga, gb) = (ngrams(&ca, n), ngrams(&cb, n));
        let (total_a, total_b): (usize, usize) = (ga.values().sum(), gb.values().sum());
        if total_a == 0 || total_b == 0 {
            continue;
        }
        let common: usize = ga
            .iter()
            .map(|(g, count)| (*count).min(gb.get(g).copied().unwrap_or(0)))
            .sum();
        precision += common as f64 / total_b as f64;
        recall += common as f64 / total_a as f64;
        orders += 1.0;
    }
    if orders == 0.0 {
        return f64::from(u8::from(ca == cb));
    }
    let (p, r) = (precision / orders, recall / orders);
    let beta2 = 4.0;
    if p + r == 0.0 {
        return 0.0;
    }
    (1.0 + beta2) * p * r / (beta2 * p + r)
}

fn ngrams(chars: &[char], n: usize) -> HashMap<&[char], usize> {
    let mut grams = HashMap::new();
    for window in chars.windows(n) {
        *grams.entry(window).or_insert(0) += 1;
    }
    grams
}

/// ROUGE-L F1 over words.
pub fn rouge_l(a: &[&str], b: &[&str]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    let lcs = row[b.len()] as f64;
    let (p, r) = (lcs / b.len() as f64, lcs / a.len() as f64);
    if lcs == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    }
}

/// 1 − word Levenshtein distance ÷ the longer length.
pub fn edit_similarity(a: &[&str], b: &[&str]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(x != y))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    1.0 - row[b.len()] as f64 / longer as f64
}

/// F1 of two sets of tool calls, each a (name, arguments) pair with the arguments'
/// JSON compared by value (key order and spacing do not count).
pub fn tool_call_f1(a: &[(String, String)], b: &[(String, String)]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let canonical = |(name, arguments): &(String, String)| {
        let arguments = serde_json::from_str::<serde_json::Value>(arguments)
            .map_or_else(|_| arguments.trim().to_owned(), |v| v.to_string());
        (name.clone(), arguments)
    };
    let mut left: Vec<_> = b.iter().map(canonical).collect();
    let mut matched = 0usize;
    for call in a.iter().map(canonical) {
        if let Some(i) = left.iter().position(|other| *other == call) {
            left.swap_remove(i);
            matched += 1;
        }
    }
    2.0 * matched as f64 / (a.len() + b.len()) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_score_one_and_unrelated_near_zero() {
        let s = Similarity::of("the cat sat on the mat", "the cat sat on the mat");
        assert_eq!((s.chrf, s.rouge_l, s.edit), (1.0, 1.0, 1.0));
        let s = Similarity::of("the cat sat on the mat", "QQQ ZZZ");
        assert!(s.chrf < 0.05 && s.rouge_l == 0.0 && s.edit == 0.0, "{s:?}");
    }

    #[test]
    fn known_values() {
        // LCS of [a b c d] and [a c d e] is 3: P = R = 3/4.
        assert!((rouge_l(&["a", "b", "c", "d"], &["a", "c", "d", "e"]) - 0.75).abs() < 1e-12);
        // kitten → sitting is 3 edits over 7, here as words.
        let k: Vec<&str> = "k i t t e n".split(' ').collect();
        let s: Vec<&str> = "s i t t i n g".split(' ').collect();
        assert!((edit_similarity(&k, &s) - (1.0 - 3.0 / 7.0)).abs() < 1e-12);
        // Case counts: upper-casing a text leaves little of its character n-grams.
        assert!(chrf("hello world", "HELLO WORLD") < 0.1);
    }

    #[test]
    fn tool_calls_compare_by_value() {
        let a = vec![("get".to_owned(), r#"{"a": 1, "b": 2}"#.to_owned())];
        let b = vec![("get".to_owned(), r#"{"b":2,"a":1}"#.to_owned())];
        assert_eq!(tool_call_f1(&a, &b), 1.0);
        let c = vec![("put".to_owned(), "{}".to_owned())];
        assert_eq!(tool_call_f1(&a, &c), 0.0);
    }
}
