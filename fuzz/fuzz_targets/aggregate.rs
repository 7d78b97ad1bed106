//! `aggregate.json` as `redline merge --without-records` reads it and the coordinator
//! reads a worker's delta off the network: an aggregate or a named problem, never a
//! panic; what parses writes back to the same aggregate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redline::metrics::file::{parse, render};

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    if let Ok(aggregate) = parse(text) {
        let again = render(&aggregate).expect("a parsed aggregate renders");
        assert_eq!(parse(&again).expect("what it wrote parses"), aggregate);
    }
});
