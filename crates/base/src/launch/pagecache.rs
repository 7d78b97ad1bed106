//! The page cache of one file: how much of it is resident, and dropping it. A cold
//! start of a model server is one whose weights come from the disk, not from memory;
//! `redline coldstart` drops the weights file's pages before each cold start, and the
//! simulator's start-up model reads its residency to know which start it is making.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::Advice;
use rustix::io::{Errno, ReadWriteFlags};

/// Bytes per probe: the page size of every Linux platform redline runs on.
const PAGE: u64 = 4096;

/// Most pages probed: a large file is sampled at an even stride, so a 100 GB weights
/// file costs the same few thousand reads as a small one.
const MAX_PROBES: u64 = 8192;

/// Longest read when waiting for missed pages.
const WAIT_READ: u64 = 1 << 20;

/// Share of the file's pages in the page cache, from 0 to 1 (1 for an empty file).
///
/// Each probe reads one byte with `RWF_NOWAIT`, which fails with `EAGAIN` rather than
/// wait for the disk. A miss still sends the kernel to read that page, in the
/// background: the file is opened for random access (`POSIX_FADV_RANDOM`), so that
/// read is the one page and not a readahead window. `Ok(None)` when the file system
/// cannot say (no `RWF_NOWAIT` support).
pub fn resident_fraction(path: &Path) -> io::Result<Option<f64>> {
    Ok(probe(path)?.map(|probe| probe.share))
}

/// As [`resident_fraction`], then waits for the pages its misses sent for. Pages
/// still being read cannot be dropped, so a reading that is followed by
/// [`drop_pages`] must be this one: on a busy disk the background reads outlast any
/// fixed wait, and a start meant to be cold found most of its weights back.
pub fn settled_resident_fraction(path: &Path) -> io::Result<Option<f64>> {
    let Some(probe) = probe(path)? else {
        return Ok(None);
    };
    probe.wait_for_misses()?;
    Ok(Some(probe.share))
}

struct Probe {
    file: File,
    share: f64,
    /// Page numbers found missing, highest first.
    missed: Vec<u64>,
}

fn probe(path: &Path) -> io::Result<Option<Probe>> {
    let file = File::open(path)?;
    rustix::fs::fadvise(&file, 0, None, Advice::Random)?;
    let size = file.metadata()?.len();
    let pages = size.div_ceil(PAGE);
    if pages == 0 {
        let missed = Vec::new();
        return Ok(Some(Probe {
            file,
            share: 1.0,
            missed,
        }));
    }
    let stride = pages.div_ceil(MAX_PROBES);
    let (mut probed, mut missed) = (0u64, Vec::new());
    let mut byte = [0u8; 1];
    for page in (0..pages.div_ceil(stride)).rev().map(|i| i * stride) {
        let mut bufs = [io::IoSliceMut::new(&mut byte)];
        match rustix::io::preadv2(&file, &mut bufs, page * PAGE, ReadWriteFlags::NOWAIT) {
            Ok(_) => {}
            Err(Errno::AGAIN) => missed.push(page),
            Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        probed += 1;
    }
    let share = (probed - missed.len() as u64) as f64 / probed as f64;
    Ok(Some(Probe {
        file,
        share,
        missed,
    }))
}

impl Probe {
    /// Reads the missed pages, waiting as the kernel does for a page already being
    /// read; runs of neighbouring pages in one read each.
    fn wait_for_misses(&self) -> io::Result<()> {
        let mut buf = vec![0u8; WAIT_READ as usize];
        let mut pages = self.missed.iter().rev().copied().peekable();
        while let Some(first) = pages.next() {
            let mut last = first;
            while last + 1 - first < WAIT_READ / PAGE && pages.next_if_eq(&(last + 1)).is_some() {
                last += 1;
            }
            let len = ((last + 1 - first) * PAGE) as usize;
            // The file's last page may be short: read what is there.
            let _ = self.file.read_at(&mut buf[..len], first * PAGE)?;
        }
        Ok(())
    }
}

/// Asks the kernel to drop the file's pages from the page cache. Dirty pages cannot be
/// dropped, so the file is synced first. Needs only read access to the file; the kernel
/// may keep pages another process has locked or mapped.
pub fn drop_pages(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    file.sync_all()?;
    rustix::fs::fadvise(&file, 0, None, Advice::DontNeed)?;
    Ok(())
}

/// Reads the whole file, so its pages are resident (what loading weights does).
pub fn read_through(path: &Path) -> io::Result<u64> {
    io::copy(&mut File::open(path)?, &mut io::sink())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_pages_read_as_cold_and_read_pages_as_warm() {
        let dir = std::env::temp_dir().join(format!("redline-pagecache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weights.bin");
        let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        std::fs::write(&path, data).unwrap();
        // As `redline coldstart` does: pages just written may survive one drop (a CI
        // machine busy with other IO once kept 60 % of them), so drop until the reading
        // says they are gone, a few times at most.
        let mut cold = None;
        for _ in 0..5 {
            drop_pages(&path).unwrap();
            cold = settled_resident_fraction(&path).unwrap();
            if cold.is_none_or(|share| share < 0.2) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let Some(cold) = cold else {
            return eprintln!("this file system cannot say what is resident: skipped");
        };
        // A settled reading leaves no read in flight: every page it found missing
        // (every page, in a file this small) is resident when it returns.
        drop_pages(&path).unwrap();
        settled_resident_fraction(&path).unwrap();
        let after_settled = resident_fraction(&path).unwrap().unwrap();
        drop_pages(&path).unwrap();
        read_through(&path).unwrap();
        let warm = resident_fraction(&path).unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            cold < 0.2,
            "{cold} of the pages resident after dropping them"
        );
        assert_eq!(
            after_settled, 1.0,
            "pages still being read after a settled reading"
        );
        assert!(
            warm > 0.99,
            "{warm} of the pages resident after reading them"
        );
    }
}
