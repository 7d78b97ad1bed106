//! KV-cache blocks with automatic prefix caching, after vLLM's V1 block pool.
//!
//! A block holds `block_size` tokens of one sequence. A full, computed block is named
//! by a hash chained over every token before it, so two prompts that share a prefix
//! share the hashes of its blocks. Freed blocks keep their hash and stay findable
//! until they are reused: allocation takes the least recently freed block first, so a
//! popular system prompt stays cached while it keeps being used.

use std::collections::{HashMap, VecDeque};

pub type BlockId = u32;

/// Hash of a full block: chained over the parent block's hash and this block's tokens.
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    // FNV-1a 64 over the parent hash and token ids: fast, deterministic, and collisions
    // only ever cost a simulated cache hit.
    let mut hash = redline_base::seed::Fnv64::new();
    hash.write(&parent.unwrap_or(0x5eed).to_le_bytes());
    for token in tokens {
        hash.write(&u64::from(*token).to_le_bytes());
    }
    hash.finish()
}

#[derive(Debug, Clone, Default)]
struct Block {
    ref_count: u32,
    hash: Option<u64>,
    /// Bumped whenever the block leaves the free queue, so stale queue entries are
    /// recognised and skipped (a lazy removal from the middle of the queue).
    epoch: u32,
}

/// The pool of KV blocks.
#[derive(Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    /// Blocks with no reference, least recently freed first; may hold stale entries.
    free_queue: VecDeque<(BlockId, u32)>,
    free_count: u32,
    cached: HashMap<u64, BlockId>,
}

impl BlockPool {
    pub fn new(num_blocks: u32) -> Self {
        BlockPool {
            blocks: vec![Block::default(); num_blocks as usize],
            free_queue: (0..num_blocks).map(|id| (id, 0)).collect(),
            free_count: num_blocks,
            cached: HashMap::new(),
        }
    }

    pub fn total(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks not referenced by any sequence (cached ones included: they can be reused).
    pub fn free(&self) -> u32 {
        self.free_count
    }

    /// Fraction of blocks referenced by running sequences, as vLLM's `kv_cache_usage_perc`.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.free_count) / f64::from(self.total().max(1))
    }

    /// The cached blocks holding the longest prefix of `hashes`.
    pub fn lookup_prefix(&self, hashes: &[u64]) -> Vec<BlockId> {
        hashes
            .iter()
            .map_while(|hash| self.cached.get(hash).copied())
            .collect()
    }

    /// How many of `blocks` are unreferenced (touching them takes them from the free pool).
    pub fn unreferenced(&self, blocks: &[BlockId]) -> u32 {
        blocks
            .iter()
            .filter(|id| self.blocks[**id as usize].ref_count == 0)
            .count() as u32
    }

    /// Takes a reference on cached blocks found by [`lookup_prefix`](Self::lookup_prefix).
    pub fn touch(&mut self, blocks: &[BlockId]) {
        for id in blocks {
            let block = &mut self.blocks[*id as usize];
            if block.ref_count == 0 {
                block.epoch = block.epoch.wrapping_add(1);
                self.free_count -= 1;
            }
            block.ref_count += 1;
        }
    }

    /// Allocates `n` fresh blocks, evicting cached ones least recently freed first;
    /// `None` (and nothing allocated) when fewer than `n` are free.
    pub fn allocate(&mut self, n: u32) -> Option<Vec<BlockId>> {
        if n > self.free_count {
            return None;
        }
        let mut out = Vec::with_capacity(n as usize);
        while out.len() < n as usize {
            let (id, epoch) = self
                .free_queue
                .pop_front()
                .expect("free_count counts blocks in the free queue");
            let block = &mut self.blocks[id as usize];
            if block.epoch != epoch || block.ref_count != 0 {
                continue; // stale entry: the block was touched since it was queued
            }
            if let Some(hash) = block.hash.take()
                && self.cached.get(&hash) == Some(&id)
            {
                self.cached.remove(&hash);
            }
            block.ref_count = 1;
            block.epoch = block.epoch.wrapping_add(1);
            self.free_count -= 1;
            out.push(id);
        }
        Some(out)
    }

    /// Names a full, computed block by its hash so later prompts can hit it. A hash
    /// already cached keeps its first block (the duplicate is simply not shared).
    pub fn register(&mut self, id: BlockId, hash: u64) {
        let block = &mut self.blocks[id as usize];
        if block.hash.is_none() && !self.cached.contains_key(&hash) {
            block.hash = Some(hash);
            self.cached.insert(hash, id);
        }
    }

    /// Drops a sequence's references. Blocks are queued tail first, so that the end of a
    /// sequence is evicted before its (more shareable) beginning.
    pub fn release(&mut self, blocks: &[BlockId]) {
        for id in blocks.iter().rev() {
            let block = &mut self.blocks[*id as usize];
            block.ref_count -= 1;
            if block.ref_count == 0 {
                self.free_queue.push_back((*id, block.epoch));
                self.free_count += 1;
            }
        }
        // Stale entries accumulate when cached blocks are touched; keep the queue bounded.
        if self.free_queue.len() > 4 * self.blocks.len() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let blocks = &self.blocks;
        self.free_queue.retain(|(id, epoch)| {
            blocks[*id as usize].epoch == *epoch && blocks[*id as usize].ref_count == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
        let mut parent = None;
        tokens
            .chunks_exact(block_size)
            .map(|chunk| {
                let hash = block_hash(parent, chunk);
                parent = Some(hash);
                hash
            })
            .collect()
    }

    #[test]
    fn shared_prefixes_share_hashes_and_divergence_breaks_the_chain() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[40] = 999;
        let (ha, hb) = (hashes(&a, 16), hashes(&b, 16));
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        assert_ne!(
            ha[3], hb[3],
            "a later block differs once an earlier one did"
        );
    }

    #[test]
    fn freed_blocks_stay_cached_until_reused() {
        let mut pool = BlockPool::new(4);
        let blocks = pool.allocate(2).unwrap();
        pool.register(blocks[0], 10);
        pool.register(blocks[1], 11);
        pool.release(&blocks);
        assert_eq!(pool.free(), 4);
        assert_eq!(pool.lookup_prefix(&[10, 11, 12]), blocks);

        // Touching cached blocks takes them out of the free pool.
        pool.touch(&blocks);
        assert_eq!(pool.free(), 2);
        assert_eq!(
            pool.allocate(3),
            None,
            "nothing allocated when too few are free"
        );
        let fresh = pool.allocate(2).unwrap();
        assert!(fresh.iter().all(|id| !blocks.contains(id)));
        assert_eq!(
            pool.lookup_prefix(&[10, 11]),
            blocks,
            "touched blocks were not evicted"
        );
        assert!((pool.usage() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn allocation_evicts_least_recently_freed_and_forgets_its_hash() {
        let mut pool = BlockPool::new(2);
        let first = pool.allocate(1).unwrap();
        pool.register(first[0], 1);
        let second = pool.allocate(1).unwrap();
        pool.register(second[0], 2);
        pool.release(&first);
        pool.release(&second);
        let taken = pool.allocate(1).unwrap();
        assert_eq!(taken, first);
        assert!(pool.lookup_prefix(&[1]).is_empty());
        assert_eq!(pool.lookup_prefix(&[2]), second);
    }

    #[test]
    fn stale_queue_entries_stay_bounded() {
        let mut pool = BlockPool::new(8);
        let blocks = pool.allocate(8).unwrap();
        for (i, id) in blocks.iter().enumerate() {
            pool.register(*id, i as u64);
        }
        pool.release(&blocks);
        for _ in 0..1_000 {
            let hit = pool.lookup_prefix(&[0, 1, 2]);
            pool.touch(&hit);
            pool.release(&hit);
        }
        assert!(pool.free_queue.len() <= 4 * 8 + 3);
        assert_eq!(pool.allocate(8).unwrap().len(), 8);
    }
}
