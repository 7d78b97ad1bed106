//! The SSE decoder, the proxy's framer and the NDJSON line splitter (Ollama's streams),
//! on any bytes cut into any chunks: no panic, and the same events however the stream
//! is chunked (each decoder against itself fed whole; the framer's pieces joined give
//! back every byte fed). The same bytes as a gRPC body: split into messages, and the
//! proxy's `empty_result` field drop, which keeps the message count and, done twice,
//! changes nothing more; and the proxy's message splitter, whose pieces give back every
//! byte, whole messages the same as the client's split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redline::client::ndjson::LineDecoder;
use redline::chaos::grpc::MessageSplitter;
use redline::client::sse::{Framed, SseDecoder, SseEvent, SseFramer};

/// A small limit, so that oversized events are exercised too.
const LIMIT: usize = 256;

/// What `next` takes out of a decoder fed `stream` in pieces of the given sizes
/// (cycled), until an error (then `true`).
fn fed<D, T, E>(
    stream: &[u8],
    sizes: &[u8],
    mut decoder: D,
    feed: impl Fn(&mut D, &[u8]),
    next: impl Fn(&mut D) -> Option<Result<T, E>>,
) -> (Vec<T>, bool) {
    let mut out = Vec::new();
    let mut rest = stream;
    let mut size = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (usize::from(*size.next().unwrap_or(&0)) + 1).min(rest.len());
        feed(&mut decoder, &rest[..n]);
        rest = &rest[n..];
        while let Some(item) = next(&mut decoder) {
            match item {
                Ok(item) => out.push(item),
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fn decode(stream: &[u8], sizes: &[u8]) -> (Vec<SseEvent>, bool) {
    let decoder = SseDecoder::new(LIMIT);
    fed(
        stream,
        sizes,
        decoder,
        SseDecoder::feed,
        SseDecoder::next_event,
    )
}

fn lines(stream: &[u8], sizes: &[u8]) -> (Vec<String>, bool) {
    let decoder = LineDecoder::new(LIMIT);
    fed(
        stream,
        sizes,
        decoder,
        LineDecoder::feed,
        LineDecoder::next_line,
    )
}

fuzz_target!(|input: &[u8]| {
    let split = input
        .first()
        .map_or(0, |&n| usize::from(n) % 8)
        .min(input.len().saturating_sub(1));
    let (sizes, stream) = input.get(1..).unwrap_or_default().split_at(split);
    let sizes = if sizes.is_empty() {
        &[255u8][..]
    } else {
        sizes
    };
    let whole = decode(stream, &[u8::MAX; 1]);
    let pieces = decode(stream, sizes);
    // An error ends the stream at a chunk-dependent point only in how far it got.
    if !whole.1 && !pieces.1 {
        assert_eq!(
            whole.0, pieces.0,
            "the same stream decoded differently in pieces"
        );
    }

    let (whole_lines, pieces_lines) = (lines(stream, &[u8::MAX; 1]), lines(stream, sizes));
    if !whole_lines.1 && !pieces_lines.1 {
        assert_eq!(
            whole_lines.0, pieces_lines.0,
            "the same lines split differently in pieces"
        );
    }

    let mut framer = SseFramer::new(LIMIT);
    let mut out = Vec::new();
    let mut size = sizes.iter().cycle();
    let mut rest = stream;
    while !rest.is_empty() {
        let n = (usize::from(*size.next().unwrap()) + 1).min(rest.len());
        framer.feed(&rest[..n]);
        rest = &rest[n..];
        while let Some(frame) = framer.next_frame() {
            match frame {
                Framed::Event(bytes) | Framed::Oversized(bytes) => out.extend_from_slice(&bytes),
            }
        }
    }
    assert!(
        stream.starts_with(&out),
        "the framer forwarded bytes it was not fed"
    );

    let mut splitter = MessageSplitter::new(LIMIT);
    let (mut passed, mut events) = (Vec::new(), Vec::new());
    let mut size = sizes.iter().cycle();
    let mut rest = stream;
    while !rest.is_empty() {
        let n = (usize::from(*size.next().unwrap()) + 1).min(rest.len());
        splitter.feed(&rest[..n]);
        rest = &rest[n..];
        while let Some(frame) = splitter.next_frame() {
            match frame {
                Framed::Event(message) => {
                    let len = u32::from_be_bytes(message[1..5].try_into().unwrap());
                    assert_eq!(message.len(), 5 + len as usize, "a message, whole");
                    assert!(message.len() <= 5 + LIMIT, "held past the limit");
                    passed.extend_from_slice(&message);
                    events.push(message);
                }
                Framed::Oversized(piece) => passed.extend_from_slice(&piece),
            }
        }
    }
    passed.extend_from_slice(&splitter.rest());
    assert_eq!(passed, stream, "the splitter lost, added or moved bytes");
    if let Ok(messages) = redline::grpc::messages(stream)
        && messages.iter().all(|m| m.len() <= LIMIT)
    {
        let payloads: Vec<&[u8]> = events.iter().map(|m| &m[5..]).collect();
        assert_eq!(payloads, messages, "the splitter split differently");
    }

    if let (Ok(messages), Some(once)) = (
        redline::grpc::messages(stream),
        redline::grpc::body_without_field(stream, 1),
    ) {
        let count = redline::grpc::messages(&once).map(|m| m.len());
        assert_eq!(count, Ok(messages.len()), "the rewrite kept every message");
        let twice = redline::grpc::body_without_field(&once, 1);
        assert_eq!(twice.as_deref(), Some(&once[..]), "a second drop changed more");
    }
});
