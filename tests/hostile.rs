//! Hostile servers: answers built to cost a client time or memory (headers one byte at
//! a time, a line that never ends, a compression bomb, ten thousand headers, bytes that
//! are not UTF-8, HTTP/2 resets and GOAWAY mid-stream, a server that never reads).
//! Each must end as a typed outcome within the client's own timeouts, and the client's
//! memory must stay bounded whatever the server sends: the last test reads the test
//! process's peak RSS after the floods. So this file is a test binary of its own
//! (Cargo.toml), not a module of `tests/main.rs`: there the other files' tests would
//! share the process and its peak.
//!
//! (`client_faults.rs` scripts the ordinary failures; this file the abusive ones.)

mod common;

use std::future::Future;
use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::llm::{self, failure};
use redline::record::{FailStage, Outcome, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most any of these tests may take: the client's total timeout is 5 s.
const BOUND: Duration = Duration::from_secs(6);

/// Serves one connection with `behave`; returns the base URL.
async fn serve_once<F, Fut>(behave: F) -> String
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        behave(tcp).await;
    });
    format!("http://{addr}")
}

/// Reads an HTTP/1.1 request's head and the body its content-length announces.
async fn read_request(tcp: &mut TcpStream) {
    let mut request = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let n = tcp.read(&mut buffer).await.unwrap();
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..n]);
        let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if request.len() >= end + 4 + length {
            return;
        }
    }
}

/// Calls `base` once (HTTP/1.1, streaming) and checks the call ended within [`BOUND`].
async fn call(base: &str, stream: bool) -> Record {
    let started = Instant::now();
    let record = llm::call_once(&llm::target(base, stream), "hello", false).await;
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    record
}

#[tokio::test]
async fn headers_one_byte_at_a_time_time_out_at_the_first_byte() {
    let base = serve_once(|mut tcp| async move {
        read_request(&mut tcp).await;
        for byte in b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" {
            if tcp.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let r = call(&base, true).await;
    assert_eq!(
        failure(&r),
        (Outcome::Timeout, FailStage::FirstByte, "timeout".into())
    );
}

/// Streams `data: xxxx…` with no newline, 64 KiB at a time, until the client hangs up
/// (at most 1 GiB).
async fn endless_line(tcp: TcpStream) {
    endless(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ",
        tcp,
    )
    .await;
}

/// Sends `head`, then `x` with no newline, 64 KiB at a time, until the client hangs up
/// (at most 1 GiB).
async fn endless(head: &str, mut tcp: TcpStream) {
    read_request(&mut tcp).await;
    tcp.write_all(head.as_bytes()).await.unwrap();
    let block = vec![b'x'; 64 << 10];
    for _ in 0..(1 << 14) {
        if tcp.write_all(&block).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_line_that_never_ends_stops_at_the_answer_limit() {
    let base = serve_once(endless_line).await;
    let r = call(&base, true).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "too_large".into())
    );
}

/// The same flood as one newline-delimited JSON line (Ollama's streams): the line
/// splitter stops at the limit too, each byte scanned once.
#[tokio::test]
async fn an_ndjson_line_that_never_ends_stops_at_the_answer_limit() {
    let base = serve_once(|tcp| {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\r\n{\"message\":{\"content\":\"";
        endless(head, tcp)
    })
    .await;
    let started = Instant::now();
    let mut target = llm::target(&base, true);
    target.api = redline::client::dialect::LlmApi::Ollama;
    let r = llm::call_once(&target, "hello", false).await;
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::Stream, "too_large".into())
    );
}

/// 256 MiB of zeros, gzipped: about 250 KiB on the wire.
fn gzip_bomb() -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        encoder.write_all(&zeros).unwrap();
    }
    encoder.finish().unwrap()
}

/// Answers `bomb` as a gzip-encoded body of `content_type`.
async fn bomb_server(bomb: Bytes, content_type: &'static str) -> String {
    serve_once(move |mut tcp| async move {
        read_request(&mut tcp).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
            bomb.len()
        );
        let _ = tcp.write_all(head.as_bytes()).await;
        let _ = tcp.write_all(&bomb).await;
    })
    .await
}

#[tokio::test]
async fn a_compressed_answer_nobody_asked_for_is_refused_unread() {
    let bomb = Bytes::from(gzip_bomb());
    for (content_type, stream) in [("application/json", false), ("text/event-stream", true)] {
        let base = bomb_server(bomb.clone(), content_type).await;
        let r = call(&base, stream).await;
        assert_eq!(
            failure(&r),
            (
                Outcome::Error,
                FailStage::Decode,
                "unexpected_encoding".into()
            ),
            "{content_type}"
        );
        let message = &r.error.as_ref().unwrap().message;
        assert!(message.contains("content-encoding: gzip"), "{message}");
    }
}

#[tokio::test]
async fn ten_thousand_headers_are_an_invalid_response() {
    let base = serve_once(|mut tcp| async move {
        read_request(&mut tcp).await;
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..10_000 {
            head.push_str(&format!("x-h{i}: v\r\n"));
        }
        head.push_str("content-length: 2\r\n\r\n{}");
        let _ = tcp.write_all(head.as_bytes()).await;
    })
    .await;
    let r = call(&base, false).await;
    assert_eq!(
        failure(&r),
        (Outcome::Error, FailStage::FirstByte, "invalid_http".into())
    );
}

#[tokio::test]
async fn bytes_that_are_not_utf8_are_decode_errors() {
    for stream in [true, false] {
        let base = serve_once(move |mut tcp| async move {
            read_request(&mut tcp).await;
            let mut body = br#"{"choices":[{"index":0,"delta":{"content":"a"#.to_vec();
            body.extend_from_slice(&[0xff, 0xfe]);
            body.extend_from_slice(br#""},"finish_reason":"stop"}]}"#);
            let (content_type, body) = if stream {
                let mut event = b"data: ".to_vec();
                event.extend_from_slice(&body);
                event.extend_from_slice(b"\n\ndata: [DONE]\n\n");
                ("text/event-stream", event)
            } else {
                ("application/json", body)
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = tcp.write_all(head.as_bytes()).await;
            let _ = tcp.write_all(&body).await;
        })
        .await;
        let r = call(&base, stream).await;
        let kind = if stream {
            "invalid_utf8"
        } else {
            "invalid_json"
        };
        assert_eq!(
            failure(&r),
            (Outcome::Error, FailStage::Decode, kind.into()),
            "stream: {stream}"
        );
    }
}

#[tokio::test]
async fn a_server_that_never_reads_times_out_while_sending() {
    let base = serve_once(|tcp| async move {
        // Hold the connection open, read nothing, answer nothing.
        tokio::time::sleep(BOUND).await;
        drop(tcp);
    })
    .await;
    // 16 MiB: more than the loopback socket buffers hold (4 MiB to send, 6 to
    // receive at most), so the write itself blocks.
    let prompt = "x".repeat(16 << 20);
    let started = Instant::now();
    let r = llm::call_once(&llm::target(&base, true), &prompt, false).await;
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    assert_eq!(
        failure(&r),
        (Outcome::Timeout, FailStage::FirstByte, "timeout".into())
    );
}

/// How an HTTP/2 server ends the stream after its first event.
#[derive(Clone, Copy, Debug)]
enum H2End {
    /// RST_STREAM with INTERNAL_ERROR.
    Reset,
    /// GOAWAY with INTERNAL_ERROR, and the connection closed.
    GoAway,
}

/// An HTTP/2 server (prior knowledge) that starts an SSE answer and then ends it badly.
async fn h2_server(end: H2End) -> String {
    serve_once(move |tcp| async move {
        let mut connection = h2::server::handshake(tcp).await.unwrap();
        let Some(Ok((_request, mut respond))) = connection.accept().await else {
            return;
        };
        let response = hyper::Response::builder()
            .header("content-type", "text/event-stream")
            .body(())
            .unwrap();
        let mut send = respond.send_response(response, false).unwrap();
        let event =
            r#"data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
        send.send_data(Bytes::from(format!("{event}\n\n")), false)
            .unwrap();
        // Let the event reach the client before the end.
        let driver = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        tokio::select! {
            _ = driver => {}
            _ = std::future::poll_fn(|cx| connection.poll_closed(cx)) => return,
        }
        match end {
            H2End::Reset => send.send_reset(h2::Reason::INTERNAL_ERROR),
            H2End::GoAway => connection.abrupt_shutdown(h2::Reason::INTERNAL_ERROR),
        }
        let _ = std::future::poll_fn(|cx| connection.poll_closed(cx)).await;
    })
    .await
}

#[tokio::test]
async fn http2_reset_and_goaway_mid_stream_are_resets() {
    for end in [H2End::Reset, H2End::GoAway] {
        let base = h2_server(end).await;
        let started = Instant::now();
        let r = llm::call_once(&llm::target(&base, true), "hello", true).await;
        assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
        assert_eq!(
            failure(&r),
            (Outcome::Error, FailStage::Stream, "reset".into()),
            "{end:?}: {:?}",
            r.error
        );
        assert_eq!(r.output_tokens_local.or(r.output_tokens), None, "{end:?}");
        assert!(
            r.first_token_us.is_some(),
            "{end:?}: the first event counted"
        );
    }
}

/// The test process's peak resident memory, from `/proc/self/status`.
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib >> 10
}

/// Eight endless lines and eight bombs side by side (up to 8 GiB offered, 2 GiB
/// inflated): the client reads at most its 1 MiB limit of each and decompresses
/// nothing, so the whole test process stays far below what one flood would cost.
#[tokio::test]
async fn floods_cost_the_client_bounded_memory() {
    let bomb = Bytes::from(gzip_bomb());
    let mut calls = Vec::new();
    for _ in 0..8 {
        let base = serve_once(endless_line).await;
        calls.push(tokio::spawn(async move { call(&base, true).await }));
        let base = bomb_server(bomb.clone(), "text/event-stream").await;
        calls.push(tokio::spawn(async move { call(&base, true).await }));
    }
    for call in calls {
        let r = call.await.unwrap();
        assert_eq!(r.outcome, Outcome::Error, "{:?}", r.error);
    }
    // The other tests of this file run beside it (the 16 MiB prompt the most: 78 MiB
    // with this test, 34 MiB without); a client that kept a flood, or
    // inflated a bomb, would pass 256 MiB on its own.
    let peak = peak_rss_mib();
    assert!(peak < 200, "peak RSS {peak} MiB");
}
