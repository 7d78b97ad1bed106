//! The stdio transport: the server as a child process (started from its argv, never
//! through a shell, in a process group of its own), one JSON-RPC message per line on
//! its stdin and stdout. One process is one session. Its stderr is the server's log:
//! drained so that it can never block the server, its last line kept for the error
//! that says why the process ended.
//!
//! A call's marks: `sent_us` when its line is written, `first_byte_us` at the first
//! line that follows, `last_byte_us` at its response. A call that runs out of time is
//! cancelled (`notifications/cancelled`) and its late response, should one come, is
//! passed over by the next call. Everything that leaves the stream in doubt (a line
//! too long, one that is not JSON-RPC, a response to an id never asked, the process
//! gone) ends the session: the next call starts a new process.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, RequestId,
};
use rustix::process::{Pid, Signal};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::wire::{Deadlines, Message, answer_to_server, parse, settle};
use crate::client::RunClock;
use crate::record::{FailStage, McpMark, Outcome, Record, cut_to};

/// Responses to cancelled calls looked out for at most.
const MAX_ABANDONED: usize = 64;

/// How long a server may take to exit once its input is closed, and again after
/// SIGTERM, before the next step of its shutdown.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A server process: one session.
pub(super) struct Process {
    child: Child,
    group: Option<Pid>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The part of a line read before a call ran out of time.
    line: Vec<u8>,
    /// The last line the server wrote to stderr.
    last_log: Arc<Mutex<String>>,
    /// The task reading stderr, done at its end.
    log_reader: Option<tokio::task::JoinHandle<()>>,
    /// Calls given up on whose responses may still come.
    abandoned: Vec<i64>,
    /// Whether the stream can carry another call.
    usable: bool,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.child.id())
            .field("usable", &self.usable)
            .finish()
    }
}

impl Process {
    /// Starts `argv`; `Err` says why it could not be.
    pub(super) fn start(argv: &[String]) -> Result<Process, String> {
        let (program, args) = argv.split_first().ok_or("the server command is empty")?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start `{program}`: {e}"))?;
        let group = child.id().and_then(|id| Pid::from_raw(id as i32));
        let last_log = Arc::new(Mutex::new(String::new()));
        let log_reader = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(drain_log(stderr, last_log.clone())));
        Ok(Process {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().expect("stdout is piped")),
            child,
            group,
            line: Vec::new(),
            last_log,
            log_reader,
            abandoned: Vec::new(),
            usable: true,
        })
    }

    pub(super) fn usable(&self) -> bool {
        self.usable
    }

    /// Ends the session as the transport says: input closed, then SIGTERM, then
    /// SIGKILL, each after a grace period; whatever the server left in its group goes
    /// with it.
    pub(super) async fn stop(mut self) {
        self.stdin = None;
        if tokio::time::timeout(EXIT_GRACE, self.child.wait())
            .await
            .is_err()
        {
            self.signal(Signal::TERM);
            let _ = tokio::time::timeout(EXIT_GRACE, self.child.wait()).await;
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }

    /// Writes one message as a line by `deadline`; a write cut short leaves half a
    /// line on the stream, so it ends the session.
    async fn write(
        &mut self,
        message: &ClientJsonRpcMessage,
        deadline: Instant,
    ) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).expect("an MCP message serialises");
        line.push(b'\n');
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("the server's input is closed".into());
        };
        let written = tokio::time::timeout_at(deadline.into(), async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                self.usable = false;
                Err(format!("cannot write to the server: {error}"))
            }
            Err(_) => {
                self.usable = false;
                Err("the server did not read its input before the deadline".into())
            }
        }
    }

    /// The next line, at most `max` bytes without its newline; `Ok(None)` at the end
    /// of the server's output. Safe to give up on: a part line stays for the next call.
    async fn read_line(&mut self, max: usize) -> Result<Option<Vec<u8>>, Ended> {
        let room = (max + 1).saturating_sub(self.line.len()) as u64;
        let read = (&mut self.stdout)
            .take(room)
            .read_until(b'\n', &mut self.line)
            .await;
        match read {
            Err(error) => Err(Ended::Broken(error.to_string())),
            Ok(_) if self.line.ends_with(b"\n") => Ok(Some(std::mem::take(&mut self.line))),
            Ok(_) if self.line.len() > max => Err(Ended::TooLong),
            // The output ended, maybe within a line.
            Ok(_) => Ok(None),
        }
    }

    /// Why the server's output ended: its exit status, when it has one, and its last
    /// log line.
    async fn why_ended(&mut self) -> String {
        let status = match tokio::time::timeout(Duration::from_millis(200), self.child.wait()).await
        {
            Ok(Ok(status)) => status.to_string(),
            _ => "still running, its output closed".to_owned(),
        };
        // The process's last words may still be in the pipe: read them to its end
        // (bounded: a child it left behind may hold the pipe open).
        if let Some(reader) = self.log_reader.take() {
            let _ = tokio::time::timeout(Duration::from_millis(200), reader).await;
        }
        let log = self
            .last_log
            .lock()
            .expect("a line holds no invariant")
            .clone();
        match log.is_empty() {
            true => format!("the server process ended ({status})"),
            false => format!("the server process ended ({status}); its last log line: {log}"),
        }
    }
}

impl Drop for Process {
    /// A session dropped without `stop` (a broken one, the run's end) is killed with
    /// everything in its group.
    fn drop(&mut self) {
        self.signal(Signal::KILL);
    }
}

/// How reading a line failed.
enum Ended {
    Broken(String),
    TooLong,
}

/// Keeps the last line of the server's log; drops the rest as it comes.
async fn drain_log(stderr: tokio::process::ChildStderr, last: Arc<Mutex<String>>) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines)
            .take(64 << 10)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                if !text.trim().is_empty() {
                    *last.lock().expect("a line holds no invariant") = cut_to(text.trim(), 200);
                }
            }
        }
    }
}

/// Sends `request` as id `id` and reads to its response: the result, or a typed
/// failure in `record` (then `None`).
pub(super) async fn request(
    process: &mut Process,
    (id, request): (i64, ClientRequest),
    deadlines: Deadlines,
    max_bytes: usize,
    (clock, record, mark): (RunClock, &mut Record, &mut McpMark),
) -> Option<Value> {
    let message = ClientJsonRpcMessage::request(request, RequestId::Number(id));
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    if let Err(why) = process.write(&message, deadlines.total).await {
        record.fail(Outcome::Error, FailStage::Send, "mcp/server_exited", why);
        return None;
    }
    let mut received = 0usize;
    loop {
        let wait = match record.first_byte_us {
            None => deadlines.total.min(sent + deadlines.first),
            Some(_) => deadlines.total.min(Instant::now() + deadlines.between),
        };
        let line = match tokio::time::timeout_at(wait.into(), process.read_line(max_bytes)).await {
            Err(_) => return give_up(process, id, deadlines.total, record, mark).await,
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                process.usable = false;
                let why = process.why_ended().await;
                record.fail(Outcome::Error, FailStage::Stream, "mcp/server_exited", why);
                return None;
            }
            Ok(Err(ended)) => {
                process.usable = false;
                let (kind, why) = match ended {
                    Ended::TooLong => (
                        "too_large",
                        format!("a message longer than {max_bytes} bytes"),
                    ),
                    Ended::Broken(why) => ("reset", format!("reading the server's output: {why}")),
                };
                record.fail(Outcome::Error, FailStage::Stream, kind, why);
                return None;
            }
        };
        if record.first_byte_us.is_none() {
            record.first_byte_us = Some(clock.now_us());
        }
        received += line.len();
        if received > max_bytes {
            process.usable = false;
            let message = format!("more than {max_bytes} bytes before the response");
            record.fail(Outcome::Error, FailStage::Stream, "too_large", message);
            return None;
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        if let Some(result) =
            take_line(process, &line, id, deadlines.total, (clock, record, mark)).await
        {
            return result;
        }
    }
}

/// What one line of the server's output does to the call: `None` to read on, else
/// the call's end (its result, or `None` when the record failed).
async fn take_line(
    process: &mut Process,
    line: &[u8],
    id: i64,
    deadline: Instant,
    (clock, record, mark): (RunClock, &mut Record, &mut McpMark),
) -> Option<Option<Value>> {
    let reply = match parse(line) {
        Ok(Message::Notification(note)) => {
            if note.notification.method == "notifications/progress" {
                mark.progress = mark.progress.saturating_add(1);
            }
            return None;
        }
        Ok(Message::Request(asked)) => {
            answer_server(process, asked.id, &asked.request.method, deadline).await;
            return None;
        }
        Ok(Message::Response(response)) => Ok(response),
        Ok(Message::Error(error)) => Err(error),
        Err((kind, message)) => {
            process.usable = false;
            record.fail(Outcome::Error, FailStage::Decode, kind, message);
            return Some(None);
        }
    };
    let answered = match &reply {
        Ok(response) => Some(&response.id),
        Err(error) => error.id.as_ref(),
    };
    if let Some(RequestId::Number(late)) = answered
        && *late != id
        && let Some(at) = process.abandoned.iter().position(|a| a == late)
    {
        process.abandoned.swap_remove(at);
        return None;
    }
    let result = settle(reply, id, record);
    record.last_byte_us = Some(clock.now_us());
    if record
        .error
        .as_ref()
        .is_some_and(|e| e.kind == "mcp/wrong_id")
    {
        process.usable = false;
    }
    Some(result)
}

/// Answers a request of the server's (see [`answer_to_server`]).
async fn answer_server(process: &mut Process, id: RequestId, method: &str, deadline: Instant) {
    let _ = process.write(&answer_to_server(id, method), deadline).await;
}

/// A call out of time: the server is told (`notifications/cancelled`), and its
/// response, should it still come, is looked out for.
async fn give_up(
    process: &mut Process,
    id: i64,
    deadline: Instant,
    record: &mut Record,
    mark: &McpMark,
) -> Option<Value> {
    let message = format!(
        "no result before the deadline ({} progress notifications)",
        mark.progress
    );
    let stage = match record.first_byte_us {
        Some(_) => FailStage::Stream,
        None => FailStage::FirstByte,
    };
    record.fail(Outcome::Timeout, stage, "timeout", message);
    if process.abandoned.len() >= MAX_ABANDONED {
        process.abandoned.remove(0);
    }
    process.abandoned.push(id);
    let params = CancelledNotificationParam::new(
        Some(RequestId::Number(id)),
        Some("the load test's deadline passed".into()),
    );
    let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
        CancelledNotification::new(params),
    ));
    // The call is over; the notice may take a moment more, not another whole call.
    let notice = deadline.max(Instant::now()) + Duration::from_millis(100);
    let _ = process.write(&cancel, notice).await;
    None
}

/// Sends a notification; only a write that fails fails the record.
pub(super) async fn notify(
    process: &mut Process,
    notification: ClientNotification,
    deadline: Instant,
    record: &mut Record,
) -> Option<()> {
    let message = ClientJsonRpcMessage::notification(notification);
    match process.write(&message, deadline).await {
        Ok(()) => Some(()),
        Err(why) => {
            record.fail(Outcome::Error, FailStage::Send, "mcp/server_exited", why);
            None
        }
    }
}
