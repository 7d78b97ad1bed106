//! Realtime sessions over WebSocket: redline's client against the simulator's
//! `/v1/realtime`, the times and counts checked against the engine's and the
//! transcriber's ground truth; and against servers that break the session, each a
//! typed failure.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{run_to_records, scenario, summary_of};
use redline::record::{FailStage, MediaKind, Outcome};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The simulator's media costs (profile defaults): words a second of speech, and
/// when a transcript's first delta is due.
const WORDS_PER_SECOND: f64 = 2.5;
const TRANSCRIBE_BASE_MS: f64 = 40.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoken_sessions_are_timed_and_counted_as_the_engine_and_the_transcriber_did() {
    let _serial = crate::common::CLIENT_TIMING.lock().await;
    let s = scenario(
        "  seed: 5\n  services:\n    voice: { url: embedded, profile: 7b, api: realtime }\n  payloadTemplate:\n    audio: { clips: { count: 6, seconds: { min: 0.5, max: 1.5 } } }\n    realtime: { output: audio, max_output_tokens: 20, chunk_ms: 50 }\n  load:\n    - { concurrency: 4, requests: 24 }\n",
    );
    let (result, records) = run_to_records(s, "realtime-spoken").await;
    assert_eq!(records.len(), 24);
    let (mut audio, mut transcript) = (Vec::new(), Vec::new());
    for r in &records {
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        let truth = r.server.expect("response.done carries the truth");
        let media = r.media.as_ref().unwrap();
        assert_eq!(media.kind, MediaKind::Realtime);
        assert_eq!(r.output_tokens, Some(truth.completion_tokens));
        assert_eq!(r.input_tokens, Some(truth.prompt_tokens));
        assert_eq!(
            r.content_events, truth.completion_tokens,
            "a transcript delta a token"
        );
        // Each token is 1 ÷ words-per-second seconds of PCM16 at 24 kHz.
        let said = f64::from(truth.completion_tokens) / WORDS_PER_SECOND;
        assert!((media.audio_s.unwrap() - said).abs() < 1e-6, "{media:?}");
        // The clip's words, as the transcriber heard them.
        let heard = media.audio_in_s.unwrap();
        let words = (heard * WORDS_PER_SECOND).round().max(1.0) as u32;
        assert_eq!(media.words, Some(words), "{heard} s");
        // Spoken at real time: the input is done no sooner than the clip lasts.
        let done = media.input_done_us.unwrap();
        let speaking = (done - r.sent_us.unwrap()) as f64 / 1e6;
        assert!(speaking >= heard - 0.001, "{speaking} s to say {heard} s");
        // The first audio no sooner than the engine's first token was sent.
        let client = media.first_audio_us.unwrap() - done;
        let server = truth.first_token_sent_us.unwrap() - truth.arrival_us;
        assert!(client + 1_000 >= server, "{client} µs vs {server} µs");
        audio.push((client as f64 - server as f64) / 1e3);
        transcript.push(media.time_to_first_transcript_us().unwrap() as f64 / 1e3);
    }
    // Transport and parsing, as the other APIs' tests allow at the median.
    let audio = median(audio);
    assert!(
        audio < 6.5,
        "client − server time to first audio p50 {audio:.3} ms"
    );
    let transcript = median(transcript);
    assert!(
        (TRANSCRIBE_BASE_MS - 1.0..TRANSCRIBE_BASE_MS + 6.5).contains(&transcript),
        "time to first transcript p50 {transcript:.3} ms"
    );
    let summary = summary_of(&result);
    let realtime = &summary.media[0];
    assert_eq!((realtime.kind, realtime.ok), (MediaKind::Realtime, 24));
    assert!(realtime.first_transcript_ms.is_some() && realtime.rtfx.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_sessions_answer_in_text() {
    let s = scenario(
        "  services:\n    voice: { url: embedded, api: realtime }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 24, output_tokens: 8 } }\n    realtime: { output: text, max_output_tokens: 12 }\n  load:\n    - { concurrency: 2, requests: 6 }\n",
    );
    let (_, records) = run_to_records(s, "realtime-typed").await;
    for r in &records {
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        let truth = r.server.unwrap();
        assert_eq!(r.output_tokens, Some(truth.completion_tokens));
        assert_eq!(
            r.content_events, truth.completion_tokens,
            "a text delta a token"
        );
        let media = r.media.as_ref().unwrap();
        assert_eq!(
            (media.bytes, media.audio_s, media.first_audio_us),
            (0, None, None)
        );
        assert_eq!((media.words, media.first_transcript_us), (None, None));
    }
}

/// How a hostile server breaks a session, once `response.create` came.
#[derive(Clone, Copy, Debug)]
enum Breaks {
    /// One delta, then the TCP connection goes without a close frame.
    DropsMidAnswer,
    /// One delta, then a clean close frame.
    ClosesMidAnswer,
    /// A 5 MiB delta.
    HugeDelta,
    /// A text message that is not JSON.
    NotJson,
    /// The first event is not `session.created`.
    NoSessionCreated,
}

/// Serves one Realtime session that breaks as told.
async fn hostile(breaks: Breaks) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                let first = match breaks {
                    Breaks::NoSessionCreated => "response.created",
                    _ => "session.created",
                };
                let _ = ws.send(text(json!({"type": first}))).await;
                while let Some(Ok(Message::Text(event))) = ws.next().await {
                    if event.as_str().contains("response.create") {
                        break;
                    }
                }
                let delta =
                    |d: String| text(json!({"type": "response.output_text.delta", "delta": d}));
                let _ = ws.send(delta("hello".into())).await;
                match breaks {
                    Breaks::DropsMidAnswer | Breaks::NoSessionCreated => drop(ws),
                    Breaks::ClosesMidAnswer => {
                        let _ = ws.close(None).await;
                    }
                    Breaks::HugeDelta => {
                        let _ = ws.send(delta("x".repeat(5 << 20))).await;
                    }
                    Breaks::NotJson => {
                        let _ = ws.send(Message::Text("data: {".into())).await;
                    }
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            });
        }
    });
    format!("http://{addr}")
}

fn text(event: Value) -> Message {
    Message::Text(event.to_string().into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_breaks_is_a_typed_failure() {
    for (breaks, stage, kind) in [
        (Breaks::DropsMidAnswer, FailStage::Stream, "reset"),
        (Breaks::ClosesMidAnswer, FailStage::Stream, "truncated"),
        (Breaks::HugeDelta, FailStage::Stream, "too_large"),
        (Breaks::NotJson, FailStage::Decode, "invalid_json"),
        (Breaks::NoSessionCreated, FailStage::Decode, "out_of_order"),
    ] {
        let url = hostile(breaks).await;
        let s = scenario(&format!(
            "  services:\n    voice: {{ url: \"{url}\", api: realtime, model: m }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 8, output_tokens: 4 }} }}\n    realtime: {{ output: text }}\n  timeouts: {{ first_token: 5s, total: 10s }}\n  limits: {{ max_response_bytes: 1MiB }}\n  load:\n    - {{ concurrency: 1, requests: 2 }}\n"
        ));
        let started = std::time::Instant::now();
        let (_, records) = run_to_records(s, "realtime-hostile").await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{breaks:?} took {:?}",
            started.elapsed()
        );
        assert_eq!(records.len(), 2, "{breaks:?}");
        for r in &records {
            let e = r
                .error
                .as_ref()
                .unwrap_or_else(|| panic!("{breaks:?}: {r:?}"));
            assert_eq!(
                (r.outcome, e.stage, e.kind.as_str()),
                (Outcome::Error, stage, kind),
                "{breaks:?}: {}",
                e.message
            );
            assert!(r.media.is_some() && r.failed_us.is_some(), "{breaks:?}");
        }
    }
}
