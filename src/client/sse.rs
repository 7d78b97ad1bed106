//! An incremental Server-Sent Events decoder that does no IO: feed it bytes as they
//! arrive, take complete events out. Follows the WHATWG event-stream rules: lines end
//! with `\n`, `\r\n` or `\r` (a `\r\n` may be split across chunks); a blank line ends
//! an event; `:` starts a comment; `data` lines are joined with `\n`; one space after
//! the colon is dropped; a leading byte-order mark is ignored. [`SseFramer`] cuts the
//! same stream into whole raw events for the chaos proxy, which forwards them as sent.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    pub data: String,
}

/// Why the stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("event stream line is not UTF-8")]
    NotUtf8,
    #[error("event larger than {limit} bytes")]
    TooLarge { limit: usize },
}

/// Largest event accepted by default (a guard against a server that never ends a line).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 << 20;

#[derive(Debug)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    /// Bytes of `buffer` already consumed.
    start: usize,
    /// Bytes after `start` already searched for a line end: a long line arriving in
    /// many chunks is scanned once, not once per chunk (which is quadratic in a line
    /// the server makes as long as it likes).
    scanned: usize,
    /// The previous chunk ended in `\r`: a `\n` opening the next one belongs to it.
    skip_lf: bool,
    at_stream_start: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The last `id:` the stream gave (WHATWG's "last event ID"), for resuming it.
    last_event_id: Option<String>,
    /// The last `retry:` the stream gave, milliseconds: how long to wait before
    /// reconnecting.
    retry_ms: Option<u64>,
    max_event_bytes: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            buffer: Vec::new(),
            start: 0,
            scanned: 0,
            skip_lf: false,
            at_stream_start: true,
            data: String::new(),
            has_data: false,
            event: None,
            last_event_id: None,
            retry_ms: None,
            max_event_bytes,
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

    /// The next complete event, if the bytes fed so far hold one.
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        loop {
            if self.skip_lf && self.start < self.buffer.len() {
                if self.buffer[self.start] == b'\n' {
                    self.start += 1;
                }
                self.skip_lf = false;
            }
            if self.at_stream_start {
                let rest = &self.buffer[self.start..];
                if rest.len() < 3 && b"\xEF\xBB\xBF".starts_with(rest) {
                    return None; // could still be a byte-order mark
                }
                if rest.starts_with(b"\xEF\xBB\xBF") {
                    self.start += 3;
                }
                self.at_stream_start = false;
            }
            let rest = &self.buffer[self.start..];
            let Some(end) =
                memchr::memchr2(b'\n', b'\r', &rest[self.scanned..]).map(|at| at + self.scanned)
            else {
                if rest.len() + self.data.len() > self.max_event_bytes {
                    return Some(Err(SseError::TooLarge {
                        limit: self.max_event_bytes,
                    }));
                }
                self.scanned = rest.len();
                self.compact();
                return None;
            };
            self.scanned = 0;
            let terminator = rest[end];
            let line_start = self.start;
            self.start += end + 1;
            if terminator == b'\r' {
                if self.start < self.buffer.len() {
                    if self.buffer[self.start] == b'\n' {
                        self.start += 1;
                    }
                } else {
                    self.skip_lf = true;
                }
            }
            let line = &self.buffer[line_start..line_start + end];
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    return Some(Ok(event));
                }
                continue;
            }
            let Ok(line) = std::str::from_utf8(line) else {
                return Some(Err(SseError::NotUtf8));
            };
            let (field, value) = match line.find(':') {
                Some(0) => continue, // comment
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
                }
                None => (line, ""),
            };
            match field {
                "data" => {
                    if self.data.len() + value.len() > self.max_event_bytes {
                        return Some(Err(SseError::TooLarge {
                            limit: self.max_event_bytes,
                        }));
                    }
                    if self.has_data {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                    self.has_data = true;
                }
                "event" => self.event = Some(value.to_owned()),
                "id" if !value.contains('\0') => self.last_event_id = Some(value.to_owned()),
                "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                    self.retry_ms = value.parse().ok();
                }
                _ => {} // unknown fields are ignored, as the standard says
            }
        }
    }

    /// The last event ID the stream gave (`id:`), to resume it from.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection time the stream asked for (`retry:`), milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Bytes fed but not yet part of a complete event (a stream that ended here was cut).
    pub fn has_partial(&self) -> bool {
        self.start < self.buffer.len() || self.has_data
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
    }
}

/// A piece of an event stream as a proxy forwards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framed {
    /// One whole event as it was sent, its blank line included.
    Event(bytes::Bytes),
    /// Bytes of an event longer than the framer holds, passed on unframed so that
    /// memory stays bounded whatever the server sends.
    Oversized(bytes::Bytes),
}

/// Splits an event stream into whole events without decoding them, for a proxy that
/// forwards events unchanged (or changes whole events). The same line-end rules as
/// [`SseDecoder`]; each byte is scanned once however the stream is chunked.
#[derive(Debug)]
pub struct SseFramer {
    buffer: bytes::BytesMut,
    /// Where the current line starts in `buffer`.
    line_start: usize,
    /// Bytes of `buffer` already searched for line ends.
    scanned: usize,
    max_event_bytes: usize,
    /// Part of the current event already went out oversized: the rest follows it so.
    in_oversized: bool,
}

impl SseFramer {
    pub fn new(max_event_bytes: usize) -> Self {
        SseFramer {
            buffer: bytes::BytesMut::new(),
            line_start: 0,
            scanned: 0,
            max_event_bytes,
            in_oversized: false,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole event (or oversized piece) the bytes fed so far hold.
    pub fn next_frame(&mut self) -> Option<Framed> {
        loop {
            let found = memchr::memchr2(b'\n', b'\r', &self.buffer[self.scanned..]);
            let Some(at) = found.map(|i| i + self.scanned) else {
                self.scanned = self.buffer.len();
                return self.oversized();
            };
            let end = match (self.buffer[at], self.buffer.get(at + 1)) {
                // A `\r` last in the buffer: a `\n` may follow in the next chunk.
                (b'\r', None) => {
                    self.scanned = at;
                    return self.oversized();
                }
                (b'\r', Some(b'\n')) => at + 2,
                _ => at + 1,
            };
            let blank = at == self.line_start;
            self.scanned = end;
            self.line_start = end;
            if !blank && end > self.max_event_bytes {
                // Many short lines and no blank one: bounded all the same.
                self.in_oversized = true;
                return Some(Framed::Oversized(self.take(end)));
            }
            if blank {
                let event = self.take(end);
                return Some(if std::mem::take(&mut self.in_oversized) {
                    Framed::Oversized(event)
                } else {
                    Framed::Event(event)
                });
            }
        }
    }

    /// What is left when the stream ends: an unfinished event, or nothing.
    pub fn rest(&mut self) -> bytes::Bytes {
        let all = self.buffer.len();
        self.take(all)
    }

    fn oversized(&mut self) -> Option<Framed> {
        if self.buffer.len() <= self.max_event_bytes {
            return None;
        }
        let all = self.buffer.len();
        self.in_oversized = true;
        Some(Framed::Oversized(self.take(all)))
    }

    fn take(&mut self, end: usize) -> bytes::Bytes {
        self.line_start = 0;
        self.scanned = 0;
        self.buffer.split_to(end).freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk);
            while let Some(event) = decoder.next_event() {
                out.push(event.unwrap());
            }
        }
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    /// `id:` and `retry:` are kept for resuming: the last ones given, an `id` with a
    /// NUL and a `retry` that is not all digits ignored, as the standard says.
    #[test]
    fn the_last_event_id_and_retry_are_kept() {
        let mut decoder = SseDecoder::default();
        decoder.feed(
            b"id: 1\nretry: 500\ndata:\n\nid: e-2\ndata: {}\n\nid: bad\0\nretry: 1x\ndata: x\n\n",
        );
        while decoder.next_event().is_some() {}
        assert_eq!(
            (decoder.last_event_id(), decoder.retry_ms()),
            (Some("e-2"), Some(500))
        );
        assert_eq!(SseDecoder::default().last_event_id(), None);
    }

    #[test]
    fn openai_style_stream() {
        let events = decode_all(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(data(&events), ["{\"a\":1}", "[DONE]"]);
    }

    #[test]
    fn crlf_cr_comments_multiline_event_names_and_bom() {
        let stream = b"\xEF\xBB\xBF: keep-alive\r\nevent: delta\r\ndata: one\r\ndata:two\r\n\r\ndata: three\r\rid: 7\nretry: 10\ndata\n\n";
        let events = decode_all(&[stream]);
        assert_eq!(events[0].event.as_deref(), Some("delta"));
        assert_eq!(data(&events), ["one\ntwo", "three", ""]);
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing() {
        assert!(decode_all(&[b"\n\n: comment\n\nevent: x\n\n"]).is_empty());
    }

    #[test]
    fn an_unterminated_event_is_held_as_partial() {
        let mut decoder = SseDecoder::default();
        decoder.feed(b"data: {\"cut\":");
        assert!(decoder.next_event().is_none());
        assert!(decoder.has_partial());
    }

    #[test]
    fn oversized_events_and_bad_utf8_are_errors() {
        let mut decoder = SseDecoder::new(8);
        decoder.feed(b"data: 0123456789\n");
        assert_eq!(
            decoder.next_event(),
            Some(Err(SseError::TooLarge { limit: 8 }))
        );
        let mut decoder = SseDecoder::new(8);
        decoder.feed(b"data: 0123456789");
        assert_eq!(
            decoder.next_event(),
            Some(Err(SseError::TooLarge { limit: 8 }))
        );
        let mut decoder = SseDecoder::default();
        decoder.feed(b"data: \xff\xfe\n\n");
        assert_eq!(decoder.next_event(), Some(Err(SseError::NotUtf8)));
    }

    #[test]
    fn a_long_line_in_many_chunks_is_one_event() {
        let mut decoder = SseDecoder::default();
        let payload = "x".repeat(1 << 20);
        let stream = format!("data: {payload}\n\n");
        let mut events = Vec::new();
        for chunk in stream.as_bytes().chunks(1 << 10) {
            decoder.feed(chunk);
            while let Some(event) = decoder.next_event() {
                events.push(event.unwrap());
            }
        }
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), payload.len());
        assert!(!decoder.has_partial());
    }

    /// `bytes` cut at the positions given (each taken modulo the length).
    fn split_at(bytes: &[u8], cuts: Vec<usize>) -> Vec<&[u8]> {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for cut in cuts {
            chunks.push(&bytes[last..cut]);
            last = cut;
        }
        chunks.push(&bytes[last..]);
        chunks
    }

    fn frame_all(chunks: &[&[u8]], max: usize) -> (Vec<Framed>, bytes::Bytes) {
        let mut framer = SseFramer::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            framer.feed(chunk);
            while let Some(frame) = framer.next_frame() {
                out.push(frame);
            }
        }
        (out, framer.rest())
    }

    fn event(bytes: &[u8]) -> Framed {
        Framed::Event(bytes::Bytes::copy_from_slice(bytes))
    }

    #[test]
    fn framing_keeps_events_as_sent_whatever_their_line_ends() {
        let stream = b"data: a\n\ndata: b\r\n\r\n: c\r\rdata: d\n\ndata: cut";
        let (frames, rest) = frame_all(&[stream], 1 << 10);
        assert_eq!(
            frames,
            [
                event(b"data: a\n\n"),
                event(b"data: b\r\n\r\n"),
                event(b": c\r\r"),
                event(b"data: d\n\n"),
            ]
        );
        assert_eq!(&rest[..], b"data: cut");
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end() {
        let (frames, rest) = frame_all(&[b"data: a\r\n\r", b"\ndata: b\r", b"\n\r\n"], 64);
        assert_eq!(
            frames,
            [event(b"data: a\r\n\r\n"), event(b"data: b\r\n\r\n")]
        );
        assert!(rest.is_empty());
    }

    #[test]
    fn an_event_longer_than_the_limit_passes_unframed() {
        let (frames, rest) = frame_all(&[b"data: 0123456789", b"0123456789\n\ndata: x\n\n"], 12);
        assert_eq!(
            frames,
            [
                Framed::Oversized(bytes::Bytes::from_static(b"data: 0123456789")),
                Framed::Oversized(bytes::Bytes::from_static(b"0123456789\n\n")),
                event(b"data: x\n\n"),
            ]
        );
        assert!(rest.is_empty());
        let lines = b"data: x\n".repeat(4);
        let (frames, _) = frame_all(&[&lines, b"\n"], 12);
        assert_eq!(
            frames,
            [
                Framed::Oversized(bytes::Bytes::from_static(b"data: x\ndata: x\n")),
                Framed::Oversized(bytes::Bytes::from_static(b"data: x\ndata: x\n")),
                Framed::Oversized(bytes::Bytes::from_static(b"\n")),
            ]
        );
    }

    proptest! {
        #[test]
        fn any_chunk_split_frames_the_same(
            payloads in proptest::collection::vec("[a-z{}\":, 0-9]{0,20}", 1..8),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let events: Vec<String> = payloads.iter().map(|p| format!("data: {p}{nl}{nl}")).collect();
            let stream = events.concat();
            let chunks = split_at(stream.as_bytes(), cuts);
            let (frames, rest) = frame_all(&chunks, 1 << 10);
            prop_assert!(rest.is_empty());
            prop_assert_eq!(frames, events.iter().map(|e| event(e.as_bytes())).collect::<Vec<_>>());
        }

        #[test]
        fn any_chunk_split_decodes_the_same(
            payloads in proptest::collection::vec("[a-z{}\":, 0-9é]{0,20}", 1..8),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let stream: String = payloads
                .iter()
                .map(|p| format!(": c{nl}data: {p}{nl}{nl}"))
                .collect();
            let chunks = split_at(stream.as_bytes(), cuts);
            let events = decode_all(&chunks);
            prop_assert_eq!(data(&events), payloads.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}
