//! Response-body faults, applied as the body streams through: event-stream faults
//! (stall, drip, cut, corrupt, drop the end marker) on whole SSE events or, in
//! newline-delimited JSON streams (Ollama's), whole lines, or in gRPC bodies whole
//! messages, then bandwidth and slicing on the bytes. Nothing is buffered beyond one
//! event, and no event beyond [`MAX_HELD_EVENT`]: a longer one passes through
//! unchanged, uncounted.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::HeaderMap;
use hyper::body::{Body, Frame};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::BoxError;
use super::grpc::{CORRUPT_MESSAGE, MessageSplitter};
use super::rules::CutEnd;
use crate::client::ndjson::LineFramer;
use crate::client::sse::{Framed, SseFramer};

/// What to do to one response body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shaping {
    pub stall_first: Duration,
    pub drip: Duration,
    /// End after this many events, in this way.
    pub cut: Option<(u32, CutEnd)>,
    /// Corrupt this event (from 1).
    pub corrupt: Option<u32>,
    pub drop_done: bool,
    pub bandwidth: Option<u64>,
    /// Largest write and the seed of the split points.
    pub slice: Option<(usize, u64)>,
}

/// The longest event the proxy holds to shape whole; LLM stream events are a few
/// hundred bytes, and a hostile upstream must not grow the proxy's memory.
pub const MAX_HELD_EVENT: usize = 1 << 20;

/// What a corrupted event carries: the start of a JSON object that never closes.
pub const CORRUPT_EVENT: &[u8] = b"data: {\"choices\": [{\"delta\": <redline chaos: not JSON>\n\n";

/// What a corrupted line of a newline-delimited stream carries.
pub const CORRUPT_LINE: &[u8] = b"{\"message\": <redline chaos: not JSON>\n";

/// How a streamed body is cut into the events the event faults work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// Server-sent events (`text/event-stream`).
    Sse,
    /// Newline-delimited JSON (`application/x-ndjson`): a line is an event, the end
    /// marker is the line with `"done": true`.
    Lines,
    /// gRPC (`application/grpc`): a length-prefixed message is an event, the end
    /// marker is the status in the trailers.
    Grpc,
}

impl StreamFormat {
    /// The format of a body with this `Content-Type`, if it is a stream of events.
    pub fn of(content_type: &str) -> Option<StreamFormat> {
        if content_type.starts_with("text/event-stream") {
            Some(StreamFormat::Sse)
        } else if content_type.starts_with("application/x-ndjson") {
            Some(StreamFormat::Lines)
        } else if crate::grpc::is_grpc(content_type.as_bytes()) {
            Some(StreamFormat::Grpc)
        } else {
            None
        }
    }

    /// The end marker sent where a stream is cut with one: bytes, or (gRPC) trailers.
    fn end_marker(self) -> Result<&'static [u8], HeaderMap> {
        match self {
            StreamFormat::Sse => Ok(b"data: [DONE]\n\n"),
            StreamFormat::Lines => Ok(b"{\"done\":true}\n"),
            StreamFormat::Grpc => Err(crate::grpc::ok_trailers()),
        }
    }

    fn corrupt(self) -> &'static [u8] {
        match self {
            StreamFormat::Sse => CORRUPT_EVENT,
            StreamFormat::Lines => CORRUPT_LINE,
            StreamFormat::Grpc => CORRUPT_MESSAGE,
        }
    }

    /// Whether the event is the stream's end marker (a gRPC stream's is its trailers,
    /// never a message).
    fn is_end(self, event: &[u8]) -> bool {
        match self {
            StreamFormat::Grpc => false,
            StreamFormat::Sse => is_done(event),
            StreamFormat::Lines => {
                #[derive(serde::Deserialize)]
                struct Done {
                    #[serde(default)]
                    done: bool,
                }
                serde_json::from_slice::<Done>(event).is_ok_and(|line| line.done)
            }
        }
    }
}

/// Cuts a body into whole events (or lines, or messages).
#[derive(Debug)]
enum Framer {
    Sse(SseFramer),
    Lines(LineFramer),
    Grpc(MessageSplitter),
}

impl Framer {
    fn new(format: StreamFormat) -> Framer {
        match format {
            StreamFormat::Sse => Framer::Sse(SseFramer::new(MAX_HELD_EVENT)),
            StreamFormat::Lines => Framer::Lines(LineFramer::new(MAX_HELD_EVENT)),
            StreamFormat::Grpc => Framer::Grpc(MessageSplitter::new(MAX_HELD_EVENT)),
        }
    }

    fn feed(&mut self, data: &[u8]) {
        match self {
            Framer::Sse(framer) => framer.feed(data),
            Framer::Lines(framer) => framer.feed(data),
            Framer::Grpc(framer) => framer.feed(data),
        }
    }

    fn next_frame(&mut self) -> Option<Framed> {
        match self {
            Framer::Sse(framer) => framer.next_frame(),
            Framer::Lines(framer) => framer.next_frame(),
            Framer::Grpc(framer) => framer.next_frame(),
        }
    }

    fn rest(&mut self) -> Bytes {
        match self {
            Framer::Sse(framer) => framer.rest(),
            Framer::Lines(framer) => framer.rest(),
            Framer::Grpc(framer) => framer.rest(),
        }
    }
}

impl Shaping {
    /// Faults that work on SSE events.
    pub fn on_events(&self) -> bool {
        !self.stall_first.is_zero()
            || !self.drip.is_zero()
            || self.cut.is_some()
            || self.corrupt.is_some()
            || self.drop_done
    }

    pub fn is_empty(&self) -> bool {
        !self.on_events() && self.bandwidth.is_none() && self.slice.is_none()
    }

    /// Whether the body's length may change (so `content-length` must go).
    pub fn changes_length(&self) -> bool {
        self.cut.is_some() || self.corrupt.is_some() || self.drop_done
    }

    /// The body, an event stream in `format`, with the faults applied as it streams.
    pub fn apply<B>(self, body: B, format: StreamFormat) -> UnsyncBoxBody<Bytes, BoxError>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let state = Shaper::new(self, body, format);
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            loop {
                if let Some((wait, chunk)) = s.queue.pop_front() {
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    return Some((Ok(Frame::data(chunk)), s));
                }
                if s.finished {
                    if let Some(trailers) = s.trailers.take() {
                        return Some((Ok(Frame::trailers(trailers)), s));
                    }
                    // An error ends the body abruptly: hyper resets the HTTP/2
                    // stream, or closes the HTTP/1.1 connection mid-body.
                    let reset: BoxError = "redline chaos: stream reset at the cut".into();
                    return std::mem::take(&mut s.reset).then(|| (Err(reset), s));
                }
                match s.body.frame().await {
                    None => s.end(None),
                    Some(Err(error)) => {
                        s.finished = true;
                        return Some((Err(error.into()), s));
                    }
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => s.push(data),
                        Err(frame) => s.end(frame.into_trailers().ok()),
                    },
                }
            }
        });
        http_body_util::StreamBody::new(stream).boxed_unsync()
    }
}

struct Shaper<B> {
    body: B,
    shaping: Shaping,
    events: bool,
    format: StreamFormat,
    framer: Framer,
    sent_events: u32,
    queue: VecDeque<(Duration, Bytes)>,
    /// Sent once the queue is empty and the body finished.
    trailers: Option<HeaderMap>,
    /// Reset the stream once the queue is empty and the body finished.
    reset: bool,
    finished: bool,
    rng: ChaCha8Rng,
}

impl<B> Shaper<B> {
    fn new(shaping: Shaping, body: B, format: StreamFormat) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(shaping.slice.map_or(0, |(_, seed)| seed));
        Shaper {
            body,
            events: shaping.on_events(),
            shaping,
            format,
            framer: Framer::new(format),
            sent_events: 0,
            queue: VecDeque::new(),
            trailers: None,
            reset: false,
            finished: false,
            rng,
        }
    }

    fn push(&mut self, data: Bytes) {
        if !self.events {
            self.emit(Duration::ZERO, data);
            return;
        }
        self.framer.feed(&data);
        while !self.finished {
            match self.framer.next_frame() {
                None => break,
                Some(Framed::Event(event)) => self.event(event),
                Some(Framed::Oversized(bytes)) => self.emit(Duration::ZERO, bytes),
            }
        }
    }

    /// The upstream body ended, with these trailers: what an unfinished event held
    /// goes out, then the trailers — unless they are the gRPC end marker to drop.
    fn end(&mut self, trailers: Option<HeaderMap>) {
        self.finished = true;
        let rest = self.framer.rest();
        if !rest.is_empty() {
            self.emit(Duration::ZERO, rest);
        }
        let drop_status = self.shaping.drop_done && self.format == StreamFormat::Grpc;
        if !drop_status {
            self.trailers = trailers;
        }
    }

    fn event(&mut self, event: Bytes) {
        let shaping = &self.shaping;
        if shaping.drop_done && self.format.is_end(&event) {
            return;
        }
        if let Some((after, end)) = &shaping.cut
            && self.sent_events >= *after
        {
            self.finished = true;
            match (end, self.format) {
                (CutEnd::Plain, _) => {}
                (CutEnd::Marker, format) => match format.end_marker() {
                    Ok(marker) => self.emit(Duration::ZERO, Bytes::from_static(marker)),
                    Err(trailers) => self.trailers = Some(trailers),
                },
                (CutEnd::Reset, _) => self.reset = true,
                (CutEnd::Grpc(code, message), StreamFormat::Grpc) => {
                    let message = message.as_deref().unwrap_or("redline chaos: cut_stream");
                    self.trailers = Some(crate::grpc::status_headers(*code, message));
                }
                // Only a gRPC stream has a status to end with.
                (CutEnd::Grpc(..), _) => {}
            }
            return;
        }
        self.sent_events += 1;
        let n = self.sent_events;
        let mut wait = shaping.drip;
        if n == 1 {
            wait += shaping.stall_first;
        }
        let event = if shaping.corrupt == Some(n) {
            Bytes::from_static(self.format.corrupt())
        } else {
            event
        };
        self.emit(wait, event);
    }

    /// Queues bytes for the client, sliced and paced as the faults say.
    fn emit(&mut self, wait: Duration, mut data: Bytes) {
        let piece_limit = match (self.shaping.slice, self.shaping.bandwidth) {
            (Some((max, _)), _) => max,
            // Paced in pieces of about 20 ms each, so the rate holds within a body.
            (None, Some(rate)) => (rate / 50).max(1) as usize,
            (None, None) => usize::MAX,
        };
        let mut wait = wait;
        while !data.is_empty() {
            let size = match self.shaping.slice {
                Some(_) => self.rng.random_range(1..=piece_limit.min(data.len())),
                None => piece_limit.min(data.len()),
            };
            let piece = data.split_to(size);
            if let Some(rate) = self.shaping.bandwidth {
                wait += Duration::from_secs_f64(piece.len() as f64 / rate as f64);
            }
            self.queue.push_back((wait, piece));
            wait = Duration::ZERO;
        }
    }
}

fn is_done(event: &[u8]) -> bool {
    event
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .any(|data| data.trim_ascii() == b"[DONE]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    const STREAM: &[u8] =
        b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\":3}\n\ndata: [DONE]\n\n";

    /// The stream cut into 5-byte frames, so events straddle frames.
    fn upstream() -> UnsyncBoxBody<Bytes, BoxError> {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = STREAM
            .chunks(5)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    async fn shaped(shaping: Shaping) -> (Vec<Bytes>, String) {
        let mut body = shaping.apply(upstream(), StreamFormat::Sse);
        let mut writes = Vec::new();
        while let Some(frame) = body.frame().await {
            writes.push(frame.unwrap().into_data().unwrap());
        }
        let text = writes.iter().map(|w| String::from_utf8_lossy(w)).collect();
        (writes, text)
    }

    #[tokio::test]
    async fn event_faults_rewrite_whole_events() {
        let (_, text) = shaped(Shaping {
            cut: Some((2, CutEnd::Plain)),
            ..Shaping::default()
        })
        .await;
        assert_eq!(text, "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n");
        let (_, text) = shaped(Shaping {
            cut: Some((1, CutEnd::Marker)),
            ..Shaping::default()
        })
        .await;
        assert_eq!(text, "data: {\"a\":1}\n\ndata: [DONE]\n\n");
        let (_, text) = shaped(Shaping {
            drop_done: true,
            ..Shaping::default()
        })
        .await;
        assert_eq!(
            text,
            "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\":3}\n\n"
        );
        let (_, text) = shaped(Shaping {
            corrupt: Some(2),
            ..Shaping::default()
        })
        .await;
        let corrupt = String::from_utf8_lossy(CORRUPT_EVENT);
        assert_eq!(
            text,
            format!("data: {{\"a\":1}}\n\n{corrupt}data: {{\"a\":3}}\n\ndata: [DONE]\n\n")
        );
    }

    /// Three gRPC messages in 4-byte frames, then the upstream's status.
    fn grpc_upstream() -> UnsyncBoxBody<Bytes, BoxError> {
        let messages: Vec<u8> = [b"a", b"b", b"c"]
            .iter()
            .flat_map(|m| [&[0, 0, 0, 0, 1][..], &m[..]].concat())
            .collect();
        let mut frames: Vec<Result<Frame<Bytes>, BoxError>> = messages
            .chunks(4)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut status = HeaderMap::new();
        status.insert("grpc-status", "14".parse().unwrap());
        frames.push(Ok(Frame::trailers(status)));
        StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    /// The messages' payloads and how the shaped gRPC body ends: its status, or
    /// `reset` when it ends in an error.
    async fn grpc_shaped(shaping: Shaping) -> (Vec<Bytes>, Option<String>) {
        let mut body = shaping.apply(grpc_upstream(), StreamFormat::Grpc);
        let (mut data, mut status) = (Vec::new(), None);
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                status = Some("reset".to_owned());
                break;
            };
            match frame.into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(frame) => {
                    let trailers = frame.into_trailers().unwrap();
                    status = Some(trailers["grpc-status"].to_str().unwrap().to_owned());
                }
            }
        }
        let messages = crate::grpc::messages(&data).unwrap();
        (
            messages.into_iter().map(Bytes::copy_from_slice).collect(),
            status,
        )
    }

    #[tokio::test]
    async fn grpc_event_faults_rewrite_whole_messages_and_the_status() {
        let (messages, status) = grpc_shaped(Shaping::default()).await;
        assert_eq!((messages.len(), status.as_deref()), (3, Some("14")));
        let cut = |end| Shaping {
            cut: Some((2, end)),
            ..Shaping::default()
        };
        let (messages, status) = grpc_shaped(cut(CutEnd::Plain)).await;
        assert_eq!(
            (messages, status),
            (vec!["a", "b"].into_iter().map(Bytes::from).collect(), None)
        );
        let (messages, status) = grpc_shaped(cut(CutEnd::Marker)).await;
        assert_eq!(
            (messages.len(), status.as_deref()),
            (2, Some("0")),
            "an early OK"
        );
        let unavailable = CutEnd::Grpc(tonic::Code::Unavailable, None);
        let (messages, status) = grpc_shaped(cut(unavailable)).await;
        assert_eq!((messages.len(), status.as_deref()), (2, Some("14")));
        let (messages, status) = grpc_shaped(cut(CutEnd::Reset)).await;
        assert_eq!((messages.len(), status.as_deref()), (2, Some("reset")));
        let drop_done = Shaping {
            drop_done: true,
            ..Shaping::default()
        };
        assert_eq!(grpc_shaped(drop_done).await.1, None, "the status dropped");
        let corrupt = Shaping {
            corrupt: Some(2),
            ..Shaping::default()
        };
        let (messages, status) = grpc_shaped(corrupt).await;
        assert_eq!(&messages[1][..], &CORRUPT_MESSAGE[5..]);
        assert_eq!(
            (&messages[2][..], status.as_deref()),
            (&b"c"[..], Some("14"))
        );
    }

    #[tokio::test]
    async fn slices_keep_every_byte_in_order() {
        let (writes, text) = shaped(Shaping {
            slice: Some((3, 9)),
            ..Shaping::default()
        })
        .await;
        assert_eq!(text.as_bytes(), STREAM);
        assert!(writes.iter().all(|w| (1..=3).contains(&w.len())));
        assert!(writes.len() >= STREAM.len() / 3);
    }

    /// The waits the shaper plans before each write: the stream sleeps exactly these
    /// (read off the queue, so the test needs no clock).
    fn planned_waits(shaping: Shaping, chunks: &[&[u8]]) -> (Duration, usize) {
        let mut shaper = Shaper::new(shaping, (), StreamFormat::Sse);
        for chunk in chunks {
            shaper.push(Bytes::copy_from_slice(chunk));
        }
        let bytes = shaper.queue.iter().map(|(_, piece)| piece.len()).sum();
        (shaper.queue.iter().map(|(wait, _)| *wait).sum(), bytes)
    }

    #[test]
    fn holds_and_bandwidth_take_their_time() {
        let stall_and_drip = Shaping {
            stall_first: Duration::from_millis(500),
            drip: Duration::from_millis(10),
            ..Shaping::default()
        };
        let frames: Vec<&[u8]> = STREAM.chunks(5).collect();
        let (waited, bytes) = planned_waits(stall_and_drip, &frames);
        assert_eq!(bytes, STREAM.len());
        assert_eq!(waited, Duration::from_millis(540), "500 + 4 × 10");

        let bandwidth = Shaping {
            bandwidth: Some(500),
            ..Shaping::default()
        };
        let (waited, bytes) = planned_waits(bandwidth, &[&[b'x'; 1000]]);
        assert_eq!(bytes, 1000);
        assert_eq!(waited, Duration::from_secs(2), "1000 B at 500 B/s");
    }
}
