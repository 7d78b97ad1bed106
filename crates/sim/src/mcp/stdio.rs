//! The same MCP server over stdio, as a client's child process: one JSON-RPC message
//! per line on stdin, answers and notifications one per line on stdout and nothing
//! else there. One process is one session; it ends when its stdin closes, once the
//! requests in flight are answered. Requests are served concurrently and answered as
//! they finish, as the transport allows; a tool call with a progress token hears its
//! progress notifications first.
//!
//! Ground truth, when asked for: one JSON line per request served, appended to a file
//! that every process of a run may share (each line one `write` to a file opened for
//! appending, so lines of different processes do not interleave), written before the
//! answer leaves.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::catalogue::RpcError;
use super::{McpServer, Message, initialize_result, message_of, result_of};

/// Longest message read: a client's line beyond it is refused, not buffered.
const MAX_LINE: usize = 16 << 20;

/// Where each served request is noted.
pub type TruthFile = Arc<Mutex<std::fs::File>>;

/// Serves `input` to `output` until `input` ends.
pub async fn serve<R, W>(
    mcp: Arc<McpServer>,
    input: R,
    output: W,
    truth: Option<TruthFile>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_lines(rx, output));
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            break;
        }
        if line.len() > MAX_LINE {
            let error = RpcError {
                code: -32600,
                message: format!("Invalid Request: a message longer than {MAX_LINE} bytes"),
            };
            let _ = tx.send(error_line(&Value::Null, &error));
            break;
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        take(&mcp, &line, &tx, &truth);
    }
    drop(tx);
    writer.await.expect("the writer does not panic")
}

/// One message from the client: a request is answered by a task of its own.
fn take(
    mcp: &Arc<McpServer>,
    line: &[u8],
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    truth: &Option<TruthFile>,
) {
    match message_of(line) {
        Err((_, error)) => {
            mcp.count(|t| *t.rejected.entry("malformed".into()).or_default() += 1);
            let _ = tx.send(error_line(&Value::Null, &error));
        }
        Ok(Message::Request { id, method, params }) => {
            mcp.count(|t| *t.requests.entry(method.clone()).or_default() += 1);
            let (mcp, tx, truth) = (mcp.clone(), tx.clone(), truth.clone());
            tokio::spawn(async move {
                let answer = answer(&mcp, &tx, &method, &params).await;
                note(truth.as_ref(), &method, &params, &answer);
                let line = match answer {
                    Ok(result) => {
                        message_line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                    }
                    Err(error) => error_line(&id, &error),
                };
                let _ = tx.send(line);
            });
        }
        Ok(Message::Notification { method }) => {
            mcp.count(|t| *t.notifications.entry(method).or_default() += 1);
        }
        Ok(Message::Response) => {}
    }
}

/// A request's result; a tool call with a progress token sends its progress first.
async fn answer(
    mcp: &McpServer,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    method: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    if method == "initialize" {
        return Ok(initialize_result(params));
    }
    let Some(token) = params.pointer("/_meta/progressToken").cloned() else {
        return result_of(mcp, method, params, None).await;
    };
    let notify = |progress: u64, total: u64| {
        let message = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": progress, "total": total}});
        let _ = tx.send(message_line(&message));
        mcp.count(|t| t.progress_sent += 1);
    };
    result_of(mcp, method, params, Some(&notify)).await
}

/// Appends what was served to the truth file: the method, the tool and whether its
/// result was an error, or the JSON-RPC error's code.
fn note(truth: Option<&TruthFile>, method: &str, params: &Value, answer: &Result<Value, RpcError>) {
    let Some(truth) = truth else { return };
    let mut line = json!({"method": method});
    if method == "tools/call" {
        line["tool"] = params.get("name").cloned().unwrap_or(Value::Null);
    }
    match answer {
        Ok(result) => line["is_error"] = json!(result["isError"] == true),
        Err(error) => line["rpc_error"] = json!(error.code),
    }
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    // A failed note is lost ground truth, which the test that reads it will see.
    let _ = truth
        .lock()
        .expect("a file holds no invariant")
        .write_all(&bytes);
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(line) = rx.recv().await {
        output.write_all(&line).await?;
        output.flush().await?;
    }
    Ok(())
}

fn message_line(message: &Value) -> Vec<u8> {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    line
}

fn error_line(id: &Value, error: &RpcError) -> Vec<u8> {
    message_line(
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": error.message}}),
    )
}
