//! `redline datagen`: prompt templates learned from a log, so a load test can send
//! traffic shaped like production without shipping the log around.
//!
//! Two passes over the log, in bounded memory whatever its size: the first keeps a
//! seeded reservoir sample of the prompts within the length bounds and fits TF-IDF and
//! k-means++ on it; the second assigns every prompt to a cluster, for the weights and
//! length statistics. Each cluster becomes a template (its skeleton, slots filled from
//! the values seen). The command also says how well traffic generated from the
//! templates matches the log: the distance between their length distributions and
//! between their cluster shares.

pub mod cluster;
pub mod synth;
pub mod template;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tokenizer::LocalTokenizer;
use cluster::{Centroids, Idf, adjusted_rand_index, kmeans};
use template::{LengthStats, Template};

/// How to learn templates.
#[derive(Debug, Clone)]
pub struct Options {
    /// Clusters, hence templates.
    pub k: usize,
    /// JSON field holding the prompt (default: `prompt`, else `messages`).
    pub field: Option<String>,
    /// Keep prompts of at least / at most this many tokens.
    pub min_length: u32,
    pub max_length: u32,
    pub seed: u64,
    /// Prompts kept in memory to fit on.
    pub sample: usize,
    /// Count and skip lines that are not valid, instead of stopping at the first.
    pub skip_invalid: bool,
    /// A JSON field holding a known family: the command then scores the clustering
    /// against it (adjusted Rand index).
    pub label_field: Option<String>,
    pub tokenizer: LocalTokenizer,
    /// Bytes of the log read so far, over both passes (for a progress bar: the whole
    /// job reads the log twice).
    pub read: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// What `redline datagen` writes: a workload file a spec can use as a prompt source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateFile {
    pub source: SourceInfo,
    pub templates: Vec<Template>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub log: String,
    pub lines: u64,
    /// Prompts within the length bounds: those the templates describe.
    pub kept: u64,
    pub outside_length: u64,
    pub skipped_invalid: u64,
    pub seed: u64,
}

/// How well templates reproduce the log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fidelity {
    /// Kolmogorov–Smirnov distance between the prompt-length distributions of the log
    /// (its sample) and of as many generated prompts.
    pub length_ks: f64,
    /// Total variation distance between the log's cluster shares and the shares of
    /// generated prompts, assigned to the same clusters.
    pub share_distance: f64,
    /// Adjusted Rand index against the known families, with `label_field`.
    pub ari: Option<f64>,
}

/// A problem with the log, naming the file and line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DatagenError(String);

/// One prompt of the log.
struct Line {
    prompt: String,
    label: Option<String>,
}

/// Streams the prompts of a log: JSONL (when its first line is a JSON object) or plain
/// text, one prompt a line.
fn read_log(
    path: &Path,
    options: &Options,
    skipped: &mut u64,
    mut each: impl FnMut(Line),
) -> Result<u64, DatagenError> {
    let file = std::fs::File::open(path)
        .map_err(|e| DatagenError(format!("{}: cannot read: {e}", path.display())))?;
    let mut lines = 0;
    let mut json = None;
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| DatagenError(format!("{}:{}: {e}", path.display(), n + 1)))?;
        if let Some(read) = &options.read {
            read.fetch_add(line.len() as u64 + 1, std::sync::atomic::Ordering::Relaxed);
        }
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let is_json = *json.get_or_insert_with(|| line.trim_start().starts_with('{'));
        if !is_json {
            each(Line {
                prompt: line,
                label: None,
            });
            continue;
        }
        match parse_line(&line, options) {
            Ok(parsed) => each(parsed),
            Err(_) if options.skip_invalid => *skipped += 1,
            Err(e) => {
                return Err(DatagenError(format!(
                    "{}:{}: {e} (pass --skip-invalid to count and skip such lines)",
                    path.display(),
                    n + 1
                )));
            }
        }
    }
    if lines == 0 {
        return Err(DatagenError(format!(
            "{}: the log is empty",
            path.display()
        )));
    }
    Ok(lines)
}

fn parse_line(line: &str, options: &Options) -> Result<Line, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let prompt = match &options.field {
        Some(field) => value
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("no string field `{field}`"))?,
        None => match (value.get("prompt"), value.get("messages")) {
            (Some(Value::String(p)), _) => p.clone(),
            (_, Some(Value::Array(messages))) => messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return Err("no `prompt` string or `messages` list".into()),
        },
    };
    let label = options
        .label_field
        .as_ref()
        .and_then(|f| value.get(f))
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    Ok(Line { prompt, label })
}

/// A seeded reservoir sample of a log's prompts within the length bounds, with the
/// counts of what was read.
struct Reservoir {
    sample: Vec<(String, u32)>,
    lines: u64,
    kept: u64,
    outside: u64,
    skipped: u64,
}

fn reservoir(path: &Path, options: &Options) -> Result<Reservoir, DatagenError> {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut sample: Vec<(String, u32)> = Vec::with_capacity(options.sample);
    let (mut kept, mut outside, mut skipped) = (0u64, 0u64, 0u64);
    let within = |tokens: u32| (options.min_length..=options.max_length).contains(&tokens);
    let lines = read_log(path, options, &mut skipped, |line| {
        let tokens = options.tokenizer.count(&line.prompt) as u32;
        if !within(tokens) {
            outside += 1;
            return;
        }
        kept += 1;
        if sample.len() < options.sample {
            sample.push((line.prompt, tokens));
        } else {
            let slot = rng.random_range(0..kept);
            if (slot as usize) < options.sample {
                sample[slot as usize] = (line.prompt, tokens);
            }
        }
    })?;
    if sample.is_empty() {
        return Err(DatagenError(format!(
            "{}: no prompts of {} to {} tokens among {lines} lines",
            path.display(),
            options.min_length,
            options.max_length
        )));
    }
    Ok(Reservoir {
        sample,
        lines,
        kept,
        outside,
        skipped,
    })
}

/// Learns templates from the log at `path`.
pub fn learn(path: &Path, options: &Options) -> Result<(TemplateFile, Fidelity), DatagenError> {
    // Pass 1: a seeded reservoir sample of the prompts within the length bounds.
    let Reservoir {
        sample,
        lines,
        kept,
        outside,
        skipped,
    } = reservoir(path, options)?;
    let within = |tokens: u32| (options.min_length..=options.max_length).contains(&tokens);

    // Fit on the sample.
    let texts: Vec<String> = sample.iter().map(|(p, _)| p.clone()).collect();
    let idf = Idf::fit(&texts);
    let vectors: Vec<_> = texts.iter().map(|t| idf.vector(t)).collect();
    let (centroids, assignment) = kmeans(&vectors, options.k, options.seed);

    // Pass 2: every prompt to its cluster, for weights, lengths and the score.
    let k = centroids.len();
    let mut counts = vec![0u64; k];
    let mut lengths = vec![Welford::default(); k];
    let mut contingency: HashMap<(usize, usize), u64> = HashMap::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut ignored = 0;
    read_log(path, options, &mut ignored, |line| {
        let tokens = options.tokenizer.count(&line.prompt) as u32;
        if !within(tokens) {
            return;
        }
        let (cluster, _) = centroids.nearest(&idf.vector(&line.prompt));
        counts[cluster] += 1;
        lengths[cluster].add(tokens);
        if let Some(label) = line.label {
            let next = labels.len();
            let label = *labels.entry(label).or_insert(next);
            *contingency.entry((cluster, label)).or_default() += 1;
        }
    })?;

    let total: u64 = counts.iter().sum();
    let mut templates = Vec::new();
    for cluster in 0..k {
        let members: Vec<usize> = (0..sample.len())
            .filter(|&i| assignment[i] == cluster)
            .collect();
        if members.is_empty() || counts[cluster] == 0 {
            continue;
        }
        let medoid = members
            .iter()
            .map(|&i| (centroids.nearest(&vectors[i]).1, i))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .expect("members is not empty")
            .1;
        let prompts: Vec<&str> = members.iter().map(|&i| sample[i].0.as_str()).collect();
        let (skeleton, slots) = template::extract(&sample[medoid].0, &prompts);
        templates.push(Template {
            weight: counts[cluster] as f64 / total as f64,
            template: skeleton,
            slots,
            length: lengths[cluster].stats(),
        });
    }
    templates.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    let fidelity = Fidelity {
        ari: (!contingency.is_empty()).then(|| adjusted_rand_index(&contingency)),
        ..fidelity(&templates, &sample, &idf, &centroids, options)
    };
    Ok((
        TemplateFile {
            source: SourceInfo {
                log: path.display().to_string(),
                lines,
                kept,
                outside_length: outside,
                skipped_invalid: skipped,
                seed: options.seed,
            },
            templates,
        },
        fidelity,
    ))
}

/// Generates as many prompts as the sample holds and compares them with it.
fn fidelity(
    templates: &[Template],
    sample: &[(String, u32)],
    idf: &Idf,
    centroids: &Centroids,
    options: &Options,
) -> Fidelity {
    let generator = TemplateSampler::new(templates.to_vec());
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed ^ 0x4649_4445);
    let mut generated_lengths = Vec::with_capacity(sample.len());
    let mut generated_shares = vec![0.0; centroids.len()];
    for _ in 0..sample.len() {
        let prompt = generator.prompt(&mut rng);
        generated_lengths.push(options.tokenizer.count(&prompt) as u32);
        generated_shares[centroids.nearest(&idf.vector(&prompt)).0] += 1.0 / sample.len() as f64;
    }
    let mut log_shares = vec![0.0; centroids.len()];
    for (text, _) in sample {
        log_shares[centroids.nearest(&idf.vector(text)).0] += 1.0 / sample.len() as f64;
    }
    let share_distance = log_shares
        .iter()
        .zip(&generated_shares)
        .map(|(a, b)| (a - b).abs())
        .sum::<f64>()
        / 2.0;
    let log_lengths: Vec<u32> = sample.iter().map(|(_, n)| *n).collect();
    Fidelity {
        length_ks: ks_distance(log_lengths, generated_lengths),
        share_distance,
        ari: None,
    }
}

/// The largest gap between two empirical distribution functions.
fn ks_distance(mut a: Vec<u32>, mut b: Vec<u32>) -> f64 {
    a.sort_unstable();
    b.sort_unstable();
    let (mut i, mut j, mut worst) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] == x {
            i += 1;
        }
        while j < b.len() && b[j] == x {
            j += 1;
        }
        worst = worst.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    worst
}

/// Running mean and variance of token lengths.
#[derive(Debug, Clone, Copy, Default)]
struct Welford {
    n: u64,
    mean: f64,
    m2: f64,
    min: u32,
    max: u32,
}

impl Welford {
    fn add(&mut self, x: u32) {
        self.n += 1;
        let delta = f64::from(x) - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (f64::from(x) - self.mean);
        self.min = if self.n == 1 { x } else { self.min.min(x) };
        self.max = self.max.max(x);
    }

    fn stats(&self) -> LengthStats {
        LengthStats {
            mean: self.mean,
            stddev: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).sqrt()
            } else {
                0.0
            },
            min: self.min,
            max: self.max,
        }
    }
}

/// Draws prompts from templates in proportion to their weights.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateSampler {
    templates: Vec<Template>,
    total: f64,
}

impl TemplateSampler {
    pub fn new(templates: Vec<Template>) -> TemplateSampler {
        let total = templates.iter().map(|t| t.weight).sum();
        TemplateSampler { templates, total }
    }

    /// Reads a file written by `redline datagen`.
    pub fn load(path: &Path) -> Result<TemplateSampler, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let file: TemplateFile = yaml_serde::from_str(&text).map_err(|e| {
            format!(
                "{}: not a template file from `redline datagen`: {e}",
                path.display()
            )
        })?;
        if file.templates.iter().all(|t| t.weight <= 0.0) {
            return Err(format!(
                "{}: no template has a positive weight",
                path.display()
            ));
        }
        Ok(TemplateSampler::new(file.templates))
    }

    /// One prompt: a template drawn by weight, each slot filled with a value seen.
    pub fn prompt(&self, rng: &mut ChaCha8Rng) -> String {
        let mut target = rng.random::<f64>() * self.total;
        let template = self
            .templates
            .iter()
            .find(|t| {
                target -= t.weight;
                target < 0.0
            })
            .unwrap_or(&self.templates[self.templates.len() - 1]);
        template.fill(|_, values| {
            if values.is_empty() {
                0
            } else {
                rng.random_range(0..values.len())
            }
        })
    }
}

/// Writes the template file, with a comment saying where it came from.
pub fn write(file: &TemplateFile, out: &PathBuf) -> std::io::Result<()> {
    let yaml = yaml_serde::to_string(file).expect("templates serialize");
    let header = format!(
        "# Prompt templates learned by `redline datagen` from {}.\n# Use as `prompts: {{ templates: {{ file: {}, output_tokens: 128 }} }}`.\n",
        file.source.log,
        out.display()
    );
    std::fs::write(out, header + &yaml)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(k: usize) -> Options {
        Options {
            k,
            field: None,
            min_length: 4,
            max_length: 512,
            seed: 7,
            sample: 4_000,
            skip_invalid: false,
            label_field: Some("family".into()),
            tokenizer: LocalTokenizer::by_name("cl100k_base").unwrap(),
            read: None,
        }
    }

    fn log(lines: u64, name: &str) -> (PathBuf, Vec<u64>) {
        let path = std::env::temp_dir().join(format!(
            "redline-datagen-{name}-{}.jsonl",
            std::process::id()
        ));
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let counts = synth::write_log(&mut file, lines, 11).unwrap();
        drop(file);
        (path, counts)
    }

    #[test]
    fn eight_known_families_are_recovered_with_their_shares() {
        let (path, counts) = log(10_000, "families");
        let (file, fidelity) = learn(&path, &options(8)).unwrap();
        let ari = fidelity.ari.unwrap();
        assert!(ari >= 0.9, "adjusted Rand index {ari}");
        // Each true share has a template within 2 points of it.
        let mut weights: Vec<f64> = file.templates.iter().map(|t| t.weight).collect();
        let mut truth: Vec<f64> = counts.iter().map(|&c| c as f64 / 10_000.0).collect();
        weights.sort_by(f64::total_cmp);
        truth.sort_by(f64::total_cmp);
        for (w, t) in weights.iter().zip(&truth) {
            assert!(
                (w - t).abs() <= 0.02,
                "weights {weights:?} vs shares {truth:?}"
            );
        }
        assert!(fidelity.share_distance < 0.05, "{fidelity:?}");
        assert!(fidelity.length_ks < 0.1, "{fidelity:?}");
        // The translation family's skeleton survives, with its languages as a slot.
        let translate = file
            .templates
            .iter()
            .find(|t| {
                t.template
                    .starts_with("Translate the following sentence into")
            })
            .unwrap_or_else(|| panic!("{:#?}", file.templates));
        assert!(
            translate
                .slots
                .iter()
                .any(|s| s.iter().any(|v| v.contains("French")))
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn bad_lines_name_file_and_line_or_are_counted_when_skipped() {
        let (path, _) = log(50, "bad");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.insert_str(0, "{\"prompt\": \"a fine first line of several words\"}\n{not json\n{\"text\": \"no prompt field\"}\n");
        std::fs::write(&path, text).unwrap();
        let err = learn(&path, &options(2)).unwrap_err().to_string();
        assert!(err.contains(":2: not valid JSON"), "{err}");
        let skipping = Options {
            skip_invalid: true,
            ..options(2)
        };
        let (file, _) = learn(&path, &skipping).unwrap();
        assert_eq!(file.source.skipped_invalid, 2);
        assert_eq!(file.source.lines, 53);
        std::fs::write(&path, "").unwrap();
        let empty = learn(&path, &options(2)).unwrap_err().to_string();
        assert!(empty.ends_with("the log is empty"), "{empty}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn templates_round_trip_through_their_file_and_generate_deterministically() {
        let (path, _) = log(2_000, "roundtrip");
        let (file, _) = learn(&path, &options(8)).unwrap();
        let out = path.with_extension("yaml");
        write(&file, &out).unwrap();
        let generator = TemplateSampler::load(&out).unwrap();
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..20)
                .map(|_| generator.prompt(&mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        std::fs::remove_file(path).unwrap();
        std::fs::remove_file(out).unwrap();
    }
}
