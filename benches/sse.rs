//! The SSE decoder on a realistic chat stream: one token per event, fed as the network
//! delivers it (whole events, and the same stream cut into 7-byte pieces); and on a
//! hostile one, a single 5 MiB event arriving in 16 KiB reads, whose cost must stay
//! linear (a rescan per read made it quadratic).

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

fn hostile(c: &mut Criterion) {
    let bytes = format!("data: {}\n\n", "a".repeat(5 << 20)).into_bytes();
    let mut group = c.benchmark_group("sse_hostile");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.sample_size(20);
    group.bench_function("one_5MiB_event_in_16KiB_reads", |b| {
        b.iter(|| {
            let mut decoder = SseDecoder::new(16 << 20);
            let mut events = 0;
            for chunk in bytes.chunks(16 << 10) {
                decoder.feed(chunk);
                while let Some(event) = decoder.next_event() {
                    events += usize::from(event.is_ok());
                }
            }
            assert_eq!(events, 1);
        })
    });
    group.finish();
}

criterion_group!(benches, decode, hostile);
criterion_main!(benches);
