//! Image, transcription and speech requests against the simulator, whose times are
//! known functions of what is asked (`MediaCost`): redline's RTFx, time to first
//! audio and latencies are compared with them; broken answers are typed outcomes.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::post;
use redline::record::{MediaKind, Outcome, Record};
use redline::scenario::Scenario;
use redline::sim::profile::MediaCost;

use crate::common::*;

fn media_profile(media: MediaCost) -> Profile {
    Profile {
        media,
        ..Profile::tiny()
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn all_ok(records: &[Record]) {
    let failed = records.iter().find(|r| r.outcome != Outcome::Ok);
    assert!(failed.is_none(), "{failed:?}");
}

/// Transcription takes 30 ms + 15 ms per second of audio: each request's RTFx is
/// a / (0.030 + 0.015 a) for a clip of a seconds. Over 60 requests of clips of 4–20 s,
/// the median of measured ÷ expected is within 5 % below 1 (the client's own time and
/// the multipart upload only add), and the summary's RTFx p50 is the records' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcription_rtfx_is_the_simulators_known_function_of_clip_length() {
    let _serial = CLIENT_TIMING.lock().await;
    let media = MediaCost {
        transcribe_base_ms: 30.0,
        transcribe_per_audio_second_ms: 15.0,
        ..MediaCost::default()
    };
    let words_per_second = media.words_per_second;
    let sim = sim(media_profile(media)).await;
    let spec = format!(
        "  seed: 11\n  services:\n    whisper: {{ url: \"{}\", api: transcriptions, model: sim-tiny }}\n  payloadTemplate:\n    audio: {{ clips: {{ count: 24, seconds: {{ min: 4, max: 20 }} }}, language: en }}\n  load:\n    - {{ concurrency: 2, requests: 60 }}\n",
        sim.base_url()
    );
    let (result, records) = run_to_records(scenario(&spec), "media-rtfx").await;
    assert_eq!(records.len(), 60);
    all_ok(&records);
    let mut ratios = Vec::new();
    let mut measured = Vec::new();
    for r in &records {
        let mark = r.media.as_ref().unwrap();
        assert_eq!(mark.kind, MediaKind::Transcription);
        let audio = mark.audio_s.unwrap();
        assert!((4.0..=20.0).contains(&audio), "{audio}");
        assert_eq!(mark.words, Some((audio * words_per_second).round() as u32));
        let expected = audio / (0.030 + 0.015 * audio);
        let rtfx = mark.realtime_factor(r).unwrap();
        ratios.push(rtfx / expected);
        measured.push(rtfx);
    }
    let ratio = median(ratios);
    assert!(
        (0.95..=1.001).contains(&ratio),
        "median measured/expected RTFx {ratio:.4}"
    );
    let summary = summary_of(&result);
    let section = &summary.media[0];
    assert_eq!(
        (section.kind, section.requests, section.ok),
        (MediaKind::Transcription, 60, 60)
    );
    let p50 = section.rtfx.unwrap().p50;
    let own = median(measured);
    assert!(
        (p50 / own - 1.0).abs() < 0.02,
        "summary p50 {p50} vs records' {own}"
    );
}

/// Speech: the first audio after 50 ms, then 3 s of audio (30 words at 10 words/s)
/// made at 20× real time, in 100 ms pieces: the last piece leaves at 50 + 29 × 5 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_first_audio_and_length_are_the_simulators() {
    let _serial = CLIENT_TIMING.lock().await;
    let media = MediaCost {
        speech_first_byte_ms: 50.0,
        speech_realtime_factor: 20.0,
        words_per_second: 10.0,
        ..MediaCost::default()
    };
    let sim = sim(media_profile(media)).await;
    let spec = format!(
        "  seed: 5\n  services:\n    tts: {{ url: \"{}\", api: speech, model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 30, output_tokens: 1 }} }}\n    speech: {{ voice: verse }}\n  load:\n    - {{ concurrency: 2, requests: 30 }}\n",
        sim.base_url()
    );
    let (result, records) = run_to_records(scenario(&spec), "media-speech").await;
    all_ok(&records);
    for r in &records {
        let mark = r.media.as_ref().unwrap();
        assert_eq!(mark.audio_s, Some(3.0));
        assert_eq!(mark.bytes, 44 + 2 * 3 * 24_000);
    }
    let section = &summary_of(&result).media[0];
    let first = section.first_byte_ms.p50;
    assert!(
        (50.0..65.0).contains(&first),
        "time to first audio p50 {first} ms"
    );
    let e2e = section.latency_ms.p50;
    assert!((195.0..215.0).contains(&e2e), "speech e2e p50 {e2e} ms");
    assert_eq!(section.audio_seconds, Some(90.0));
}

/// Images of 256×128, two a request: 60 + 320 × 0.0328 × 2 = 81 ms each; every image
/// is decoded far enough to check its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_are_counted_checked_and_timed() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim(media_profile(MediaCost::default())).await;
    let spec = |format: &str| {
        format!(
            "  seed: 5\n  services:\n    sdxl: {{ url: \"{}\", api: images, model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 12, output_tokens: 1 }} }}\n    image: {{ size: 256x128, n: 2, response_format: {format} }}\n  load:\n    - {{ concurrency: 2, requests: 20 }}\n",
            sim.base_url()
        )
    };
    let (result, records) = run_to_records(scenario(&spec("b64_json")), "media-images").await;
    all_ok(&records);
    assert!(records.iter().all(|r| {
        let mark = r.media.as_ref().unwrap();
        mark.images == Some(2) && mark.bytes > 200
    }));
    let section = &summary_of(&result).media[0];
    assert_eq!(section.images, Some(40));
    let e2e = section.latency_ms.p50;
    assert!((81.0..96.0).contains(&e2e), "image e2e p50 {e2e} ms");
    let (_, records) = run_to_records(scenario(&spec("url")), "media-image-urls").await;
    all_ok(&records);
    assert!(
        records
            .iter()
            .all(|r| r.media.as_ref().unwrap().images == Some(2))
    );
}

/// A server that answers 200 with JSON but no image, or with JSON where audio should
/// be: every request is a typed failure at `decode`, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_without_the_media_are_typed_failures() {
    let app = Router::new()
        .route(
            "/v1/images/generations",
            post(|| async { axum::Json(serde_json::json!({"created": 1, "data": []})) }),
        )
        .route(
            "/v1/audio/speech",
            post(|| async { axum::Json(serde_json::json!({"audio": "none"})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    for (api, section, kind) in [
        ("images", "image: { size: 64x64 }", "no_image"),
        ("speech", "speech: { voice: alloy }", "invalid_audio"),
    ] {
        let spec = format!(
            "  services:\n    m: {{ url: \"http://{addr}\", api: {api}, model: m }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 4, output_tokens: 1 }} }}\n    {section}\n  load:\n    - {{ concurrency: 2, requests: 12 }}\n"
        );
        let (_, records) = run_to_records(scenario(&spec), "media-hostile").await;
        assert_eq!(records.len(), 12);
        for r in &records {
            let error = r.error.as_ref().unwrap();
            assert_eq!(
                (r.outcome, error.kind.as_str()),
                (Outcome::Error, kind),
                "{error:?}"
            );
        }
    }
    server.abort();
}

fn spec_error(body: &str) -> String {
    let text = format!(
        "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: {{ name: t }}\nspec:\n{body}"
    );
    let file = redline::spec::parse("test.yaml", &text).unwrap();
    Scenario::from_spec(&file, &text).unwrap_err().to_string()
}

/// A directory whose `.wav` is not audio, a missing directory, a media section on the
/// wrong API: each named before anything is sent.
#[test]
fn bad_media_specs_name_the_file_and_the_field() {
    let dir = temp_dir("media-bad-clips");
    std::fs::write(dir.join("speech.wav"), "this is text, not audio").unwrap();
    let services =
        "  services:\n    w: { url: embedded, api: transcriptions }\n  payloadTemplate:\n";
    let load = "  load:\n    - { concurrency: 1, requests: 1 }\n";
    let error = spec_error(&format!(
        "{services}    audio: {{ dir: \"{}\" }}\n{load}",
        dir.display()
    ));
    assert!(error.contains("speech.wav is not a WAV file"), "{error}");
    assert!(error.contains("spec.payloadTemplate.audio.dir"), "{error}");
    let error = spec_error(&format!(
        "{services}    audio: {{ dir: /no/such/clips }}\n{load}"
    ));
    assert!(
        error.contains("cannot read the audio directory /no/such/clips"),
        "{error}"
    );
    let error = spec_error(&format!("{services}    audio: {{ language: en }}\n{load}"));
    assert!(
        error.contains("needs exactly one of `dir` and `clips`"),
        "{error}"
    );
    let chat = "  services:\n    llm: { url: embedded }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 4, output_tokens: 1 } }\n    image: { size: 64x64 }\n";
    let error = spec_error(&format!("{chat}{load}"));
    assert!(
        error.contains("applies only to `api: images` services"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A mix of chat, images and speech at 3 : 1 : 1 on one closed loop: over 300
/// requests each share is within 2.5 binomial standard deviations of its weight, and
/// each request went to its own service (chat records carry tokens, media records
/// their mark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mix_sends_each_service_its_weighted_share() {
    let _serial = CLIENT_TIMING.lock().await;
    let media = MediaCost {
        image_base_ms: 2.0,
        image_per_megapixel_ms: 0.0,
        speech_first_byte_ms: 2.0,
        speech_realtime_factor: 1000.0,
        ..MediaCost::default()
    };
    let sim = sim(media_profile(media)).await;
    let url = sim.base_url();
    let spec = format!(
        "  seed: 21\n  services:\n    llm: {{ url: \"{url}\", model: sim-tiny }}\n    img: {{ url: \"{url}\", api: images, model: sim-tiny }}\n    tts: {{ url: \"{url}\", api: speech, model: sim-tiny }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 10, output_tokens: 4 }} }}\n    image: {{ size: 64x64 }}\n    mix:\n      - {{ service: llm, weight: 3 }}\n      - {{ service: img }}\n      - {{ service: tts }}\n  load:\n    - {{ concurrency: 4, requests: 300 }}\n"
    );
    let (result, records) = run_to_records(scenario(&spec), "media-mix").await;
    assert_eq!(records.len(), 300);
    all_ok(&records);
    let count = |kind: Option<MediaKind>| {
        records
            .iter()
            .filter(|r| r.media.as_ref().map(|m| m.kind) == kind)
            .count() as f64
    };
    for (kind, share) in [
        (None, 0.6_f64),
        (Some(MediaKind::Image), 0.2),
        (Some(MediaKind::Speech), 0.2),
    ] {
        let sd = (share * (1.0 - share) / 300.0).sqrt();
        let seen = count(kind) / 300.0;
        assert!(
            (seen - share).abs() < 2.5 * sd,
            "{kind:?}: {seen:.3} of the requests, weight {share}"
        );
    }
    assert!(
        records
            .iter()
            .all(|r| r.media.is_some() || r.output_tokens == Some(4))
    );
    let summary = summary_of(&result);
    let kinds: Vec<MediaKind> = summary.media.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MediaKind::Image, MediaKind::Speech]);
}

#[test]
fn a_bad_mix_names_the_entry_and_the_fix() {
    let services = "  services:\n    llm: { url: embedded }\n    vectors: { url: embedded, api: qdrant }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 4, output_tokens: 1 } }\n";
    let load = "  load:\n    - { concurrency: 1, requests: 1 }\n";
    let error = spec_error(&format!(
        "{services}    mix: [{{ service: lm }}, {{ service: llm, weight: 0 }}, {{ service: vectors }}]\n{load}"
    ));
    assert!(
        error.contains("mix[0].service: names service `lm`"),
        "{error}"
    );
    assert!(error.contains("did you mean `llm`?"), "{error}");
    assert!(
        error.contains("mix[1].weight: must be at least 1"),
        "{error}"
    );
    assert!(
        error.contains("`vectors` speaks `api: qdrant`, which a mix cannot send to"),
        "{error}"
    );
}

/// One GPU of 80 GiB shared by chat (12 GiB a request), images (8) and audio (6).
fn gpu_profile() -> Profile {
    Profile {
        gpu: Some(redline::sim::gpu::GpuSpec {
            wait_ms: 1_000,
            ..Default::default()
        }),
        media: MediaCost {
            image_base_ms: 150.0,
            image_per_megapixel_ms: 0.0,
            ..MediaCost::default()
        },
        ..Profile::tiny()
    }
}

const GPU_MIX: &str = "  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 64, output_tokens: 200 } }\n    image: { size: 256x256 }\n    audio: { clips: { count: 8, seconds: { min: 2, max: 6 } } }\n    mix:\n      - { service: llm, weight: 30 }\n      - { service: img, weight: 8 }\n      - { service: asr, weight: 10 }\n";

fn gpu_services(url: &str) -> String {
    format!(
        "  seed: 4\n  services:\n    llm: {{ url: \"{url}\", model: sim-tiny }}\n    img: {{ url: \"{url}\", api: images, model: sim-tiny }}\n    asr: {{ url: \"{url}\", api: transcriptions, model: sim-tiny }}\n"
    )
}

fn out_of_memory(records: &[Record]) -> usize {
    records
        .iter()
        .filter(|r| {
            r.error
                .as_ref()
                .is_some_and(|e| e.message.contains("CUDA out of memory"))
        })
        .count()
}

/// The clients want chat 30/s, images 8/s, audio 10/s: more than the GPU holds. Sent
/// at that rate, requests run out of memory. With the controller reading the
/// simulator's nvidia-smi gauge, none do, and every rate it set is its formula at
/// the smoothed reading, within the step limit of the rate before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_keeps_memory_under_capacity_where_the_fixed_load_runs_out() {
    let _serial = CLIENT_TIMING.lock().await;
    let off_sim = sim(gpu_profile()).await;
    let url = off_sim.base_url();
    let fixed = format!(
        "{}{GPU_MIX}  load:\n    - {{ arrival: poisson, rate: 48, duration: 6s }}\n",
        gpu_services(&url)
    );
    let (_, records) = run_to_records(scenario(&fixed), "gpu-off").await;
    let without = out_of_memory(&records);
    assert!(
        without > 0,
        "the fixed load must overflow the GPU to show anything"
    );

    let on_sim = sim(gpu_profile()).await;
    let url = on_sim.base_url();
    let controlled = format!(
        "{}{GPU_MIX}  feedback:\n    gauge: {{ url: \"{url}/redline/nvidia-smi\" }}\n    interval: 250ms\n    smoothing: 0.5\n    max_step: 0.3\n    duration: 6s\n    rates:\n      llm: {{ base: 30, floor: 1 }}\n      img: {{ base: 8, floor: 1, exponent: 2 }}\n      asr: {{ base: 10, floor: 1, exponent: 1.5 }}\n",
        gpu_services(&url)
    );
    let (result, records) = run_to_records(scenario(&controlled), "gpu-on").await;
    let with = out_of_memory(&records);
    assert_eq!(with, 0, "with the controller ({without} without it)");
    let peak = get_text(&client(), format!("{url}/metrics")).await;
    assert!(metric(&peak, "redline_sim_gpu_out_of_memory_total") == 0.0);

    let report = result
        .feedback
        .expect("a controlled run reports its readings");
    assert_eq!(report.services, ["llm", "img", "asr"]);
    assert!(
        report.events.len() >= 20,
        "{} readings in 6 s at 250 ms",
        report.events.len()
    );
    let formulas = [(30.0, 1.0, 1.0), (8.0, 1.0, 2.0), (10.0, 1.0, 1.5)];
    let mut rates = vec![1.0_f64; 3];
    let mut smoothed: Option<f64> = None;
    for event in &report.events {
        let u = event.reading.expect("the simulator's gauge never fails");
        let s = smoothed.map_or(u, |s| s + 0.5 * (u - s));
        smoothed = Some(s);
        for (i, (base, floor, exponent)) in formulas.iter().enumerate() {
            let formula = (base * (1.0_f64 - s).powf(*exponent) + 1e-9)
                .floor()
                .max(*floor);
            let (low, high) = (rates[i] * 0.7, rates[i] * 1.3 + 1.0);
            rates[i] = formula.clamp(low, high).max(*floor);
        }
        assert_eq!(event.rates, rates, "at {} ms, u {u}", event.at_ms);
    }
    assert!(
        report.events.iter().any(|e| e.reading.unwrap() > 0.3),
        "the gauge moved"
    );
}

/// A gauge that prints text: every reading fails and is counted, the rates stay
/// where they started, and the run goes on to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gauge_that_prints_text_holds_the_rates_and_the_run_goes_on() {
    let sim = sim(gpu_profile()).await;
    let spec = format!(
        "{}{GPU_MIX}  feedback:\n    gauge: {{ command: [echo, 'GPU is busy'] }}\n    interval: 200ms\n    duration: 2s\n    rates:\n      llm: {{ base: 30, floor: 2 }}\n      img: {{ base: 8, floor: 1 }}\n      asr: {{ base: 10, floor: 1 }}\n",
        gpu_services(&sim.base_url())
    );
    let dir = temp_dir("gpu-garbage");
    let options = redline::runner::RunOptions::records_to(dir.join("records.jsonl"));
    let stop = tokio_util::sync::CancellationToken::new();
    let result = redline::runner::run(scenario(&spec), options, stop)
        .await
        .unwrap();
    assert!(result.aggregator.counts.ok > 0 && result.aggregator.counts.failed() == 0);
    let report = result.feedback.unwrap();
    // Each reading is also a line of feedback.jsonl beside the records, as it happens.
    let logged = std::fs::read_to_string(dir.join("feedback.jsonl")).unwrap();
    let lines: Vec<redline::results::RateEvent> = logged
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, report.events);
    std::fs::remove_dir_all(dir).unwrap();
    assert!(report.gauge_failures >= 5, "{report:?}");
    assert_eq!(report.gauge_failures as usize, report.events.len());
    assert!(report.events.iter().all(|e| e.rates == [2.0, 1.0, 1.0]));
    let why = report.last_failure.unwrap();
    assert!(
        why.contains("`GPU is busy`: neither `used, total` lines"),
        "{why}"
    );
}

/// A streamed transcript: its first text after the fixed 30 ms, its deltas four words
/// each, its end at the same 30 ms + 15 ms per audio second as a whole answer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_transcript_times_its_first_text_and_keeps_the_rtfx() {
    let _serial = CLIENT_TIMING.lock().await;
    let media = MediaCost {
        transcribe_base_ms: 30.0,
        transcribe_per_audio_second_ms: 15.0,
        ..MediaCost::default()
    };
    let sim = sim(media_profile(media)).await;
    let spec = format!(
        "  seed: 12\n  services:\n    whisper: {{ url: \"{}\", api: transcriptions, model: sim-tiny }}\n  payloadTemplate:\n    audio: {{ clips: {{ count: 8, seconds: {{ min: 4, max: 12 }} }}, stream: true }}\n  load:\n    - {{ concurrency: 2, requests: 24 }}\n",
        sim.base_url()
    );
    let (_, records) = run_to_records(scenario(&spec), "media-asr-stream").await;
    all_ok(&records);
    let mut first = Vec::new();
    let mut ratios = Vec::new();
    for r in &records {
        let mark = r.media.as_ref().unwrap();
        let audio = mark.audio_s.unwrap();
        let words = (audio * 2.5).round() as u32;
        assert_eq!(mark.words, Some(words));
        assert_eq!(r.content_events, words.div_ceil(4));
        first.push((r.first_token_us.unwrap() - r.sent_us.unwrap()) as f64 / 1e3);
        ratios.push(mark.realtime_factor(r).unwrap() / (audio / (0.030 + 0.015 * audio)));
    }
    let first = median(first);
    assert!((30.0..45.0).contains(&first), "first text p50 {first} ms");
    let ratio = median(ratios);
    assert!(
        (0.95..=1.001).contains(&ratio),
        "median measured/expected RTFx {ratio:.4}"
    );
}
