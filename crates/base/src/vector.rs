//! Arithmetic on embedding vectors, shared by the simulator's vector search, the
//! semantic-similarity assertion and the data generator.

/// Cosine similarity of two vectors of the same length (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norms = norm(a) * norm(b);
    if norms == 0.0 { 0.0 } else { dot / norms }
}

/// Euclidean length.
pub fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// Scales `v` to unit length in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let n = norm(v);
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}
