//! The SSE decoder on a realistic chat stream: one token per event, fed as the network
//! delivers it (whole events, and the same stream cut into 7-byte pieces).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use redline::client::sse::SseDecoder;

fn stream(events: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..events {
        out.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" w{i}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

fn decode(c: &mut Criterion) {
    let bytes = stream(1_000);
    let mut group = c.benchmark_group("sse_decode");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    for (name, piece) in [("whole", bytes.len()), ("7_byte_pieces", 7)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut decoder = SseDecoder::default();
                let mut events = 0;
                for chunk in bytes.chunks(piece) {
                    decoder.feed(chunk);
                    while let Some(event) = decoder.next_event() {
                        events += usize::from(event.is_ok());
                    }
                }
                assert_eq!(events, 1_001);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
