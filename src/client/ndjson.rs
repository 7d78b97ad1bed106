//! An incremental newline-delimited JSON splitter (Ollama's streaming format) that does
//! no IO: feed it bytes as they arrive, take whole lines out. Lines end with `\n` (a
//! `\r` before it is dropped); blank lines are skipped. Like the SSE decoder, each byte
//! is scanned once however the stream is chunked, and a line may not grow past a limit.
//! [`LineFramer`] cuts the same stream into raw lines for the chaos proxy.

use super::sse::{Framed, SseError};

#[derive(Debug)]
pub struct LineDecoder {
    buffer: Vec<u8>,
    /// Bytes of `buffer` already consumed.
    start: usize,
    /// Bytes after `start` already searched for `\n`.
    scanned: usize,
    max_line_bytes: usize,
}

impl LineDecoder {
    pub fn new(max_line_bytes: usize) -> Self {
        LineDecoder {
            buffer: Vec::new(),
            start: 0,
            scanned: 0,
            max_line_bytes,
        }
    }

    /// Appends bytes received from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buffer.len() {
            self.buffer.clear();
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole, non-blank line, if the bytes fed so far hold one.
    pub fn next_line(&mut self) -> Option<Result<String, SseError>> {
        loop {
            let rest = &self.buffer[self.start..];
            let Some(end) =
                memchr::memchr(b'\n', &rest[self.scanned..]).map(|at| at + self.scanned)
            else {
                if rest.len() > self.max_line_bytes {
                    return Some(Err(SseError::TooLarge {
                        limit: self.max_line_bytes,
                    }));
                }
                self.scanned = rest.len();
                if self.start > 0 {
                    self.buffer.drain(..self.start);
                    self.start = 0;
                }
                return None;
            };
            self.scanned = 0;
            let line = &rest[..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.start += end + 1;
            if line.len() > self.max_line_bytes {
                return Some(Err(SseError::TooLarge {
                    limit: self.max_line_bytes,
                }));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(match std::str::from_utf8(line) {
                Ok(text) => Ok(text.to_owned()),
                Err(_) => Err(SseError::NotUtf8),
            });
        }
    }

    /// Bytes fed but not yet part of a whole line (a stream that ended here was cut).
    pub fn has_partial(&self) -> bool {
        self.buffer[self.start..]
            .iter()
            .any(|b| !b.is_ascii_whitespace())
    }
}

/// Splits a newline-delimited stream into whole raw lines (their `\n` included)
/// without decoding them, for a proxy that forwards lines unchanged (or changes whole
/// lines): [`super::sse::SseFramer`]'s twin for NDJSON.
#[derive(Debug)]
pub struct LineFramer {
    buffer: bytes::BytesMut,
    /// Bytes of `buffer` already searched for `\n`.
    scanned: usize,
    max_line_bytes: usize,
    /// Part of the current line already went out oversized: the rest follows it so.
    in_oversized: bool,
}

impl LineFramer {
    pub fn new(max_line_bytes: usize) -> Self {
        LineFramer {
            buffer: bytes::BytesMut::new(),
            scanned: 0,
            max_line_bytes,
            in_oversized: false,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole line (or oversized piece) the bytes fed so far hold.
    pub fn next_frame(&mut self) -> Option<Framed> {
        let Some(at) = memchr::memchr(b'\n', &self.buffer[self.scanned..]) else {
            self.scanned = self.buffer.len();
            if self.buffer.len() <= self.max_line_bytes {
                return None;
            }
            self.in_oversized = true;
            return Some(Framed::Oversized(self.take(self.buffer.len())));
        };
        let line = self.take(self.scanned + at + 1);
        Some(if std::mem::take(&mut self.in_oversized) {
            Framed::Oversized(line)
        } else {
            Framed::Event(line)
        })
    }

    /// What is left when the stream ends: an unfinished line, or nothing.
    pub fn rest(&mut self) -> bytes::Bytes {
        self.take(self.buffer.len())
    }

    fn take(&mut self, end: usize) -> bytes::Bytes {
        self.scanned = 0;
        self.buffer.split_to(end).freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]], limit: usize) -> Vec<Result<String, SseError>> {
        let mut decoder = LineDecoder::new(limit);
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk);
            while let Some(line) = decoder.next_line() {
                out.push(line);
            }
        }
        out
    }

    #[test]
    fn lines_split_anywhere_come_out_whole() {
        let text = b"{\"a\":1}\r\n\n{\"b\":\"x y\"}\n";
        let whole = lines(&[text], 100);
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(lines(&[a, b], 100), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(lines(&bytes, 100), whole);
        assert_eq!(
            whole,
            vec![Ok("{\"a\":1}".to_owned()), Ok("{\"b\":\"x y\"}".to_owned())]
        );
    }

    #[test]
    fn a_cut_line_is_partial_and_a_long_one_fails() {
        let mut decoder = LineDecoder::new(8);
        decoder.feed(b"{\"a\":1}\n{\"b\"");
        assert_eq!(decoder.next_line(), Some(Ok("{\"a\":1}".to_owned())));
        assert_eq!(decoder.next_line(), None);
        assert!(decoder.has_partial());
        decoder.feed(b":123456789");
        assert_eq!(
            decoder.next_line(),
            Some(Err(SseError::TooLarge { limit: 8 }))
        );
        assert_eq!(lines(&[b"\xff\xfe\n"], 8), vec![Err(SseError::NotUtf8)]);
    }

    #[test]
    fn the_framer_passes_every_byte_as_whole_lines_or_bounded_pieces() {
        let mut framer = LineFramer::new(16);
        let mut out = Vec::new();
        for chunk in [
            &b"{\"a\":1}\n{\"b\""[..],
            b":2}\n",
            b"0123456789abcdefXYZ",
            b"\n{\"c\"",
        ] {
            framer.feed(chunk);
            while let Some(frame) = framer.next_frame() {
                out.push(frame);
            }
        }
        out.push(Framed::Event(framer.rest()));
        let whole = |s: &'static [u8]| Framed::Event(bytes::Bytes::from_static(s));
        let over = |s: &'static [u8]| Framed::Oversized(bytes::Bytes::from_static(s));
        assert_eq!(
            out,
            vec![
                whole(b"{\"a\":1}\n"),
                whole(b"{\"b\":2}\n"),
                over(b"0123456789abcdefXYZ"),
                over(b"\n"),
                whole(b"{\"c\""),
            ]
        );
    }

    #[test]
    fn a_long_line_in_many_chunks_is_scanned_once() {
        // Each call searches only the bytes fed since the last: a server that sends
        // one endless line costs linear time, not quadratic.
        let mut decoder = LineDecoder::new(8 << 20);
        let chunk = vec![b'x'; 4096];
        for n in 1..=256 {
            decoder.feed(&chunk);
            assert_eq!(decoder.next_line(), None);
            assert_eq!(decoder.scanned, n * 4096, "nothing left to search again");
        }
        decoder.feed(b"\n");
        assert_eq!(decoder.next_line().unwrap().unwrap().len(), 256 * 4096);
    }
}
