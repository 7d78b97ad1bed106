//! Runs a runbook action: a program (never through a shell, in its own process group so
//! a timeout stops everything it started, with only the environment the runbook
//! names), a webhook, `ansible-playbook`, or an AWX job-template launch polled to its
//! end. Every outcome is data for the audit log, never a panic.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::runbook::{Run, host_allowed};
use crate::client::{self, HttpClient, Timeouts};

/// Output kept per stream of a command, and of an HTTP answer, in the audit log.
const OUTPUT_BYTES: usize = 8 << 10;

/// What one run of an action (or a rollback) did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionRun {
    pub ok: bool,
    /// What ran: its argv, or `METHOD URL`.
    pub ran: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub elapsed_ms: f64,
    /// Its output (stdout, then stderr), or the answer's body, cut short.
    pub output: String,
    /// Why it did not succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What every run needs besides the action: where, how long, which environment, which
/// hosts, and the client for HTTP.
pub struct Runner<'a> {
    pub dir: &'a Path,
    pub env: &'a [String],
    pub allow_hosts: &'a [String],
    pub http: &'a HttpClient,
}

impl Runner<'_> {
    /// Runs `run` with `arguments` (already checked against the action's schema),
    /// within `timeout`.
    pub async fn run(&self, run: &Run, arguments: &Value, timeout: Duration) -> ActionRun {
        let started = Instant::now();
        let mut outcome = match run {
            Run::Command(template) => {
                let argv = substitute(template, arguments);
                self.command(argv, timeout).await
            }
            Run::Ansible {
                playbook,
                inventory,
                connection,
            } => {
                let mut argv = vec![
                    "ansible-playbook".to_owned(),
                    "-i".into(),
                    inventory.clone(),
                ];
                if let Some(connection) = connection {
                    argv.extend(["-c".into(), connection.clone()]);
                }
                argv.push(playbook.display().to_string());
                argv.extend(["--extra-vars".into(), arguments.to_string()]);
                self.command(argv, timeout).await
            }
            Run::Webhook { url, method } => {
                let deadline = started + timeout;
                self.webhook(method.clone(), url, arguments, deadline).await
            }
            Run::Awx {
                url,
                job_template,
                token_env,
                poll,
            } => {
                let deadline = started + timeout;
                let job = AwxJob {
                    base: url,
                    template: *job_template,
                    token_env,
                    poll: *poll,
                };
                job.launch_and_wait(self, arguments, deadline).await
            }
        };
        outcome.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        outcome
    }

    async fn command(&self, argv: Vec<String>, timeout: Duration) -> ActionRun {
        let mut outcome = ActionRun::of(argv.clone());
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(self.dir)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        for name in ["PATH", "HOME", "LANG"]
            .into_iter()
            .chain(self.env.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return outcome.failed(format!("cannot start `{}`: {e}", argv[0])),
        };
        let group = child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32));
        let stdout = tokio::spawn(keep_head(child.stdout.take()));
        let stderr = tokio::spawn(keep_head(child.stderr.take()));
        let waited = tokio::time::timeout(timeout, child.wait()).await;
        if waited.is_err() {
            // The program and everything it started: a playbook's workers hold its
            // pipes open after the playbook itself is gone.
            if let Some(group) = group {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = child.wait().await;
        }
        let out = stdout.await.unwrap_or_default();
        let err = stderr.await.unwrap_or_default();
        outcome.output = [out, err]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        match waited {
            Err(_) => outcome.failed(format!("did not finish within {timeout:?}: stopped")),
            Ok(Err(e)) => outcome.failed(format!("cannot wait for it: {e}")),
            Ok(Ok(status)) => {
                outcome.exit_code = status.code();
                if status.success() {
                    outcome.ok = true;
                    outcome
                } else {
                    outcome.failed(format!("exited with {status}"))
                }
            }
        }
    }

    async fn webhook(
        &self,
        method: hyper::Method,
        url: &str,
        body: &Value,
        deadline: Instant,
    ) -> ActionRun {
        let outcome = ActionRun::of(vec![method.to_string(), url.to_owned()]);
        match self.call(method, url, None, Some(body), deadline).await {
            Ok((status, text)) => outcome.answered(status, text),
            Err(e) => outcome.failed(e),
        }
    }

    /// One HTTP call to an allowed host: its status and body (cut short), or why
    /// there is none.
    async fn call(
        &self,
        method: hyper::Method,
        url: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
        deadline: Instant,
    ) -> Result<(u16, String), String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("`{url}`: {e}"))?;
        if !host_allowed(&uri, self.allow_hosts) {
            return Err(format!("{url} is not on a host the runbook allows"));
        }
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json");
        if let Some(token) = bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let request = request
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        client::exchange(self.http, request, deadline).await
    }
}

/// An HTTP client for the agent's calls: the model, webhooks, AWX.
pub fn http_client() -> HttpClient {
    client::http_client(&Timeouts::default(), false)
}

/// An AWX / Tower job-template launch.
struct AwxJob<'a> {
    base: &'a str,
    template: u64,
    token_env: &'a str,
    poll: Duration,
}

/// The states an AWX job ends in.
const AWX_DONE: [&str; 4] = ["successful", "failed", "error", "canceled"];

impl AwxJob<'_> {
    /// `POST /api/v2/job_templates/{id}/launch/` with the arguments as `extra_vars`,
    /// then `GET /api/v2/jobs/{job}/` until the job ends or the deadline passes.
    async fn launch_and_wait(
        &self,
        runner: &Runner<'_>,
        arguments: &Value,
        deadline: Instant,
    ) -> ActionRun {
        let launch = format!(
            "{}/api/v2/job_templates/{}/launch/",
            self.base, self.template
        );
        let mut outcome = ActionRun::of(vec!["POST".into(), launch.clone()]);
        let Ok(token) = std::env::var(self.token_env) else {
            return outcome.failed(format!("${} (the AWX token) is not set", self.token_env));
        };
        let body = json!({"extra_vars": arguments});
        let answer = runner
            .call(
                hyper::Method::POST,
                &launch,
                Some(&token),
                Some(&body),
                deadline,
            )
            .await;
        let job = match answer {
            Ok((status @ 200..=299, text)) => match awx_job_id(&text) {
                Some(job) => job,
                None => {
                    return outcome
                        .answered(status, text)
                        .failed("the launch answer names no job".into());
                }
            },
            Ok((status, text)) => return outcome.answered(status, text),
            Err(e) => return outcome.failed(e),
        };
        let url = format!("{}/api/v2/jobs/{job}/", self.base);
        outcome.ran.push(format!("GET {url}"));
        loop {
            let answer = runner
                .call(hyper::Method::GET, &url, Some(&token), None, deadline)
                .await;
            let (status, text) = match answer {
                Ok(answer) => answer,
                Err(e) => return outcome.failed(e),
            };
            let state = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned));
            match state {
                Some(state) if AWX_DONE.contains(&state.as_str()) => {
                    let done = outcome.answered(status, text);
                    return if state == "successful" {
                        done
                    } else {
                        done.failed(format!("AWX job {job} ended `{state}`"))
                    };
                }
                Some(_) if Instant::now() + self.poll < deadline => {
                    tokio::time::sleep(self.poll).await;
                }
                Some(state) => {
                    return outcome
                        .failed(format!("AWX job {job} was still `{state}` at the deadline"));
                }
                None => {
                    return outcome
                        .answered(status, text)
                        .failed(format!("AWX job {job}: the answer has no status"));
                }
            }
        }
    }
}

fn awx_job_id(text: &str) -> Option<u64> {
    let value: Value = serde_json::from_str(text).ok()?;
    value
        .get("job")
        .or_else(|| value.get("id"))
        .and_then(Value::as_u64)
}

impl ActionRun {
    fn of(ran: Vec<String>) -> ActionRun {
        ActionRun {
            ok: false,
            ran,
            exit_code: None,
            status: None,
            elapsed_ms: 0.0,
            output: String::new(),
            error: None,
        }
    }

    fn failed(mut self, why: String) -> ActionRun {
        self.ok = false;
        self.error = Some(why);
        self
    }

    /// An HTTP answer: ok when 2xx.
    fn answered(mut self, status: u16, text: String) -> ActionRun {
        self.status = Some(status);
        self.output = crate::record::cut_to(&text, OUTPUT_BYTES);
        self.ok = (200..300).contains(&status);
        if !self.ok {
            self.error = Some(format!("HTTP {status}"));
        }
        self
    }
}

/// The command template with each `{name}` replaced by that argument: a string as
/// is, anything else as JSON. Each item stays one argv item.
pub fn substitute(template: &[String], arguments: &Value) -> Vec<String> {
    template
        .iter()
        .map(|item| {
            let mut out = item.clone();
            for name in super::runbook::placeholders(item) {
                let value = match arguments.get(name) {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                out = out.replace(&format!("{{{name}}}"), &value);
            }
            out
        })
        .collect()
}

/// The first bytes of a stream, as text; the rest is read and dropped, so a chatty
/// program never blocks on a full pipe.
async fn keep_head(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        let room = OUTPUT_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..n.min(room)]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_stay_one_argv_item_whatever_they_hold() {
        let template: Vec<String> = ["kubectl", "scale", "--replicas={n}", "{target}"]
            .map(String::from)
            .to_vec();
        let argv = substitute(&template, &json!({"n": 4, "target": "a; rm -rf / #"}));
        assert_eq!(argv, ["kubectl", "scale", "--replicas=4", "a; rm -rf / #"]);
    }

    #[test]
    fn awx_job_ids_come_from_the_launch_answer() {
        assert_eq!(awx_job_id(r#"{"job": 17, "status": "pending"}"#), Some(17));
        assert_eq!(awx_job_id(r#"{"id": 9}"#), Some(9));
        assert_eq!(awx_job_id("<html>"), None);
    }
}
