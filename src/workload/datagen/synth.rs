//! A synthetic prompt log of eight known families in known shares, for tests and demos
//! of `redline datagen`: each line is `{"prompt": …, "family": N}`, so a clustering can
//! be scored against the truth.

use std::io::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// (share, template with `{}` slots, values for each slot in turn).
type Family = (f64, &'static str, &'static [&'static [&'static str]]);

const LANGUAGES: &[&str] = &["French", "German", "Spanish", "Italian", "Japanese"];
const SENTENCES: &[&str] = &[
    "the meeting moved to thursday",
    "please send the invoice again",
    "our flight lands at noon",
    "the new release fixes the login bug",
    "we ran out of coffee",
];
const TABLES: &[&str] = &["orders", "users", "payments", "sessions", "products"];
const TASKS: &[&str] = &[
    "counts rows per day",
    "finds duplicate emails",
    "sums revenue by region",
    "lists the ten newest entries",
];
const PRODUCTS: &[&str] = &["router", "laptop", "headphones", "thermostat", "camera"];
const ISSUES: &[&str] = &[
    "stopped working after an update",
    "arrived with a cracked screen",
    "keeps disconnecting every hour",
    "was charged twice",
];
const TOPICS: &[&str] = &[
    "photosynthesis",
    "black holes",
    "inflation",
    "vaccines",
    "tides",
];
const AUDIENCES: &[&str] = &["a child", "a new employee", "a busy executive"];
const LANGS: &[&str] = &["Python", "Rust", "Go", "TypeScript"];
const FUNCS: &[&str] = &[
    "parses a CSV file",
    "retries an HTTP request",
    "merges two sorted lists",
    "validates an email address",
];
const CITIES: &[&str] = &["Lisbon", "Kyoto", "Denver", "Nairobi", "Oslo"];
const DAYS: &[&str] = &["two", "three", "five", "seven"];
const ROLES: &[&str] = &["data engineer", "nurse", "product manager", "teacher"];
const COMPANIES: &[&str] = &["a bank", "a hospital", "a startup", "a school"];
const REVIEWS: &[&str] = &[
    "the battery lasts all day and the screen is bright",
    "it broke within a week and support never answered",
    "decent value but the app is confusing",
];

/// The eight families, with shares summing to 1.
pub const FAMILIES: &[Family] = &[
    (
        0.30,
        "Translate the following sentence into {}: {}",
        &[LANGUAGES, SENTENCES],
    ),
    (
        0.20,
        "Write a SQL query on the {} table that {}",
        &[TABLES, TASKS],
    ),
    (
        0.15,
        "Customer support ticket: my {} {}. Draft a polite reply with next steps",
        &[PRODUCTS, ISSUES],
    ),
    (
        0.10,
        "Explain {} to {} in three short paragraphs",
        &[TOPICS, AUDIENCES],
    ),
    (
        0.10,
        "Write a {} function that {} and add unit tests",
        &[LANGS, FUNCS],
    ),
    (
        0.07,
        "Plan a {} day trip to {} with a daily budget and a packing list",
        &[DAYS, CITIES],
    ),
    (
        0.05,
        "Draft a cover letter for a {} position at {}",
        &[ROLES, COMPANIES],
    ),
    (
        0.03,
        "Classify the sentiment of this product review as positive, negative or mixed: {}",
        &[REVIEWS],
    ),
];

/// Writes `lines` prompts to `out`; returns how many lines each family got.
pub fn write_log(out: &mut impl Write, lines: u64, seed: u64) -> std::io::Result<Vec<u64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut families = vec![0; FAMILIES.len()];
    for _ in 0..lines {
        let mut target = rng.random::<f64>();
        let family = FAMILIES
            .iter()
            .position(|(share, _, _)| {
                target -= share;
                target < 0.0
            })
            .unwrap_or(FAMILIES.len() - 1);
        let (_, template, slots) = FAMILIES[family];
        let mut prompt = template.to_owned();
        for values in slots {
            let value = values[rng.random_range(0..values.len())];
            prompt = prompt.replacen("{}", value, 1);
        }
        serde_json::to_writer(
            &mut *out,
            &serde_json::json!({"prompt": prompt, "family": family}),
        )?;
        out.write_all(b"\n")?;
        families[family] += 1;
    }
    Ok(families)
}
