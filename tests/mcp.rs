//! MCP as the load: redline's client against the simulator's MCP server, whose own
//! counts (`GET /redline/mcp`) are the ground truth for calls, tool failures and
//! sessions; and against hostile servers, whose every wrong answer must be a typed
//! outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use redline::client::mcp::{self, McpTarget, McpTransport};
use redline::client::{RunClock, Timeouts};
use redline::record::{Outcome, Phase, Record};
use redline::sim::tiers::TierConfig;
use redline::workload::mcp::McpCall;
use serde_json::{Value, json};

use crate::common::*;

async fn sim_with_tools(latency_ms: f64, failure_rate: f64) -> EmbeddedSim {
    EmbeddedSim::start(SimConfig {
        profile: Profile::tiny(),
        model: None,
        seed: 3,
        tiers: TierConfig {
            tool_latency: redline_base::latency::LatencySpec {
                ms: Some(latency_ms),
                ..Default::default()
            },
            tool_failure_rate: failure_rate,
            ..Default::default()
        },
        script: None,
        startup: None,
    })
    .await
    .expect("start the simulator")
}

async fn truth(base: &str) -> Value {
    let text = get_text(&client(), format!("{base}/redline/mcp")).await;
    serde_json::from_str(&text).unwrap()
}

fn count(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// 2,000 calls in a weighted mix on 8 sessions that churn at 10 %, against tools
/// that fail at 5 %: every call is one record; per tool, the records' calls and
/// `isError` failures are exactly the server's; the sessions the records opened and
/// ended are the server's; the failure share is 5 % within 4 standard deviations; the
/// summary's tool success is the records' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_load_matches_the_simulators_ground_truth() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(2.0, 0.05).await;
    let base = sim.base_url();
    let spec = format!(
        "  seed: 5\n  services:\n    tools: {{ url: \"{base}/mcp\", api: mcp }}\n  payloadTemplate:\n    mcp:\n      ops:\n        - {{ tool: get_weather, args: {{ city: \"c{{{{ n }}}}\" }}, weight: 5 }}\n        - {{ tool: echo, args: {{ message: \"call {{{{ seq }}}}\" }}, weight: 3 }}\n        - {{ read: \"redline://about\" }}\n        - {{ list: tools }}\n      churn: 0.1\n  load:\n    - {{ concurrency: 8, requests: 2000 }}\n"
    );
    let (result, records) = run_to_records(scenario(&spec), "mcp-truth").await;
    assert_eq!(records.len(), 2000, "one record per scheduled call");
    let truth = truth(&base).await;
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for r in &records {
        let mark = r.mcp.as_ref().expect("an MCP mark");
        if mark.method == "tools/call" {
            let tool = mark.name.clone().unwrap();
            *calls.entry(tool.clone()).or_default() += 1;
            if r.error.as_ref().is_some_and(|e| e.kind == "mcp/tool_error") {
                *errors.entry(tool).or_default() += 1;
            }
        } else {
            assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        }
    }
    for (tool, n) in &calls {
        assert_eq!(
            *n,
            count(&truth["tool_calls"], tool),
            "{tool} calls: {truth}"
        );
        let failed = errors.get(tool).copied().unwrap_or(0);
        assert_eq!(failed, count(&truth["tool_errors"], tool), "{tool} errors");
    }
    let tool_calls: u64 = calls.values().sum();
    let failed: u64 = errors.values().sum();
    let share = failed as f64 / tool_calls as f64;
    let sd = (0.05 * 0.95 / tool_calls as f64).sqrt();
    assert!(
        (share - 0.05).abs() < 4.0 * sd,
        "tool failures {share:.4} of {tool_calls}"
    );
    let opened = records
        .iter()
        .filter(|r| r.mcp.as_ref().unwrap().handshake_us.is_some())
        .count();
    let ended = records
        .iter()
        .filter(|r| r.mcp.as_ref().unwrap().ended_session)
        .count();
    assert_eq!(opened as u64, count(&truth, "sessions_opened"));
    assert_eq!(ended as u64, count(&truth, "sessions_ended"));
    // 8 sessions at first, then one per ended session, give or take the last ends.
    assert!(
        opened >= 8 && opened <= 8 + ended,
        "{opened} opened, {ended} ended"
    );
    assert!((ended as f64 / 2000.0 - 0.1).abs() < 4.0 * (0.1 * 0.9 / 2000f64).sqrt());
    let summary = summary_of(&result);
    let mcp = summary.mcp.expect("an MCP section");
    assert_eq!(mcp.tool_calls, tool_calls);
    let pct = mcp.tool_success_pct.unwrap();
    assert!((pct - 100.0 * (1.0 - share)).abs() < 1e-9, "{pct}");
    assert_eq!(mcp.handshakes, opened as u64);
    let list = mcp.ops.iter().find(|o| o.op == "tools/list").unwrap();
    assert_eq!(list.failed, 0);
    let pages = records
        .iter()
        .filter_map(|r| r.mcp.as_ref().unwrap().pages)
        .collect::<Vec<_>>();
    // The simulator has 5 tools, 3 to a page.
    assert!(pages.iter().all(|p| *p == 2), "{pages:?}");
    let tool = mcp
        .ops
        .iter()
        .find(|o| o.op == "tools/call get_weather")
        .unwrap();
    assert!(
        tool.latency_ms.p50 >= 2.0,
        "a 2 ms tool answered in {} ms",
        tool.latency_ms.p50
    );
}

/// How a hostile server answers calls after `initialize`.
#[derive(Clone, Copy)]
enum Hostile {
    /// The response names another id.
    WrongId,
    /// Progress notifications, forever, never the result.
    EndlessProgress,
    /// A 10 MiB text result.
    HugeResult,
    /// A new session id on every answer.
    ChangingSession,
    /// An HTML page: not an MCP server at all.
    NotMcp,
    /// 404 to the first call on each session but the second's: a dropped session.
    DropsFirstSession,
    /// The SSE answer stops after one progress event, without the result; a GET
    /// for the rest is refused (405).
    CutStream,
    /// As `CutStream`, but a GET with `Last-Event-ID` gets the rest: the result.
    ResumesOnGet,
    /// The SSE answer asks the client for a `ping` first, and gives the result only
    /// once the client has POSTed the ping's response (within 2 s).
    PingsFirst,
    /// Calls answered; a GET opens a stream with a notification, a `ping` request and
    /// another notification, then stays open.
    Listens,
}

/// What a hostile server keeps between requests.
#[derive(Default)]
struct HostileState {
    sessions: AtomicU64,
    /// The client answered the server's ping.
    pinged: std::sync::atomic::AtomicBool,
}

async fn hostile_server(mode: Hostile) -> String {
    hostile_server_with_state(mode).await.0
}

/// A hostile server's URL, and what it keeps between requests.
async fn hostile_server_with_state(mode: Hostile) -> (String, Arc<HostileState>) {
    let state = Arc::new(HostileState::default());
    let kept = state.clone();
    let mut route = post(move |headers: HeaderMap, body: String| {
        let state = state.clone();
        async move { hostile_answer(mode, &state, &headers, &body) }
    });
    if let Hostile::ResumesOnGet = mode {
        route = route.get(resumed_answer);
    }
    if let Hostile::Listens = mode {
        route = route.get(standalone_stream);
    }
    let app = Router::new().route("/mcp", route);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), kept)
}

fn hostile_answer(
    mode: Hostile,
    state: &Arc<HostileState>,
    headers: &HeaderMap,
    body: &str,
) -> Response {
    let sessions = &state.sessions;
    let message: Value = serde_json::from_str(body).unwrap();
    let id = message["id"].clone();
    if id == "s1" && message.get("result") == Some(&json!({})) {
        state.pinged.store(true, Ordering::Relaxed);
        return StatusCode::ACCEPTED.into_response();
    }
    if matches!(mode, Hostile::NotMcp) {
        return ([("content-type", "text/html")], "<html>hello</html>").into_response();
    }
    match message["method"].as_str() {
        Some("initialize") => {
            let n = sessions.fetch_add(1, Ordering::Relaxed);
            let result = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "hostile", "version": "0"}});
            let mut response =
                axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
            response
                .headers_mut()
                .insert("mcp-session-id", format!("s{n}").parse().unwrap());
            return response;
        }
        Some(method) if method.starts_with("notifications/") => {
            return StatusCode::ACCEPTED.into_response();
        }
        _ => {}
    }
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let text_result = |text: String| json!({"content": [{"type": "text", "text": text}]});
    match mode {
        Hostile::WrongId => {
            axum::Json(json!({"jsonrpc": "2.0", "id": 999_999, "result": text_result("x".into())}))
                .into_response()
        }
        Hostile::HugeResult => axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "result": text_result("x".repeat(10 << 20))}),
        )
        .into_response(),
        Hostile::ChangingSession => {
            let mut response =
                axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": text_result("x".into())}))
                    .into_response();
            let n = sessions.fetch_add(1, Ordering::Relaxed);
            response
                .headers_mut()
                .insert("mcp-session-id", format!("other{n}").parse().unwrap());
            response
        }
        Hostile::DropsFirstSession if session == "s0" => StatusCode::NOT_FOUND.into_response(),
        Hostile::DropsFirstSession | Hostile::Listens => {
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": text_result("ok".into())}))
                .into_response()
        }
        Hostile::EndlessProgress => {
            let events = futures_util::stream::unfold(0u64, |n| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": n}});
                Some((
                    Ok::<_, std::convert::Infallible>(format!("data: {note}\n\n")),
                    n + 1,
                ))
            });
            sse(Body::from_stream(events))
        }
        Hostile::CutStream | Hostile::ResumesOnGet => {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
            sse(Body::from(format!("id: 1\nretry: 30\ndata: {note}\n\n")))
        }
        Hostile::PingsFirst => {
            let ping = json!({"jsonrpc": "2.0", "id": "s1", "method": "ping"});
            let result =
                json!({"jsonrpc": "2.0", "id": id, "result": text_result("pinged".into())});
            let state = state.clone();
            let answered = async move {
                for _ in 0..400 {
                    if state.pinged.load(Ordering::Relaxed) {
                        return Ok::<_, std::convert::Infallible>(format!("data: {result}\n\n"));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(": never answered\n\n".to_owned())
            };
            let events = futures_util::StreamExt::chain(
                futures_util::stream::iter([Ok(format!("data: {ping}\n\n"))]),
                futures_util::stream::once(answered),
            );
            sse(Body::from_stream(events))
        }
        Hostile::NotMcp => unreachable!("answered above"),
    }
}

/// A session's standalone stream: three messages, then silence, held open.
async fn standalone_stream(headers: HeaderMap) -> Response {
    if headers.get("mcp-session-id").is_none() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
    let ping = json!({"jsonrpc": "2.0", "id": "s1", "method": "ping"});
    let events = futures_util::StreamExt::chain(
        futures_util::stream::iter(
            [note.clone(), ping, note]
                .map(|m| Ok::<_, std::convert::Infallible>(format!("data: {m}\n\n"))),
        ),
        futures_util::stream::pending(),
    );
    sse(Body::from_stream(events))
}

/// The rest of a cut answer, for a GET that names its last event and the session:
/// the result of the call (id 2: the client's ids start at 1, with `initialize`).
async fn resumed_answer(headers: HeaderMap) -> Response {
    let named = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if named("last-event-id").as_deref() != Some("1") || named("mcp-session-id").is_none() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let result = json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "resumed"}]}});
    sse(Body::from(format!("id: 2\ndata: {result}\n\n")))
}

fn sse(body: Body) -> Response {
    ([("content-type", "text/event-stream")], body).into_response()
}

fn target(uri: &str, total: Duration, max_bytes: usize) -> McpTarget {
    let timeouts = Timeouts {
        total,
        ..Timeouts::default()
    };
    let transport = McpTransport::http(uri.parse().unwrap(), Vec::new());
    McpTarget::new(transport, timeouts, max_bytes, true)
}

/// One call of `echo` through redline's MCP client.
pub(crate) async fn call_once(target: &McpTarget) -> Record {
    let http = redline::client::http_client(&Timeouts::default(), false);
    let clock = RunClock::new(Instant::now());
    let mut record = Record::unsent(0, 0, Phase::Measure, 0);
    let call = McpCall::Tool {
        name: "echo".into(),
        args: serde_json::Map::new(),
    };
    mcp::call(
        &http,
        target,
        &call,
        false,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        clock,
        &mut record,
    )
    .await;
    record
}

pub(crate) fn kind(record: &Record) -> (Outcome, String) {
    let kind = record
        .error
        .as_ref()
        .map_or_else(String::new, |e| e.kind.clone());
    (record.outcome, kind)
}

/// Every hostile answer ends the call as a typed outcome, within its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mcp_answers_are_typed_outcomes() {
    let cases = [
        (Hostile::WrongId, Outcome::Error, "mcp/wrong_id"),
        (
            Hostile::ChangingSession,
            Outcome::Error,
            "mcp/session_changed",
        ),
        (Hostile::NotMcp, Outcome::Error, "mcp/not_mcp"),
        (Hostile::CutStream, Outcome::Error, "mcp/no_result"),
        (Hostile::ResumesOnGet, Outcome::Ok, ""),
        (Hostile::PingsFirst, Outcome::Ok, ""),
        (Hostile::EndlessProgress, Outcome::Timeout, "timeout"),
    ];
    for (mode, outcome, expected) in cases {
        let uri = hostile_server(mode).await;
        let target = target(&uri, Duration::from_millis(800), 64 << 20);
        let started = Instant::now();
        let record = call_once(&target).await;
        assert_eq!(kind(&record), (outcome, expected.to_owned()), "{record:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        if let Hostile::CutStream = mode {
            let message = &record.error.as_ref().unwrap().message;
            assert!(
                message.ends_with("resuming from event `1`: HTTP 405"),
                "{message}"
            );
        }
        if let Hostile::ResumesOnGet = mode {
            let mark = record.mcp.as_ref().unwrap();
            assert_eq!((mark.resumed, mark.progress), (1, 1), "{record:?}");
        }
        if let Hostile::EndlessProgress = mode {
            let heard = record.mcp.as_ref().unwrap().progress;
            assert!(heard > 10, "{heard} progress notifications counted");
        }
    }
}

/// A 10 MiB tool result is read whole under the default limit, and refused as
/// `too_large` under a 1 MiB one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_tool_result_is_read_or_refused_by_the_limit() {
    let uri = hostile_server(Hostile::HugeResult).await;
    let record = call_once(&target(&uri, Duration::from_secs(20), 64 << 20)).await;
    assert_eq!(record.outcome, Outcome::Ok, "{:?}", record.error);
    let record = call_once(&target(&uri, Duration::from_secs(20), 1 << 20)).await;
    assert_eq!(kind(&record), (Outcome::Error, "too_large".to_owned()));
}

/// A 404 on the session's id: the client initializes once more, sends the call
/// again, and the record says so; the next call uses the new session as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_opened_again_once() {
    let uri = hostile_server(Hostile::DropsFirstSession).await;
    let target = target(&uri, Duration::from_secs(5), 64 << 20);
    let first = call_once(&target).await;
    assert_eq!(first.outcome, Outcome::Ok, "{:?}", first.error);
    let mark = first.mcp.as_ref().unwrap();
    assert!(mark.reinitialized);
    assert!(mark.handshake_us.is_some());
    assert_eq!(target.idle_sessions(), 1);
    let second = call_once(&target).await;
    let mark = second.mcp.as_ref().unwrap();
    assert_eq!(second.outcome, Outcome::Ok);
    assert!(
        !mark.reinitialized && mark.handshake_us.is_none(),
        "{mark:?}"
    );
}

/// The shorthand calls one tool with its arguments; `--timeout` bounds each call:
/// `long_task` of 20 steps takes 200 ms on the simulator, so at 80 ms every call
/// ends as a timeout (and the run fails its default gate), at 2 s every call succeeds
/// in no less than the 200 ms.
#[test]
fn the_shorthand_calls_a_tool_and_timeout_bounds_each_call() {
    for (timeout, ok) in [("80ms", false), ("2s", true)] {
        let dir = temp_dir(&format!("mcp-shorthand-{timeout}"));
        let dir_text = dir.display().to_string();
        let (code, out, err) = redline(&[
            "run",
            "--url",
            "embedded",
            "--api",
            "mcp",
            "--tool",
            "long_task",
            "--args",
            r#"{"steps": 20}"#,
            "--requests",
            "12",
            "--concurrency",
            "4",
            "--timeout",
            timeout,
            "--out",
            &dir_text,
            "--quiet",
        ]);
        assert_eq!(code == Some(0), ok, "{out}\n{err}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        let op = &summary["mcp"]["ops"][0];
        assert_eq!(op["op"], "tools/call long_task");
        let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
        let section = page
            .split(r#"<section id="mcp">"#)
            .nth(1)
            .expect("an MCP section");
        assert!(
            section.contains("<td>tools/call long_task</td><td class=\"n\">12</td>"),
            "{section}"
        );
        assert_eq!(op["calls"], 12);
        if ok {
            assert_eq!(op["ok"], 12, "{op}");
            assert!(op["latency_ms"]["p50"].as_f64().unwrap() >= 200.0, "{op}");
        } else {
            assert_eq!(op["errors"]["first_byte/timeout"], 12, "{op}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}

fn agent_spec(base: &str, tool_timeout: &str, sessions: u32) -> String {
    format!(
        "  seed: 9\n  services:\n    llm: {{ url: embedded, profile: tiny }}\n    tools: {{ url: \"{base}/mcp\", api: mcp }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 20, output_tokens: 8 }} }}\n    flow:\n      - mcp: {{ name: lookup, service: tools, tool: search_docs, args: {{ query: \"{{{{ prompt }}}}\", limit: 2 }} }}\n      - chat: {{ name: agent, service: llm, max_tokens: 32, user: \"Use get_weather for {{{{ steps.lookup.text | length }}}} cities\", tools: {{ from: tools }} }}\n      - tool: {{ name: call, service: tools, timeout: {tool_timeout}, max_iterations: 4 }}\n    circuitBreaker: {{ consecutiveTimeouts: 3 }}\n  load:\n    - {{ concurrency: 4, requests: {sessions} }}\n"
    )
}

/// An agent flow on the simulator: an `mcp` step searches, the chat step is offered
/// the tools the MCP server lists and calls `get_weather`, the tool step runs it as
/// `tools/call`. The tool step's calls and `isError` failures are exactly the
/// server's; the failure share is the planted 10 % within 4 standard deviations; the
/// flow's tool success is the records' own, and a session whose tool failed failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_flow_runs_its_tools_over_mcp_and_counts_their_failures() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(1.0, 0.1).await;
    let base = sim.base_url();
    let (result, records) =
        run_to_records(scenario(&agent_spec(&base, "2s", 400)), "mcp-agent").await;
    let truth = truth(&base).await;
    let of = |name: &str| -> Vec<&Record> {
        records
            .iter()
            .filter(|r| r.step.as_ref().unwrap().name == name)
            .collect()
    };
    let calls = of("call");
    assert!(
        calls
            .iter()
            .all(|r| r.mcp.as_ref().unwrap().method == "tools/call")
    );
    assert!(
        calls
            .iter()
            .all(|r| r.step.as_ref().unwrap().tool.as_deref() == Some("get_weather"))
    );
    let failed = calls
        .iter()
        .filter(|r| r.error.as_ref().is_some_and(|e| e.kind == "mcp/tool_error"))
        .count();
    assert_eq!(
        calls.len() as u64,
        count(&truth["tool_calls"], "get_weather"),
        "{truth}"
    );
    assert_eq!(failed as u64, count(&truth["tool_errors"], "get_weather"));
    let lookups = of("lookup");
    assert_eq!(lookups.len(), 400);
    assert_eq!(count(&truth["tool_calls"], "search_docs"), 400);
    let searched_ok = lookups.iter().filter(|r| r.outcome == Outcome::Ok).count();
    assert_eq!(
        400 - searched_ok as u64,
        count(&truth["tool_errors"], "search_docs")
    );
    let n = calls.len() as f64;
    let share = failed as f64 / n;
    assert!(n >= 300.0, "{n} tool calls");
    assert!(
        (share - 0.1).abs() < 4.0 * (0.1 * 0.9 / n).sqrt(),
        "{share:.3} of {n}"
    );
    let flow = summary_of(&result).flow.unwrap();
    let tools = flow.tool_calls.unwrap();
    assert_eq!(
        (tools.calls, tools.ok),
        (calls.len() as u64, (calls.len() - failed) as u64)
    );
    let failed_sessions = records
        .iter()
        .filter_map(|r| r.session_end.as_ref())
        .filter(|end| end.outcome == redline::record::SessionOutcome::Failed)
        .count();
    let sessions_with_a_failure = records
        .iter()
        .filter(|r| r.outcome != Outcome::Ok)
        .map(|r| r.session.as_ref().unwrap().id)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(failed_sessions, sessions_with_a_failure);
}

/// The MCP tool answers in 400 ms and the tool step waits 100 ms: the third timeout
/// in a row opens the breaker, as for any tool; the server saw every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_timeouts_open_the_circuit_breaker() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(400.0, 0.0).await;
    let base = sim.base_url();
    let spec = agent_spec(&base, "100ms", 4)
        .replace(
            "tools: { from: tools } }",
            "tools: { from: tools }, tool_choice: required }",
        )
        .replace("search_docs", "echo")
        .replace(
            "query: \"{{ prompt }}\", limit: 2",
            "message: \"{{ prompt }}\"",
        );
    let (_, records) = run_to_records(scenario(&spec), "mcp-breaker").await;
    let calls: Vec<&Record> = records
        .iter()
        .filter(|r| r.step.as_ref().unwrap().name == "call")
        .collect();
    assert_eq!(calls.len(), 12, "3 timed-out calls in each of 4 sessions");
    assert!(calls.iter().all(|r| r.outcome == Outcome::Timeout));
    let ends: Vec<_> = records
        .iter()
        .filter_map(|r| r.session_end.as_ref())
        .collect();
    assert_eq!(ends.len(), 4);
    assert!(
        ends.iter()
            .all(|e| e.outcome == redline::record::SessionOutcome::Fallback
                && e.fallback_reason.as_ref().unwrap().tool == "get_weather")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let truth = truth(&base).await;
    assert_eq!(count(&truth["tool_calls"], "get_weather"), 12, "{truth}");
}

fn faulted_spec(base: &str, op: &str, faults: &str, load: &str) -> String {
    format!(
        "  seed: 21\n  services:\n    tools: {{ url: \"{base}/mcp\", api: mcp }}\n  payloadTemplate:\n    mcp:\n      ops: [ {op} ]\n      progress: true\n  load:\n    - {load}\n  faults:\n{faults}"
    )
}

/// A chaos rule answers 5 % of `tools/call` with a JSON-RPC error, in the server's
/// place: over 4,000 calls the share is 5 % ± 1 %, each such record names the rule
/// and fails as `mcp/-32000` with the chaos origin, no other call fails, and the
/// server saw exactly the calls the proxy let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_json_rpc_errors_are_attributed() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(0.0, 0.0).await;
    let base = sim.base_url();
    let faults = "    - { name: rpc-errors, service: tools, match: { mcp: { method: tools/call } }, mcp_error: { probability: 0.05, code: -32000, message: overloaded } }\n";
    let spec = faulted_spec(
        &base,
        "{ tool: echo, args: { message: hi } }",
        faults,
        "{ concurrency: 8, requests: 4000 }",
    );
    let (_, records) = run_to_records(scenario(&spec), "mcp-rpc-errors").await;
    assert_eq!(records.len(), 4000);
    let faulted: Vec<&Record> = records.iter().filter(|r| !r.faults.is_empty()).collect();
    for r in &faulted {
        let e = r.error.as_ref().expect("a faulted call failed");
        assert_eq!(
            (e.kind.as_str(), e.origin.as_deref()),
            ("mcp/-32000", Some("chaos:rpc-errors"))
        );
        assert_eq!(
            (r.faults[0].rule.as_str(), r.faults[0].fault.as_str()),
            ("rpc-errors", "mcp_error")
        );
    }
    assert!(
        records
            .iter()
            .filter(|r| r.faults.is_empty())
            .all(|r| r.outcome == Outcome::Ok)
    );
    let share = faulted.len() as f64 / 4000.0;
    assert!((share - 0.05).abs() <= 0.01, "{share}");
    let truth = truth(&base).await;
    assert_eq!(
        count(&truth["tool_calls"], "echo"),
        4000 - faulted.len() as u64
    );
}

/// With `listen`, a session opens its GET stream: what the server says there is
/// counted into the session's next calls (each message once), and its `ping` is
/// answered by a POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_session_hears_its_get_stream() {
    let (uri, state) = hostile_server_with_state(Hostile::Listens).await;
    let target = target(&uri, Duration::from_secs(2), 1 << 20).listening(true);
    let mut heard = 0;
    for _ in 0..20 {
        let record = call_once(&target).await;
        assert_eq!(kind(&record), (Outcome::Ok, String::new()));
        heard += record.mcp.unwrap().heard;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(heard, 3, "a notification, a ping, a notification");
    assert!(
        state.pinged.load(Ordering::Relaxed),
        "the ping was answered"
    );
    assert_eq!(target.idle_sessions(), 1, "one session, one stream");
}

/// A rule answers a share of `tools/list` with a 2 MiB catalogue of made-up tools:
/// over a 1 MiB limit each is `too_large`, read no further and attributed to the
/// rule; under a 4 MiB one it is read, every page's items counted. No other call
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_tool_list_is_attributed() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(0.0, 0.0).await;
    let base = sim.base_url();
    let faults = "    - { name: huge-list, service: tools, match: { mcp: { method: tools/list } }, mcp_oversize: { probability: 0.2, bytes: 2MiB } }\n";
    for (limit, fails) in [("1MiB", true), ("4MiB", false)] {
        let spec = faulted_spec(
            &base,
            "{ list: tools }",
            faults,
            "{ concurrency: 4, requests: 200 }",
        ) + &format!("  limits: {{ max_response_bytes: {limit} }}\n");
        let (_, records) = run_to_records(scenario(&spec), "mcp-oversize").await;
        assert_eq!(records.len(), 200);
        let faulted: Vec<&Record> = records.iter().filter(|r| !r.faults.is_empty()).collect();
        assert!((20..=60).contains(&faulted.len()), "{}", faulted.len());
        for r in &faulted {
            assert_eq!(r.faults[0].fault, "mcp_oversize");
            let items = r.mcp.as_ref().unwrap().items;
            match fails {
                true => {
                    let e = r.error.as_ref().expect("an oversized list failed");
                    assert_eq!(
                        (e.kind.as_str(), e.origin.as_deref()),
                        ("too_large", Some("chaos:huge-list"))
                    );
                }
                // 2 MiB of 4 KiB tools; the first page is the proxy's (it has no next).
                false => assert!(r.outcome == Outcome::Ok && items > Some(400), "{r:?}"),
            }
        }
        let clean = records.iter().filter(|r| r.faults.is_empty());
        assert!(clean.clone().all(|r| r.outcome == Outcome::Ok));
        assert!(
            clean
                .clone()
                .all(|r| r.mcp.as_ref().unwrap().items == Some(5))
        );
    }
}

/// A rule answers one tool call 404, as a server that dropped the session would: the
/// client opens one new session and sends the call again; the record says so and is
/// a success, with the fault noted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_answered_by_one_new_initialize() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(0.0, 0.0).await;
    let base = sim.base_url();
    let faults = "    - { name: drop, service: tools, max: 1, window: { from: 300ms }, match: { mcp: { method: tools/call } }, abort: { probability: 1, status: 404 } }\n";
    let spec = faulted_spec(
        &base,
        "{ tool: echo, args: { message: hi } }",
        faults,
        "{ concurrency: 1, duration: 1s }",
    );
    let (_, records) = run_to_records(scenario(&spec), "mcp-drop").await;
    assert!(records.iter().all(|r| r.outcome == Outcome::Ok));
    let dropped: Vec<&Record> = records
        .iter()
        .filter(|r| r.mcp.as_ref().unwrap().reinitialized)
        .collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].faults[0].fault, "abort");
    assert!(dropped[0].mcp.as_ref().unwrap().handshake_us.is_some());
    let truth = truth(&base).await;
    assert_eq!(
        count(&truth, "sessions_opened"),
        2,
        "the first session and one more: {truth}"
    );
}

/// A rule cuts `long_task`'s SSE answer after two events, before its result: the
/// call is `mcp/no_result`, the rule named; the other tool is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_sse_answer_is_typed() {
    let _serial = CLIENT_TIMING.lock().await;
    let sim = sim_with_tools(0.0, 0.0).await;
    let base = sim.base_url();
    let faults = "    - { name: cut, service: tools, match: { mcp: { tool: long_task } }, cut_stream: { probability: 1, after_events: 2 } }\n";
    let op = "{ tool: long_task, args: { steps: 4 } }, { tool: echo, args: { message: hi } }";
    let spec = faulted_spec(&base, op, faults, "{ concurrency: 2, requests: 40 }");
    let (_, records) = run_to_records(scenario(&spec), "mcp-cut").await;
    for r in &records {
        let mark = r.mcp.as_ref().unwrap();
        if mark.name.as_deref() == Some("long_task") {
            assert_eq!(
                kind(r),
                (Outcome::Error, "mcp/no_result".to_owned()),
                "{r:?}"
            );
            assert_eq!(r.faults[0].fault, "cut_stream");
            assert_eq!(mark.progress, 2, "two progress events before the cut");
        } else {
            assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
            assert!(r.faults.is_empty());
        }
    }
}
