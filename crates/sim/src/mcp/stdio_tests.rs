//! The MCP server over stdio, through in-memory pipes: concurrent requests answered by
//! id, progress before its result, malformed lines refused, the end of input waiting
//! for the answers in flight, and the truth file's one line per request.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::McpServer;
use super::stdio::serve;
use crate::tiers::{TierConfig, Tiers};

fn server() -> Arc<McpServer> {
    let config = TierConfig {
        corpus_size: 20,
        ..TierConfig::default()
    };
    Arc::new(McpServer::new(Arc::new(Tiers::new(config, 7, 16)), 7))
}

/// Writes `lines` to a server, closes its input, and gives every line it wrote.
async fn exchange(lines: &[Value], truth: Option<std::fs::File>) -> Vec<Value> {
    let (client, server_end) = tokio::io::duplex(1 << 20);
    let (server_in, server_out) = tokio::io::split(server_end);
    let truth = truth.map(|f| Arc::new(Mutex::new(f)));
    let served = tokio::spawn(serve(server(), server_in, server_out, truth));
    let (client_in, mut client_out) = tokio::io::split(client);
    for line in lines {
        client_out
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    client_out.write_all(b"not json\n").await.unwrap();
    client_out.shutdown().await.unwrap();
    let mut read = BufReader::new(client_in).lines();
    let mut answers = Vec::new();
    while let Some(line) = read.next_line().await.unwrap() {
        answers.push(serde_json::from_str(&line).unwrap());
        if answers.len() == lines.len() + 3 {
            break;
        }
    }
    served.await.unwrap().unwrap();
    answers
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[tokio::test]
async fn requests_are_answered_by_id_with_progress_first_and_noted() {
    let truth_path = std::env::temp_dir().join(format!("redline-mcp-truth-{}", std::process::id()));
    let truth = std::fs::File::create(&truth_path).unwrap();
    let lines = [
        request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        // The slow call first: its answer comes after the fast one's.
        request(
            2,
            "tools/call",
            json!({"name": "long_task", "arguments": {"steps": 3}, "_meta": {"progressToken": "p"}}),
        ),
        request(
            3,
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "hi"}}),
        ),
        request(4, "nope/nope", json!({})),
    ];
    let answers = exchange(&lines, Some(truth)).await;
    let by_id = |id: u64| answers.iter().position(|a| a["id"] == id).unwrap();
    assert_eq!(answers[by_id(1)]["result"]["protocolVersion"], "2025-06-18");
    assert!(by_id(3) < by_id(2), "{answers:?}");
    assert_eq!(answers[by_id(3)]["result"]["content"][0]["text"], "hi");
    assert_eq!(answers[by_id(4)]["error"]["code"], -32601);
    let progress: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(_, a)| a["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3);
    assert!(
        progress
            .iter()
            .all(|(at, p)| *at < by_id(2) && p["params"]["progressToken"] == "p")
    );
    let refused = answers.iter().find(|a| a["id"].is_null()).unwrap();
    assert_eq!(refused["error"]["code"], -32700);
    let noted: Vec<Value> = std::fs::read_to_string(&truth_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_file(&truth_path).unwrap();
    assert_eq!(noted.len(), 4, "{noted:?}");
    assert!(
        noted.contains(&json!({"method": "tools/call", "tool": "long_task", "is_error": false}))
    );
    assert!(noted.contains(&json!({"method": "nope/nope", "rpc_error": -32601})));
}
