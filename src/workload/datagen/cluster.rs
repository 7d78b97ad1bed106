//! TF-IDF vectors over word unigrams, word bigrams and character trigrams (feature-
//! hashed, so memory does not grow with the vocabulary), and seeded k-means++ on them.
//! Vectors are L2-normalised, so the dot product is the cosine similarity.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Hashed feature space: collisions are rare at prompt-log vocabularies, and centres
/// stay small enough to sum densely in every k-means iteration.
const DIMS: u32 = 1 << 16;
/// Lloyd iterations at most; they usually settle in a handful.
const MAX_ITERATIONS: usize = 50;

/// A sparse, L2-normalised vector: (feature, weight) sorted by feature.
pub type Sparse = Vec<(u32, f32)>;

/// Weight of character trigrams against words: a prompt has several times more
/// trigrams than words, and at full weight they let the words of the varying spans
/// outvote the skeleton a family shares. They stay, lightly, for spelling variants.
const TRIGRAM_WEIGHT: f32 = 0.2;

/// Term features of a text, with (weighted) counts.
fn terms(text: &str) -> HashMap<u32, f32> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut counts = HashMap::new();
    let mut add = |kind: u8, parts: &[&str]| {
        let weight = if kind == b'c' { TRIGRAM_WEIGHT } else { 1.0 };
        *counts.entry(feature(kind, parts)).or_insert(0.0) += weight;
    };
    for w in &words {
        add(b'w', &[w]);
    }
    for pair in words.windows(2) {
        add(b'b', pair);
    }
    let chars: Vec<char> = lower.chars().collect();
    for tri in chars.windows(3) {
        let s: String = tri.iter().collect();
        add(b'c', &[&s]);
    }
    counts
}

/// FNV-1a over a kind byte and the parts, into [0, DIMS).
fn feature(kind: u8, parts: &[&str]) -> u32 {
    let mut hash = crate::seed::Fnv32::new();
    hash.write(&[kind]);
    for part in parts {
        hash.write(part.as_bytes());
        hash.write(&[0]);
    }
    hash.finish() % DIMS
}

/// Inverse document frequencies learned from a sample.
pub struct Idf {
    weights: HashMap<u32, f32>,
    /// Weight of a feature never seen in the sample.
    unseen: f32,
}

impl Idf {
    pub fn fit(texts: &[String]) -> Idf {
        let mut documents: HashMap<u32, u32> = HashMap::new();
        for text in texts {
            for feature in terms(text).into_keys() {
                *documents.entry(feature).or_insert(0) += 1;
            }
        }
        let n = texts.len() as f32;
        let idf = |df: f32| ((1.0 + n) / (1.0 + df)).ln() + 1.0;
        Idf {
            weights: documents
                .into_iter()
                .map(|(f, df)| (f, idf(df as f32)))
                .collect(),
            unseen: idf(0.0),
        }
    }

    /// The normalised TF-IDF vector of a text (sublinear term frequency, ln(1 + tf)).
    pub fn vector(&self, text: &str) -> Sparse {
        let mut v: Sparse = terms(text)
            .into_iter()
            .map(|(f, tf)| {
                let idf = self.weights.get(&f).copied().unwrap_or(self.unseen);
                (f, tf.ln_1p() * idf)
            })
            .collect();
        v.sort_unstable_by_key(|(f, _)| *f);
        let norm = v.iter().map(|(_, w)| w * w).sum::<f32>().sqrt();
        if norm > 0.0 {
            for (_, w) in &mut v {
                *w /= norm;
            }
        }
        v
    }
}

/// Cluster centres, dense over the hashed features.
pub struct Centroids {
    centres: Vec<Vec<f32>>,
}

impl Centroids {
    /// The nearest centre (highest cosine similarity) to `v`, and that similarity.
    pub fn nearest(&self, v: &Sparse) -> (usize, f32) {
        self.centres
            .iter()
            .enumerate()
            .map(|(i, c)| (i, dot(c, v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("at least one centre")
    }

    pub fn len(&self) -> usize {
        self.centres.len()
    }

    pub fn is_empty(&self) -> bool {
        self.centres.is_empty()
    }
}

fn dot(dense: &[f32], sparse: &Sparse) -> f32 {
    sparse.iter().map(|(f, w)| dense[*f as usize] * w).sum()
}

fn sparse_dot(a: &Sparse, b: &Sparse) -> f32 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                sum += a[i].1 * b[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    sum
}

/// Clusters into `k` families: k-means++ into `OVERSPLIT`·k clusters (the best of
/// several seeded runs, as scikit-learn's `n_init`), then the most similar centres
/// merged pairwise until `k` remain.
///
/// k-means alone favours clusters of equal spread: it splits a large family by the
/// values of its slots and merges two small families to pay for it. Over-splitting
/// first and then merging by centre similarity puts the pieces of a family — which
/// share its skeleton — back together before any two different families meet.
pub fn kmeans(vectors: &[Sparse], k: usize, seed: u64) -> (Centroids, Vec<usize>) {
    let k = k.min(vectors.len()).max(1);
    // Score each run once, then keep the best.
    let (_, (centroids, assignment)) = (0..RESTARTS)
        .map(|run| {
            let clustering = kmeans_once(vectors, k * OVERSPLIT, seed.wrapping_add(run));
            (cohesion(vectors, &clustering), clustering)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .expect("at least one run");
    let mut sizes = vec![0usize; centroids.len()];
    for &a in &assignment {
        sizes[a] += 1;
    }
    // (centre, size) of the live clusters; merged ones become None.
    let mut live: Vec<Option<(Vec<f32>, usize)>> = centroids
        .centres
        .into_iter()
        .zip(sizes)
        .map(|(c, n)| (n > 0).then_some((c, n)))
        .collect();
    while live.iter().flatten().count() > k {
        let mut best = (0, 0, f32::MIN);
        for i in 0..live.len() {
            for j in i + 1..live.len() {
                if let (Some((a, _)), Some((b, _))) = (&live[i], &live[j]) {
                    let similarity: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                    if similarity > best.2 {
                        best = (i, j, similarity);
                    }
                }
            }
        }
        let (i, j, _) = best;
        let (b, nb) = live[j].take().expect("live");
        let (a, na) = live[i].take().expect("live");
        let mut merged: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| x * na as f32 + y * nb as f32)
            .collect();
        let norm = merged.iter().map(|w| w * w).sum::<f32>().sqrt();
        if norm > 0.0 {
            merged.iter_mut().for_each(|w| *w /= norm);
        }
        live[i] = Some((merged, na + nb));
    }
    let centroids = Centroids {
        centres: live.into_iter().flatten().map(|(c, _)| c).collect(),
    };
    let assignment = vectors.iter().map(|v| centroids.nearest(v).0).collect();
    (centroids, assignment)
}

/// Clusters per family before merging.
const OVERSPLIT: usize = 3;

/// Runs of k-means++ from different seeds.
const RESTARTS: u64 = 10;

fn cohesion(vectors: &[Sparse], (centroids, assignment): &(Centroids, Vec<usize>)) -> f32 {
    vectors
        .iter()
        .zip(assignment)
        .map(|(v, &a)| dot(&centroids.centres[a], v))
        .sum()
}

/// One k-means++ seeding then Lloyd iterations, on cosine distance.
fn kmeans_once(vectors: &[Sparse], k: usize, seed: u64) -> (Centroids, Vec<usize>) {
    let k = k.min(vectors.len());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // k-means++: each next seed drawn with probability proportional to its squared
    // distance from the nearest seed so far (cosine distance 1 − similarity).
    let mut seeds = vec![rng.random_range(0..vectors.len())];
    let mut distance: Vec<f32> = vectors
        .iter()
        .map(|v| 1.0 - sparse_dot(v, &vectors[seeds[0]]))
        .collect();
    while seeds.len() < k {
        let total: f32 = distance.iter().map(|d| d * d).sum();
        let next = if total <= 0.0 {
            rng.random_range(0..vectors.len())
        } else {
            let mut target = rng.random::<f32>() * total;
            distance
                .iter()
                .position(|d| {
                    target -= d * d;
                    target <= 0.0
                })
                .unwrap_or(vectors.len() - 1)
        };
        seeds.push(next);
        for (d, v) in distance.iter_mut().zip(vectors) {
            *d = d.min(1.0 - sparse_dot(v, &vectors[next]));
        }
    }
    let mut centroids = Centroids {
        centres: seeds.iter().map(|&s| densify(&vectors[s])).collect(),
    };
    let mut assignment = vec![usize::MAX; vectors.len()];
    for _ in 0..MAX_ITERATIONS {
        let mut changed = false;
        for (a, v) in assignment.iter_mut().zip(vectors) {
            let (nearest, _) = centroids.nearest(v);
            changed |= *a != nearest;
            *a = nearest;
        }
        if !changed {
            break;
        }
        let mut sums = vec![vec![0.0f32; DIMS as usize]; k];
        for (a, v) in assignment.iter().zip(vectors) {
            for (f, w) in v {
                sums[*a][*f as usize] += w;
            }
        }
        for (i, sum) in sums.into_iter().enumerate() {
            let norm = sum.iter().map(|w| w * w).sum::<f32>().sqrt();
            // An emptied cluster keeps its old centre.
            if norm > 0.0 {
                centroids.centres[i] = sum.into_iter().map(|w| w / norm).collect();
            }
        }
    }
    (centroids, assignment)
}

fn densify(v: &Sparse) -> Vec<f32> {
    let mut dense = vec![0.0; DIMS as usize];
    for (f, w) in v {
        dense[*f as usize] = *w;
    }
    dense
}

/// Adjusted Rand index from a contingency table (count of items per (cluster, label)):
/// 1 for identical partitions, whatever the names; about 0 for chance agreement.
pub fn adjusted_rand_index(table: &HashMap<(usize, usize), u64>) -> f64 {
    let mut rows: HashMap<usize, u64> = HashMap::new();
    let mut cols: HashMap<usize, u64> = HashMap::new();
    for (&(x, y), &n) in table {
        *rows.entry(x).or_default() += n;
        *cols.entry(y).or_default() += n;
    }
    let total: u64 = table.values().sum();
    let pairs = |n: u64| n as f64 * n.saturating_sub(1) as f64 / 2.0;
    let index: f64 = table.values().map(|&n| pairs(n)).sum();
    let row_sum: f64 = rows.values().map(|&n| pairs(n)).sum();
    let col_sum: f64 = cols.values().map(|&n| pairs(n)).sum();
    let expected = row_sum * col_sum / pairs(total);
    let max = (row_sum + col_sum) / 2.0;
    if max == expected {
        return 1.0;
    }
    (index - expected) / (max - expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_texts_are_close_and_different_ones_far() {
        let texts: Vec<String> = [
            "translate this sentence into french please",
            "translate this sentence into german please",
            "write a sql query that counts the users",
        ]
        .map(String::from)
        .to_vec();
        let idf = Idf::fit(&texts);
        let v: Vec<Sparse> = texts.iter().map(|t| idf.vector(t)).collect();
        assert!(sparse_dot(&v[0], &v[1]) > 0.6);
        assert!(sparse_dot(&v[0], &v[2]) < 0.2);
        assert!((sparse_dot(&v[0], &v[0]) - 1.0).abs() < 1e-5);
    }

    fn table(a: &[usize], b: &[usize]) -> HashMap<(usize, usize), u64> {
        let mut t = HashMap::new();
        for pair in a.iter().copied().zip(b.iter().copied()) {
            *t.entry(pair).or_default() += 1;
        }
        t
    }

    #[test]
    fn the_adjusted_rand_index_ignores_label_names() {
        let same = table(&[0, 0, 1, 1, 2], &[5, 5, 3, 3, 9]);
        assert!((adjusted_rand_index(&same) - 1.0).abs() < 1e-12);
        assert!(adjusted_rand_index(&table(&[0, 0, 1, 1], &[0, 1, 0, 1])) < 0.0);
    }
}
