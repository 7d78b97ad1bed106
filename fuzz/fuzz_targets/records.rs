//! `records.jsonl` as `redline check`, `report`, `compare` and `explain` read it:
//! records, a named bad line, or a cut-short last line; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let path = std::path::Path::new("records.jsonl");
    let mut seen = 0u64;
    let read = std::sync::atomic::AtomicU64::new(0);
    if let Ok(counts) = redline::record::read_records_from(input, path, Some(&read), |_| seen += 1)
    {
        assert_eq!(counts.records, seen);
        assert_eq!(read.into_inner(), input.len() as u64, "every byte read");
    }
});
