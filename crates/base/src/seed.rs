//! Seeded mixing and FNV-1a hashing: the deterministic building blocks every seeded part
//! of redline draws from (schedules, prompt orders, fault rolls, trace IDs, the
//! simulator's answers and embeddings). One copy, so two parts that must agree — the
//! chaos proxy's roll and the runner's record of it, say — cannot drift apart.

/// Mixes seed parts into one well-spread 64-bit seed (SplitMix64's finaliser, folded).
pub fn mix_seed(parts: &[u64]) -> u64 {
    parts.iter().fold(0x9e37_79b9_7f4a_7c15, |acc, part| {
        let mut z = acc ^ part.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

const FNV64_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV64_PRIME: u64 = 0x0100_0000_01b3;
const FNV32_BASIS: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// FNV-1a, 64-bit, fed in parts: fast, deterministic, and good enough wherever a
/// collision costs only a cache hit or a shared roll.
#[derive(Debug, Clone, Copy)]
pub struct Fnv64(u64);

impl Fnv64 {
    pub const fn new() -> Fnv64 {
        Fnv64(FNV64_BASIS)
    }

    /// A hasher whose basis is offset by `key`, so one input hashes apart per key.
    pub const fn keyed(key: u64) -> Fnv64 {
        Fnv64(FNV64_BASIS ^ key)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(FNV64_PRIME);
        }
    }

    pub const fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64::new()
    }
}

/// FNV-1a 64 of one byte string.
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut hash = Fnv64::new();
    hash.write(bytes);
    hash.finish()
}

/// FNV-1a, 32-bit, fed in parts (token ids and feature buckets).
#[derive(Debug, Clone, Copy)]
pub struct Fnv32(u32);

impl Fnv32 {
    pub const fn new() -> Fnv32 {
        Fnv32(FNV32_BASIS)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u32::from(*byte)).wrapping_mul(FNV32_PRIME);
        }
    }

    pub const fn finish(self) -> u32 {
        self.0
    }
}

impl Default for Fnv32 {
    fn default() -> Fnv32 {
        Fnv32::new()
    }
}

/// FNV-1a 32 of one byte string.
pub fn fnv32(bytes: &[u8]) -> u32 {
    let mut hash = Fnv32::new();
    hash.write(bytes);
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_published_test_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv32(b""), 0x811c_9dc5);
        assert_eq!(fnv32(b"a"), 0xe40c_292c);
        assert_eq!(fnv64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn parts_hash_as_their_concatenation() {
        let mut parts = Fnv64::new();
        parts.write(b"foo");
        parts.write(b"bar");
        assert_eq!(parts.finish(), fnv64(b"foobar"));
    }

    #[test]
    fn mixed_seeds_depend_on_every_part_and_its_place() {
        assert_ne!(mix_seed(&[1, 2]), mix_seed(&[2, 1]));
        assert_ne!(mix_seed(&[1]), mix_seed(&[1, 0]));
        assert_eq!(mix_seed(&[7, 9]), mix_seed(&[7, 9]));
    }
}
