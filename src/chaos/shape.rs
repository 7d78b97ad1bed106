//! Response-body faults, applied as the body streams through: event-stream faults
//! (stall, drip, cut, corrupt, drop `[DONE]`) on whole SSE events, then bandwidth and
//! slicing on the bytes. Nothing is buffered beyond one event, and no event beyond
//! [`MAX_HELD_EVENT`]: a longer one passes through unchanged, uncounted.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::BoxError;
use crate::client::sse::{Framed, SseFramer};

/// What to do to one response body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shaping {
    pub stall_first: Duration,
    pub drip: Duration,
    /// End after this many events; send `[DONE]` at the cut when true.
    pub cut: Option<(u32, bool)>,
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

    /// The body with the faults applied as it streams.
    pub fn apply<B>(self, body: B) -> UnsyncBoxBody<Bytes, BoxError>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let state = Shaper::new(self, body);
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            loop {
                if let Some((wait, chunk)) = s.queue.pop_front() {
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    return Some((Ok(Frame::data(chunk)), s));
                }
                if s.finished {
                    return None;
                }
                match s.body.frame().await {
                    None => {
                        s.finished = true;
                        let rest = s.framer.rest();
                        if !rest.is_empty() {
                            s.emit(Duration::ZERO, rest);
                        }
                    }
                    Some(Err(error)) => {
                        s.finished = true;
                        return Some((Err(error.into()), s));
                    }
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => s.push(data),
                        Err(trailers) => return Some((Ok(trailers), s)),
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
    framer: SseFramer,
    sent_events: u32,
    queue: VecDeque<(Duration, Bytes)>,
    finished: bool,
    rng: ChaCha8Rng,
}

impl<B> Shaper<B> {
    fn new(shaping: Shaping, body: B) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(shaping.slice.map_or(0, |(_, seed)| seed));
        Shaper {
            body,
            events: shaping.on_events(),
            shaping,
            framer: SseFramer::new(MAX_HELD_EVENT),
            sent_events: 0,
            queue: VecDeque::new(),
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

    fn event(&mut self, event: Bytes) {
        let shaping = &self.shaping;
        if shaping.drop_done && is_done(&event) {
            return;
        }
        if let Some((after, done)) = shaping.cut
            && self.sent_events >= after
        {
            self.finished = true;
            if done {
                self.emit(Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n"));
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
            Bytes::from_static(CORRUPT_EVENT)
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
        let mut body = shaping.apply(upstream());
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
            cut: Some((2, false)),
            ..Shaping::default()
        })
        .await;
        assert_eq!(text, "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n");
        let (_, text) = shaped(Shaping {
            cut: Some((1, true)),
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
        let mut shaper = Shaper::new(shaping, ());
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
