//! gRPC calls through the proxy: the proxy's own answers to them (an injected abort,
//! a rate limit, its failure) are trailers-only responses (HTTP 200, `grpc-status` and
//! `grpc-message` in the head, [`crate::grpc::trailers_only`]), as a gRPC server gives
//! them, so the caller's client reports the status rather than a protocol error. The
//! stream faults see a gRPC body as its length-prefixed messages ([`MessageSplitter`]).

use bytes::{Bytes, BytesMut};
use hyper::header;
use hyper::http::request::Parts;

use crate::client::sse::Framed;

/// Whether the request is a gRPC call (by its `content-type`).
pub fn is_call(head: &Parts) -> bool {
    head.headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|c| crate::grpc::is_grpc(c.as_bytes()))
}

/// What a corrupted message carries: a whole gRPC frame (so the caller's framing
/// holds) whose bytes are not protobuf — its first key has wire type 7, which no
/// protobuf decoder accepts.
pub const CORRUPT_MESSAGE: &[u8] = b"\0\0\0\0\x1e\x0f<redline chaos: not protobuf>";

/// Splits a gRPC body into whole messages, each with its 5-byte prefix, without
/// decoding them. A message longer than the limit is passed on in pieces as its bytes
/// come (never held whole), so a hostile upstream cannot grow the proxy's memory; its
/// flag is not read, so a compressed message is a message like any other.
#[derive(Debug)]
pub struct MessageSplitter {
    buffer: BytesMut,
    limit: usize,
    /// Bytes of an oversized message still to pass on unframed.
    passing: usize,
}

impl MessageSplitter {
    pub fn new(limit: usize) -> MessageSplitter {
        MessageSplitter {
            buffer: BytesMut::new(),
            limit,
            passing: 0,
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    /// The next whole message (or piece of an oversized one) the bytes fed so far hold.
    pub fn next_frame(&mut self) -> Option<Framed> {
        if self.passing == 0 && self.buffer.len() >= 5 {
            let prefix = [
                self.buffer[1],
                self.buffer[2],
                self.buffer[3],
                self.buffer[4],
            ];
            let whole = 5 + u32::from_be_bytes(prefix) as usize;
            if whole - 5 <= self.limit {
                return (self.buffer.len() >= whole)
                    .then(|| Framed::Event(self.buffer.split_to(whole).freeze()));
            }
            self.passing = whole;
        }
        if self.passing == 0 || self.buffer.is_empty() {
            return None;
        }
        let piece = self.passing.min(self.buffer.len());
        self.passing -= piece;
        Some(Framed::Oversized(self.buffer.split_to(piece).freeze()))
    }

    /// What is left when the body ends: an unfinished message, or nothing.
    pub fn rest(&mut self) -> Bytes {
        self.buffer.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn split(body: &[u8], chunk: usize, limit: usize) -> (Vec<Framed>, Bytes) {
        let mut splitter = MessageSplitter::new(limit);
        let mut frames = Vec::new();
        for piece in body.chunks(chunk) {
            splitter.feed(piece);
            frames.extend(std::iter::from_fn(|| splitter.next_frame()));
        }
        (frames, splitter.rest())
    }

    fn message(payload: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        framed.extend_from_slice(payload);
        framed
    }

    #[test]
    fn whole_messages_however_the_body_is_chunked() {
        let (a, b, c) = (message(b"one"), message(b""), message(&[7; 40]));
        let body = [a.clone(), b.clone(), c.clone(), vec![0, 0]].concat();
        for chunk in [1, 2, 5, 7, body.len()] {
            let (frames, rest) = split(&body, chunk, 64);
            let events = [a.clone(), b.clone(), c.clone()]
                .map(|m| Framed::Event(Bytes::from(m)))
                .to_vec();
            assert_eq!(frames, events, "chunks of {chunk}");
            assert_eq!(&rest[..], &[0, 0], "an unfinished prefix is the rest");
        }
    }

    #[test]
    fn an_oversized_message_passes_unheld_and_framing_resumes_after_it() {
        let (big, small) = (message(&[1; 100]), message(b"after"));
        let body = [big.clone(), small.clone()].concat();
        let (frames, rest) = split(&body, 10, 64);
        assert!(rest.is_empty());
        let pieces: Vec<&[u8]> = frames
            .iter()
            .map_while(|f| match f {
                Framed::Oversized(piece) => Some(&piece[..]),
                Framed::Event(_) => None,
            })
            .collect();
        assert!(pieces.iter().all(|p| p.len() <= 10), "never held whole");
        assert_eq!(pieces.concat(), big);
        assert_eq!(frames.last(), Some(&Framed::Event(Bytes::from(small))));
    }

    #[test]
    fn the_corrupt_message_is_framed_right_and_is_not_protobuf() {
        let (frames, rest) = split(CORRUPT_MESSAGE, 3, 64);
        assert_eq!(frames, [Framed::Event(Bytes::from_static(CORRUPT_MESSAGE))]);
        assert!(rest.is_empty());
        let payload = &CORRUPT_MESSAGE[5..];
        let error = crate::grpc::kserve::ModelStreamInferResponse::decode(payload);
        assert!(error.is_err());
    }
}
