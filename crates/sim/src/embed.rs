//! Deterministic text embeddings with meaning enough for tests: feature hashing of
//! words and character trigrams into a signed vector, L2-normalised. Texts that share
//! words and spellings have a high cosine similarity; unrelated texts are near
//! orthogonal. No model weights, so it runs anywhere.
use redline_base::seed::{Fnv64, mix_seed};

/// Words too common to say anything about similarity; they count for little.
const STOPWORDS: &[&str] = &[
    "a", "an", "the", "is", "are", "was", "were", "of", "to", "in", "on", "and", "or", "it", "its",
    "for", "with", "as", "at", "by", "be", "this", "that", "what", "which",
];

const WORD_WEIGHT: f32 = 1.0;
const STOPWORD_WEIGHT: f32 = 0.15;
const TRIGRAM_WEIGHT: f32 = 0.35;

/// The embedding of `text` in `dim` dimensions (unit length; all zeros for a text with
/// no letters or digits).
pub fn embed(text: &str, dim: usize) -> Vec<f32> {
    let mut vector = vec![0.0f32; dim.max(1)];
    let lower = text.to_lowercase();
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let weight = if STOPWORDS.contains(&word) {
            STOPWORD_WEIGHT
        } else {
            WORD_WEIGHT
        };
        add_feature(&mut vector, 0x77, word.as_bytes(), weight);
        if weight == WORD_WEIGHT {
            // Trigrams of the padded word: spelling variants and inflections overlap.
            let padded: Vec<char> = format!(" {word} ").chars().collect();
            for gram in padded.windows(3) {
                let gram: String = gram.iter().collect();
                add_feature(&mut vector, 0x33, gram.as_bytes(), TRIGRAM_WEIGHT);
            }
        }
    }
    redline_base::vector::normalize(&mut vector);
    vector
}

fn add_feature(vector: &mut [f32], kind: u64, bytes: &[u8], weight: f32) {
    let mut fnv = Fnv64::keyed(kind);
    fnv.write(bytes);
    let hash = mix_seed(&[fnv.finish()]);
    let bucket = (hash % vector.len() as u64) as usize;
    let sign = if hash >> 63 == 1 { -1.0 } else { 1.0 };
    vector[bucket] += sign * weight;
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_base::vector::cosine;

    #[test]
    fn unit_length_deterministic_and_sized() {
        let a = embed("The cache hit rate fell after the deploy", 384);
        assert_eq!(a.len(), 384);
        assert!((a.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(a, embed("The cache hit rate fell after the deploy", 384));
        assert!(embed("?!", 8).iter().all(|x| *x == 0.0));
    }

    #[test]
    fn paraphrases_are_near_and_unrelated_texts_are_far() {
        let dim = 384;
        let q = embed("How do I reset my account password?", dim);
        let paraphrase = embed("How can I reset the password of my account", dim);
        let unrelated = embed("Quarterly revenue grew in the northern region", dim);
        assert!(
            cosine(&q, &paraphrase) > 0.85,
            "{}",
            cosine(&q, &paraphrase)
        );
        assert!(cosine(&q, &unrelated) < 0.3, "{}", cosine(&q, &unrelated));
    }
}
