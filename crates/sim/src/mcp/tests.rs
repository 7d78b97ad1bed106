//! The MCP server through the simulator's router, without a socket: the lifecycle, the
//! session rules, pagination, a streamed tool call's progress, planted tool failures
//! and malformed messages, each checked against the server's own counts.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::server::app;
use crate::state::{SimConfig, SimState};
use crate::tiers::TierConfig;

struct Reply {
    status: StatusCode,
    session: Option<String>,
    content_type: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn send(router: &axum::Router, method: &str, session: Option<&str>, body: String) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (status, session, content_type) = (
        response.status(),
        header("mcp-session-id"),
        header("content-type").unwrap_or_default(),
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        session,
        content_type,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn router(tool_failure_rate: f64) -> axum::Router {
    let config = SimConfig {
        tiers: TierConfig {
            tool_failure_rate,
            corpus_size: 20,
            ..TierConfig::default()
        },
        ..SimConfig::default()
    };
    app(SimState::new(config))
}

async fn truth(router: &axum::Router) -> Value {
    let request = Request::get("/redline/mcp").body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

async fn initialize(router: &axum::Router, version: &str) -> (String, Value) {
    let params = json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let reply = send(router, "POST", None, request(0, "initialize", params)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let session = reply.session.clone().expect("initialize names a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ack = send(router, "POST", Some(&session), initialized.to_string()).await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    (session, reply.json()["result"].clone())
}

#[tokio::test]
async fn a_session_lists_in_pages_calls_and_ends() {
    let router = router(0.0);
    let (session, result) = initialize(&router, "2025-06-18").await;
    assert_eq!(result["protocolVersion"], "2025-06-18");
    let (_, newest) = initialize(&router, "1999-01-01").await;
    assert_eq!(
        newest["protocolVersion"], "2025-11-25",
        "an unknown version gets the newest"
    );

    let first = send(
        &router,
        "POST",
        Some(&session),
        request(1, "tools/list", json!({})),
    )
    .await;
    let first = first.json()["result"].clone();
    assert_eq!(first["tools"].as_array().unwrap().len(), 3);
    let next = first["nextCursor"].as_str().unwrap();
    let second = send(
        &router,
        "POST",
        Some(&session),
        request(2, "tools/list", json!({"cursor": next})),
    )
    .await;
    let second = second.json()["result"].clone();
    assert_eq!(second["tools"].as_array().unwrap().len(), 2);
    assert!(second.get("nextCursor").is_none());

    let call = json!({"name": "add", "arguments": {"a": 1, "b": 2}});
    let added = send(
        &router,
        "POST",
        Some(&session),
        request(3, "tools/call", call),
    )
    .await;
    assert_eq!(added.json()["id"], 3);
    assert_eq!(
        added.json()["result"]["structuredContent"],
        json!({"sum": 3.0})
    );
    let unknown = send(
        &router,
        "POST",
        Some(&session),
        request(4, "tools/call", json!({"name": "nope"})),
    )
    .await;
    assert_eq!(unknown.json()["error"]["code"], -32602);

    let ended = send(&router, "DELETE", Some(&session), String::new()).await;
    assert_eq!(ended.status, StatusCode::OK);
    let after = send(
        &router,
        "POST",
        Some(&session),
        request(5, "ping", json!({})),
    )
    .await;
    assert_eq!(
        after.status,
        StatusCode::NOT_FOUND,
        "an ended session is 404: initialize again"
    );
    let none = send(&router, "POST", None, request(6, "ping", json!({}))).await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST);

    let truth = truth(&router).await;
    assert_eq!(truth["sessions_opened"], 2);
    assert_eq!(truth["sessions_ended"], 1);
    assert_eq!(
        truth["tool_calls"],
        json!({"add": 1}),
        "an unknown tool is not a call"
    );
    assert_eq!(truth["requests"]["tools/list"], 2);
    assert_eq!(
        truth["rejected"],
        json!({"no_session": 1, "unknown_session": 1})
    );
}

#[tokio::test]
async fn a_call_with_a_progress_token_streams_its_progress_then_its_result() {
    let router = router(0.0);
    let (session, _) = initialize(&router, "2025-11-25").await;
    let call =
        json!({"name": "long_task", "arguments": {"steps": 3}, "_meta": {"progressToken": "p1"}});
    let reply = send(
        &router,
        "POST",
        Some(&session),
        request(7, "tools/call", call),
    )
    .await;
    assert_eq!(reply.content_type, "text/event-stream");
    let events: Vec<Value> = reply
        .body
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(events.len(), 4, "{}", reply.body);
    for (i, progress) in events[..3].iter().enumerate() {
        assert_eq!(progress["method"], "notifications/progress");
        assert_eq!(progress["params"]["progressToken"], "p1");
        assert_eq!(progress["params"]["progress"], i as u64 + 1);
        assert_eq!(progress["params"]["total"], 3);
    }
    assert_eq!(events[3]["id"], 7);
    assert_eq!(events[3]["result"]["content"][0]["text"], "3 steps done");
    assert!(reply.body.starts_with("id: 0\n"), "events carry ids");
    assert_eq!(truth(&router).await["progress_sent"], 3);
}

#[tokio::test]
async fn planted_tool_failures_are_tool_errors_and_counted() {
    let router = router(1.0);
    let (session, _) = initialize(&router, "2025-11-25").await;
    for id in 0..5 {
        let call = json!({"name": "echo", "arguments": {"message": "x"}});
        let reply = send(
            &router,
            "POST",
            Some(&session),
            request(id, "tools/call", call),
        )
        .await;
        assert_eq!(reply.json()["result"]["isError"], true);
    }
    let truth = truth(&router).await;
    assert_eq!(truth["tool_errors"], json!({"echo": 5}));
}

#[tokio::test]
async fn malformed_messages_get_json_rpc_errors() {
    let router = router(0.0);
    let (session, _) = initialize(&router, "2025-11-25").await;
    let cases = [
        ("{not json", -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            -32600,
        ),
        ("{\"id\":1,\"method\":\"ping\"}", -32600),
    ];
    for (body, code) in cases {
        let reply = send(&router, "POST", Some(&session), body.to_owned()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.json()["error"]["code"], code, "{body}");
    }
    let unknown = send(
        &router,
        "POST",
        Some(&session),
        request(1, "tools/destroy", json!({})),
    )
    .await;
    assert_eq!(unknown.json()["error"]["code"], -32601);
}

#[test]
fn the_tool_names_are_the_catalogue_s() {
    let listed: Vec<Value> = crate::mcp::catalogue::tools()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(listed, crate::mcp::catalogue::TOOL_NAMES.map(Value::from));
}
