//! What `redline collect` accepts: OTLP traces and metrics as protobuf or JSON. A body
//! that decodes is stored as an OTLP/JSON line, which the graph reader then reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redline::trace::receiver::{decode_metrics, decode_traces};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let content_type = if selector & 1 == 0 {
        "application/x-protobuf"
    } else {
        "application/json"
    };
    if selector & 2 == 0 {
        if let Ok(request) = decode_traces(content_type, body) {
            let line = serde_json::to_string(&request).expect("a decoded export serialises");
            let _ = redline::trace::graph::parse_spans(&line);
        }
    } else if let Ok(request) = decode_metrics(content_type, body) {
        serde_json::to_string(&request).expect("a decoded export serialises");
    }
});
