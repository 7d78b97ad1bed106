//! MCP over stdio: a load on `redline sim --mcp-stdio` processes checked against the
//! truth file they append to, no process left behind, and hostile servers (scripts of
//! `sh`) each ending a call as a typed outcome within its deadline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redline::client::Timeouts;
use redline::client::mcp::{McpTarget, McpTransport};
use redline::record::Outcome;
use serde_json::Value;

use crate::common::*;
use crate::mcp::{call_once, kind};

/// Processes whose command line holds `marker`, zombies aside.
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .filter(|line| line.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_load_matches_the_processes_ground_truth() {
    let _serial = CLIENT_TIMING.lock().await;
    let dir = temp_dir("mcp-stdio-truth");
    let truth_path = dir.join("truth.jsonl");
    let redline = env!("CARGO_BIN_EXE_redline");
    let spec = format!(
        "  seed: 5\n  services:\n    tools:\n      url: stdio\n      api: mcp\n      command: [\"{redline}\", sim, --mcp-stdio, --tool-ms, \"1\", --tool-failure-rate, \"0.05\", --mcp-truth, \"{}\"]\n  payloadTemplate:\n    mcp:\n      ops:\n        - {{ tool: echo, args: {{ message: \"call {{{{ seq }}}}\" }}, weight: 6 }}\n        - {{ tool: long_task, args: {{ steps: 2 }} }}\n        - {{ read: \"redline://about\" }}\n        - {{ list: tools }}\n      churn: 0.05\n      progress: true\n  load:\n    - {{ concurrency: 4, requests: 1500 }}\n",
        truth_path.display()
    );
    let (result, records) = run_to_records(scenario(&spec), "mcp-stdio").await;
    assert_eq!(records.len(), 1500, "one record per scheduled call");
    let noted: Vec<Value> = std::fs::read_to_string(&truth_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut truth_calls: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in noted.iter().filter(|l| l["method"] == "tools/call") {
        let entry = truth_calls
            .entry(line["tool"].as_str().unwrap().to_owned())
            .or_default();
        entry.0 += 1;
        entry.1 += u64::from(line["is_error"] == true);
    }
    let mut calls: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &records {
        let mark = r.mcp.as_ref().expect("an MCP mark");
        if mark.method != "tools/call" {
            assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
            continue;
        }
        let name = mark.name.clone().unwrap();
        let entry = calls.entry(name.clone()).or_default();
        entry.0 += 1;
        match r.error.as_ref().map(|e| e.kind.as_str()) {
            Some("mcp/tool_error") => entry.1 += 1,
            Some(other) => panic!("{other}: {r:?}"),
            None if name == "long_task" => assert_eq!(mark.progress, 2, "{r:?}"),
            None => {}
        }
    }
    assert_eq!(calls, truth_calls, "calls and tool errors by tool");
    let (tool_calls, failed) = calls.values().fold((0, 0), |(c, f), v| (c + v.0, f + v.1));
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
    let initialized = noted.iter().filter(|l| l["method"] == "initialize").count();
    assert_eq!(
        opened, initialized,
        "one process, one initialize, per session"
    );
    let ended = records
        .iter()
        .filter(|r| r.mcp.as_ref().unwrap().ended_session)
        .count();
    assert!(
        opened >= 4 && opened <= 4 + ended,
        "{opened} opened, {ended} ended"
    );
    let mcp = summary_of(&result).mcp.expect("an MCP section");
    assert_eq!(mcp.handshakes, opened as u64);
    let marker = truth_path.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&marker).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "no server left running"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `initialize` answered (id 1), `notifications/initialized` and the call (id 2) read.
const INIT: &str = r#"read l; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"hostile","version":"1"}}}'; read l; read l; "#;

fn stdio_target(script: &str, total: Duration, max_bytes: usize) -> McpTarget {
    let timeouts = Timeouts {
        total,
        ..Timeouts::default()
    };
    let command = vec!["sh".to_owned(), "-c".to_owned(), format!("{INIT}{script}")];
    McpTarget::new(McpTransport::Stdio { command }, timeouts, max_bytes, false)
}

/// Every hostile server ends the call as a typed outcome, within its deadline, and a
/// server that does right after a slow call is still answered on the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_stdio_servers_are_typed_outcomes() {
    let huge = r#"printf '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"'; head -c 10485760 /dev/zero | tr '\0' a; printf '"}]}}\n'; sleep 5"#;
    let cases: [(&str, usize, Outcome, &str); 8] = [
        (
            r#"echo '{"jsonrpc":"2.0","id":99,"result":{"content":[]}}'; sleep 5"#,
            1 << 20,
            Outcome::Error,
            "mcp/wrong_id",
        ),
        (
            r#"while :; do echo '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":2,"progress":1}}'; done"#,
            1 << 20,
            Outcome::Error,
            "too_large",
        ),
        (huge, 1 << 20, Outcome::Error, "too_large"),
        (huge, 16 << 20, Outcome::Ok, ""),
        (
            "echo 'oops: no key' >&2; exit 3",
            1 << 20,
            Outcome::Error,
            "mcp/server_exited",
        ),
        (
            r#"echo 'this is not JSON'; sleep 5"#,
            1 << 20,
            Outcome::Error,
            "invalid_json",
        ),
        // A server's own request (ping) is answered before the call's response comes.
        (
            r#"echo '{"jsonrpc":"2.0","id":"s1","method":"ping"}'; read a; case "$a" in *'"id":"s1"'*'"result"'*) echo '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"pinged"}]}}';; esac; sleep 5"#,
            1 << 20,
            Outcome::Ok,
            "",
        ),
        // Its log never fills a pipe that blocks it.
        (
            r#"head -c 5000000 /dev/zero >&2; echo '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"logged"}]}}'; sleep 5"#,
            1 << 20,
            Outcome::Ok,
            "",
        ),
    ];
    for (script, max_bytes, outcome, expected) in cases {
        let target = stdio_target(script, Duration::from_secs(3), max_bytes);
        let started = Instant::now();
        let record = call_once(&target).await;
        assert_eq!(
            kind(&record),
            (outcome, expected.to_owned()),
            "{script}: {:?}",
            record.error
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{script}: {:?}",
            started.elapsed()
        );
        if expected == "mcp/server_exited" {
            let message = &record.error.as_ref().unwrap().message;
            assert!(
                message.contains("exit status: 3") && message.contains("oops: no key"),
                "{message}"
            );
        }
    }
    let missing = McpTarget::new(
        McpTransport::Stdio {
            command: vec!["/nonexistent/mcp-server".into()],
        },
        Timeouts::default(),
        1 << 20,
        false,
    );
    assert_eq!(
        kind(&call_once(&missing).await),
        (Outcome::Error, "mcp/spawn".to_owned())
    );
}

/// A call out of time is cancelled; its late response (0.3 s into the next call) is
/// passed over, and the next call on the same process gets its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_response_after_a_cancel_is_passed_over() {
    let script = r#"sleep 1.3; read c; case "$c" in *'"notifications/cancelled"'*'"requestId":2'*) echo '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"late"}]}}';; *) echo "no cancel: $c" >&2; exit 1;; esac; read l; echo '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"second"}]}}'; sleep 5"#;
    let target = stdio_target(script, Duration::from_secs(1), 1 << 20);
    let first = call_once(&target).await;
    assert_eq!(kind(&first), (Outcome::Timeout, "timeout".to_owned()));
    assert_eq!(
        target.idle_sessions(),
        1,
        "a timeout leaves the process usable"
    );
    let second = call_once(&target).await;
    assert_eq!(
        kind(&second),
        (Outcome::Ok, String::new()),
        "{:?}",
        second.error
    );
    assert!(
        second.mcp.unwrap().handshake_us.is_none(),
        "the same process"
    );
}
